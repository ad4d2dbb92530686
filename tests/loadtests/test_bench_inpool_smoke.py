"""Smoke test of the in-pool benchmark (``loadtests/bench_inpool.py``) on a short slice
of the Mooncake trace: it runs to the end and writes every policy's numbers. The
numbers themselves are never asserted: the benchmark prints them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from simulator.inpool import POLICIES

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "simulator" / "data" / "mooncake_hash_first300.jsonl"


def test_a_short_run_prints_every_in_pool_policy_and_the_decision_timings(
    tmp_path: Path,
) -> None:
    out = tmp_path / "inpool.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_inpool.py"), "--trace", str(TRACE),
         "--requests", "200", "--micro-calls", "300", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    assert [r["policy"] for r in data["policies"]] == list(POLICIES)
    for row in data["policies"]:
        assert all(math.isfinite(v) for k, v in row.items() if k != "policy"), row
    assert data["micro"]["both_p99_us"] > 0
    assert "prefix-affinity" in proc.stdout and "target p99 <= 60 µs" in proc.stdout
