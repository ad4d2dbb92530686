"""Smoke test of the overhead benchmark: it runs end to end and every request succeeds.

Timings are never asserted here; the benchmark only prints them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = {"closed_nonstream", "closed_stream", "open_nonstream", "open_stream"}


def run_quick(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """Run ``bench_overhead.py --quick`` and return its JSON output."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "loadtests" / "bench_overhead.py"), "--quick", "--json", out,
         *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_quick_benchmark_runs_without_errors(tmp_path: Path) -> None:
    data = run_quick(tmp_path, "--bare")
    results = data["results"]
    seen = {(r["scenario"], r["target"]) for r in results}
    assert seen == {(s, t) for s in SCENARIOS for t in ("direct", "bare", "gateway")}
    for r in results:
        assert r["requests"] > 0, r
        assert r["errors"] == 0, r
        # Both proxies are priced against the direct run of the same phase.
        assert (r["added_p50_ms"] is None) == (r["target"] == "direct"), r
        assert (r["gw_cpu_ms_per_req"] is None) == (r["target"] == "direct"), r
    for r in results:
        if r["target"] == "gateway":
            assert r["gw_cpu_ms_per_req"] is not None
            assert sum(r["pools"].values()) == r["requests"] + r["errors"]
            assert "?" not in r["pools"], "a response without x-skyroute-pool"
    assert data["tracing"] is None


def test_quick_benchmark_with_tracing_exports_spans_to_its_sink(tmp_path: Path) -> None:
    data = run_quick(tmp_path, "--tracing", "--duration", "1")
    assert all(r["errors"] == 0 for r in data["results"])
    tracing = data["tracing"]
    assert tracing["requests"] > 0
    assert tracing["bad"] == 0
    # Every finished request has at least its server span in the sink.
    assert tracing["spans"] >= tracing["requests"]


def test_sigterm_stops_the_engine_and_gateway_the_benchmark_started(tmp_path: Path) -> None:
    # Python dies at SIGTERM without running ``finally``: the engine and the gateway it
    # had started kept running (found after a killed run).
    with subprocess.Popen(
        [sys.executable, str(ROOT / "loadtests" / "bench_overhead.py"), "--quick",
         "--duration", "60"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()  # printed once both are up, before the phases
            found = re.search(r"\(pid (\d+)\), gateway \S+ \(pid (\d+)\)", first)
            assert found, first
            children = [psutil.Process(int(pid)) for pid in found.groups()]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 128 + signal.SIGTERM
            _, alive = psutil.wait_procs(children, timeout=5)
            assert not alive, f"still running after the benchmark stopped: {alive}"
        finally:
            if proc.poll() is None:
                proc.kill()
