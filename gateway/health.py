"""Drives the shared health state machine (``router.health``) from this replica.

- Passive: ejections found by ``gateway.outlier`` on real traffic become EJECT events.
- Active: every ``probe_interval_s`` each pool is probed (``gateway.probe``), except an
  ejected pool whose backoff is not over yet, and the result becomes PROBE_OK/FAIL.
- A pool that probes, a missed deadline or a scrape took out for silence fails over
  what still waits on its engine with no byte of answer (``abandon_silent``); a pool
  another replica ejected is probed once by this one for the same (``confirm_round``).
- Operators and the autoscaler send DRAIN and UNCORDON through the admin API.

Each event is applied to the pool's record in Redis with a compare-and-set, so every
gateway replica shares one state machine; each transition is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from adapters.upstream import UpstreamClient
from base.errors import TableError
from gateway.metrics import GatewayMetrics
from gateway.probe import endpoint_bases, probe_pool
from gateway.routing_state import RoutingState
from live.tables import LiveTables
from router.health import HealthEvent, HealthRecord, PoolState, transition

logger = logging.getLogger(__name__)


def abandon_silent(upstream: UpstreamClient, address: str, reason: str) -> int:
    """Fail over now what waits on the engine at ``address`` (a base URL or any URL of
    it) with no byte of answer yet (``UpstreamClient.abandon_silent``), logging how many.
    For an engine just taken out for silence (a missed deadline, probes or scrapes with
    no answer): what waits on it is stuck behind the same hang, and each would otherwise
    sit out its own deadline before failing over. Returns the count."""
    count = upstream.abandon_silent(address, reason)
    if count:
        logger.warning("%d exchange(s) waiting on %s failed over at once", count, address)
    return count


class HealthMonitor:
    """Applies health events for one gateway replica. Loops run until cancelled."""

    def __init__(self, state: RoutingState, tables: LiveTables, metrics: GatewayMetrics) -> None:
        self.state = state
        self.tables = tables
        self.metrics = metrics
        # Pool id -> the start (since_s) of the last shared ejection confirm_round saw.
        self._confirmed: dict[str, float] = {}

    async def apply(
        self, pool_id: str, event: HealthEvent, reason: str = ""
    ) -> HealthRecord | None:
        """Apply one event to the shared record; returns the new record, or None if it
        changed nothing. Raises TableError when Redis cannot be reached."""
        policy = self.state.policy.policy
        now = time.time()
        result = await self.tables.update_health(
            pool_id,
            lambda rec: transition(rec, event, now, policy.health, policy.routing.outlier, reason),
        )
        if result is None:
            return None
        before, after = result
        if before.state is not after.state:
            logger.info(
                "pool %s: %s -> %s (%s)",
                pool_id,
                before.state.value,
                after.state.value,
                after.reason,
            )
            self.metrics.pool_transitions.labels(
                pool_id, before.state.value, after.state.value
            ).inc()
        if after.needs_replacement and not before.needs_replacement:
            logger.warning(
                "pool %s flagged needs-replacement after %d relapses", pool_id, after.relapses
            )
        return after

    async def events(self, interval_s: float = 0.05) -> None:
        """Loop: turn this replica's passive ejections into shared EJECT events."""
        while True:
            await asyncio.sleep(interval_s)
            for pool_id, reason in self.state.outlier.take_ejections().items():
                try:
                    await self.apply(pool_id, HealthEvent.EJECT, reason)
                except TableError:
                    self.state.outlier.requeue(pool_id, reason)

    async def probe_round(self, upstream: UpstreamClient) -> None:
        """Probe every pool that is due once, and apply the results."""
        policy = self.state.policy.policy
        now = time.time()
        rows = self.state.snapshot.rows
        due = []
        for pool in policy.pools:
            record = rows[pool.id].health if pool.id in rows else HealthRecord()
            if record.state is PoolState.EJECTED and now < record.until_s:
                continue  # backing off
            due.append(pool)
        settings = policy.health
        results = await asyncio.gather(
            *(
                probe_pool(
                    upstream, p, settings.probe_path, settings.probe_timeout_s,
                    self._replicas_of(p.id),
                )
                for p in due
            )
        )  # fmt: skip
        rtt = {}
        for pool, result in zip(due, results, strict=True):
            event = HealthEvent.PROBE_OK if result.ok else HealthEvent.PROBE_FAIL
            reason = "" if result.ok else f"probe failed: {result.detail}"
            with contextlib.suppress(TableError):
                after = await self.apply(pool.id, event, reason)
                if after is not None and after.state is PoolState.EJECTED:
                    for base in result.silent:
                        abandon_silent(upstream, base, f"pool {pool.id} taken out: {reason}")
            if result.rtt_ms is not None:
                rtt[pool.id] = result.rtt_ms
        if rtt:
            with contextlib.suppress(TableError):
                await self.tables.record_rtt(rtt)

    async def confirm_round(self, upstream: UpstreamClient) -> int:
        """For each pool newly ejected in the shared state (by any replica, for any
        reason) while this replica still has requests waiting on its engines with no
        byte of answer: probe those engines once, and fail over at once what waits on
        the ones that stay silent (``abandon_silent``). The replica that ejected the
        pool did so for its own requests; this one would otherwise sit out each of its
        deadlines, since it neither sends new work nor probes a pool in its backoff.
        Returns how many exchanges were failed over."""
        policy = self.state.policy.policy
        rows = self.state.snapshot.rows
        jobs = []
        for pool in policy.pools:
            record = rows[pool.id].health if pool.id in rows else None
            if record is None or record.state is not PoolState.EJECTED:
                continue
            if self._confirmed.get(pool.id) == record.since_s:
                continue
            self._confirmed[pool.id] = record.since_s
            bases = endpoint_bases(pool, self._replicas_of(pool.id))
            waiting = tuple(base for base in bases if upstream.count_silent(base))
            if waiting:
                jobs.append((pool, waiting, record.reason))
        settings = policy.health
        results = await asyncio.gather(
            *(
                probe_pool(upstream, p, settings.probe_path, settings.probe_timeout_s, bases)
                for p, bases, _ in jobs
            )
        )  # fmt: skip
        failed = 0
        for (pool, _, why), result in zip(jobs, results, strict=True):
            for base in result.silent:
                reason = f"pool {pool.id} ejected ({why}) and silent to this replica's probe"
                failed += abandon_silent(upstream, base, reason)
        return failed

    async def confirm_ejections(self, upstream: UpstreamClient, interval_s: float = 0.1) -> None:
        """Loop: ``confirm_round`` every ``interval_s`` (the snapshot's refresh period)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.confirm_round(upstream)
            except Exception:
                logger.exception("confirming shared ejections failed")

    def _replicas_of(self, pool_id: str) -> tuple[str, ...]:
        """The pool's replicas as requests see them (DNS, node group or static)."""
        pool = self.state.replicas.by_id.get(pool_id)
        return pool.table.ids if pool is not None else ()

    async def probes(self, upstream: UpstreamClient) -> None:
        """Loop: a probe round every ``health.probe_interval_s`` of the running policy."""
        while True:
            await asyncio.sleep(self.state.policy.policy.health.probe_interval_s)
            try:
                await self.probe_round(upstream)
            except Exception:
                logger.exception("probe round failed")
