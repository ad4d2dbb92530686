"""Smoke test of the access-line microbenchmark: it runs and prints its four figures.
Numbers are never asserted: the benchmark prints them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_logline_benchmark_prints_the_format_and_log_call_costs() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_logline.py"), "--lines", "200"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = re.findall(r":\s+([0-9.]+) us$", proc.stdout, re.MULTILINE)
    assert len(figures) == 4, proc.stdout
    assert proc.stderr == ""  # the log lines went to /dev/null, not to the caller
