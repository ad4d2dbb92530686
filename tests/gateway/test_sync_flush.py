"""The flush loop's writes to a real Redis: an idle replica skips them, but not for long."""

from __future__ import annotations

import asyncio
import secrets

from redis.asyncio import Redis

from gateway.context import build_gateway
from gateway.settings import GatewaySettings
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
    key = gw.sync.tables.inflight.keys[2]  # the heartbeats: every written flush sets one

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
