"""The usage consumer writes every stream entry to the ledger exactly once, across
crashes between writing and acknowledging, store outages and an emptied Redis."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from base.errors import StoreError, TableError
from live import usage_codec
from live.access_table import AccessTables
from live.usage_rollups import period_ids
from live.usage_stream import UsageStream, backlog
from store.consumer import LedgerWriter, UsageConsumer
from store.ledger import Ledger
from store.records import LedgerRow
from store.store import Store
from store.usage_rows import to_batch
from tests.aio import run_async
from tests.live.conftest import RedisTarget
from tests.store.helpers import TS_S, access_tables, opened, publish, publish_flush, usage

ROOT = Path(__file__).resolve().parents[2]


class Crash(Exception):
    """The process died here."""


class CrashAfterWrite:
    """A ledger whose process dies right after the transaction commits (before the ack)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.committed = 0

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]:
        self.committed += len(await self.ledger.write(rows))
        raise Crash


class HeldWrite:
    """A ledger whose writes wait, once started, until ``release`` is set."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]:
        self.started.set()
        await self.release.wait()
        return await self.ledger.write(rows)


class StoreDown:
    """A ledger whose database does not answer."""

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]:
        raise StoreError("connection refused")


def consumer(
    tables: AccessTables, ledger: LedgerWriter, name: str, *, batch: int = 7, claim_idle_ms: int = 0
) -> UsageConsumer:
    stream = UsageStream(tables, consumer=name)
    return UsageConsumer(
        stream,
        ledger,
        batch=batch,
        claim_idle_ms=claim_idle_ms,
        block_ms=None,
    )


async def month_spend(store: Store, tenant: str = "acme") -> int:
    month = period_ids(TS_S)[2]
    return (await store.ledger.spend([month])).get((tenant, month), 0)


@run_async
async def test_a_consumer_killed_between_write_and_ack_double_counts_nothing(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(20)])
        doomed = CrashAfterWrite(store.ledger)
        first = consumer(tables, doomed, "gw-a")
        await first.stream.ensure_group()
        with pytest.raises(Crash):
            await first.run_once()
        assert doomed.committed == 7
        # A new process, under another name: it takes the dead reader's entries over.
        survivor = consumer(tables, store.ledger, "gw-b")
        assert await survivor.drain() == 20
        assert survivor.written == 13
        assert await store.ledger.count() == 20
        assert await month_spend(store) == 20 * 1_000
        assert await survivor.stream.pending_count() == 0


@run_async
async def test_a_consumer_restarted_under_its_name_rereads_its_own_pending_entries(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(5)])
        first = consumer(tables, CrashAfterWrite(store.ledger), "gw-a", claim_idle_ms=3_600_000)
        await first.stream.ensure_group()
        with pytest.raises(Crash):
            await first.run_once()
        again = consumer(tables, store.ledger, "gw-a", claim_idle_ms=3_600_000)
        assert await again.drain() == 5
        assert await store.ledger.count() == 5
        assert await month_spend(store) == 5_000


@run_async
async def test_a_stopped_consumer_finishes_its_step_and_returns_without_cancelling(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(5)])
        held = HeldWrite(store.ledger)
        c = UsageConsumer(UsageStream(tables, consumer="gw-a"), held, block_ms=None, pace_s=3600)
        await c.stream.ensure_group()
        runner = asyncio.create_task(c.run())
        await held.started.wait()
        c.stop()  # mid-write: the transaction is not cut; the step ends, then run()
        held.release.set()
        await asyncio.wait_for(runner, 60)
        assert not runner.cancelled()
        assert c.written == 5
        assert await c.stream.pending_count() == 0


@run_async
async def test_a_live_readers_entries_are_not_claimed_before_they_are_idle(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(3)])
        slow = consumer(tables, CrashAfterWrite(store.ledger), "gw-a")
        await slow.stream.ensure_group()
        with pytest.raises(Crash):
            await slow.run_once()
        patient = consumer(tables, store.ledger, "gw-b", claim_idle_ms=3_600_000)
        assert await patient.drain() == 0
        assert await patient.stream.pending_count() == 3


@run_async
async def test_entries_wait_in_redis_while_the_store_is_down(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(4)])
        down = consumer(tables, StoreDown(), "gw-a", claim_idle_ms=3_600_000)
        await down.stream.ensure_group()
        with pytest.raises(StoreError):
            await down.run_once()
        down.ledger = store.ledger  # the database is back
        assert await down.drain() == 4
        assert await store.ledger.count() == 4


@run_async
async def test_a_malformed_entry_is_acknowledged_and_the_rest_written(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await tables.redis.xadd(tables.key("usage"), {"ts": "not a time", "tenant": "acme"})
        await publish(tables, [usage(1)])
        reader = consumer(tables, store.ledger, "gw-a")
        await reader.stream.ensure_group()
        assert await reader.drain() == 2
        assert (reader.malformed, await store.ledger.count()) == (1, 1)
        assert await reader.stream.pending_count() == 0


@run_async
async def test_the_consumer_waits_for_the_refill_after_redis_lost_its_group(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(3)])
        reader = consumer(tables, store.ledger, "gw-a")
        await reader.stream.ensure_group()
        assert await reader.drain() == 3
        await tables.redis.delete(tables.key("usage"))
        await publish(tables, [usage(n) for n in range(3, 5)])
        with pytest.raises(TableError, match="no usage group"):
            await reader.drain()
        await reader.stream.ensure_group()  # what the refill does (tests/store/test_restore.py)
        assert await reader.drain() == 2
        assert await store.ledger.count() == 5


@run_async
async def test_a_consumer_process_sigkilled_after_its_commit_loses_and_doubles_nothing(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish(tables, [usage(n) for n in range(25)])
        await UsageStream(tables, consumer="setup").ensure_group()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.store.crash_consumer",
            db_url, live_redis.url, live_redis.prefix,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        finally:
            proc.kill()
            await proc.wait()
        assert line.decode().strip() == "committed 10"
        assert await store.ledger.count() == 10
        survivor = consumer(tables, store.ledger, "gw-b")
        assert await survivor.drain() == 25
        assert (survivor.written, await store.ledger.count()) == (15, 25)
        assert await month_spend(store) == 25 * 1_000


@run_async
async def test_one_flush_is_one_entry_and_every_record_in_it_one_row(
    db_url: str, live_redis: RedisTarget
) -> None:
    twins = [usage(1), usage(2), usage(1)]  # a client sent one request id twice
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await publish_flush(tables, twins)
        reader = consumer(tables, store.ledger, "gw-a")
        await reader.stream.ensure_group()
        assert await reader.drain() == 1
        assert (reader.written, await store.ledger.count()) == (3, 3)
        assert await month_spend(store) == 3_000
        replay = consumer(tables, store.ledger, "gw-b")
        await replay.stream.ensure_group()
        await tables.redis.xgroup_setid(tables.key("usage"), "store", "0")
        assert await replay.drain() == 1  # delivered again: nothing is written twice
        assert (replay.written, await store.ledger.count()) == (0, 3)


@run_async
async def test_a_malformed_record_in_a_flush_is_dropped_and_its_neighbours_written(
    db_url: str, live_redis: RedisTarget
) -> None:
    good = json.loads(usage_codec.encode([usage(1)])[usage_codec.RECORDS_FIELD])[0]
    bad = [*good[:7], "-5", *good[8:]]  # negative prompt tokens
    blob = json.dumps([good, bad, [*good[:1], "req-x", *good[2:]]])

    def row_at(entry_id: str, place: int) -> LedgerRow:
        [row] = to_batch([(entry_id, {usage_codec.RECORDS_FIELD: json.dumps([good])})]).rows
        request_id = "req-1" if place == 0 else "req-x"
        return row._replace(idempotency_id=f"{entry_id}/{place}/{request_id}")

    async with opened(db_url) as store, access_tables(live_redis) as tables:
        added = await tables.redis.xadd(tables.key("usage"), {usage_codec.RECORDS_FIELD: blob})
        entry = added.decode() if isinstance(added, bytes) else added
        await tables.redis.xadd(tables.key("usage"), {usage_codec.RECORDS_FIELD: "[1, 2"})
        reader = consumer(tables, store.ledger, "gw-a")
        await reader.stream.ensure_group()
        assert await reader.drain() == 2
        assert (reader.written, reader.malformed) == (2, 2)
        assert await reader.stream.pending_count() == 0
        assert await store.ledger.count() == 2
        # The two good records of the entry at places 0 and 2, the bad one at 1 dropped.
        assert not await store.ledger.write([row_at(entry, 0), row_at(entry, 2)])


@run_async
async def test_the_backlog_counts_what_the_ledger_has_not_read_or_written_yet(
    db_url: str, live_redis: RedisTarget
) -> None:
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        assert await backlog(tables) == (0.0, 0)  # no stream yet
        await publish(tables, [usage(n) for n in range(10)])
        assert await backlog(tables) == (10.0, 0)  # no group yet: nothing read
        held = HeldWrite(store.ledger)
        reader = consumer(tables, held, "gw-a")
        await reader.stream.ensure_group()
        step = asyncio.create_task(reader.run_once())
        await held.started.wait()
        assert await backlog(tables) == (3.0, 7)  # 7 read, being written
        held.release.set()
        assert await step == 7
        assert await backlog(tables) == (3.0, 0)
        assert await consumer(tables, store.ledger, "gw-a").drain() == 3
        assert await backlog(tables) == (0.0, 0)
