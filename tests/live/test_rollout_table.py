"""The rollout keys against a real Redis and a real Redis Cluster: compare-and-set on a
record's revision, the transition log, per-stage counts, restore from the store."""

from __future__ import annotations

import asyncio

import pytest

from live.rollout_table import RolloutRecord, RolloutTable, plan_from_yaml
from router.rollout import Stage, operator, start
from router.rollout_tally import StageCounts, evidence
from tests.live.conftest import SERVERS, RedisTarget, server_target

PLAN = plan_from_yaml("steps: [{share: 0.1}, {share: 0.5}]\n")


def _record(revision: int = 1, paused: bool = False) -> RolloutRecord:
    rollout = start("m", "v1", "v2", PLAN, 100.0)
    if paused:
        rollout, _ = operator(rollout, "pause", 101.0)
    return RolloutRecord("r1", rollout, PLAN, revision, 100.0, 100.0)


async def _scenario(target: RedisTarget) -> dict[str, object]:
    client = target.client()
    try:
        table = RolloutTable(client, prefix=target.prefix)
        first = await table.write(_record(), 0, ())
        again = await table.write(_record(), 0, ())  # someone else wrote revision 1
        paused = _record(2, paused=True)
        _, moved = operator(_record().rollout, "pause", 101.0)
        stale = await table.write(paused, 5, (moved,))
        second = await table.write(paused, 1, (moved,))
        counts = StageCounts()
        for i in range(50):
            counts.record("v1", ok=True, ttft_ms=100.0 + i, tpot_ms=20.0, output_tokens=40)
            counts.record("v2", ok=i % 10 != 0, ttft_ms=100.0 + i, tpot_ms=30.0, output_tokens=40)
        pipe = client.pipeline(transaction=False)
        table.add_counts(pipe, {("r1", Stage.CANARY, 0): counts})
        table.add_counts(pipe, {("r1", Stage.CANARY, 0): counts})  # two gateways' flushes
        await pipe.execute()
        return {
            "writes": (first, again, stale, second),
            "record": await table.read("m"),
            "log": await table.transitions("m"),
            "counts": await table.read_counts("r1", Stage.CANARY, 0),
            "empty": await table.read_counts("r1", Stage.CANARY, 1),
        }
    finally:
        await client.aclose()


@pytest.fixture(params=[*SERVERS, "cluster"])
def any_redis(request: pytest.FixtureRequest) -> RedisTarget:
    if request.param == "cluster":
        cluster: RedisTarget = request.getfixturevalue("cluster")
        return cluster
    return server_target(request, request.param)


def test_records_are_written_by_compare_and_set_and_counts_add_up(any_redis: RedisTarget) -> None:
    out = asyncio.run(_scenario(any_redis))

    assert out["writes"] == (True, False, False, True)
    record = out["record"]
    assert isinstance(record, RolloutRecord)
    assert record.revision == 2 and record.rollout.paused
    assert record.plan == PLAN
    log = out["log"]
    assert isinstance(log, list) and [t.reason for _, t in log] == ["paused by operator"]
    counts = out["counts"]
    assert isinstance(counts, StageCounts)
    assert counts.versions["v1"].n == 100 and counts.versions["v2"].err == 10
    ev = evidence(counts, "v1", "v2", PLAN)
    assert ev.canary["error_rate"].bad == 10 and ev.stable["error_rate"].bad == 0
    assert ev.canary["tpot_over_reference"].bad == ev.canary["tpot_over_reference"].n == 90
    assert not out["empty"]


def test_restore_puts_back_only_what_redis_lost_or_holds_older(live_redis: RedisTarget) -> None:
    async def scenario() -> tuple[int, int, int]:
        client = live_redis.client()
        try:
            table = RolloutTable(client, prefix=live_redis.prefix)
            lost = await table.restore({"m": _record(3)})
            same = await table.restore({"m": _record(3)})
            older = await table.restore({"m": _record(2)})
            stored = await table.read("m")
            assert stored is not None and stored.revision == 3
            return lost, same, older
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == (1, 0, 0)
