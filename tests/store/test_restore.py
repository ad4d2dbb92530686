"""Restore: after Redis lost a prefix's keys, the store brings back API keys (a revoked
one stays revoked), admin-API tenants with their limits, and the spend so far."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from base.auth_digest import digest_hex
from base.errors import TableError
from live.access_refill import AccessRefill
from live.access_table import NANO, AccessTables, AdmitCode, KeyRecord, UsageRecord
from live.usage_rollups import period_ids
from live.usage_stream import UsageStream
from router.policy import TenantSpec
from store.consumer import UsageConsumer
from store.records import StoredKey
from store.restore import RestoreLoop, key_record, restore
from store.store import Store
from tests.aio import run_async
from tests.live.conftest import RedisTarget, delete_prefix
from tests.store.helpers import access_tables, opened, publish

# 10 requests of 1000 nano-USD reach a budget of 10_000 nano-USD.
BUDGET = TenantSpec(budget_usd=10_000 / NANO, budget_period="month")


def served(n: int, now_s: float, tenant: str = "acme") -> list[UsageRecord]:
    """``n`` requests served just now, 1000 nano-USD each."""
    return [
        UsageRecord(now_s, f"r{now_s}-{i}", tenant, "m", "p", "aws", "r", 1, 1, 1_000, "ok")
        for i in range(n)
    ]


async def put_key(store: Store, tables: AccessTables, key: StoredKey) -> None:
    """Write-through, as the admin API does: the store first, then Redis."""
    await store.add_key(key)
    await tables.store_key(key.digest, key_record(key))


async def setup(store: Store, tables: AccessTables, now_s: float) -> UsageConsumer:
    """acme with a budget and two keys (one revoked), a deleted tenant, and 6 requests
    consumed into the store."""
    now_ms = int(now_s * 1000)
    await store.put_tenant("acme", BUDGET, now_ms)
    await tables.put_tenant("acme", BUDGET)
    await tables.write_limits({"acme": BUDGET})
    await store.put_tenant("gone", TenantSpec(), now_ms)
    await store.delete_tenant("gone", now_ms)
    await put_key(store, tables, StoredKey("key_live", "acme", digest_hex("live"), "", now_ms))
    await put_key(store, tables, StoredKey("key_old", "acme", digest_hex("old"), "", now_ms))
    assert await store.revoke_key("key_old", now_ms)
    await tables.revoke_key("key_old")
    assert await restore(store, tables, now_s)  # the first start fills and makes the group
    await publish(tables, served(6, now_s))
    consumer = UsageConsumer(UsageStream(tables, "gw-a"), store.ledger, block_ms=None)
    assert await consumer.drain() == 6
    return consumer


async def admit(tables: AccessTables, secret: str, now_s: float) -> int:
    return (await tables.admit(digest_hex(secret), now_s, 1)).code


async def spent(tables: AccessTables, now_s: float) -> int:
    raw = await tables.redis.get(tables.key("spend", "acme", period_ids(now_s)[2]))
    return int(raw or 0)


@run_async
async def test_restore_after_a_flush_brings_back_keys_tenants_and_spend(
    db_url: str, live_redis: RedisTarget
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await setup(store, tables, now_s)
        await delete_prefix(live_redis)
        assert await admit(tables, "live", now_s) == AdmitCode.UNKNOWN

        assert await restore(store, tables, now_s)
        assert await admit(tables, "live", now_s) == AdmitCode.OK
        assert await admit(tables, "old", now_s) == AdmitCode.REVOKED
        assert await tables.tenant_overrides() == {"acme": BUDGET}
        assert await spent(tables, now_s) == 6_000
        assert [k.id for k in await tables.list_keys("acme")] == ["key_live", "key_old"]
        # The budget did not restart from zero: 4 more requests exhaust it.
        await publish(tables, served(4, now_s))
        assert await admit(tables, "live", now_s) == AdmitCode.BUDGET
        assert not await restore(store, tables, now_s)


@run_async
async def test_a_first_start_is_not_reported_as_a_loss_and_a_real_loss_is(
    db_url: str, live_redis: RedisTarget, caplog: pytest.LogCaptureFixture
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        with caplog.at_level(logging.INFO, logger="store.restore"):
            assert await restore(store, tables, now_s)  # empty store, empty Redis
            assert [r.levelno for r in caplog.records] == [logging.INFO]
            await delete_prefix(live_redis)  # so that setup() starts as a first start
            await setup(store, tables, now_s)
            await delete_prefix(live_redis)
            caplog.clear()
            assert await restore(store, tables, now_s)
        assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
            (
                logging.WARNING,
                "redis had lost the access tables: refilled 2 keys, 1 tenants, 3 spend counters",
            )
        ]


@run_async
async def test_spend_served_between_the_loss_and_the_refill_is_kept_and_counted_once(
    db_url: str, live_redis: RedisTarget
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        consumer = await setup(store, tables, now_s)
        await delete_prefix(live_redis)
        await publish(tables, served(3, now_s))  # flushed into the empty Redis
        with pytest.raises(TableError, match="no usage group"):
            await consumer.drain()  # no group yet: nothing reaches the store early

        assert await restore(store, tables, now_s)
        assert await spent(tables, now_s) == 9_000
        assert await consumer.drain() == 3
        month = period_ids(now_s)[2]
        assert await store.ledger.spend([month]) == {("acme", month): 9_000}


@run_async
async def test_replicas_restoring_together_refill_once(
    db_url: str, live_redis: RedisTarget
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await setup(store, tables, now_s)
        await delete_prefix(live_redis)
        clients = [live_redis.client() for _ in range(4)]
        try:
            replicas = [AccessTables(c, prefix=live_redis.prefix) for c in clients]
            done = await asyncio.gather(*(restore(store, t, now_s) for t in replicas))
        finally:
            for c in clients:
                await c.aclose()
        assert sorted(done) == [False, False, False, True]
        assert await spent(tables, now_s) == 6_000


@run_async
async def test_a_lost_sentinel_alone_neither_unrevokes_a_key_nor_double_counts_spend(
    db_url: str, live_redis: RedisTarget
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await setup(store, tables, now_s)
        # Revoked in Redis by a call whose store write this refill's read predates.
        stale = StoredKey("key_x", "acme", digest_hex("x"), "", int(now_s * 1000))
        await put_key(store, tables, stale)
        await tables.revoke_key("key_x")
        await tables.redis.delete(AccessRefill(tables).sentinel)

        assert await restore(store, tables, now_s)
        assert await admit(tables, "x", now_s) == AdmitCode.REVOKED
        assert await spent(tables, now_s) == 6_000


@run_async
async def test_the_restore_loop_refills_when_poked_and_calls_back(
    db_url: str, live_redis: RedisTarget
) -> None:
    now_s = time.time()
    async with opened(db_url) as store, access_tables(live_redis) as tables:
        await setup(store, tables, now_s)
        refilled = asyncio.Event()

        async def on_restored() -> None:
            refilled.set()

        loop = RestoreLoop(store, tables, lambda: now_s, interval_s=3600, on_restored=on_restored)
        task = asyncio.create_task(loop.run())
        try:
            await delete_prefix(live_redis)
            loop.poke()
            await asyncio.wait_for(refilled.wait(), timeout=30)
        finally:
            task.cancel()
        assert loop.restores == 1
        assert await admit(tables, "live", now_s) == AdmitCode.OK


def test_a_stored_key_maps_to_the_live_record() -> None:
    key = StoredKey("k", "t", "d", "n", created_ms=1500, expires_ms=None, revoked_ms=9)
    assert key_record(key) == KeyRecord("k", "t", "n", 1.5, 0.0, True)
