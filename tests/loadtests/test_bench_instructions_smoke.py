"""Smoke test of the instruction-count benchmark: skyroute runs under callgrind, answers
every request of a short phase, and the count a request comes out positive. The count is
never compared with a figure: the benchmark only prints it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind is not installed")
def test_skyroute_counted_under_callgrind(tmp_path: Path) -> None:
    out = tmp_path / "instr.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_instructions.py"), "--targets",
         "skyroute", "--modes", "nonstream", "--requests", "20", "--warmup", "5",
         "--concurrency", "2", "--idle-s", "0.5", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    rows = json.loads(out.read_text())["rows"]
    assert [(r["target"], r["mode"], r["errors"]) for r in rows] == [("skyroute", "nonstream", 0)]
    assert rows[0]["load_ir"] > 0 and rows[0]["ir_per_request"] > 0
    assert "| nonstream | - | " in proc.stdout
