"""One refresh of the price feeds: fetch, validate, keep the last good rows, write the
price table and every feed-priced pool's live price.

Rules:
- a feed that fails keeps all its last good rows; one that comes back partial (a region
  missing, a page failed, rows rejected) updates what it returned and keeps the rest;
- the static file is the operator's word: its rows override the clouds' row by row, and
  a row deleted from the file is gone at the next refresh;
- a pool's live price is written (which publishes a table-change event, so every gateway
  re-reads its snapshot at once) whenever its price, source, age or stale flag changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from base.errors import PriceFeedError
from live.lease import Fence
from live.price_table import FeedState, FeedStatus, PriceKey, PriceRow, PriceTable
from live.tables import LiveTables, PriceEntry
from pricing.catalog import Catalog
from pricing.feed import Feed, FeedResult
from pricing.metrics import PriceMetrics
from pricing.pools import STATIC_FEED, PoolPrice, price_pools, wanted_keys
from pricing.rows import Bounds, validate_all
from pricing.static import StaticFeed
from router.policy import Policy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefreshReport:
    """What a refresh did: each refreshed feed's status, every feed-priced pool's price,
    and ``fenced_out`` if the lease was lost so nothing was written."""

    statuses: Mapping[str, FeedStatus]
    pools: list[PoolPrice] = field(default_factory=list)
    fenced_out: bool = False


class Refresher:
    """Owns the last good rows of every feed for one sidecar process.

    Not safe to run two refreshes of one Refresher at once; the watch loop does not.
    Raises TableError when Redis fails (the in-memory last good rows survive it).
    """

    def __init__(
        self,
        policy: Policy,
        feeds: Mapping[str, Feed],
        table: PriceTable,
        tables: LiveTables,
        metrics: PriceMetrics,
        catalog: Catalog,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.feeds = dict(feeds)
        self.table = table
        self.tables = tables
        self.metrics = metrics
        self.catalog = catalog
        self.clock = clock
        self._good: dict[str, dict[PriceKey, PriceRow]] = {}
        self.statuses: dict[str, FeedStatus] = {}
        self._written: dict[str, PriceEntry] = {}
        self._loaded = False

    async def load(self) -> None:
        """Start from the rows and statuses in Redis (written by a previous leader)."""
        self._good = {}
        for row in (await self.table.read_rows()).values():
            self._good.setdefault(row.source, {})[row.key] = row
        self.statuses = await self.table.read_statuses()
        self._written = {}
        self._loaded = True

    @property
    def merged(self) -> dict[PriceKey, PriceRow]:
        """The effective table: every cloud feed's last good rows, static rows on top."""
        out: dict[PriceKey, PriceRow] = {}
        for source in sorted(self._good, key=lambda s: s == STATIC_FEED):
            out.update(self._good[source])
        return out

    async def refresh(
        self, names: Iterable[str] | None = None, fence: Fence | None = None
    ) -> RefreshReport:
        """Fetch ``names`` (default: every feed) at once, then write the table and the
        pools' prices. With a ``fence``, nothing is written once the lease is lost."""
        if not self._loaded:
            await self.load()
        chosen = [n for n in (names or self.feeds) if n in self.feeds]
        wants = wanted_keys(self.policy)
        now = self.clock()
        idle = {n: why for n in chosen if (why := self._nothing_to_do(n, wants)) is not None}
        fetching = [n for n in chosen if n not in idle]
        outcomes = await asyncio.gather(
            *(self.feeds[n].fetch(wants.get(n, frozenset())) for n in fetching),
            return_exceptions=True,
        )
        for name, outcome in zip(fetching, outcomes, strict=True):
            self.statuses[name] = self._apply(name, outcome, wants.get(name, frozenset()), now)
        for name, why in idle.items():
            prev = self.statuses.get(name)
            self.statuses[name] = FeedStatus(
                name, "skipped", "unused", why, now, prev.last_ok_s if prev else 0.0
            )
        refreshed = {n: self.statuses[n] for n in chosen}
        rows = list(self.merged.values())
        if not await self.table.write(rows, refreshed.values(), fence=fence, replace=True):
            logger.warning("price lease lost during a refresh: nothing written")
            return RefreshReport(refreshed, fenced_out=True)
        pools = await self.publish_pools()
        return RefreshReport(refreshed, pools)

    def _nothing_to_do(self, name: str, wants: Mapping[str, frozenset[PriceKey]]) -> str | None:
        """Why feed ``name`` has nothing to fetch, or None if it has work."""
        feed = self.feeds[name]
        if isinstance(feed, StaticFeed):
            return None if feed.path is not None else "the policy names no pricing.static_file"
        if name == STATIC_FEED:
            return None  # another static source (tests): the operator's rows, always read
        if not wants.get(name):
            return f"no pool of the policy takes its price from {name}"
        return None

    async def publish_pools(self) -> list[PoolPrice]:
        """Write every feed-priced pool's live price that changed since last written
        (stale flags change with time alone), and update the gauges."""
        now = self.clock()
        pools = price_pools(self.policy, self.merged, now)
        for pool in pools:
            entry = pool.entry()
            if entry is None or self._written.get(pool.pool_id) == entry:
                continue
            await self.tables.set_price(pool.pool_id, entry)
            self._written[pool.pool_id] = entry
            if entry.stale:
                logger.warning(
                    "pool %s: price from %s is stale (%.0f s old); still routed on",
                    pool.pool_id,
                    entry.source,
                    now - entry.fetched_at_s,
                )
        self.metrics.stale_pools.set(sum(p.stale for p in pools))
        self.metrics.observe(self.statuses.values(), now)
        return pools

    def _apply(
        self,
        name: str,
        outcome: FeedResult | BaseException,
        wants: frozenset[PriceKey],
        now: float,
    ) -> FeedStatus:
        prev = self.statuses.get(name)
        last_ok = prev.last_ok_s if prev else 0.0
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):
                raise outcome
            if isinstance(outcome, PriceFeedError):
                reason = outcome.reason
            else:
                logger.error("price feed %s failed unexpectedly", name, exc_info=outcome)
                reason = "internal"
            logger.warning(
                "price feed %s failed (%s), last good prices kept: %s", name, reason, outcome
            )
            self.metrics.failed(name, reason)
            kept = prev.rows if prev else 0
            return FeedStatus(name, "error", reason, str(outcome), now, last_ok, kept)
        rows, rejected = validate_all(
            outcome.quotes, Bounds.of(self.policy.pricing), self.catalog, now
        )
        for exc in outcome.errors:
            self.metrics.failed(name, exc.reason)
        n_rejected = len(rejected) + len(outcome.malformed)
        self.metrics.rows_rejected(name, n_rejected)
        if name == STATIC_FEED:
            self._good[name] = {r.key: r for r in rows}
        else:
            self._good.setdefault(name, {}).update({r.key: r for r in rows})
        got = {r.key for r in rows}
        missing = tuple(sorted(str(k) for k in wants - got))
        if missing and not outcome.errors:
            self.metrics.failed(name, "missing")
        state: FeedState
        if wants and not wants & got:
            state, reason = "error", outcome.errors[0].reason if outcome.errors else "missing"
        elif outcome.errors or missing:
            state, reason = "partial", outcome.errors[0].reason if outcome.errors else "missing"
        else:
            state, reason = "ok", ""
        error = "; ".join(str(e) for e in outcome.errors)
        if missing and not error:
            error = f"no valid price for {len(missing)} wanted row(s)"
        if state == "error":
            logger.warning("price feed %s returned nothing usable: %s", name, error)
        return FeedStatus(
            feed=name,
            state=state,
            reason=reason,
            error=error,
            last_attempt_s=now,
            last_ok_s=last_ok if state == "error" else now,
            rows=len(rows),
            rejected=n_rejected,
            missing=missing,
        )
