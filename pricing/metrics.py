"""Prometheus metrics of the price feeds, in a registry the caller owns (no global one)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from live.price_table import FeedStatus


class PriceMetrics:
    """Feed health as metrics:

    - ``skyroute_price_age_seconds{feed}``: seconds since the feed's last good refresh
      (+Inf before the first one);
    - ``skyroute_price_feed_up{feed}``: 1 if the last refresh was ok or partial, else 0;
    - ``skyroute_price_feed_errors_total{feed,reason}``: failed fetches, failed parts of
      one, and refreshes that left wanted rows missing (reason ``missing``);
    - ``skyroute_price_rows_rejected_total{feed}``: rows refused by validation or unreadable;
    - ``skyroute_price_rows{feed}``: valid rows the last good refresh returned;
    - ``skyroute_price_stale_pools``: pools routed on a price older than the bound;
    - ``skyroute_price_leader``: 1 while this process holds the price lease.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.age = Gauge(
            "skyroute_price_age_seconds",
            "Seconds since the feed's last good refresh",
            ["feed"],
            registry=registry,
        )
        self.up = Gauge(
            "skyroute_price_feed_up",
            "1 if the feed's last refresh worked",
            ["feed"],
            registry=registry,
        )
        self.errors = Counter(
            "skyroute_price_feed_errors",
            "Failed price fetches (or parts of one), by reason",
            ["feed", "reason"],
            registry=registry,
        )
        self.rejected = Counter(
            "skyroute_price_rows_rejected",
            "Price rows refused by validation or unreadable",
            ["feed"],
            registry=registry,
        )
        self.rows = Gauge(
            "skyroute_price_rows",
            "Valid rows of the last good refresh",
            ["feed"],
            registry=registry,
        )
        self.stale_pools = Gauge(
            "skyroute_price_stale_pools",
            "Pools routed on a price older than the policy's bound",
            registry=registry,
        )
        self.leader = Gauge(
            "skyroute_price_leader", "1 while this process holds the price lease", registry=registry
        )

    def observe(self, statuses: Iterable[FeedStatus], now_s: float) -> None:
        """Set the per-feed gauges from the feeds' statuses at ``now_s``."""
        for status in statuses:
            age = status.age_s(now_s)
            self.age.labels(feed=status.feed).set(age if math.isfinite(age) else math.inf)
            self.up.labels(feed=status.feed).set(0 if status.state == "error" else 1)
            if status.state != "error":
                self.rows.labels(feed=status.feed).set(status.rows)

    def failed(self, feed: str, reason: str) -> None:
        """Count one failed fetch (or part of one)."""
        self.errors.labels(feed=feed, reason=reason).inc()

    def rows_rejected(self, feed: str, count: int) -> None:
        """Count rejected rows."""
        if count:
            self.rejected.labels(feed=feed).inc(count)
