"""Smoke test of the rollout detection benchmark: it runs every case and prints the
table. Numbers are never asserted: the benchmark prints them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_rollout_benchmark_prints_every_case() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_rollout.py"), "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    names = [row.split("|")[1].strip() for row in rows[2:]]
    assert names == ["TPOT x1.2", "TPOT x1.5", "1 % errors", "5 % errors", "identical"]
