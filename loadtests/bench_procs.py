"""Child processes of a benchmark: start and stop them, pin them to CPUs, count their CPU.

Pinning sets the affinity of every thread of every process in a tree (what ``taskset -a``
does): pinning a process by pid moves only its main thread, and threads that already exist
(uvicorn's, Node's libuv pool, Redis' I/O and background threads) stay where they were.
Threads and children created later inherit their creator's affinity.

A benchmark stopped by SIGTERM (``kill``, a CI job's timeout) must stop what it started:
``stop_on_sigterm`` turns the signal into ``SystemExit`` so that its ``finally`` blocks
and ``atexit`` hooks run, as they do for Ctrl-C; while ``run_until_sigterm`` runs an event
loop, it cancels the loop's work first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import psutil
import uvloop

T = TypeVar("T")


# While ``run_until_sigterm`` runs an event loop: what a SIGTERM does instead of raising.
_IN_LOOP: list[Callable[[], None]] = []


def stop_on_sigterm() -> None:
    """From now on SIGTERM raises ``SystemExit(143)`` in the main thread (the shell's
    exit status for it), so the benchmark's clean-up runs: Python's default is to die at
    once, leaving the engines, gateways and Redis servers it started running. Inside
    ``run_until_sigterm`` it cancels the loop's work instead. Idempotent."""

    def exit_(signum: int, frame: FrameType | None) -> None:
        if _IN_LOOP:
            _IN_LOOP[-1]()
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_)


def run_until_sigterm(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a new uvloop event loop and return its result. A SIGTERM while
    the loop runs cancels ``coro``; once the loop is closed this raises
    ``SystemExit(143)``, as ``stop_on_sigterm`` does outside a loop, and the caller's
    clean-up runs. Installs ``stop_on_sigterm``'s handler.

    Why: a Python signal handler runs in the main thread at the next bytecode boundary
    (and a SIGTERM sent to the process may be taken by another thread first), so it can
    run anywhere inside the loop, its set-up included. ``SystemExit`` raised there left
    uvloop's loop marked running, closing it failed (``RuntimeError: Cannot close a
    running event loop``) and the benchmark exited with status 1. So inside the loop the
    handler only records the signal and asks the loop to cancel ``coro``.
    """
    term = False
    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[T] | None = None

    def on_term() -> None:
        nonlocal term
        term = True
        if loop is not None and task is not None and not task.done():
            # The handler may run inside one of the loop's own callbacks.
            loop.call_soon_threadsafe(task.cancel)

    async def guarded() -> T:
        nonlocal loop, task
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        if term:  # the signal came before the task was there to cancel
            coro.close()
            raise asyncio.CancelledError
        return await coro

    stop_on_sigterm()
    _IN_LOOP.append(on_term)
    try:
        result = uvloop.run(guarded())
    except asyncio.CancelledError:
        if not term:
            raise
    finally:
        _IN_LOOP.remove(on_term)
    if term:
        raise SystemExit(128 + signal.SIGTERM)
    return result


def tree(proc: psutil.Process) -> list[psutil.Process]:
    """``proc`` and its live descendants (empty when ``proc`` is gone)."""
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its live descendants."""
    total = 0.0
    for p in tree(proc):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += float(sum(p.cpu_times()[:2]))
    return total


def own_cpu_s() -> float:
    """User + system CPU seconds of this process alone (its children not counted)."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def tree_peak_rss_mb(proc: psutil.Process) -> float:
    """Peak resident memory (VmHWM) summed over ``proc`` and its descendants, MB."""
    total_kb = 0
    for p in tree(proc):
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024.0


def pin_threads(proc: psutil.Process, cpus: list[int], children: bool = True) -> int:
    """Pin every thread of ``proc`` (and of its descendants unless ``children`` is False)
    to ``cpus``; returns how many threads were pinned. Threads that exit meanwhile are
    skipped."""
    pinned = 0
    for p in tree(proc) if children else [proc]:
        with contextlib.suppress(psutil.NoSuchProcess):
            for th in p.threads():
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(th.id, cpus)  # a thread id is a valid target
                    pinned += 1
    return pinned


def cpu_list(text: str) -> list[int]:
    """``0,2-4`` -> [0, 2, 3, 4]: a list of numbers and inclusive ranges, as ``taskset``
    takes CPUs (empty items are skipped). Raises ValueError on anything else."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            lo, _, hi = part.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    return out


def parse_ports(spec: str, names: set[str]) -> dict[str, int]:
    """``engine=9001,skyroute=9002`` -> {"engine": 9001, "skyroute": 9002}.

    Raises ValueError on an unknown name or a port outside 1..65535.
    """
    out: dict[str, int] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, port = item.partition("=")
        if name not in names:
            raise ValueError(f"--ports: unknown process {name!r} (known: {sorted(names)})")
        value = int(port)
        if not 0 < value < 65536:
            raise ValueError(f"--ports: {name}={port} is not a port")
        out[name] = value
    return out


def wait_http(url: str, deadline_s: float, proc: subprocess.Popen[bytes], want: bytes) -> None:
    """Poll ``url`` until it answers 200 with ``want`` in the body. Raises RuntimeError."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=0.5) as resp:
            if resp.status == 200 and want in resp.read():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready within {deadline_s:.0f} s")


def stop(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM ``proc`` if it still runs and wait up to ``timeout_s``; then SIGKILL.
    Idempotent: a process that has exited is only reaped."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Processes:
    """The benchmark's child processes, each logging to a file; stopped in reverse order."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> psutil.Process:
        with (self.logdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return psutil.Process(proc.pid)

    def wait_ready(self, name: str, url: str, deadline_s: float, want: bytes) -> None:
        """Wait for ``url``; on failure print the tail of ``name``'s log and re-raise."""
        try:
            wait_http(url, deadline_s, self.procs[-1], want)
        except RuntimeError:
            print(self.tail(name), file=sys.stderr)
            raise

    def tail(self, name: str, chars: int = 3000) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")[-chars:]

    def stop_last(self) -> None:
        """Stop the most recently started process and forget it."""
        proc = self.procs.pop()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
