"""Passive outlier detection from real traffic, per gateway replica.

Two triggers: ``consecutive_failures`` failed attempts in a row, or an error rate of
``error_rate_threshold`` over ``error_rate_window_s`` (with enough requests to judge).
Either one ejects the pool locally at once (this replica stops sending it work without
waiting for Redis) and queues an EJECT event for the shared health state machine
(``gateway.health``), which makes every replica follow.

Ejections are counted per incident, not per failure: requests already in flight when a
pool is ejected fail too, and they neither eject it again nor lengthen its backoff. The
backoff doubles per relapse: a failed half-open trial, or a new ejection soon after a
readmission (within ``max(ramp_s, probe_interval_s)``, as the shared state machine
counts relapses); a pool that stayed healthy that long starts again from the base.
When the backoff ends the pool is half-open here: one trial request at a time; a
success lifts the local block. While Redis is reachable the shared state decides
readmission (by active probes) and a local block never outlives it (``shared_readmitted``);
the local half-open path is what keeps a replica sane when Redis is not.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from router.policy import HealthSettings, OutlierSettings


@dataclass
class _PoolHealth:
    failures: int = 0
    ejections: int = 0
    ejected_at: float = 0.0
    ejected_until: float = 0.0
    readmitted_at: float = 0.0
    trial_running: bool = False
    # (second, ok, errors) buckets over the error-rate window.
    window: deque[list[int]] = field(default_factory=deque)


class OutlierDetector:
    """Tracks outcomes per pool id. ``now`` arguments are unix seconds. One event loop only."""

    def __init__(self, settings: OutlierSettings, health: HealthSettings) -> None:
        self.settings = settings
        self.health = health
        self._pools: dict[str, _PoolHealth] = {}
        self._ejected: set[str] = set()
        self._ejections: dict[str, str] = {}

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

    def _count(self, health: _PoolHealth, now: float, ok: bool) -> None:
        """Count one attempt in the pool's per-second window, dropping seconds older
        than the error-rate window."""
        second = math.floor(now)
        window = health.window
        if window and window[-1][0] == second:
            window[-1][1 if ok else 2] += 1
        else:
            window.append([second, int(ok), int(not ok)])
        horizon = second - self.health.error_rate_window_s
        while window and window[0][0] <= horizon:
            window.popleft()

    def on_success(self, pool_id: str, now: float) -> None:
        """Record a successful attempt. Only the half-open trial (or a success after the
        backoff) lifts a local block: a request sent before the ejection that succeeds
        during the backoff says little about the pool now."""
        health = self._pools.setdefault(pool_id, _PoolHealth())
        health.failures = 0
        self._count(health, now, ok=True)
        if pool_id in self._ejected and (health.trial_running or now >= health.ejected_until):
            self._readmit(pool_id, health, now)

    def _readmit(self, pool_id: str, health: _PoolHealth, now: float) -> None:
        # The ejection count stays: a relapse soon after this doubles the next backoff.
        self._ejected.discard(pool_id)
        health.trial_running = False
        health.failures = 0
        health.readmitted_at = now

    def shared_readmitted(self, pool_id: str, readmitted_s: float, now: float) -> None:
        """The shared state readmitted ``pool_id`` at ``readmitted_s`` (unix s): a local
        block from before that is lifted, so it never outlives the readmission."""
        health = self._pools.get(pool_id)
        if pool_id in self._ejected and health is not None and readmitted_s > health.ejected_at:
            self._readmit(pool_id, health, now)

    def ejected_ids(self) -> frozenset[str]:
        """Pools this replica has blocked (their backoff may be over: half-open)."""
        return frozenset(self._ejected)

    def on_failure(self, pool_id: str, now: float, reason: str) -> bool:
        """Record a failed attempt. Returns True if this failure ejected the pool."""
        health = self._pools.setdefault(pool_id, _PoolHealth())
        health.failures += 1
        self._count(health, now, ok=False)
        # Summed only here: a success (nearly every attempt) needs no rate.
        ok = sum(b[1] for b in health.window)
        errors = sum(b[2] for b in health.window)
        half_open_failed = pool_id in self._ejected and health.trial_running
        if pool_id in self._ejected and not half_open_failed:
            # The incident that ejected it (requests already in flight): counted, no more.
            return False
        rate_tripped = (
            ok + errors >= self.health.error_rate_min_requests
            and errors / (ok + errors) >= self.health.error_rate_threshold
        )
        if half_open_failed:
            why = f"trial request failed: {reason}"
        elif health.failures >= self.settings.consecutive_failures:
            why = f"{health.failures} consecutive failures: {reason}"
        elif rate_tripped and pool_id not in self._ejected:
            why = f"error rate {errors}/{ok + errors} over {self.health.error_rate_window_s:.0f}s"
        else:
            return False
        settle_s = max(self.health.ramp_s, self.health.probe_interval_s)
        if not half_open_failed and now - health.readmitted_at >= settle_s:
            health.ejections = 0  # healthy long enough since the last readmission
        backoff = min(
            self.settings.base_ejection_s * 2**health.ejections, self.settings.max_ejection_s
        )
        health.ejections += 1
        health.ejected_at = now
        health.failures = 0
        health.trial_running = False
        health.ejected_until = now + backoff
        health.window.clear()
        self._ejected.add(pool_id)
        self._ejections[pool_id] = why
        return True

    def release_trial(self, pool_id: str) -> None:
        """Free the half-open trial slot when an attempt ended without a verdict."""
        health = self._pools.get(pool_id)
        if health is not None:
            health.trial_running = False

    def take_ejections(self) -> dict[str, str]:
        """Pools ejected since the last call, with the reason: EJECT events for the shared
        state machine."""
        out, self._ejections = self._ejections, {}
        return out

    def requeue(self, pool_id: str, reason: str) -> None:
        """Put back an ejection the shared state machine could not record yet."""
        self._ejections.setdefault(pool_id, reason)
