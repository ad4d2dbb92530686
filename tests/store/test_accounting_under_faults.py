"""Usage accounting under load while processes die and the store stops answering, with
real gateway processes, a real Redis and the real SQLite store.

- Gateways SIGKILLed at random moments under load (and restarted under their names):
  the store ends up with every request served, none twice. What a killed gateway served
  and had not flushed yet is in its usage journal, replayed by its restart.
- The store down for 10 s under load (SQLite locked; PostgreSQL, when it answers on
  127.0.0.1:5432, closed to connections): no request fails, and afterwards the store
  holds every request served, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from live import usage_codec
from live.keyspace import tagged
from tests.gateway.harness import (
    API_KEY,
    Engine,
    Gateway,
    policy_doc,
    pool,
    unique_prefix,
    wait_for,
    write_policy,
)
from tests.store.conftest import PG_ADMIN_URL

MODEL = "chat-model"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
KILLS = 3


@dataclass
class Served:
    request_id: str
    gateway: int  # index into the deployment's slots
    at: float  # monotonic, when the answer was complete


@dataclass
class Load:
    """Two client threads sending requests to whichever gateways are up, until stopped."""

    gateways: list[Gateway | None]
    served: list[Served] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # Request ids of the failed requests: a gateway killed after recording a request
    # and before its answer left bills a request its client saw fail.
    failed_ids: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def _worker(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                up = [(i, g) for i, g in enumerate(self.gateways) if g is not None]
                if not up:
                    time.sleep(0.01)
                    continue
                i, gw = random.choice(up)
                rid = uuid.uuid4().hex
                headers = {"Authorization": f"Bearer {API_KEY}", "x-request-id": rid}
                try:
                    r = client.post(f"{gw.base}/v1/chat/completions", json=BODY, headers=headers)
                except httpx.HTTPError as exc:
                    self.failed.append(f"{type(exc).__name__}")
                    self.failed_ids.add(rid)
                    continue
                if r.status_code == 200:
                    self.served.append(Served(rid, i, time.monotonic()))
                else:
                    self.failed.append(f"{r.status_code} {r.text[:200]}")
                    self.failed_ids.add(rid)
                self.stop.wait(0.02)  # bounded: at most ~100 requests/s in all

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(2)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=30)


@pytest.fixture
def engine_policy(tmp_path: Path) -> Iterator[Path]:
    engine = Engine("a10g-llama-3.1-8b", "upstream-chat", 0.05).start()
    doc = policy_doc(
        [pool("aws:us-east-1:p", engine, provider="aws", region="us-east-1", model=MODEL,
              usd_per_gpu_hour=1.0)],
        [MODEL],
    )  # fmt: skip
    try:
        yield write_policy(tmp_path / "policy.yaml", doc)
    finally:
        engine.kill()


def _store_ids(gw: Gateway) -> list[str]:
    # closing(): a sqlite3 connection's own context ends its transaction, not the
    # connection (Python 3.13 warns of each one left to the garbage collector).
    with contextlib.closing(sqlite3.connect(gw.store_path, timeout=10)) as db:
        return [r[0] for r in db.execute("SELECT request_id FROM usage_ledger")]


def _stream_ids(client: redis.Redis, prefix: str) -> list[str]:
    entries = client.xrange(tagged(prefix, "access", "usage"))
    return [
        record["id"]
        for _, fields in entries
        for record in usage_codec.decode({k.decode(): v.decode() for k, v in fields.items()})
    ]


def test_sigkilled_gateways_lose_no_usage_record_and_double_none(
    engine_policy: Path, redis_url: str
) -> None:
    prefix = unique_prefix()
    names = [f"gw-kill-{n}" for n in range(2)]

    journals = engine_policy.parent / "journals"

    def start(n: int) -> Gateway:
        env = {"SKYROUTE_REPLICA_ID": names[n], "SKYROUTE_USAGE_JOURNAL_DIR": str(journals)}
        return Gateway(engine_policy, redis_url, prefix, extra_env=env).start()

    slots: list[Gateway | None] = [start(0), start(1)]
    kills: list[tuple[int, float]] = []
    client = redis.Redis.from_url(redis_url)
    try:
        with Load(slots) as load:
            wait_for(lambda: len(load.served) >= 20, "the load to get going")
            for k in range(KILLS):
                victim = k % 2
                gw = slots[victim]
                assert gw is not None and gw.proc is not None
                time.sleep(random.uniform(0.2, 1.0))  # a random point of the accounting
                slots[victim] = None
                gw.proc.send_signal(signal.SIGKILL)
                gw.proc.wait(timeout=10)
                kills.append((victim, time.monotonic()))
                # Its name: it replays its journal and re-reads its own pending entries.
                slots[victim] = start(victim)
            wait_for(lambda: len(load.served) >= 60 + len(kills) * 10, "load after the kills")
        live = [g for g in slots if g is not None]

        served = {s.request_id for s in load.served}

        def settled() -> bool:
            # A record replayed after a kill that fell between its flush and the
            # journal's checkpoint is in the stream twice (the store counts it once).
            stream = set(_stream_ids(client, prefix))
            return set(_store_ids(live[0])) == stream and served <= stream

        with contextlib.suppress(TimeoutError):  # the assertions below say what is wrong
            wait_for(settled, "the store to hold every served record", timeout_s=30)
        stored = _store_ids(live[0])
        in_stream = _stream_ids(client, prefix)
    finally:
        for g in slots:
            if g is not None:
                g.stop()
        client.close()

    missing = served - set(stored)
    duplicates = len(stored) - len(set(stored))
    billed_failures = set(stored) - served
    print(f"kills {len(kills)}: served {len(served)}, stored {len(stored)}, "
          f"missing {len(missing)}, duplicates {duplicates}, "
          f"in the stream twice {len(in_stream) - len(set(in_stream))}, "
          f"failed {len(load.failed)}, stored of failed {len(billed_failures)}")  # fmt: skip
    assert duplicates == 0, "a record was written twice"
    assert not missing, f"{len(missing)} served records lost"
    assert billed_failures <= load.failed_ids, "the store holds a request no client sent"


@contextmanager
def _store_down(db_url: str) -> Iterator[Callable[[], int | None]]:
    """The store unwritable while the context lasts: SQLite locked exclusively, or the
    PostgreSQL database closed to connections (its open ones terminated). Yields a
    function giving the rows stored so far, readable during the outage (None where it
    cannot be read then)."""
    url = sa.make_url(db_url)
    if url.get_backend_name() == "sqlite":
        db = sqlite3.connect(url.database or "", timeout=10, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")  # no gateway can write the store now
        try:
            yield lambda: int(db.execute("SELECT count(*) FROM usage_ledger").fetchone()[0])
        finally:
            db.execute("ROLLBACK")
            db.close()
        return
    name = url.database
    asyncio.run(_pg_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
                          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"))  # fmt: skip
    try:
        yield lambda: None
    finally:
        asyncio.run(_pg_admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))


async def _pg_admin(*statements: str) -> None:
    engine = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


def _ledger_ids(db_url: str) -> list[str]:
    async def read() -> list[str]:
        engine = create_async_engine(db_url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(sa.text("SELECT request_id FROM usage_ledger"))
                return [r[0] for r in rows]
        except Exception:  # not migrated yet, or down: nothing readable
            return []
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_the_store_down_for_10_s_under_load_fails_no_request_and_catches_up(
    engine_policy: Path, redis_url: str, db_url: str
) -> None:
    prefix = unique_prefix()
    env = {"SKYROUTE_DATABASE_URL": db_url}
    gws = [Gateway(engine_policy, redis_url, prefix, extra_env=env).start() for _ in range(2)]
    try:
        with Load(list(gws)) as load:
            wait_for(lambda: len(_ledger_ids(db_url)) >= 5, "records in the store")
            with _store_down(db_url) as stored_now:
                during = len(load.served)
                load.stop.wait(10)  # the outage: 10 s of load
                during = len(load.served) - during
                stored_locked, served_locked = stored_now(), len(load.served)
        served = {s.request_id for s in load.served}
        wait_for(lambda: set(_ledger_ids(db_url)) == served, "the store to catch up", 30)
        stored = _ledger_ids(db_url)
    finally:
        for g in gws:
            g.stop()

    assert load.failed == []
    assert during > 0
    if stored_locked is not None:
        assert stored_locked < served_locked  # the store really was behind
    assert len(stored) == len(set(stored)) == len(served)
