"""The flush loop's writes to a real Redis: an idle replica skips them, but not for long;
usage records go out in batches, late by at most their interval."""

from __future__ import annotations

import asyncio
import secrets

from redis.asyncio import Redis

from gateway.context import build_gateway
from gateway.settings import GatewaySettings
from gateway.sync import USAGE_BATCH
from live.access_table import UsageRecord
from live.keyspace import tagged
from skyroute.demo import demo_policy_path

POOL = "aws:us-east-1:h100-llama70b"


def test_an_idle_replica_skips_flushes_until_a_quarter_of_its_ttl(redis_url: str) -> None:
    settings = GatewaySettings(
        policy=demo_policy_path(),
        redis_url=redis_url,
        redis_prefix=f"flush{secrets.token_hex(4)}",
        replica_ttl_ms=800,  # a write at least every 200 ms
    )
    gw = build_gateway(settings)
    clock = [1000.0]  # the flush rule's monotonic clock, moved by the test
    gw.sync.monotonic = lambda: clock[0]
    key = gw.sync.tables.obs_stream  # every written flush adds an entry

    async def scenario() -> list[bool]:
        redis = Redis.from_url(redis_url)
        seen = []
        try:
            gw.state.inflight[POOL] = 2
            await gw.sync.flush_once()  # first: always written
            seen.append(bool(await redis.exists(key)))
            await redis.delete(key)
            await gw.sync.flush_once()  # nothing new, 0 ms later: skipped
            seen.append(bool(await redis.exists(key)))
            gw.state.inflight[POOL] = 1
            await gw.sync.flush_once()  # a count changed: written
            seen.append(bool(await redis.exists(key)))
            await redis.delete(key)
            clock[0] += 0.199
            await gw.sync.flush_once()  # nothing new, 199 ms < 800 / 4: still skipped
            seen.append(bool(await redis.exists(key)))
            clock[0] += 0.002
            await gw.sync.flush_once()  # nothing new, but 201 ms > 800 / 4: written
            seen.append(bool(await redis.exists(key)))
        finally:
            await redis.aclose()
            await gw.sync.tables.redis.aclose()
        return seen

    assert asyncio.run(scenario()) == [True, False, True, False, True]
    assert gw.sync.skipped_flushes == 2


def _record(n: int) -> UsageRecord:
    return UsageRecord(1.7e9, f"req-{n}", "acme", "m", POOL, "aws", "us-east-1", 3, 4, 10, "200")


def test_usage_records_wait_for_their_interval_a_full_batch_or_shutdown(redis_url: str) -> None:
    prefix = f"flush{secrets.token_hex(4)}"
    settings = GatewaySettings(
        policy=demo_policy_path(), redis_url=redis_url, redis_prefix=prefix,
        usage_flush_interval_ms=1000,
    )  # fmt: skip
    gw = build_gateway(settings)
    clock = [1000.0]
    gw.sync.monotonic = lambda: clock[0]
    stream = tagged(prefix, "access", "usage")

    async def scenario() -> list[int]:
        redis = Redis.from_url(redis_url)
        written = []

        async def flush(advance_s: float, **kw: bool) -> None:
            clock[0] += advance_s
            await gw.sync.flush_once(**kw)
            written.append(await redis.xlen(stream))

        try:
            gw.usage.record(_record(0))
            await flush(0.0)  # the first record starts the interval
            await flush(0.999)  # not yet
            await flush(0.002)  # 1.001 s after it: written
            for n in range(1, USAGE_BATCH + 1):
                gw.usage.record(_record(n))
            await flush(0.0)  # a full batch goes at once
            gw.usage.record(_record(USAGE_BATCH + 1))
            await flush(0.0)
            await flush(0.0, final=True)  # shutdown writes what waits
        finally:
            await redis.aclose()
            await gw.sync.tables.redis.aclose()
        return written

    assert asyncio.run(scenario()) == [0, 0, 1, 2, 2, 3]
    assert len(gw.usage) == 0
