"""Scrape every replica's engine metrics in the background, never on the request path.

Every ``health.scrape_interval_s`` each endpoint of every pool gets ``GET /metrics``
(at most ``scrape_concurrency`` at a time, each within ``health.scrape_timeout_s``),
parsed by ``parse_engine_load`` into the replica's state (``gateway.replicas``). Then
the load the engines report beyond this gateway fleet's own in-flight count goes to the
routing state, so a pool's queue depth includes requests that did not come through it.

What counts as a failed scrape: no answer (connect error, timeout). Any answer that is
not engine metrics (a 404, an error status, another exporter's page) means the replica
is alive but its load unknown: it keeps its traffic, chosen by this process's in-flight
count alone, and whether it serves well is for its requests to show.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from adapters.upstream import UpstreamClient
from adapters.upstream.engine_metrics import EngineLoad, parse_engine_load
from base.errors import EngineMetricsError, UpstreamError, UpstreamTimeout
from gateway.health import abandon_silent
from gateway.routing_state import RoutingState

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"


class Scrape(NamedTuple):
    """One replica's scrape: its load (None: no engine metrics in the answer, or no
    answer), the error if it failed, and whether it failed by silence (no answer at all
    within the timeout: a hang, not a refusal or an error status)."""

    load: EngineLoad | None
    error: str | None = None
    silent: bool = False


async def scrape_one(upstream: UpstreamClient, address: str, timeout_s: float) -> Scrape:
    """One replica's load (``Scrape``). Never raises for the replica's faults."""
    try:
        status, body = await upstream.get(address + METRICS_PATH, timeout_s)
    except UpstreamTimeout as exc:
        return Scrape(None, str(exc), silent=True)
    except UpstreamError as exc:
        return Scrape(None, str(exc) or type(exc).__name__)
    if status != 200:
        return Scrape(None)
    try:
        return Scrape(parse_engine_load(body.decode("utf-8", "replace")))
    except EngineMetricsError:
        return Scrape(None)


class ReplicaScraper:
    """Runs scrape rounds for one gateway process. ``monotonic`` is injectable."""

    def __init__(
        self,
        state: RoutingState,
        upstream: UpstreamClient,
        *,
        concurrency: int = 16,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.upstream = upstream
        self.monotonic = monotonic
        self._limit = asyncio.Semaphore(concurrency)
        self.rounds = 0

    async def round(self) -> None:
        """Scrape every replica of every pool once and apply the results. An address
        several pools share (one engine serving more than one pool) is scraped once."""
        health = self.state.policy.policy.health
        timeout_s = min(health.scrape_timeout_s, health.scrape_interval_s)
        replica_set = self.state.replicas
        jobs = [(p, i, r.address) for p in replica_set.pools for i, r in enumerate(p.replicas)]

        async def one(address: str) -> Scrape:
            async with self._limit:
                return await scrape_one(self.upstream, address, timeout_s)

        addresses = list(dict.fromkeys(address for _, _, address in jobs))
        scraped = await asyncio.gather(*(one(address) for address in addresses))
        results = dict(zip(addresses, scraped, strict=True))
        now = self.monotonic()
        for pool, i, address in jobs:
            load, error, silent = results[address]
            if replica_set.by_id.get(pool.pool_id) is not pool:
                continue  # a policy reload replaced the pool meanwhile; next round
            before = bool(pool.table.available[i])
            pool.on_scrape(i, load, error, now)
            after = bool(pool.table.available[i])
            if before != after:
                logger.warning(
                    "replica %s of pool %s %s%s", address, pool.pool_id,
                    "back in service" if after else "out of service: ",
                    "" if after else error or "",
                )  # fmt: skip
                if not after and silent:
                    abandon_silent(self.upstream, address, f"replica {address} out: {error}")
        self.state.set_engine_load(replica_set.engine_load())
        self.rounds += 1

    async def run(self) -> None:
        """Loop: a round every ``health.scrape_interval_s``. Runs until cancelled."""
        while True:
            try:
                await self.round()
            except Exception:
                logger.exception("replica scrape round failed")
            await asyncio.sleep(self.state.policy.policy.health.scrape_interval_s)
