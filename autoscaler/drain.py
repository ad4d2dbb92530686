"""Cordon a pool before replicas leave it, and give it back afterwards.

The gateway routes per pool, so the drain mechanism in Redis is the pool's shared health
record: DRAIN (``router.health.transition``) stops every gateway replica from sending
it new requests. The drainer then waits until the pool's in-flight count, summed over
the live gateway replicas, is zero, or a deadline passes. A gateway may still route one
request on a snapshot taken just before the cordon and report it at its next flush, so
zero only counts once ``settle_s`` (longer than a snapshot refresh plus a flush) has
passed since the cordon. Afterwards the pool's record goes back to exactly what it was
before the drain, unless someone else has changed it meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from autoscaler.fleet import AUTOSCALER_REASON
from live.tables import LiveTables
from router.health import HealthEvent, HealthRecord, PoolState, transition
from router.policy import HealthSettings, OutlierSettings

__all__ = ["DrainResult", "Drainer"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DrainResult:
    """How a drain ended: the record before it, whether in-flight reached zero
    (``drained``), what was still in flight (requests), the wait (s), and whether it
    stopped because this sidecar lost the lead (``aborted``)."""

    before: HealthRecord
    drained: bool
    inflight: float
    waited_s: float
    aborted: bool = False


class Drainer:
    """Drains pools through the live tables. ``still_leader`` is asked before every
    wait step; ``clock`` (unix s) and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        tables: LiveTables,
        health: HealthSettings,
        outlier: OutlierSettings,
        *,
        replica_ttl_ms: int = 3000,
        settle_s: float = 1.0,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.tables = tables
        self.health = health
        self.outlier = outlier
        self.replica_ttl_ms = replica_ttl_ms
        self.settle_s = settle_s
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep

    async def inflight(self, pool_id: str) -> float:
        """Requests in flight on ``pool_id`` summed over live gateway replicas.
        Raises TableError."""
        rows = await self.tables.read(
            [pool_id], int(self.clock() * 1000), self.replica_ttl_ms, with_samples=False
        )
        return rows[pool_id].inflight

    async def drain(
        self, pool_id: str, reason: str, deadline_s: float, still_leader: Callable[[], bool]
    ) -> DrainResult:
        """Cordon ``pool_id`` and wait up to ``deadline_s`` for its in-flight requests to
        finish. Idempotent: a pool already draining is waited on, not cordoned again.
        Raises TableError when Redis fails."""
        started = self.clock()
        text = f"{AUTOSCALER_REASON} {reason}"
        result = await self.tables.update_health(
            pool_id,
            lambda rec: transition(
                rec, HealthEvent.DRAIN, started, self.health, self.outlier, text
            ),
        )
        before = result[0] if result else await self.tables.read_health(pool_id)
        logger.info("pool %s: draining (%s)", pool_id, reason)
        inflight = await self.inflight(pool_id)
        while True:
            waited = self.clock() - started
            if inflight <= 0 and waited >= self.settle_s:
                return DrainResult(before, True, 0.0, waited)
            if waited >= deadline_s:
                logger.warning(
                    "pool %s: drain deadline %.0fs passed with %.0f in flight",
                    pool_id, deadline_s, inflight,
                )  # fmt: skip
                return DrainResult(before, False, inflight, waited)
            if not still_leader():
                return DrainResult(before, False, inflight, waited, aborted=True)
            await self.sleep(self.poll_s)
            inflight = await self.inflight(pool_id)

    async def restore(self, pool_id: str, before: HealthRecord) -> bool:
        """Put back the record from before our drain, if the pool is still in our drain
        (an operator's later drain or uncordon wins). True if it was restored."""

        def undo(rec: HealthRecord) -> HealthRecord | None:
            ours = rec.state is PoolState.DRAINING and rec.reason.startswith(AUTOSCALER_REASON)
            if not ours or before.state is PoolState.DRAINING:
                return None
            return replace(before, version=rec.version)

        done = await self.tables.update_health(pool_id, undo) is not None
        if done:
            logger.info("pool %s: drain over, back to %s", pool_id, before.state.value)
        return done

    async def recover(self, pool_id: str) -> bool:
        """Lift a drain a previous leader left behind (it died mid-scale-down). The pool
        is readmitted with a ramp. True if there was one."""
        now = self.clock()

        def lift(rec: HealthRecord) -> HealthRecord | None:
            if rec.state is not PoolState.DRAINING or not rec.reason.startswith(AUTOSCALER_REASON):
                return None
            after = transition(rec, HealthEvent.UNCORDON, now, self.health, self.outlier,
                               f"{AUTOSCALER_REASON} interrupted drain lifted")  # fmt: skip
            return (
                None if after is None else replace(after, needs_replacement=rec.needs_replacement)
            )

        done = await self.tables.update_health(pool_id, lift) is not None
        if done:
            logger.info("pool %s: lifted a drain left by a previous leader", pool_id)
        return done

    async def readmit(self, pool_id: str, reason: str) -> bool:
        """Clear a needs-replacement flag once the bad instances are replaced (UNCORDON:
        the pool is readmitted with a ramp). True if the flag was set."""
        now = self.clock()

        def clear(rec: HealthRecord) -> HealthRecord | None:
            if not rec.needs_replacement:
                return None
            return transition(rec, HealthEvent.UNCORDON, now, self.health, self.outlier,
                              f"{AUTOSCALER_REASON} {reason}")  # fmt: skip

        return await self.tables.update_health(pool_id, clear) is not None
