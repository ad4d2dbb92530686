"""The demand tables in a real Redis: buckets, TTL, index, and the fenced state write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis

from live.demand_table import DemandRecord, DemandTables
from live.lease import Lease
from tests.autoscaler.conftest import RedisTarget

# Data must be recent: a day older than its retention expires as it is written.
T0 = time.time() // 86_400 * 86_400
MIDNIGHT = T0 + 86_400.0
T = TypeVar("T")


def _rec(ts: float, model: str = "m", region: str = "us", met: bool = True) -> DemandRecord:
    return DemandRecord(ts, model, region, prompt_tokens=100, output_tokens=10, slo_met=met)


def _run(target: RedisTarget, body: Callable[[Redis], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = target.client()
        try:
            return await body(redis)
        finally:
            await redis.aclose()

    return asyncio.run(main())


def test_records_queued_on_a_pipeline_are_summed_into_their_buckets(target: RedisTarget) -> None:
    async def body(redis: Redis) -> Any:
        tables = DemandTables(redis, target.prefix, bucket_s=60)
        pipe = redis.pipeline(transaction=False)
        tables.add(pipe, [_rec(T0 + 5), _rec(T0 + 50, met=False), _rec(T0 + 70)])
        await pipe.execute()
        return (await tables.read([("m", "us")], T0, T0 + 180))[("m", "us")]

    got = _run(target, body)
    assert (got.start_s, got.bucket_s) == (T0, 60.0)
    assert list(got.requests) == [2, 1, 0]
    assert list(got.prompt_tokens) == [200, 100, 0]
    assert list(got.output_tokens) == [20, 10, 0]
    assert list(got.slo_misses) == [1, 0, 0]


def test_a_read_across_midnight_joins_both_days(target: RedisTarget) -> None:
    async def body(redis: Redis) -> Any:
        tables = DemandTables(redis, target.prefix, bucket_s=60)
        await tables.record([_rec(MIDNIGHT - 30), _rec(MIDNIGHT + 30)])
        return (await tables.read([("m", "us")], MIDNIGHT - 120, MIDNIGHT + 120))[("m", "us")]

    assert list(_run(target, body).requests) == [0, 1, 1, 0]


def test_each_days_buckets_expire_after_the_retention(target: RedisTarget) -> None:
    async def body(redis: Redis) -> Any:
        tables = DemandTables(redis, target.prefix, bucket_s=60, retention_s=3600)
        await tables.record([_rec(T0 + 10)])
        # PTTL, not EXPIRETIME: the embedded Redis of a fresh machine is 6.2.
        ttl_ms = await redis.pttl(tables._day_key("m", "us", int(T0 // 86_400)))
        return time.time() + ttl_ms / 1000.0

    assert abs(_run(target, body) - (MIDNIGHT + 3600)) < 1.0


def test_the_index_lists_every_model_and_client_region_seen(target: RedisTarget) -> None:
    async def body(redis: Redis) -> Any:
        tables = DemandTables(redis, target.prefix)
        await tables.record(
            [_rec(T0, "a", "aws:us-east-1"), _rec(T0, "b", "eu"), _rec(T0, "a", "aws:us-east-1")]
        )
        return await tables.pairs()

    assert _run(target, body) == [("a", "aws:us-east-1"), ("b", "eu")]


def test_a_state_write_under_a_lost_lease_is_refused(target: RedisTarget) -> None:
    async def body(redis: Redis) -> Any:
        tables = DemandTables(redis, target.prefix)
        first = Lease(redis, "autoscaler", "one", 60_000, target.prefix)
        await first.acquire()
        fence = first.fence
        await first.release()
        second = Lease(redis, "autoscaler", "two", 60_000, target.prefix)
        await second.acquire()
        assert fence is not None and second.fence is not None
        refused = await tables.save_state('{"holder": "one"}', fence)
        accepted = await tables.save_state('{"holder": "two"}', second.fence)
        return refused, accepted, await tables.load_state()

    assert _run(target, body) == (False, True, '{"holder": "two"}')
