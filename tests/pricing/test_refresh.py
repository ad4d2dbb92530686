"""A refresh on a real Redis: last good prices, staleness, static override, events."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from redis.asyncio import Redis

from live.price_table import PriceKey
from pricing.show import render
from router.compiled import compile_policy
from router.snapshot import Snapshot
from tests.pricing.helpers import Clock, policy_of, pool_doc, rig, run
from tests.pricing.scripted import ScriptedFeed, quote

KEY = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")
POLICY = policy_of([pool_doc("pool-a", "aws", "us-east-1", "aws", "p5.48xlarge", gpus=8)],
                   stale_after_s=600)  # fmt: skip


def _aws(usd: object = "55.04") -> ScriptedFeed:
    return ScriptedFeed("aws", [quote("aws", KEY, usd)])


def test_refresh_writes_the_pools_usd_per_gpu_hour(redis_url: str, prefix: str) -> None:
    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws()}) as r:
            await r.refresher.refresh()
            return await r.pool_price("pool-a")

    row = run(scenario())

    assert (row.usd_per_gpu_hour, row.price_source, row.price_stale) == (6.88, "aws", False)


def test_failed_refresh_keeps_the_last_good_price(redis_url: str, prefix: str) -> None:
    feed = _aws()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}) as r:
            await r.refresher.refresh()
            feed.fail("timeout")
            await r.refresher.refresh()
            return await r.pool_price("pool-a"), r.refresher.statuses["aws"]

    row, status = run(scenario())

    assert row.usd_per_gpu_hour == 6.88 and status.state == "error"


def test_rejected_price_never_reaches_the_pool(redis_url: str, prefix: str) -> None:
    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws("-55.04")}) as r:
            await r.refresher.refresh()
            return await r.pool_price("pool-a"), r.metric(
                "skyroute_price_rows_rejected_total", feed="aws"
            )

    row, rejected = run(scenario())

    assert np.isnan(row.usd_per_gpu_hour) and rejected == 1


def test_rejected_new_price_keeps_the_last_good_one(redis_url: str, prefix: str) -> None:
    feed = _aws()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}) as r:
            await r.refresher.refresh()
            feed.set_quotes(quote("aws", KEY, "not-a-number"))
            await r.refresher.refresh()
            return await r.pool_price("pool-a")

    assert run(scenario()).usd_per_gpu_hour == 6.88


def test_price_older_than_the_bound_is_marked_stale(redis_url: str, prefix: str) -> None:
    feed, clock = _aws(), Clock()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}, clock) as r:
            await r.refresher.refresh()
            feed.fail("timeout")
            clock.now += 601
            await r.refresher.refresh()
            return await r.pool_price("pool-a"), r.metric("skyroute_price_stale_pools")

    row, stale_pools = run(scenario())

    assert row.price_stale and stale_pools == 1


def test_stale_price_is_still_routed_on(redis_url: str, prefix: str) -> None:
    feed, clock = _aws(), Clock()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}, clock) as r:
            await r.refresher.refresh()
            clock.now += 601
            await r.refresher.publish_pools()
            return await r.pool_price("pool-a")

    row = run(scenario())
    snap = Snapshot.build(compile_policy(POLICY), {"pool-a": row}, taken_at_s=0.0)

    assert row.price_stale and snap.usd_per_gpu_hour[0] == 6.88


def test_stale_price_is_flagged_in_prices_show(redis_url: str, prefix: str) -> None:
    feed, clock = _aws(), Clock()

    async def scenario() -> str:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}, clock) as r:
            await r.refresher.refresh()
            clock.now += 601
            pools = await r.refresher.publish_pools()
            return render(pools, r.refresher.statuses, clock.now)

    assert "STALE" in run(scenario())


def test_static_row_overrides_the_feeds_row(redis_url: str, prefix: str) -> None:
    static = ScriptedFeed("static", [quote("static", KEY, "40.0")])

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws(), "static": static}) as r:
            await r.refresher.refresh()
            return await r.pool_price("pool-a")

    row = run(scenario())

    assert (row.usd_per_gpu_hour, row.price_source) == (5.0, "static")


def test_row_removed_from_the_static_file_falls_back_to_the_feed(
    redis_url: str, prefix: str
) -> None:
    static = ScriptedFeed("static", [quote("static", KEY, "40.0")])

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws(), "static": static}) as r:
            await r.refresher.refresh()
            static.set_quotes()
            await r.refresher.refresh()
            return await r.pool_price("pool-a")

    assert run(scenario()).price_source == "aws"


def test_new_refresher_starts_from_the_table_in_redis(redis_url: str, prefix: str) -> None:
    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws()}) as r:
            await r.refresher.refresh()
        failing = _aws()
        failing.fail("connection")
        async with rig(redis_url, prefix, POLICY, {"aws": failing}) as r:
            await r.refresher.refresh()
            return r.refresher.merged

    assert run(scenario())[KEY].usd_per_gpu_hour == 6.88


def test_changed_price_publishes_a_table_event(redis_url: str, prefix: str) -> None:
    feed = _aws()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}) as r:
            await r.refresher.refresh()
            listener = Redis.from_url(redis_url)
            try:
                async with listener.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(r.tables.events_channel)
                    feed.set_quotes(quote("aws", KEY, "44.0"))
                    await r.refresher.refresh()
                    return await asyncio.wait_for(_next_message(pubsub), timeout=10)
            finally:
                await listener.aclose()

    assert run(scenario()) == f"{prefix}:price:{{pool-a}}"


async def _next_message(pubsub: Any) -> str:
    async for message in pubsub.listen():
        data = message["data"]
        return data.decode() if isinstance(data, bytes) else str(data)
    raise AssertionError("no message")


def test_missing_wanted_row_makes_a_partial_refresh(redis_url: str, prefix: str) -> None:
    other = PriceKey("aws", "us-west-2", "p5.48xlarge", "on_demand")
    policy = policy_of([pool_doc("pool-a", "aws", "us-east-1", "aws", "p5.48xlarge", gpus=8),
                        pool_doc("pool-b", "aws", "us-west-2", "aws", "p5.48xlarge", gpus=8)])  # fmt: skip

    async def scenario() -> Any:
        async with rig(redis_url, prefix, policy, {"aws": _aws()}) as r:
            await r.refresher.refresh()
            return r.refresher.statuses["aws"], r.metric(
                "skyroute_price_feed_errors_total", feed="aws", reason="missing"
            )

    status, missing_errors = run(scenario())

    assert (status.state, status.missing, missing_errors) == ("partial", (str(other),), 1)


def test_unexpected_feed_exception_is_an_internal_error(redis_url: str, prefix: str) -> None:
    feed = _aws()
    feed.error = RuntimeError("bug")

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}) as r:
            await r.refresher.refresh()
            return r.refresher.statuses["aws"]

    assert run(scenario()).reason == "internal"


def test_feed_age_metric_counts_from_the_last_good_refresh(redis_url: str, prefix: str) -> None:
    feed, clock = _aws(), Clock()

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": feed}, clock) as r:
            await r.refresher.refresh()
            feed.fail("timeout")
            clock.now += 120
            await r.refresher.refresh()
            return r.metric("skyroute_price_age_seconds", feed="aws"), r.metric(
                "skyroute_price_feed_up", feed="aws"
            )

    assert run(scenario()) == (120.0, 0.0)


def test_a_feed_no_pool_uses_is_skipped_with_the_reason(redis_url: str, prefix: str) -> None:
    gcp = ScriptedFeed("gcp", [])

    async def scenario() -> Any:
        async with rig(redis_url, prefix, POLICY, {"aws": _aws(), "gcp": gcp}) as r:
            report = await r.refresher.refresh()
            return report.statuses, render(report.pools, report.statuses, 0.0)

    statuses, shown = run(scenario())

    assert statuses["aws"].state == "ok"
    assert statuses["gcp"].state == "skipped"
    assert statuses["gcp"].error == "no pool of the policy takes its price from gcp"
    assert gcp.calls == []  # asked for nothing, so never called
    assert "SKIPPED" in shown and "no pool of the policy takes its price from gcp" in shown
