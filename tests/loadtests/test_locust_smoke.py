"""CI smoke of loadtests/locustfile.py: 20 seconds headless against the real demo.

The demo (embedded Redis, 9 simulated engines on free ports, the gateway) runs with
real engine timings; locust sends trace-shaped streamed and non-streamed requests across
SLO classes. A second short run replays the trace with unmeetable targets, which must fail
the run. Timings are not asserted, only that the runs work end to end.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skyroute.embedded_redis import free_port
from tests.gateway.harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-locust-smoke-0123456789abcdef"


@dataclass(frozen=True)
class Demo:
    url: str
    config_home: Path  # XDG_CONFIG_HOME of the demo's CLI context


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """A running ``skyroute demo``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYROUTE_")}
    run = tmp_path_factory.mktemp("demo")
    env |= {"SKYROUTE_API_KEY": KEY, "SKYROUTE_PORT": str(port),
            "XDG_CONFIG_HOME": str(run / "config")}  # fmt: skip
    log_path = run / "demo.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from skyroute.cli import main; main()", "demo"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            # The demo starts its price feed and autoscaler (and their first engines) first.
            wait_until(f"http://127.0.0.1:{port}/readyz", timeout_s=240)
            yield Demo(f"http://127.0.0.1:{port}", run / "config")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def locust(host: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYROUTE_", "LOCUST_"))}
    env["SKYROUTE_API_KEY"] = KEY
    cmd = [sys.executable, "-m", "locust", "-f", "loadtests/locustfile.py", "--headless",
           "--host", host, "--model", "llama-3.1-8b,llama-3.1-70b", "--max-output-tokens", "200",
           "--seed", "7", *args]  # fmt: skip
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_locust_smoke_against_the_demo_passes_and_prints_the_summary(demo: Demo) -> None:
    run = locust(demo.url, "-u", "6", "-r", "6", "-t", "12s", "--slo-threshold", "0.5")
    out = run.stdout
    assert run.returncode == 0, f"stdout:\n{out}\nstderr:\n{run.stderr[-3000:]}"
    assert "=== skyroute load test summary ===" in out
    for cls in ("interactive", "standard", "batch"):
        assert f"\n  {cls} " in out, f"no attainment row for {cls}"
    assert "Traffic share by provider and region" in out
    shares = out.split("Traffic share by provider and region", 1)[1]
    assert any(f"\n  {p} " in shares for p in ("aws", "gcp", "azure")), shares
    assert "RESULT: PASS" in out
    # Streams get their own TTFT entries in locust's table, apart from the total time.
    assert "TTFT     chat interactive" in run.stderr
    assert "POST     chat interactive stream" in run.stderr
    assert "POST     chat interactive nonstream" in run.stderr


def test_trace_replay_below_the_attainment_threshold_exits_non_zero(demo: Demo) -> None:
    run = locust(demo.url, "-t", "8s", "--trace-replay", "--replay-speedup", "4",
                 "--slo-targets", "interactive=1/1,standard=1/1,batch=1/1",
                 "--slo-threshold", "0.9", "--only-summary")  # fmt: skip
    out = run.stdout
    assert run.returncode == 1, f"stdout:\n{out}\nstderr:\n{run.stderr[-3000:]}"
    assert "Trace replay x4:" in out
    assert "RESULT: FAIL: SLO attainment below 90.0%" in out


def test_the_readme_locust_command_runs_verbatim_against_the_demo(demo: Demo) -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"`(\.venv/bin/locust -f loadtests/locustfile\.py[^`]*)`", readme)
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYROUTE_", "LOCUST_"))}
    env["XDG_CONFIG_HOME"] = str(demo.config_home)  # only the demo's context
    argv = [str(Path(sys.executable).parent / Path(words[0]).name), *words[1:]]
    run = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert "=== skyroute load test summary ===" in run.stdout, run.stderr[-3000:]
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-3000:]}"
