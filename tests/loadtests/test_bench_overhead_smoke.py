"""Smoke test of the overhead benchmark: it runs end to end and every request succeeds.

Timings are never asserted here; the benchmark only prints them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = {"closed_nonstream", "closed_stream", "open_nonstream", "open_stream"}


def test_quick_benchmark_runs_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_overhead.py"), "--quick", "--json", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data = json.loads(out.read_text())
    results = data["results"]
    seen = {(r["scenario"], r["target"]) for r in results}
    assert seen == {(s, t) for s in SCENARIOS for t in ("direct", "gateway")}
    for r in results:
        assert r["requests"] > 0, r
        assert r["errors"] == 0, r
    for r in results:
        if r["target"] == "gateway":
            assert r["gw_cpu_ms_per_req"] is not None
            assert sum(r["pools"].values()) == r["requests"] + r["errors"]
            assert "?" not in r["pools"], "a response without x-skyroute-pool"
