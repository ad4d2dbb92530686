"""Parse policy YAML text and report every problem with its key path and line.

PyYAML's composed node tree keeps each key's position, so a pydantic error location
such as ``('pools', 2, 'goodput', 'tokens_per_s')`` maps back to the line a platform
engineer has to fix.
"""

from __future__ import annotations

import yaml
from pydantic import ValidationError

from base.errors import PolicyError, PolicyProblem
from router.policy import Policy
from router.policy_refs import cross_reference_problems

_CROSS_REF_PREFIX = "Value error, "


def _index_lines(
    node: yaml.Node, path: str, out: dict[str, int], duplicates: list[PolicyProblem]
) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = f"{path}.{key.value}" if path else str(key.value)
            line = key.start_mark.line + 1
            if child in out and out[child] != line:
                # PyYAML keeps the last of two equal keys without a word; a policy that
                # says one thing twice is ambiguous, so it is refused.
                message = f"duplicate key {key.value!r} (first at line {out[child]})"
                duplicates.append(PolicyProblem(child, line, message))
            out.setdefault(child, line)
            _index_lines(value, child, out, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, f"{path}[{i}]", out, duplicates)


def _dotted(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else part
    return path


def _line_of(path: str, lines: dict[str, int]) -> int:
    # Fall back to the nearest ancestor that exists in the file (a missing key has no line).
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return lines.get("", 0)


def _problems(exc: ValidationError, lines: dict[str, int]) -> list[PolicyProblem]:
    problems: list[PolicyProblem] = []
    for err in exc.errors():
        path = _dotted(tuple(err["loc"]))
        message = str(err["msg"])
        if message.startswith(_CROSS_REF_PREFIX):
            message = message[len(_CROSS_REF_PREFIX) :]
        # Cross-reference checks report several "path: reason" items in one error.
        if err["type"] == "value_error" and ": " in message:
            for item in message.split("; "):
                sub_path, _, reason = item.partition(": ")
                full = f"{path}.{sub_path}" if path else sub_path
                problems.append(PolicyProblem(full, _line_of(full, lines), reason))
            continue
        problems.append(PolicyProblem(path, _line_of(path, lines), message))
    return problems


_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse and validate policy YAML text.

    Raises PolicyError listing every problem (key path, 1-based line, reason).
    Pure: no file or network access.
    """
    # One parse, by libyaml where PyYAML has it: the pure-Python parser, run twice (once
    # for the line numbers, once for the data), was a tenth of a gateway's start-up CPU.
    loader = _SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise PolicyError(source, [PolicyProblem("", line, f"not valid YAML: {exc}")]) from exc
    finally:
        loader.dispose()
    if not isinstance(data, dict) or root is None:
        raise PolicyError(source, [PolicyProblem("", 1, "the policy must be a YAML mapping")])
    lines: dict[str, int] = {}
    duplicates: list[PolicyProblem] = []
    _index_lines(root, "", lines, duplicates)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc, lines)
        # Cross-references are checked by the model only once every field is valid; check
        # them on the document too, so one run reports every problem.
        problems += _reference_problems(data, lines, problems)
        raise PolicyError(source, duplicates + problems) from exc
    if duplicates:
        raise PolicyError(source, duplicates)
    return policy


def _reference_problems(
    data: dict[str, object], lines: dict[str, int], known: list[PolicyProblem]
) -> list[PolicyProblem]:
    seen = {(p.path, p.message) for p in known}
    out: list[PolicyProblem] = []
    for item in cross_reference_problems(data):
        path, _, reason = item.partition(": ")
        if (path, reason) not in seen:
            out.append(PolicyProblem(path, _line_of(path, lines), reason))
    return out
