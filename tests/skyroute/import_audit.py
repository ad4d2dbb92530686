"""Which installed distributions a set of processes imports, against what an extra of
skyroute installs.

``audit_env(log_dir)`` returns environment variables that make every Python process
started with them (and their children, which inherit them) append each top-level module
it imports to ``log_dir/<pid>.txt`` as the import starts: lazy imports deep in a run are
seen, and a process that is killed has already written its names.
``imported_distributions(log_dir)`` maps those names to distributions;
``extra_closure(pyproject, "demo")`` is every distribution ``pip install skyroute[demo]``
installs. A distribution in the first and not in the second is one a fresh install of the
extra lacks.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

_SITECUSTOMIZE = """\
import os, sys

class _Audit:
    def __init__(self, path):
        self.path, self.seen = path, set()

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in self.seen:
            self.seen.add(top)
            with open(self.path, "a") as out:
                out.write(top + "\\n")
        return None

sys.meta_path.insert(0, _Audit(os.path.join(os.environ["IMPORT_AUDIT_DIR"], f"{os.getpid()}.txt")))
"""


def audit_env(log_dir: Path) -> dict[str, str]:
    """``PYTHONPATH`` (with this environment's own entries after it) and the variable the
    audit reads. Writes the audit's ``sitecustomize.py`` into ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(log_dir), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "IMPORT_AUDIT_DIR": str(log_dir)}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(log_dir: Path) -> dict[str, set[str]]:
    """Distribution (canonical name) -> the top-level modules of it that the audited
    processes imported. Standard-library modules and names of no distribution (the
    project's own packages in an editable install, the audit itself) are left out."""
    owners = md.packages_distributions()
    out: dict[str, set[str]] = {}
    for log in log_dir.glob("*.txt"):
        for top in log.read_text().split():
            if top in sys.stdlib_module_names or top not in owners:
                continue
            for dist in owners[top]:
                out.setdefault(_canonical(dist), set()).add(top)
    return out


def _requires(name: str, pyproject: dict[str, Any]) -> list[str]:
    # The project's own from its pyproject.toml: the installed metadata of an editable
    # install is as old as its last `pip install`.
    project = pyproject["project"]
    if _canonical(name) != _canonical(project["name"]):
        return md.requires(name) or []
    out = list(project["dependencies"])
    for extra, lines in project.get("optional-dependencies", {}).items():
        for line in lines:
            spec, _, marker = line.partition(";")
            both = f"({marker}) and extra == {extra!r}" if marker.strip() else f"extra == {extra!r}"
            out.append(f"{spec}; {both}")
    return out


def extra_closure(pyproject: Path, extra: str) -> set[str]:
    """Canonical names of every distribution that installing the project of
    ``pyproject`` with ``extra`` installs (the project included): its own requirements
    from the file, the rest from the installed distributions' metadata."""
    config = tomllib.loads(pyproject.read_text())
    project = config["project"]["name"]
    todo = [(project, frozenset({extra}))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (_canonical(name), extras) in done:
            continue
        done.add((_canonical(name), extras))
        for line in _requires(name, config):
            req = Requirement(line)
            markers = [{"extra": e} for e in extras | {""}]
            if req.marker is None or any(req.marker.evaluate(m) for m in markers):
                todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in done}
