"""The leader lease with a fencing token, against a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from live.lease import Lease
from tests.pricing.helpers import run


async def _leases(redis_url: str, prefix: str, scenario: Any, ttl_ms: int = 10_000) -> Any:
    client = Redis.from_url(redis_url)
    try:
        a = Lease(client, "prices", "sidecar-a", ttl_ms, prefix=prefix)
        b = Lease(client, "prices", "sidecar-b", ttl_ms, prefix=prefix)
        return await scenario(a, b)
    finally:
        await client.aclose()


def test_only_one_holder_gets_the_lease(redis_url: str, prefix: str) -> None:
    async def scenario(a: Lease, b: Lease) -> Any:
        return await a.acquire(), await b.acquire()

    token_a, token_b = run(_leases(redis_url, prefix, scenario))

    assert token_a is not None and token_b is None


def test_acquiring_again_keeps_the_same_token(redis_url: str, prefix: str) -> None:
    async def scenario(a: Lease, _: Lease) -> Any:
        return await a.acquire(), await a.acquire()

    first, second = run(_leases(redis_url, prefix, scenario))

    assert first == second


def test_each_new_acquisition_gets_a_larger_fencing_token(redis_url: str, prefix: str) -> None:
    async def scenario(a: Lease, b: Lease) -> Any:
        first = await a.acquire()
        await a.release()
        return first, await b.acquire()

    first, second = run(_leases(redis_url, prefix, scenario))

    assert second > first


def test_non_holder_cannot_renew_or_release(redis_url: str, prefix: str) -> None:
    async def scenario(a: Lease, b: Lease) -> Any:
        await a.acquire()
        b.token = a.token  # same token, wrong holder
        return await b.renew(), await b.release(), await a.renew()

    assert run(_leases(redis_url, prefix, scenario)) == (False, False, True)


def test_expired_lease_goes_to_the_next_holder(redis_url: str, prefix: str) -> None:
    async def scenario(a: Lease, b: Lease) -> Any:
        await a.acquire()
        for _ in range(200):  # TTL 50 ms; poll up to 2 s rather than assert a timing
            if await b.acquire() is not None:
                break
            await asyncio.sleep(0.01)
        return b.token is not None, await a.renew()

    took, old_renewed = run(_leases(redis_url, prefix, scenario, ttl_ms=50))

    assert took and not old_renewed
