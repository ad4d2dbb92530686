"""The drainer's cordon and its undo, on the shared health records in a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from autoscaler.drain import Drainer
from live.tables import LiveTables
from router.health import HealthEvent, HealthRecord, PoolState, transition
from router.policy import HealthSettings, OutlierSettings
from tests.autoscaler.conftest import RedisTarget

POOL = "aws:us-east-1:a"
HEALTH, OUTLIER = HealthSettings(), OutlierSettings()
T = TypeVar("T")


def _run(target: RedisTarget, body: Callable[[Drainer, LiveTables], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = target.client()
        try:
            tables = LiveTables(redis, target.prefix)
            return await body(Drainer(tables, HEALTH, OUTLIER, settle_s=0.0, poll_s=0.01), tables)
        finally:
            await redis.aclose()

    return asyncio.run(main())


async def _event(tables: LiveTables, event: HealthEvent, reason: str = "") -> None:
    await tables.update_health(
        POOL, lambda rec: transition(rec, event, 1.0, HEALTH, OUTLIER, reason)
    )


def test_after_a_drain_an_ejected_pool_goes_back_to_ejected(target: RedisTarget) -> None:
    async def body(drainer: Drainer, tables: LiveTables) -> tuple[PoolState, PoolState]:
        await _event(tables, HealthEvent.EJECT)
        result = await drainer.drain(POOL, "test", 5.0, lambda: True)
        during = (await tables.read_health(POOL)).state
        await drainer.restore(POOL, result.before)
        return during, (await tables.read_health(POOL)).state

    assert _run(target, body) == (PoolState.DRAINING, PoolState.EJECTED)


def test_an_operators_drain_survives_the_autoscalers_drain_and_undo(target: RedisTarget) -> None:
    async def body(drainer: Drainer, tables: LiveTables) -> HealthRecord:
        await _event(tables, HealthEvent.DRAIN, "drained by operator")
        result = await drainer.drain(POOL, "test", 5.0, lambda: True)
        await drainer.restore(POOL, result.before)
        return await tables.read_health(POOL)

    record = _run(target, body)
    assert (record.state, record.reason) == (PoolState.DRAINING, "drained by operator")


def test_a_drain_left_by_a_dead_leader_is_lifted(target: RedisTarget) -> None:
    async def body(drainer: Drainer, tables: LiveTables) -> tuple[bool, PoolState]:
        await drainer.drain(POOL, "test", 5.0, lambda: True)  # and then the leader "dies"
        lifted = await drainer.recover(POOL)
        return lifted, (await tables.read_health(POOL)).state

    assert _run(target, body) == (True, PoolState.HEALTHY)


def test_an_operators_drain_is_not_lifted_as_a_leftover(target: RedisTarget) -> None:
    async def body(drainer: Drainer, tables: LiveTables) -> tuple[bool, PoolState]:
        await _event(tables, HealthEvent.DRAIN, "drained by operator")
        lifted = await drainer.recover(POOL)
        return lifted, (await tables.read_health(POOL)).state

    assert _run(target, body) == (False, PoolState.DRAINING)


def test_a_drain_stops_waiting_when_the_lead_is_lost(target: RedisTarget) -> None:
    async def body(drainer: Drainer, tables: LiveTables) -> bool:
        await tables.flush("gw-1", now_ms=_now_ms(), inflight={POOL: 2},
                           observations={})  # fmt: skip
        result = await drainer.drain(POOL, "test", 60.0, lambda: False)
        return result.aborted and not result.drained

    assert _run(target, body) is True


def _now_ms() -> int:
    import time  # noqa: PLC0415

    return int(time.time() * 1000)
