"""From the price table to pools: which rows each feed must fetch, and what each pool
costs per GPU-hour and per million output tokens. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from live.price_table import PriceKey, PriceRow
from live.tables import PriceEntry
from router.policy import Policy, PoolSpec

CLOUD_FEEDS = ("aws", "gcp", "azure")
STATIC_FEED = "static"


def pool_key(pool: PoolSpec) -> PriceKey | None:
    """The price-table row a pool's price comes from; None if the policy prices it."""
    if pool.price.source == "policy":
        return None
    return PriceKey(pool.provider, pool.region, pool.price.instance_type, pool.price.purchase)


def wanted_keys(policy: Policy) -> dict[str, frozenset[PriceKey]]:
    """Per feed name, the rows the policy's pools need from it. A pool whose source is a
    cloud asks that cloud's feed; a pool whose source is ``static`` asks only the file."""
    out: dict[str, set[PriceKey]] = {name: set() for name in (*CLOUD_FEEDS, STATIC_FEED)}
    for pool in policy.pools:
        key = pool_key(pool)
        if key is not None:
            out[pool.price.source].add(key)
    return {name: frozenset(keys) for name, keys in out.items()}


def usd_per_million_tokens(
    usd_per_gpu_hour: float, gpus_per_replica: int, tokens_per_s: float
) -> float:
    """Cost of one million output tokens in USD: $/hour of a replica (USD per GPU-hour ×
    GPUs) ÷ (goodput tokens/s × 3600) × 1e6. The same formula the router prices with."""
    return usd_per_gpu_hour * gpus_per_replica / (tokens_per_s * 3600.0) * 1e6


@dataclass(frozen=True)
class PoolPrice:
    """One pool's price as the feeds see it.

    ``row`` is None while no feed has priced the pool's key. ``stale`` is True when the
    row is older than the policy's ``stale_after_s``: routing still uses it (dropping
    the pool would drop capacity), but it is flagged everywhere it is shown.
    ``override_usd_per_gpu_hour`` is the policy's override, which routing uses instead.
    """

    pool_id: str
    key: PriceKey
    row: PriceRow | None
    stale: bool
    gpus_per_replica: int
    tokens_per_s: float
    override_usd_per_gpu_hour: float | None

    @property
    def usd_per_million_tokens(self) -> float:
        """USD per 1M output tokens at the price routing uses; NaN if there is none."""
        price = self.override_usd_per_gpu_hour
        if price is None:
            price = self.row.usd_per_gpu_hour if self.row is not None else math.nan
        return usd_per_million_tokens(price, self.gpus_per_replica, self.tokens_per_s)

    def entry(self) -> PriceEntry | None:
        """What to write into the pool's live price, or None if there is no row."""
        if self.row is None:
            return None
        return PriceEntry(
            usd_per_gpu_hour=self.row.usd_per_gpu_hour,
            source=self.row.source,
            fetched_at_s=self.row.fetched_at_s,
            stale=self.stale,
            usd_per_hour=self.row.usd_per_hour,
            instance_type=self.row.instance_type,
            purchase=self.row.purchase,
        )


def price_pools(policy: Policy, rows: Mapping[PriceKey, PriceRow], now_s: float) -> list[PoolPrice]:
    """Every feed-priced pool of ``policy`` with its row from ``rows`` (the merged table,
    where static rows already override the clouds')."""
    out = []
    stale_after = policy.pricing.stale_after_s
    for pool in policy.pools:
        key = pool_key(pool)
        if key is None:
            continue
        row = rows.get(key)
        if row is not None and pool.price.source == STATIC_FEED and row.source != STATIC_FEED:
            row = None
        out.append(
            PoolPrice(
                pool_id=pool.id,
                key=key,
                row=row,
                stale=row is not None and row.age_s(now_s) > stale_after,
                gpus_per_replica=pool.gpus_per_replica,
                tokens_per_s=pool.goodput.tokens_per_s,
                override_usd_per_gpu_hour=pool.price.usd_per_gpu_hour,
            )
        )
    return out
