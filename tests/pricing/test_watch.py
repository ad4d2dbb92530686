"""The sidecar loop: only the lease holder fetches; backoff; policy reload."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from live.lease import Lease
from live.policy_file import PolicySource
from live.price_table import PriceKey, PriceTable
from live.tables import LiveTables
from pricing.catalog import Catalog
from pricing.metrics import PriceMetrics
from pricing.refresh import Refresher
from pricing.schedule import Schedule
from pricing.watch import LEASE_NAME, PriceWatcher
from tests.pricing.helpers import NOW, Clock, policy_of, pool_doc, run
from tests.pricing.scripted import ScriptedFeed, quote

KEY = PriceKey("aws", "us-east-1", "p5.48xlarge", "on_demand")
POOL = pool_doc("pool-a", "aws", "us-east-1", "aws", "p5.48xlarge", gpus=8)
POLICY = policy_of([POOL])


@asynccontextmanager
async def _watcher(
    redis_url: str,
    prefix: str,
    holder: str,
    feed: ScriptedFeed,
    clock: Clock,
    policy_path: Path | None = None,
) -> AsyncIterator[PriceWatcher]:
    client = Redis.from_url(redis_url)
    metrics = PriceMetrics(CollectorRegistry())
    refresher = Refresher(
        POLICY, {"aws": feed}, PriceTable(client, prefix), LiveTables(client, prefix),
        metrics, Catalog.builtin(), clock=clock,
    )  # fmt: skip
    lease = Lease(client, LEASE_NAME, holder, 30_000, prefix=prefix)
    schedule = Schedule(["aws"], 300.0, 0.0, 5.0, now_s=clock(), rand=lambda: 0.5)
    try:
        policies = PolicySource(policy_path) if policy_path is not None else None
        yield PriceWatcher(refresher, lease, schedule, metrics, policies=policies, clock=clock)
    finally:
        await client.aclose()


def _touch_later(path: Path) -> None:
    """Move the file's mtime on, so a rewrite within the clock's resolution is seen."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def _feed(usd: str = "55.04") -> ScriptedFeed:
    return ScriptedFeed("aws", [quote("aws", KEY, usd)])


def test_only_the_lease_holder_fetches(redis_url: str, prefix: str) -> None:
    a, b, clock = _feed(), _feed(), Clock()

    async def scenario() -> Any:
        async with (
            _watcher(redis_url, prefix, "a", a, clock) as wa,
            _watcher(redis_url, prefix, "b", b, clock) as wb,
        ):
            for _ in range(3):
                await wa.tick()
                await wb.tick()
                clock.now += 400  # every feed due again
        return len(a.calls), len(b.calls)

    assert run(scenario()) == (3, 0)


def test_follower_takes_over_when_the_leader_lets_go(redis_url: str, prefix: str) -> None:
    a, b, clock = _feed(), _feed(), Clock()

    async def scenario() -> Any:
        async with (
            _watcher(redis_url, prefix, "a", a, clock) as wa,
            _watcher(redis_url, prefix, "b", b, clock) as wb,
        ):
            await wa.tick()
            await wb.tick()
            await wa.lease.release()
            await wb.tick()
        return len(a.calls), len(b.calls)

    assert run(scenario()) == (1, 1)


def test_new_leader_starts_from_the_previous_leaders_prices(redis_url: str, prefix: str) -> None:
    a, b, clock = _feed(), _feed(), Clock()
    b.fail("timeout")

    async def scenario() -> Any:
        async with (
            _watcher(redis_url, prefix, "a", a, clock) as wa,
            _watcher(redis_url, prefix, "b", b, clock) as wb,
        ):
            await wa.tick()
            await wa.lease.release()
            await wb.tick()
            return wb.refresher.merged

    assert run(scenario())[KEY].usd_per_hour == 55.04


def test_leader_that_lost_its_lease_stops_fetching(redis_url: str, prefix: str) -> None:
    a, b, clock = _feed(), _feed(), Clock()

    async def scenario() -> Any:
        async with (
            _watcher(redis_url, prefix, "a", a, clock) as wa,
            _watcher(redis_url, prefix, "b", b, clock) as wb,
        ):
            await wa.tick()  # a leads and fetches
            await wa.refresher.table.redis.delete(wa.lease.key)  # a lease expiry
            await wb.tick()  # b takes over and fetches
            clock.now += 400
            await wa.tick()  # a cannot renew, b holds the lease: a does not fetch
            return wa.leader, len(a.calls), len(b.calls)

    assert run(scenario()) == (False, 1, 1)


def test_failed_fetch_is_retried_after_the_backoff(redis_url: str, prefix: str) -> None:
    feed, clock = _feed(), Clock()
    feed.fail("timeout")

    async def scenario() -> Any:
        async with _watcher(redis_url, prefix, "a", feed, clock) as w:
            await w.tick()
            return w.schedule.next_due_s() - NOW

    assert run(scenario()) == 5.0


def test_changed_policy_file_is_picked_up(redis_url: str, prefix: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY.model_dump(mode="json")))
    feed, clock = _feed(), Clock()

    async def scenario() -> Any:
        async with _watcher(redis_url, prefix, "a", feed, clock, path) as w:
            doc = POLICY.model_dump(mode="json")
            doc["pricing"]["refresh_interval_s"] = 60.0
            path.write_text(yaml.safe_dump(doc))
            _touch_later(path)
            await w.tick()  # sees the file move
            await w.tick()  # sees it hold still: applies it
            return w.refresher.policy.pricing.refresh_interval_s, w.schedule.interval_s

    assert run(scenario()) == (60.0, 60.0)


def test_invalid_policy_file_is_refused_and_the_running_one_stays(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY.model_dump(mode="json")))
    feed, clock = _feed(), Clock()

    async def scenario() -> Any:
        async with _watcher(redis_url, prefix, "a", feed, clock, path) as w:
            path.write_text("pools: [")
            _touch_later(path)
            await w.tick()
            await w.tick()  # read once it holds still, and refused
            return w.refresher.policy

    assert run(scenario()) is POLICY


def test_run_fetches_as_leader_and_gives_the_lease_up_on_stop(redis_url: str, prefix: str) -> None:
    feed, clock = _feed(), Clock()

    async def scenario() -> Any:
        async with _watcher(redis_url, prefix, "a", feed, clock) as w:
            stop = asyncio.Event()
            task = asyncio.create_task(w.run(stop))
            for _ in range(500):  # poll up to 5 s for the first fetch
                if feed.calls:
                    break
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.wait_for(task, timeout=10)
            holder = await w.refresher.table.redis.get(w.lease.key)
            leader = w.metrics.leader.collect()[0].samples[0].value
            return len(feed.calls), holder, leader

    assert run(scenario()) == (1, None, 0)
