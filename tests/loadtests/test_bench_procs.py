"""The benchmark's process helpers: per-thread pinning and the --ports option."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadtests.bench_procs import parse_ports, pin_threads

# A child with three threads besides its main one, all alive until its stdin closes.
CHILD = """
import sys, threading
stop = threading.Event()
for _ in range(3):
    threading.Thread(target=stop.wait, daemon=True).start()
print("up", flush=True)
sys.stdin.read()
"""


def allowed_cpus(pid: int, tid: int) -> str:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return next(
        line.split()[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list")
    )


def test_pin_threads_pins_every_thread_of_the_child_not_only_its_main_one() -> None:
    cpu = sorted(psutil.Process().cpu_affinity() or [0])[-1]
    with subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as child:  # fmt: skip
        try:
            check_pinned(child, cpu)
        finally:
            child.kill()


def check_pinned(child: subprocess.Popen[bytes], cpu: int) -> None:
    """The child has said it is up; pin it to ``cpu`` and check each thread's mask."""
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    proc = psutil.Process(child.pid)
    deadline = time.monotonic() + 10
    while proc.num_threads() < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    pinned = pin_threads(proc, [cpu])
    threads = [t.id for t in proc.threads()]
    assert pinned == len(threads) >= 4
    assert {allowed_cpus(child.pid, tid) for tid in threads} == {str(cpu)}


def test_parse_ports_maps_names_and_refuses_unknown_names_and_bad_ports() -> None:
    names = {"engine", "skyroute"}
    assert parse_ports("engine=9001, skyroute=9002", names) == {"engine": 9001, "skyroute": 9002}
    assert parse_ports("", names) == {}
    with pytest.raises(ValueError, match="unknown"):
        parse_ports("redis=6379", names)
    with pytest.raises(ValueError, match="not a port"):
        parse_ports("engine=70000", names)
