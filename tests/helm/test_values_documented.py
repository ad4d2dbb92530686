"""Every value in values.yaml carries a "# --" comment (helm-docs style).

A key is documented by a "# --" comment in the comment block right above it, or by an
ancestor's: a documented mapping documents its whole subtree (its children are the example
value). Plain section headers (mappings without a comment) need every leaf below documented.
"""

from __future__ import annotations

import re

from tests.helm.chart import CHART

KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*|\"[^\"]+\"):(?P<rest>.*)$")


def undocumented_keys(text: str) -> list[str]:
    missing: list[str] = []
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented)
    comment_block: list[str] = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#"):
            comment_block.append(stripped)
            continue
        if not stripped:
            comment_block = []
            continue
        match = KEY.match(line)
        if not match or stripped.startswith("- "):
            comment_block = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        covered = any(doc for _, _, doc in stack)
        documented = any(c.startswith("# --") for c in comment_block)
        comment_block = []
        rest = match["rest"].strip()
        next_line = next(
            (x for x in lines[n + 1 :] if x.strip() and not x.strip().startswith("#")), ""
        )
        has_children = not rest and len(next_line) - len(next_line.lstrip()) > indent
        path = ".".join([k for _, k, _ in stack] + [match["key"]])
        if not (covered or documented or has_children):
            missing.append(path)
        stack.append((indent, match["key"], documented))
    return missing


def test_every_value_in_values_yaml_is_documented() -> None:
    assert undocumented_keys((CHART / "values.yaml").read_text()) == []


def test_the_documentation_check_catches_an_undocumented_value() -> None:
    text = "a:\n  # -- documented\n  b: 1\n  c: 2\n# -- top\nd: {x: 1}\n"
    assert undocumented_keys(text) == ["a.c"]
