"""Smoke test of the ledger microbenchmark: it writes every batch size it is given into a
real (temporary SQLite) ledger and prints a row of figures for each. Numbers are never
asserted: the benchmark prints them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ledger_benchmark_prints_one_line_per_batch_size() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_ledger.py"),
         "--batches", "2,16", "--writes", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = re.findall(r"^batch\s+(\d+) rows: process CPU\s+[0-9.]+ us/row", proc.stdout, re.M)
    assert sizes == ["2", "16"], proc.stdout
