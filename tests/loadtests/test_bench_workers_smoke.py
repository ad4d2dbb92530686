"""Smoke test of the workers benchmark: ``serve --workers 1`` and ``--workers 2`` each
serve a short phase without errors, and the verdict says why a 2-core run is not a
scaling figure. Requests/s are never asserted: the benchmark only prints them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_of_one_and_two_workers(tmp_path: Path) -> None:
    out = tmp_path / "workers.json"
    cpu = str(min(os.sched_getaffinity(0)))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_workers.py"), "--workers", "1,2",
         "--rounds", "1", "--duration", "0.5", "--concurrency", "4", "--gateway-cpus", cpu,
         "--client-cpus", cpu, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert [p["workers"] for p in data["phases"]] == [1, 2]
    assert all(p["rps"] > 0 and p["errors"] == 0 for p in data["phases"]), data["phases"]
    assert "workers 2: " in proc.stdout
    assert "not a scaling figure: 2 workers share 1 gateway CPU(s)" in proc.stdout
