"""Smoke test of the A/B benchmark: both gateways serve every phase without errors.

Timings are never asserted here; the benchmark only prints them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_against_itself_runs_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_ab.py"), "--a", str(ROOT), "--b",
         str(ROOT), "--rounds", "2", "--duration", "0.5", "--concurrency", "4", "--json",
         str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    phases = data["phases"]
    assert [p["tree"] for p in phases] == ["A", "B", "B", "A"]
    assert all(p["requests"] > 0 and p["errors"] == 0 for p in phases)
    assert data["summary"]["A"]["median"] > 0 and data["summary"]["B"]["median"] > 0


def test_two_launches_start_the_gateways_afresh_and_report_each(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_ab.py"), "--a", str(ROOT), "--b",
         str(ROOT), "--rounds", "1", "--launches", "2", "--duration", "0.5", "--concurrency",
         "4", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert [(p["launch"], p["tree"]) for p in data["phases"]] == [
        (0, "A"), (0, "B"), (1, "A"), (1, "B"),
    ]  # fmt: skip
    assert all(p["requests"] > 0 and p["errors"] == 0 for p in data["phases"])
    assert len(data["launches"]) == 2 and "B / A per launch:" in proc.stdout
