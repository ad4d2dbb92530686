"""Passive outlier ejection from real traffic, per gateway replica.

After ``consecutive_failures`` failed attempts a pool is ejected for a backoff that
doubles with every ejection in a row (capped). When the backoff ends the pool is
half-open: one trial request at a time may go to it; a success readmits it and resets
the backoff, a failure ejects it again for longer. Every change is also queued as a
HealthUpdate, which the flush loop writes to Redis so the other replicas follow.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.policy import OutlierSettings
from router.snapshot import PoolState
from router.tables import HealthUpdate


@dataclass
class _PoolHealth:
    failures: int = 0
    ejections: int = 0
    ejected_until: float = 0.0
    trial_running: bool = False


class OutlierDetector:
    """Tracks failures per pool id. ``now`` arguments are unix seconds. Not thread-safe
    (one event loop)."""

    def __init__(self, settings: OutlierSettings) -> None:
        self.settings = settings
        self._pools: dict[str, _PoolHealth] = {}
        self._updates: dict[str, HealthUpdate] = {}
        self._ejected: set[str] = set()

    def allows(self, pool_id: str, now: float) -> bool:
        """Whether an attempt may go to the pool now; claims the half-open trial slot."""
        if pool_id not in self._ejected:
            return True
        health = self._pools[pool_id]
        if now < health.ejected_until or health.trial_running:
            return False
        health.trial_running = True
        return True

    def blocked(self, now: float) -> set[str]:
        """Pool ids this replica must not route to now (cheap when nothing is ejected)."""
        if not self._ejected:
            return set()
        return {
            pid
            for pid in self._ejected
            if now < self._pools[pid].ejected_until or self._pools[pid].trial_running
        }

    def on_success(self, pool_id: str) -> None:
        """Record a successful attempt; readmits a half-open pool."""
        health = self._pools.get(pool_id)
        if health is None:
            return
        health.failures = 0
        if pool_id in self._ejected:
            self._ejected.discard(pool_id)
            health.ejections = 0
            health.trial_running = False
            self._updates[pool_id] = HealthUpdate(PoolState.HEALTHY, "trial request succeeded")

    def on_failure(self, pool_id: str, now: float, reason: str) -> bool:
        """Record a failed attempt. Returns True if this failure ejected the pool."""
        health = self._pools.setdefault(pool_id, _PoolHealth())
        health.failures += 1
        half_open_failed = pool_id in self._ejected and health.trial_running
        if not half_open_failed and health.failures < self.settings.consecutive_failures:
            return False
        backoff = min(
            self.settings.base_ejection_s * 2**health.ejections, self.settings.max_ejection_s
        )
        health.ejections += 1
        health.failures = 0
        health.trial_running = False
        health.ejected_until = now + backoff
        self._ejected.add(pool_id)
        self._updates[pool_id] = HealthUpdate(
            PoolState.EJECTED,
            f"{reason} (ejection {health.ejections})",
            weight=0.0,
            until_s=health.ejected_until,
        )
        return True

    def release_trial(self, pool_id: str) -> None:
        """Free the half-open trial slot when an attempt ended without a verdict."""
        health = self._pools.get(pool_id)
        if health is not None:
            health.trial_running = False

    def requeue(self, pool_id: str, update: HealthUpdate) -> None:
        """Put back an update the flush could not write, unless a newer one exists."""
        self._updates.setdefault(pool_id, update)

    def take_updates(self) -> dict[str, HealthUpdate]:
        """Health changes since the last call, for the flush loop to write."""
        updates, self._updates = self._updates, {}
        return updates
