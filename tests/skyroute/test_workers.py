"""``skyroute serve --workers 2``: two gateway processes share one port (SO_REUSEPORT),
both take connections, both serve the real ``openai`` client, one store worker beside them
writes their usage to the ledger, and SIGTERM stops all."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from skyroute.embedded_redis import free_port
from skyroute.workers import (
    MAX_RESTARTS,
    SERVE,
    STORE_RESTART_S,
    STORE_WORKER,
    Supervisor,
    runs_own_store_worker,
)
from tests.gateway.conftest import CHAT, Fleet, start_fleet
from tests.gateway.harness import ADMIN_TOKEN, API_KEY, unique_prefix, wait_for, wait_until


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = start_fleet(tmp_path, time_scale=0.05)
    try:
        yield f
    finally:
        f.stop()


def _sockets(pid: int, port: int, status: str) -> int:
    """Sockets of process ``pid`` on local ``port`` in TCP state ``status``."""
    return sum(
        1
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == status
    )


def _children(pid: int, command: str) -> list[psutil.Process]:
    """The live children of ``pid`` running ``skyroute <command>`` (a child killed and
    not yet reaped is a zombie, with no command line left: skipped)."""
    out = []
    for child in psutil.Process(pid).children():
        with contextlib.suppress(psutil.ZombieProcess, psutil.NoSuchProcess):
            if child.cmdline()[-1] == command:
                out.append(child)
    return out


def _usage_requests(port: int) -> tuple[str, int]:
    """(source, requests) of the default tenant's usage, as a worker's admin API says."""
    resp = httpx.get(
        f"http://127.0.0.1:{port}/admin/usage?tenant=default",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10,
    )  # fmt: skip
    resp.raise_for_status()
    body = resp.json()
    return body["source"], sum(g["requests"] for g in body["groups"].values())


def test_two_workers_share_the_port_and_stop_together(
    fleet: Fleet, redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'store.db'}",
        **os.environ,
        "SKYROUTE_REDIS_URL": redis_url,
        "SKYROUTE_REDIS_PREFIX": unique_prefix(),
        "SKYROUTE_POLICY": str(fleet.policy_path),
        "SKYROUTE_PORT": str(port),
        "SKYROUTE_API_KEY": API_KEY,
        "SKYROUTE_ADMIN_TOKEN": ADMIN_TOKEN,
        "SKYROUTE_DRAIN_DELAY_S": "0",
    }
    log = (fleet.policy_path.parent / "workers.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skyroute.cli import main; main()", "serve", "--workers", "2"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    held: list[socket.socket] = []
    workers: list[psutil.Process] = []
    store_workers: list[psutil.Process] = []
    try:
        wait_until(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
        workers = _children(proc.pid, "serve")
        store_workers = _children(proc.pid, "store-worker")
        assert (len(workers), len(store_workers)) == (2, 1)
        # The store's work runs once, in the store worker: the gateways leave it to it.
        assert all(w.environ().get("SKYROUTE_STORE_WORKER") == "external" for w in workers)
        wait_for(lambda: all(_sockets(w.pid, port, psutil.CONN_LISTEN) for w in workers),
                  "both workers listening")  # fmt: skip
        # The kernel hashes each new connection to one of the listeners: with 32 of them,
        # both workers get some unless one does not listen (odds 2**-31 otherwise).
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(32)]

        def accepted() -> dict[int, int]:
            return {w.pid: _sockets(w.pid, port, psutil.CONN_ESTABLISHED) for w in workers}

        wait_for(lambda: sum(accepted().values()) >= 32, "32 accepted connections")
        assert all(n > 0 for n in accepted().values()), accepted()

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY,
                               max_retries=0, timeout=30)  # fmt: skip

        def chat(times: int) -> None:
            for _ in range(times):
                reply = client.chat.completions.create(
                    model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=4
                )
                assert reply.choices[0].message.content

        with client:
            chat(8)
            # Both gateways' usage reaches the ledger through the one store worker.
            wait_for(lambda: _usage_requests(port) == ("store", 8), "8 requests in the ledger")
            # A store worker killed outright is restarted; meanwhile usage waits in Redis,
            # and every request is stored once.
            store_workers[0].kill()
            chat(8)

            def restarted() -> bool:
                new = [c for c in _children(proc.pid, "store-worker") if c not in store_workers]
                store_workers.extend(new)
                return bool(new)

            wait_for(restarted, "a new store worker")
            wait_for(lambda: _usage_requests(port) == ("store", 16), "16 requests in the ledger")
    finally:
        for s in held:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            # Leave no process behind to hold the test run's output open.
            for w in workers + store_workers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    w.kill()
            proc.kill()
            proc.wait()
            raise
        finally:
            log.close()
    assert code == 0, (fleet.policy_path.parent / "workers.log").read_text()[-3000:]
    assert not any(w.is_running() for w in workers + store_workers)


class _Deaf(Supervisor):
    """A supervisor whose workers ignore SIGTERM (a worker hung in its shutdown)."""

    def _spawn(self, command: str = SERVE) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
             "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc


def test_a_worker_that_does_not_stop_in_time_is_killed() -> None:
    supervisor = _Deaf(2, os.environ, stop_timeout_s=1.0)
    supervisor.procs = [supervisor._spawn() for _ in range(2)]
    supervisor._signal(signal.SIGTERM)
    assert supervisor._wait() == 1
    assert all(p.returncode == -signal.SIGKILL for p in supervisor.procs)
    for p in supervisor.procs:
        assert p.stdout is not None
        p.stdout.close()


@pytest.mark.parametrize(
    ("setting", "own"), [(None, True), ("inline", True), ("external", False), ("External", False)]
)
def test_a_store_worker_runs_beside_the_workers_unless_one_runs_elsewhere(
    setting: str | None, own: bool
) -> None:
    env = {} if setting is None else {"SKYROUTE_STORE_WORKER": setting}
    assert runs_own_store_worker(env) is own


def test_the_store_worker_keeps_its_consumer_name_across_restarts() -> None:
    named = Supervisor(2, {"SKYROUTE_REPLICA_ID": "host-a"}, 1.0, store_worker=True)
    assert named.commands == [SERVE, SERVE, STORE_WORKER]
    assert named.store_worker_id == "host-a-store"
    unnamed = Supervisor(2, {}, 1.0, store_worker=True)
    assert unnamed.store_worker_id == f"{socket.gethostname()}-{os.getpid()}-store"
    assert Supervisor(2, {}, 1.0).commands == [SERVE, SERVE]


class _Stub:
    """A process handle that has exited (``poll`` says so), for the restart policy."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode = 1

    def poll(self) -> int:
        return self.returncode


