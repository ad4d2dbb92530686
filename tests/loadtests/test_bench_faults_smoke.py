"""Smoke test of the fault benchmark: two short cases end to end (a garbage 200 behind
the cheapest pool, and a hung engine), each answered without a client-visible failure.

Latencies are printed by the benchmark, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_fault_cases_run_and_clients_see_no_failure(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_faults.py"), "--rate", "10",
         "--warm-s", "1", "--fault-s", "3", "--after-s", "1", "--settle-s", "1",
         "--only", "HTML", "hung", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    rows = {row["case"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"hung engine (SIGSTOP)", "200 with an HTML body"}
    for row in rows.values():
        assert row["requests"] > 0, row
        assert row["failures"] == 0, row
