"""Wiring of one price-feed process: Redis, tables, feeds, refresher, lease, watcher.

``open_process(settings)`` builds everything from settings once and closes it all on
exit; the entry points (``skyroute prices …``, the sidecar) only call it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from base.errors import PriceFeedError
from live.lease import Lease
from live.policy_file import PolicySource
from live.price_table import PriceTable
from live.redis_client import RedisClient, connect
from live.tables import LiveTables
from pricing.catalog import Catalog
from pricing.feeds import build_feeds
from pricing.metrics import PriceMetrics
from pricing.pools import PoolPrice, price_pools
from pricing.refresh import Refresher
from pricing.schedule import Schedule
from pricing.settings import PriceFeedSettings
from pricing.show import render
from pricing.watch import LEASE_NAME, PriceWatcher
from router.policy import Policy


@dataclass
class PriceProcess:
    """Everything one price-feed process uses. ``registry`` holds its metrics."""

    settings: PriceFeedSettings
    policy: Policy
    redis: RedisClient
    table: PriceTable
    refresher: Refresher
    lease: Lease
    watcher: PriceWatcher
    registry: CollectorRegistry
    metrics: PriceMetrics

    async def show(self) -> str:
        """The ``prices show`` text, from what is in Redis now."""
        rows = await self.table.read_rows()
        statuses = await self.table.read_statuses()
        now = time.time()
        pools: list[PoolPrice] = price_pools(self.refresher.policy, rows, now)
        return render(pools, statuses, now)


@contextlib.asynccontextmanager
async def open_process(settings: PriceFeedSettings) -> AsyncIterator[PriceProcess]:
    """Build the process from ``settings``. Raises PolicyError for a bad policy file and
    PriceFeedError for a missing Redis URL or an unknown feed name."""
    if not settings.redis_url:
        raise PriceFeedError(
            "SKYROUTE_REDIS_URL is not set: the price feeds write to the shared Redis",
            feed="all",
            reason="config",
        )
    policies = PolicySource(settings.policy)
    policy = policies.policy
    catalog = Catalog.builtin()
    feeds = build_feeds(settings, policy, settings.policy, catalog)
    redis = connect(settings.redis_url)
    registry = CollectorRegistry()
    metrics = PriceMetrics(registry)
    table = PriceTable(redis, settings.redis_prefix)
    refresher = Refresher(
        policy, feeds, table, LiveTables(redis, settings.redis_prefix), metrics, catalog
    )
    try:
        ttl_ms = int(settings.price_lease_ttl_s * 1000)
        lease = Lease(redis, LEASE_NAME, settings.sidecar_id, ttl_ms, prefix=settings.redis_prefix)
        schedule = Schedule(
            feeds,
            policy.pricing.refresh_interval_s,
            policy.pricing.jitter,
            settings.price_backoff_base_s,
            now_s=time.time(),
        )
        watcher = PriceWatcher(
            refresher,
            lease,
            schedule,
            metrics,
            policies=policies,
            rebuild_feeds=lambda p: build_feeds(settings, p, settings.policy, catalog),
        )
        yield PriceProcess(
            settings, policy, redis, table, refresher, lease, watcher, registry, metrics
        )
    finally:
        # The watcher may have rebuilt the feeds (policy reload); it closed the old ones.
        for feed in refresher.feeds.values():
            await feed.aclose()
        await redis.aclose()
