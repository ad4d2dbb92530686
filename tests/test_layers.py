"""The import contracts in pyproject.toml hold, and each one breaks when a forbidden
import is added: the walls are checked by ``lint-imports``, not by a reviewer's memory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "base", "router", "live", "store", "adapters", "simengine", "gateway", "pricing", "autoscaler",
    "simulator", "skyroute",
)  # fmt: skip
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source packages and pyproject.toml, safe to break."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", root)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return root


def _lint(root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    args = [str(LINT), "--no-cache"] + [f"--contract={c}" for c in contracts]
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        args, check=False, cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("router/scoring.py", "import redis", "pure-core"),
        ("router/compiled.py", "import asyncio", "pure-core"),
        ("base/errors.py", "import router.policy", "layers"),
        ("adapters/upstream/client.py", "import router.policy", "adapters-leaves"),
        ("pricing/feed.py", "import gateway.settings", "entry-points"),
        ("gateway/auth.py", "import boto3", "cloud-sdks"),
        ("live/lease.py", "import adapters.upstream", "storage-room"),
        ("store/ledger.py", "import httpx", "storage-room"),
        ("store/usage_rows.py", "import pricing.feed", "layers"),
        ("gateway/routes_tenants.py", "import sqlalchemy", "sql-in-store"),
        ("simulator/trace.py", "import live.tables", "offline-simulator"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tree: Path, module: str, statement: str, contract: str
) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(f"{original}\n{statement}  # added by the test\n")
    try:
        result = _lint(tree, contract)
    finally:
        path.write_text(original)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout
    assert module.removesuffix(".py").replace("/", ".") in result.stdout
