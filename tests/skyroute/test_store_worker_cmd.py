"""``skyroute store-worker`` beside gateways run with ``SKYROUTE_STORE_WORKER=external``:
the gateway serves without loading the store's libraries; the worker writes every usage
record to the ledger exactly once, across a SIGKILL of the worker; and after Redis loses
its data the worker refills it and the gateway republishes its policy's tenant limits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateway.access.conftest import (
    access_policy,
    admin,
    create_key,
    openai_client,
    post_chat,
    put_tenant,
    tenant_name,
)
from tests.gateway.conftest import CHAT, Fleet, start_fleet
from tests.gateway.harness import Gateway, unique_prefix, wait_for, write_policy
from tests.live.conftest import RedisTarget, delete_prefix

EXTERNAL = {"SKYROUTE_STORE_WORKER": "external", "SKYROUTE_DRAIN_DELAY_S": "0"}


@dataclass
class Worker:
    """One ``skyroute store-worker`` process for a gateway's Redis prefix and store."""

    gw: Gateway
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        env = {
            **os.environ,
            "SKYROUTE_REDIS_URL": self.gw.redis_url,
            "SKYROUTE_REDIS_PREFIX": self.gw.prefix,
            "SKYROUTE_DATABASE_URL": f"sqlite+aiosqlite:///{self.gw.store_path}",
            # The same consumer name after a restart: it takes its own pending entries first.
            "SKYROUTE_REPLICA_ID": "store-worker-1",
        }
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from skyroute.cli import main; main()", "store-worker"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = start_fleet(tmp_path_factory.mktemp("worker-fleet"), time_scale=0.1)
    try:
        yield f
    finally:
        f.stop()


@contextmanager
def external(tmp: Path, fleet: Fleet, redis_url: str, tenants: dict[str, object] | None = None
             ) -> Iterator[tuple[Gateway, Worker]]:  # fmt: skip
    """A gateway in external mode and its worker, on a Redis prefix of their own."""
    policy = write_policy(tmp / "policy.yaml", access_policy(fleet, tenants))
    gw = Gateway(policy, redis_url, unique_prefix(), extra_env=EXTERNAL).start()
    worker = Worker(gw, tmp / "worker.log")
    try:
        yield gw, worker.start()
    finally:
        worker.stop()
        gw.stop()


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _ledger_requests(gw: Gateway, tenant: str) -> int:
    reply = admin(gw, "GET", f"/admin/usage?tenant={tenant}").json()
    assert reply["source"] == "store"
    return int(reply["groups"].get("all", {}).get("requests", 0))


def _backlog(gw: Gateway) -> tuple[float, float]:
    """(skyroute_usage_backlog, skyroute_usage_pending) on the gateway's /metrics."""
    values = {
        line.split()[0]: float(line.split()[1])
        for line in admin(gw, "GET", "/metrics").text.splitlines()
        if line.startswith("skyroute_usage_")
    }
    return values["skyroute_usage_backlog"], values["skyroute_usage_pending"]


def _chat(gw: Gateway, secret: str, n: int) -> None:
    with openai_client(gw, secret) as client:
        for i in range(n):
            out = client.chat.completions.create(
                model=CHAT, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=2
            )
            assert out.choices


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps")
def test_the_worker_writes_the_ledger_once_across_a_kill_and_the_gateway_never_loads_it(
    fleet: Fleet, redis_url: str, tmp_path: Path
) -> None:
    with external(tmp_path, fleet, redis_url) as (gw, worker):
        assert gw.proc is not None
        wait_for(lambda: "usage consumer running" in worker.log.read_text(), "the worker")
        # Serving, with a worker doing the store's work: the gateway has not loaded the
        # store's libraries (SQLAlchemy's greenlet, SQLite) at all.
        assert gw.chat_status("before any admin call") in (200, 401)
        maps = _mapped(gw.proc.pid)
        assert "greenlet" not in maps and "_sqlite3" not in maps

        tenant = tenant_name("worker")
        put_tenant([gw], tenant)  # the gateway opens the store now, for the admin API
        secret = str(create_key(gw, tenant)["secret"])
        _chat(gw, secret, 6)
        wait_for(lambda: _ledger_requests(gw, tenant) == 6, "6 requests in the ledger")

        wait_for(lambda: _backlog(gw) == (0.0, 0.0), "the ledger caught up")

        worker.stop(signal.SIGKILL)
        _chat(gw, secret, 6)  # served without a worker: records wait in Redis
        assert _ledger_requests(gw, tenant) == 6
        # The gateway's metrics show the ledger trailing, though it runs no writer itself.
        wait_for(lambda: _backlog(gw)[0] >= 1, "the usage backlog on /metrics")
        worker.start()
        wait_for(lambda: _ledger_requests(gw, tenant) == 12, "12 requests in the ledger")
        assert _ledger_requests(gw, tenant) == 12  # and no more: each stored once
        wait_for(lambda: _backlog(gw) == (0.0, 0.0), "the ledger caught up again")


def test_after_redis_lost_its_data_the_worker_refills_and_the_gateway_republishes(
    fleet: Fleet, redis_url: str, tmp_path: Path
) -> None:
    # A policy tenant's limit is the gateway's to publish (the store holds only the
    # admin API's tenants): it must be back after the worker's refill.
    with external(tmp_path, fleet, redis_url, {"capped": {"rpm": 1}}) as (gw, _):
        # The worker refills the new, empty prefix once, and the gateway republishes.
        wait_for(lambda: "are republished" in gw.logs(), "the worker's first refill")
        secret = str(create_key(gw, "capped")["secret"])
        assert post_chat(gw, secret).status_code == 200
        assert post_chat(gw, secret).status_code == 429
        seen = gw.logs().count("are republished")
        asyncio.run(delete_prefix(RedisTarget(gw.redis_url, gw.prefix)))
        wait_for(
            lambda: gw.logs().count("are republished") > seen, "the gateway to see the refill", 20.0
        )
        # The key came back with the refill, the minute's count went with Redis, and the
        # limit is enforced again.
        assert post_chat(gw, secret).status_code == 200
        assert post_chat(gw, secret).status_code == 429
