"""What applying a plan did, and the limits the actuator enforces while doing it."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.state import ScalerState

__all__ = ["ActuationReport", "ActuatorLimits", "Outcome"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one pool: ``done`` replicas of ``asked`` for ``action`` (up,
    down, replace, fallback), and the error class if any (stockout, quota, throttled,
    error, budget, not-leader)."""

    pool_id: str
    action: str
    asked: int
    done: int
    error: str = ""


@dataclass
class ActuationReport:
    """Every outcome of one ``apply`` and the state to remember afterwards."""

    state: ScalerState
    outcomes: list[Outcome] = field(default_factory=list)


@dataclass(frozen=True)
class ActuatorLimits:
    """Budget (USD/hour, None: none) and backoffs (s) the actuator enforces."""

    budget_usd_per_hour: float | None = None
    stockout_backoff_s: float = 900.0
    quota_backoff_s: float = 3600.0
    throttle_backoff_s: float = 30.0
    max_throttle_backoff_s: float = 600.0
    drain_deadline_s: float = 120.0
