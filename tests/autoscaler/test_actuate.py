"""The actuator against the fake cloud and a real Redis: errors, limits, drains, repairs."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis as sync_redis

from adapters.cloud import CloudConfig, NodeGroup, NodeGroupSpec, NodeStatus, create
from adapters.cloud.fake import FakeCloud, ScaleEvent
from autoscaler.actuate import ActuationReport, Actuator, ActuatorLimits
from autoscaler.drain import Drainer
from autoscaler.plan import Plan, PoolChange
from autoscaler.state import ScalerState
from live.tables import LiveTables
from router.health import HealthEvent, transition
from router.policy import HealthSettings, OutlierSettings
from tests.autoscaler.conftest import RedisTarget

A, B, C = "fake:x:a", "fake:x:b", "fake:x:c"


def change(pool: str, current: int, target: int, *, usd: float = 1.0, goodput: float = 1000.0,
           fallbacks: tuple[str, ...] = (), replace: tuple[str, ...] = ()) -> PoolChange:  # fmt: skip
    return PoolChange(pool, "chat", current, target, "test", usd, goodput, "on_demand",
                      replace=replace, fallbacks=fallbacks)  # fmt: skip


def plan(*changes: PoolChange, state: ScalerState | None = None) -> Plan:
    after = sum(c.target * c.usd_per_replica_hour for c in changes)
    before = sum(c.current * c.usd_per_replica_hour for c in changes)
    return Plan(0.0, changes, (), before, after, None, state or ScalerState())


class DrainClock:
    """The drainer's clock and sleep, driven by the test: each sleep moves time on by
    what was asked and counts the drainer's polls, so a test waits for polls, not time."""

    def __init__(self) -> None:
        self.t = time.time()
        self.polls = 0
        self.polled = asyncio.Event()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.polls += 1
        self.polled.set()
        await asyncio.sleep(0)  # let the test's coroutine run between polls

    async def wait_polls(self, n: int) -> None:
        while self.polls < n:
            self.polled.clear()
            await asyncio.wait_for(self.polled.wait(), timeout=30)  # a hang guard only


class World:
    """A fake cloud with groups a, b, c (max 10), live tables and an actuator."""

    def __init__(self, target: RedisTarget, sizes: dict[str, int], **limits: Any) -> None:
        self.events: list[ScaleEvent] = []
        self.health_at_delete: list[str] = []
        self.prefix = target.prefix
        self.cloud = FakeCloud(on_scale_up=self.events.append, on_scale_down=self._deleted)
        config = CloudConfig(fake=self.cloud, cache_ttl_s=0.0)
        self.groups: dict[str, NodeGroup] = {}
        for pool in (A, B, C):
            name = pool.rsplit(":", 1)[1]
            self.cloud.add_group(name, sizes.get(pool, 0))
            self.groups[pool] = create(NodeGroupSpec(pool, "fake", "x", name, 0, 10), config)
        self.target = target
        self.limits = ActuatorLimits(**limits)
        self.leading = True

    def _deleted(self, event: ScaleEvent) -> None:
        self.events.append(event)
        if not event.node_ids:
            return  # a lower target, no replica deleted
        self.health_at_delete.append(self.health(f"fake:x:{event.group}"))

    def health(self, pool: str) -> str:
        """The pool's shared health state, read now (from the cloud's callback thread)."""
        with sync_redis.Redis.from_url(self.target.url, decode_responses=True) as client:
            state = client.hget(f"{self.prefix}:pool:{{{pool}}}:health", "state")
        return str(state or "healthy")

    def run(
        self,
        body: Callable[[Actuator, LiveTables], Awaitable[Any]],
        drain_clock: DrainClock | None = None,
    ) -> Any:
        async def main() -> Any:
            redis = self.target.client()
            try:
                tables = LiveTables(redis, self.prefix)
                timing: dict[str, Any] = (
                    {"clock": drain_clock.now, "sleep": drain_clock.sleep} if drain_clock else {}
                )
                drainer = Drainer(tables, HealthSettings(), OutlierSettings(), settle_s=0.2,
                                  poll_s=0.02, **timing)  # fmt: skip
                actuator = Actuator(self.groups, drainer, lambda: self.leading, self.limits)
                return await body(actuator, tables)
            finally:
                await redis.aclose()

        return asyncio.run(main())

    def apply(self, p: Plan) -> ActuationReport:
        async def body(actuator: Actuator, tables: LiveTables) -> ActuationReport:
            return await actuator.apply(p)

        report: ActuationReport = self.run(body)
        return report

    def size(self, pool: str) -> int:
        return self.groups[pool].target_size()


def test_a_scale_up_asks_the_cloud_for_the_new_replicas(target: RedisTarget) -> None:
    world = World(target, {A: 1})
    world.apply(plan(change(A, 1, 4)))
    assert world.size(A) == 4


def test_a_stockout_sends_the_capacity_to_the_next_cheapest_pool(target: RedisTarget) -> None:
    world = World(target, {})
    world.cloud.fail_next("a", "stockout")
    report = world.apply(plan(change(A, 0, 3, fallbacks=(B, C)), change(B, 0, 0, goodput=2000.0),
                              change(C, 0, 0)))  # fmt: skip
    assert (world.size(A), world.size(B), world.size(C)) == (0, 2, 0)
    assert report.state.blocked_reason == {A: "stockout"}
    assert report.state.blocked(A, math.inf) is False and report.state.blocked_until_s[A] > 0


