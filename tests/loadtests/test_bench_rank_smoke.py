"""Smoke test of the rank microbenchmark: it runs and prints every case. Numbers are never
asserted: the benchmark prints them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rank_benchmark_prints_the_demo_64_and_1000_pool_cases() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_rank.py"), "--calls", "200"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert {r[0] for r in rows} == {"demo", "64", "1000"}
    assert len(rows) == 6
