"""Smoke test of the start-up benchmark: one start of ``skyroute serve`` and one of
``serve --workers 2`` against the test Redis, each figure printed. Numbers are never
asserted: the benchmark prints them; what is checked is that a supervisor of two workers
runs one store worker beside them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_startup_benchmark_prints_every_figure(redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "SKYROUTE_REDIS_URL": redis_url,
           "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_startup.py"), "--runs", "1",
         "--no-compile", "--workers", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for figure in ("skyroute --help", "serve: start to ready", "serve: idle RSS"):
        assert re.search(rf"^{re.escape(figure)}\s+[0-9.]+ ", proc.stdout, re.M), proc.stdout
    assert re.search(
        r"^serve --workers 2: idle RSS a worker [0-9.]+ MB \(median of 2;.*its store worker "
        r"[0-9.]+ MB$", proc.stdout, re.M,
    ), proc.stdout  # fmt: skip