def test_quota_blocks_the_pool_for_the_quota_backoff(target: RedisTarget) -> None:
    world = World(target, {}, stockout_backoff_s=60.0, quota_backoff_s=3600.0)
    world.cloud.fail_next("a", "quota")
    report = world.apply(plan(change(A, 0, 1)))
    assert report.state.blocked_reason == {A: "quota"}
    assert [o.error for o in report.outcomes] == ["quota"]


def test_throttling_backs_the_provider_off_until_its_backoff_is_over(target: RedisTarget) -> None:
    world = World(target, {})
    world.cloud.fail_next("a", "throttle")
    first = world.apply(plan(change(A, 0, 2)))
    assert "fake" in first.state.throttled_until_s
    again = world.apply(plan(change(A, 0, 2), state=first.state))
    assert world.size(A) == 0
    assert [o.error for o in again.outcomes] == ["throttled"]


def test_a_fallback_never_passes_the_budget(target: RedisTarget) -> None:
    world = World(target, {}, budget_usd_per_hour=3.0)
    world.cloud.fail_next("a", "stockout")
    world.apply(plan(change(A, 0, 3, fallbacks=(B,)), change(B, 0, 0)))
    assert world.size(B) == 3  # the stocked-out replicas' budget, not more
    world.cloud.fail_next("a", "stockout")
    world.apply(plan(change(A, 0, 3, fallbacks=(B,)), change(B, 3, 3)))
    assert world.size(B) == 3


def test_a_scale_up_never_passes_the_pools_max_size(target: RedisTarget) -> None:
    world = World(target, {A: 8})
    world.apply(plan(change(A, 8, 14)))
    assert world.size(A) == 10


def test_a_scale_down_cordons_the_pool_first_and_gives_it_back_after(target: RedisTarget) -> None:
    world = World(target, {A: 3})
    world.apply(plan(change(A, 3, 1)))
    assert world.size(A) == 1
    assert world.health_at_delete == ["draining"]
    assert world.health(A) == "healthy"


def test_a_scale_down_deletes_only_after_in_flight_requests_finish(target: RedisTarget) -> None:
    world = World(target, {A: 2})
    clock = DrainClock()

    async def body(actuator: Actuator, tables: LiveTables) -> list[list[ScaleEvent]]:
        async def inflight(n: int) -> None:
            await tables.flush("gw-1", now_ms=_now_ms(), inflight={A: n},
                               observations={})  # fmt: skip

        await inflight(1)
        task = asyncio.create_task(actuator.apply(plan(change(A, 2, 1))))
        # 30 polls of 20 ms: three settle periods of the drainer's clock, request in flight.
        await clock.wait_polls(30)
        during = [e for e in world.events if e.after < e.before]
        await inflight(0)
        await task
        return [during, [e for e in world.events if e.after < e.before]]

    during, after = world.run(body, clock)
    assert during == []
    assert len(after) == 1


def test_a_drain_that_misses_its_deadline_deletes_anyway(target: RedisTarget) -> None:
    world = World(target, {A: 2}, drain_deadline_s=0.5)

    async def body(actuator: Actuator, tables: LiveTables) -> ActuationReport:
        await tables.flush("gw-1", now_ms=_now_ms(), inflight={A: 1},
                           observations={})  # fmt: skip
        return await actuator.apply(plan(change(A, 2, 1)))

    report = world.run(body)
    assert world.size(A) == 1
    assert [(o.action, o.done) for o in report.outcomes] == [("down", 1)]


def test_failed_nodes_go_first_and_without_a_drain(target: RedisTarget) -> None:
    world = World(target, {A: 3})
    failed = world.groups[A].nodes()[0].id
    world.cloud.set_status("a", failed, NodeStatus.FAILED)
    world.apply(plan(change(A, 3, 2)))
    assert failed not in {n.id for n in world.groups[A].nodes()}
    assert world.health_at_delete == ["healthy"]


def test_capacity_asked_for_but_not_created_is_cancelled_not_deleted(target: RedisTarget) -> None:
    world = World(target, {A: 1})
    world.cloud.hold("a")
    world.groups[A].increase_size(2)
    world.apply(plan(change(A, 3, 1)))
    assert world.size(A) == 1
    assert len(world.groups[A].nodes()) == 1
    assert world.health_at_delete == []  # no replica was deleted, so none was drained


def test_a_pool_needing_replacement_gets_new_nodes_then_its_flag_cleared(
    target: RedisTarget,
) -> None:
    world = World(target, {A: 2})
    old = tuple(n.id for n in world.groups[A].nodes())

    async def body(actuator: Actuator, tables: LiveTables) -> tuple[ScalerState, bool]:
        await tables.update_health(
            A,
            lambda rec: transition(
                rec, HealthEvent.EJECT, 1.0, HealthSettings(), OutlierSettings()
            ),
        )
        await tables.update_health(
            A, lambda rec: type(rec)(**{**rec.__dict__, "needs_replacement": True})
        )
        report = await actuator.apply(plan(change(A, 2, 2, replace=old)))
        state = await actuator.settle_replacements(report.state)
        return state, (await tables.read_health(A)).needs_replacement

    state, flagged = world.run(body)
    nodes = {n.id for n in world.groups[A].nodes()}
    assert len(nodes) == 2 and not nodes & set(old)
    assert state.replacing == {}
    assert flagged is False


def test_nothing_is_done_without_the_lead(target: RedisTarget) -> None:
    world = World(target, {A: 2})
    world.leading = False
    report = world.apply(plan(change(A, 2, 5), change(B, 0, 0)))
    assert world.size(A) == 2 and world.events == []
    assert [o.error for o in report.outcomes] == ["not-leader"]


def _now_ms() -> int:
    import time  # noqa: PLC0415

    return int(time.time() * 1000)
