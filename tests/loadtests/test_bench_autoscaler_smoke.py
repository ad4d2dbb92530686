"""Smoke test of the autoscaler benchmark: a day and a half of the ../shared series (day 1
warms up) and random mixes of 10 pools, each row printed. Numbers are never asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.backtest_fleet import DATA

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_autoscaler_benchmark_prints_every_row() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_autoscaler.py"), "--days", "1.5",
         "--pools", "10"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    number = r"\s+[0-9]+\.[0-9]+"
    for row, calls in (
        ("decide() cycle (forecast + MILPs)", 72),
        ("solve_mix, oracle's mix", 216),
        ("quantile_regression, 144-216 rows", 12),
        ("solve_mix, random 10 pools", 4),
    ):
        assert re.search(rf"^{re.escape(row)}\s+{calls}({number}){{4}}$", proc.stdout, re.M), (
            proc.stdout
        )
