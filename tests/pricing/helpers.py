"""Policies, clocks and a Redis-backed refresher for the price-feed tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from live.price_table import PriceTable
from live.tables import LiveTables
from pricing.catalog import Catalog
from pricing.feed import Feed
from pricing.metrics import PriceMetrics
from pricing.refresh import Refresher
from router.policy import Policy

T = TypeVar("T")
NOW = 1_750_000_000.0


def run(coro: Awaitable[T]) -> T:
    """Run one coroutine in a fresh event loop (Redis clients are bound to their loop)."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


def pool_doc(
    pool_id: str,
    provider: str,
    region: str,
    source: str,
    instance_type: str,
    purchase: str = "on_demand",
    *,
    gpus: int = 1,
    tokens_per_s: float = 1000.0,
    override: float | None = None,
) -> dict[str, Any]:
    """A policy pool whose price comes from ``source`` for ``instance_type``."""
    price: dict[str, Any] = {"source": source, "instance_type": instance_type, "purchase": purchase}
    if override is not None:
        price["usd_per_gpu_hour"] = override
    return {
        "id": pool_id, "provider": provider, "region": region, "model": "m",
        "upstream_model": "m", "gpu_type": "H100", "gpus_per_replica": gpus,
        "endpoints": ["http://127.0.0.1:9"], "price": price,
        "goodput": {"tokens_per_s": tokens_per_s, "prefill_tokens_per_s": 10000.0,
                    "max_concurrency": 8, "tpot_ms": 20.0},
    }  # fmt: skip


def policy_of(pools: list[dict[str, Any]], **pricing: Any) -> Policy:
    """A valid policy around ``pools``; ``pricing`` sets PricingSettings fields."""
    locations = {f"{p['provider']}:{p['region']}" for p in pools}
    return Policy.model_validate(
        {
            "slo_classes": {"interactive": {"ttft_ms": 800, "tpot_ms": 60}},
            "models": {"m": {"default_slo": "interactive"}},
            "pools": pools,
            "client_regions": {"us": {"rtt_ms": dict.fromkeys(sorted(locations), 5.0)}},
            "routing": {"default_client_region": "us"},
            "pricing": pricing,
        }
    )


class Clock:
    """A settable clock (unix seconds)."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """A refresher on a real Redis, with what tests inspect."""

    refresher: Refresher
    table: PriceTable
    tables: LiveTables
    registry: CollectorRegistry
    redis: Redis
    clock: Clock

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def pool_price(self, pool_id: str) -> Any:
        rows = await self.tables.read([pool_id], int(self.clock() * 1000), 3000)
        return rows[pool_id]


@asynccontextmanager
async def rig(
    redis_url: str,
    prefix: str,
    policy: Policy,
    feeds: Mapping[str, Feed],
    clock: Clock | None = None,
) -> AsyncIterator[Rig]:
    """A refresher for ``policy`` and ``feeds`` under ``prefix``; closes everything."""
    client = Redis.from_url(redis_url)
    registry = CollectorRegistry()
    clock = clock or Clock()
    table = PriceTable(client, prefix)
    tables = LiveTables(client, prefix)
    refresher = Refresher(
        policy, feeds, table, tables, PriceMetrics(registry), Catalog.builtin(), clock=clock
    )
    try:
        yield Rig(refresher, table, tables, registry, client, clock)
    finally:
        for feed in feeds.values():
            await feed.aclose()
        await client.aclose()
