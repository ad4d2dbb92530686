"""Leader election over the Redis lease: one leader, takeover, and stepping down in time."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from autoscaler.leader import Leadership
from live.lease import Fence, Lease
from tests.autoscaler.conftest import RedisTarget

TTL_MS = 600
HANG_S = 20.0  # bounds a hung test only; no assertion is about elapsed time


def _leadership(target: RedisTarget, holder: str) -> tuple[Leadership, Redis]:
    redis = target.client()
    return Leadership(Lease(redis, "autoscaler", holder, TTL_MS, target.prefix)), redis


def test_exactly_one_of_two_sidecars_leads(target: RedisTarget) -> None:
    async def main() -> list[bool]:
        (a, ra), (b, rb) = _leadership(target, "a"), _leadership(target, "b")
        try:
            for _ in range(3):
                await a.tick()
                await b.tick()
            return [a.is_leader(), b.is_leader()]
        finally:
            await ra.aclose()
            await rb.aclose()

    assert sorted(asyncio.run(main())) == [False, True]


def test_a_standby_takes_over_with_a_larger_token_when_the_leader_dies(target: RedisTarget) -> None:
    async def main() -> tuple[int, int, bool]:
        (a, ra), (b, rb) = _leadership(target, "a"), _leadership(target, "b")
        stop = asyncio.Event()
        try:
            assert await a.tick()
            first = a.lease.fence
            standby = asyncio.create_task(b.run(stop))
            # "a" dies: it never renews or releases again.
            deadline = time.monotonic() + HANG_S
            while not b.is_leader():
                assert time.monotonic() < deadline, "no takeover"
                await asyncio.sleep(0.05)
            assert first is not None and b.fence is not None
            taken = b.fence.token
            stop.set()
            await standby
            return first.token, taken, a.is_leader()
        finally:
            stop.set()
            await ra.aclose()
            await rb.aclose()

    old, new, old_still_leads = asyncio.run(main())
    assert new > old
    assert old_still_leads is False


def test_a_resigning_leader_hands_over_at_once(target: RedisTarget) -> None:
    async def main() -> bool:
        (a, ra), (b, rb) = _leadership(target, "a"), _leadership(target, "b")
        try:
            await a.tick()
            await a.resign()
            return await b.tick()
        finally:
            await ra.aclose()
            await rb.aclose()

    assert asyncio.run(main()) is True


class _StuckLease:
    """A lease we hold but can no longer renew (Redis unreachable)."""

    holder = "a"
    ttl_ms = 3000
    fence = Fence("k", "a|1", 1)

    async def acquire(self) -> int | None:
        return 1

    async def renew(self) -> bool:
        from base.errors import TableError  # noqa: PLC0415

        raise TableError("redis down")

    async def release(self) -> bool:
        return False


def test_a_leader_that_cannot_renew_stops_leading_before_its_lease_can_expire() -> None:
    now = [100.0]
    leadership = Leadership(_StuckLease(), clock=lambda: now[0])
    leadership._confirmed_at = 100.0  # the last renewal that worked
    now[0] = 101.9  # 1.9 s of a 3 s lease: still safe
    assert leadership.is_leader()
    asyncio.run(leadership.tick())
    now[0] = 102.1  # past two thirds of the TTL: another sidecar may get it soon
    assert not leadership.is_leader()
