"""One sidecar cycle in process: recorded demand in Redis -> plan -> the fake cloud."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from adapters.cloud import CloudConfig
from adapters.cloud.fake import FakeCloud
from autoscaler.sidecar import CycleResult, Sidecar, SidecarOptions
from autoscaler.state import ScalerState
from live.demand_table import DemandRecord, DemandTables
from live.tables import LiveTables
from tests.autoscaler.conftest import MODEL, RedisTarget, config, make_policy, pool_doc

POOL = "aws:us-east-1:a"
POLICY = make_policy([pool_doc(POOL, usd=1.0, max_replicas=8)])


async def _record_demand(tables: DemandTables, tokens_per_s: float, hours: float = 2.0) -> None:
    """One record a minute over the last ``hours`` of whole 300 s buckets, worth
    ``tokens_per_s`` output tokens."""
    end = time.time() // 300 * 300
    minutes = int(hours * 60)
    await tables.record(
        DemandRecord(end - 60 * (minutes - i) + 1, MODEL, "us", 500, int(tokens_per_s * 60))
        for i in range(minutes)
    )


def _text(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _cycle(
    target: RedisTarget, cloud: FakeCloud, *, dry_run: bool = False, lead: bool = True
) -> tuple[CycleResult, dict[str, Any], str | None]:
    async def main() -> tuple[CycleResult, dict[str, Any], str | None]:
        redis = target.client()
        cloud_config = CloudConfig(fake=cloud, adapter_for={"aws": "fake"}, cache_ttl_s=0.0)
        options = SidecarOptions(holder="test-1", prefix=target.prefix, dry_run=dry_run)
        sidecar = Sidecar(POLICY, redis, cloud_config, config(history_s=86_400.0), options)
        try:
            await _record_demand(sidecar.demand, 2500.0)
            if lead:
                await sidecar.leadership.tick()
            result = await sidecar.cycle(act=True)
            replicas = await redis.hgetall(f"{target.prefix}:pool:{{{POOL}}}:replicas")
            state = await sidecar.demand.load_state()
            return result, _text(replicas), state
        finally:
            sidecar.close()
            await redis.aclose()

    return asyncio.run(main())


def test_the_leader_scales_a_pool_for_recorded_demand(target: RedisTarget) -> None:
    cloud = FakeCloud()
    result, _, _ = _cycle(target, cloud)
    assert result.leader
    assert result.plan.change(POOL).target == 3
    assert cloud.describe("aws-us-east-1-a").target == 3


def test_the_leader_publishes_ready_and_target_replicas_for_the_gateways(
    target: RedisTarget,
) -> None:
    _, replicas, _ = _cycle(target, FakeCloud())
    # The fake cloud reports no addresses: no replica URL is published.
    assert replicas == {"ready": "3", "target": "3", "endpoints": "[]"}


def test_the_leader_saves_its_state_with_its_holder_and_token(target: RedisTarget) -> None:
    _, _, saved = _cycle(target, FakeCloud())
    state = ScalerState.from_json(saved)
    assert state.holder == "test-1" and state.token >= 1 and state.cycles == 1


def test_a_dry_run_plans_but_changes_nothing(target: RedisTarget) -> None:
    cloud = FakeCloud()
    result, replicas, saved = _cycle(target, cloud, dry_run=True)
    assert result.plan.change(POOL).target == 3
    assert cloud.describe("aws-us-east-1-a").target == 0 and cloud.events == []
    assert replicas == {} and saved is None


def test_a_standby_plans_but_changes_nothing(target: RedisTarget) -> None:
    async def hold_lease() -> None:
        redis = target.client()
        try:
            from live.lease import Lease  # noqa: PLC0415

            await Lease(redis, "autoscaler", "other", 60_000, target.prefix).acquire()
        finally:
            await redis.aclose()

    asyncio.run(hold_lease())
    cloud = FakeCloud()
    result, _, saved = _cycle(target, cloud)
    assert not result.leader and result.report is None
    assert cloud.events == [] and saved is None


def test_a_pool_without_a_scaling_section_is_planned_but_left_alone(target: RedisTarget) -> None:
    doc = pool_doc(POOL, usd=1.0)
    del doc["scaling"]
    policy = make_policy([doc])

    async def main() -> tuple[CycleResult, dict[str, str]]:
        redis = target.client()
        sidecar = Sidecar(policy, redis, CloudConfig(cache_ttl_s=0.0), config(),
                          SidecarOptions(holder="t", prefix=target.prefix))  # fmt: skip
        try:
            await LiveTables(redis, target.prefix).set_replicas(POOL, 1, 1)
            await _record_demand(sidecar.demand, 2500.0)
            await sidecar.leadership.tick()
            result = await sidecar.cycle(act=True)
            return result, _text(await redis.hgetall(f"{target.prefix}:pool:{{{POOL}}}:replicas"))
        finally:
            sidecar.close()
            await redis.aclose()

    result, replicas = asyncio.run(main())
    assert result.plan.actionable == ()
    assert result.plan.change(POOL).target == 1
    assert replicas == {"ready": "1", "target": "1"}


def test_a_reloaded_policy_applies_from_the_next_cycle(target: RedisTarget) -> None:
    capped = make_policy([pool_doc(POOL, usd=1.0, max_replicas=2)])

    async def main() -> tuple[int | None, int | None, object]:
        redis = target.client()
        cloud_config = CloudConfig(fake=FakeCloud(), adapter_for={"aws": "fake"}, cache_ttl_s=0.0)
        options = SidecarOptions(holder="test-1", prefix=target.prefix)
        sidecar = Sidecar(POLICY, redis, cloud_config, config(history_s=86_400.0), options)
        try:
            await _record_demand(sidecar.demand, 2500.0)
            await sidecar.leadership.tick()
            sidecar.on_policy(capped)  # as a PolicySource subscriber would
            before = sidecar.policy.pools[0].replicas.max
            result = await sidecar.cycle(act=True)
            return before, result.plan.change(POOL).target, sidecar.policy
        finally:
            sidecar.close()
            await redis.aclose()

    before, target_replicas, policy = asyncio.run(main())
    assert before == 8  # nothing changes until the next cycle
    assert target_replicas == 2  # 3 wanted, capped by the reloaded max
    assert policy is capped
