"""The per-pool health state machine, as a pure function.

    healthy ──eject──► ejected ──backoff over──► probing ──N good probes──► healthy (ramping)
       ▲                  ▲                          │
       │                  └────────probe fails───────┘
       └──uncordon── draining ◄──drain── (any state)

Every gateway replica feeds it events (its probes, its passive outlier detection, an
operator's drain) and applies the result to Redis with a compare-and-set on
``version``, so all replicas share one record per pool. ``transition`` never reads a
clock: ``now`` (unix seconds) is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from router.policy import HealthSettings, OutlierSettings

# A readmitted pool starts at this share of its normal traffic and ramps to 1.
RAMP_FLOOR = 0.1


class PoolState(StrEnum):
    """Health state of a pool, shared by every gateway replica. Only HEALTHY pools
    take traffic."""

    HEALTHY = "healthy"
    EJECTED = "ejected"
    PROBING = "probing"
    DRAINING = "draining"


class HealthEvent(StrEnum):
    """Something that happened to a pool."""

    PROBE_OK = "probe_ok"
    PROBE_FAIL = "probe_fail"
    EJECT = "eject"  # passive outlier detection on real traffic
    DRAIN = "drain"
    UNCORDON = "uncordon"


@dataclass(frozen=True)
class HealthRecord:
    """One pool's shared health record. Times are unix seconds."""

    state: PoolState = PoolState.HEALTHY
    reason: str = ""
    since_s: float = 0.0
    until_s: float = 0.0
    ejections: int = 0
    probe_ok: int = 0
    probe_fail: int = 0
    readmitted_s: float = 0.0
    relapses: int = 0
    needs_replacement: bool = False
    version: int = 0

    def weight(self, now: float, ramp_s: float) -> float:
        """Share of normal traffic the pool may take now, 0..1 (ramps after readmission)."""
        if self.state is not PoolState.HEALTHY:
            return 0.0
        if ramp_s <= 0 or self.readmitted_s <= 0 or now >= self.readmitted_s + ramp_s:
            return 1.0
        progress = max(now - self.readmitted_s, 0.0) / ramp_s
        return RAMP_FLOOR + (1.0 - RAMP_FLOOR) * progress

    def to_fields(self) -> dict[str, str]:
        """The Redis hash fields of this record."""
        return {
            "state": self.state.value,
            "reason": self.reason,
            "since_s": f"{self.since_s:.3f}",
            "until_s": f"{self.until_s:.3f}",
            "ejections": str(self.ejections),
            "probe_ok": str(self.probe_ok),
            "probe_fail": str(self.probe_fail),
            "readmitted_s": f"{self.readmitted_s:.3f}",
            "relapses": str(self.relapses),
            "needs_replacement": "1" if self.needs_replacement else "0",
            "version": str(self.version),
        }

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> HealthRecord:
        """Parse a Redis hash; unknown or bad fields fall back to the defaults."""

        def num(key: str) -> float:
            try:
                value = float(raw.get(key, 0) or 0)
            except ValueError:
                return 0.0
            return value if math.isfinite(value) else 0.0

        try:
            state = PoolState(raw.get("state", PoolState.HEALTHY.value))
        except ValueError:
            state = PoolState.HEALTHY
        return cls(
            state=state,
            reason=raw.get("reason", ""),
            since_s=num("since_s"),
            until_s=num("until_s"),
            ejections=int(num("ejections")),
            probe_ok=int(num("probe_ok")),
            probe_fail=int(num("probe_fail")),
            readmitted_s=num("readmitted_s"),
            relapses=int(num("relapses")),
            needs_replacement=raw.get("needs_replacement") == "1",
            version=int(num("version")),
        )


def _eject(
    rec: HealthRecord, now: float, reason: str, health: HealthSettings, outlier: OutlierSettings
) -> HealthRecord:
    backoff = min(outlier.base_ejection_s * 2**rec.ejections, outlier.max_ejection_s)
    # A relapse is a readmitted pool failing again soon; a failed probe while probing is
    # the same failed readmission, not another one.
    window = max(health.ramp_s, health.probe_interval_s)
    relapsed = (
        rec.state is PoolState.HEALTHY and rec.readmitted_s > 0 and now - rec.readmitted_s < window
    )
    relapses = rec.relapses + 1 if relapsed else rec.relapses
    return replace(
        rec,
        state=PoolState.EJECTED,
        reason=reason,
        since_s=now,
        until_s=now + backoff,
        ejections=rec.ejections + 1,
        probe_ok=0,
        probe_fail=0,
        relapses=relapses,
        needs_replacement=rec.needs_replacement or relapses >= health.max_readmissions,
    )


def transition(
    rec: HealthRecord,
    event: HealthEvent,
    now: float,
    health: HealthSettings,
    outlier: OutlierSettings,
    reason: str = "",
) -> HealthRecord | None:
    """The record after ``event`` at ``now``, or None if nothing changes.

    The caller bumps ``version`` when it writes the result.
    """
    if event is HealthEvent.DRAIN:
        if rec.state is PoolState.DRAINING:
            return None
        return replace(
            rec, state=PoolState.DRAINING, reason=reason or "drained by operator", since_s=now
        )
    if event is HealthEvent.UNCORDON:
        if rec.state is not PoolState.DRAINING and not rec.needs_replacement:
            return None
        return replace(
            HealthRecord(version=rec.version),
            reason=reason or "uncordoned",
            since_s=now,
            readmitted_s=now,
        )
    if rec.state is PoolState.DRAINING:
        return None  # an operator's cordon is not overridden by traffic or probes
    if rec.state is PoolState.EJECTED and now >= rec.until_s:
        rec = replace(
            rec, state=PoolState.PROBING, reason="ejection backoff over, probing", since_s=now
        )

    if event is HealthEvent.EJECT:
        if rec.state is PoolState.EJECTED:
            return None
        return _eject(rec, now, reason or "outlier on real traffic", health, outlier)
    if rec.state is PoolState.EJECTED:
        return None  # still backing off: probes are not due yet
    if event is HealthEvent.PROBE_FAIL:
        fails = rec.probe_fail + 1
        if rec.state is PoolState.PROBING or fails >= health.unhealthy_threshold:
            return _eject(rec, now, reason or f"{fails} failed probe(s)", health, outlier)
        return replace(rec, probe_fail=fails)
    # PROBE_OK
    if rec.state is PoolState.PROBING:
        good = rec.probe_ok + 1
        if good >= health.healthy_threshold:
            return replace(
                rec,
                state=PoolState.HEALTHY,
                reason=f"readmitted after {good} good probes",
                since_s=now,
                probe_ok=0,
                probe_fail=0,
                readmitted_s=now,
            )
        return replace(rec, probe_ok=good)
    settled = rec.readmitted_s > 0 and now - rec.readmitted_s >= max(
        health.ramp_s, health.probe_interval_s
    )
    if settled and (rec.ejections or rec.relapses or rec.reason):
        # A pool that stayed healthy through its ramp starts its backoff from scratch, and
        # the reason of its last transition (readmitted, uncordoned) is history by then.
        return replace(rec, probe_fail=0, ejections=0, relapses=0, reason="")
    if rec.probe_fail:
        return replace(rec, probe_fail=0)
    return None