class _Counting(Supervisor):
    """A supervisor whose spawns are stubs, timed on a clock the test moves: the restart
    policy alone."""

    def __init__(self) -> None:
        super().__init__(2, {}, 1.0, store_worker=True)
        self.spawned: list[tuple[str, float]] = []
        self.now = 100.0
        self.clock = lambda: self.now

    def _spawn(self, command: str = SERVE) -> subprocess.Popen[bytes]:
        self.spawned.append((command, self.now))
        return _Stub(len(self.spawned))  # type: ignore[return-value]


def test_a_store_worker_that_keeps_dying_is_restarted_every_few_seconds_and_stops_nothing() -> None:
    sup = _Counting()
    sup.procs = [sup._spawn(c) for c in sup.commands]
    sup._store_started_at = sup.now
    for _ in range(90):  # it dies at once, every time, for a minute and a half
        sup._restart_store_worker(2)
        sup.now += 1.0
    restarts = [t for command, t in sup.spawned[3:] if command == STORE_WORKER]
    assert len(sup.spawned[3:]) == len(restarts) > MAX_RESTARTS  # past the workers' budget
    gaps = [b - a for a, b in zip([100.0, *restarts], restarts, strict=False)]
    assert min(gaps) >= STORE_RESTART_S
    assert not sup._stopping.is_set()
