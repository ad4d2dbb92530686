"""Sequential comparison of a canary with the stable version, valid at every look.

A rollout watches the two versions' requests as they finish and must be able to stop
the moment the evidence is clear, without the false alarms that repeated looks at a
fixed-sample test would cause. Each judged metric is a per-request *bad event* (an
error, an SLO miss, a TTFT or TPOT above the stable version's reference), so a metric is
a pair of Bernoulli streams, and what is judged is ``d = p_canary - p_stable``.

The interval on ``d`` is an asymptotic confidence sequence (the normal-mixture boundary
of Howard, Ramdas, McAuliffe and Sekhon, "Time-uniform, nonparametric, nonasymptotic
confidence sequences", Ann. Statist. 2021), applied to the difference estimate with
information ``I = 1 / Var(d)``: with probability ``1 - alpha`` it holds at *every*
sample size at once, so it may be checked after every request:

    radius = sqrt((I + rho) * ln((I + rho) / (rho * alpha**2))) / I

Decisions for an allowed regression ``allowed`` (a rate difference):

- ``regression``: the whole interval lies above ``allowed`` (roll back at once);
- ``no_regression``: the whole interval lies below ``allowed`` (this metric passes);
- ``continue``: not enough evidence either way.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Decision = Literal["regression", "no_regression", "continue"]

# The mixture's prior precision, in units of information (1 / variance of d). Any value
# gives a valid sequence; this one makes it tightest around a few hundred requests per
# arm at rates of a few percent, where a canary step's decisions fall.
DEFAULT_RHO = 100.0


@dataclass(frozen=True)
class Tally:
    """Requests judged and how many of them were bad events."""

    n: int = 0
    bad: int = 0

    def add(self, n: int, bad: int) -> Tally:
        """This tally with ``n`` more requests, ``bad`` of them bad."""
        if not 0 <= bad <= n:
            raise ValueError(f"bad events {bad} not within 0..{n}")
        return Tally(self.n + n, self.bad + bad)

    @property
    def rate(self) -> float:
        """The observed rate (0 with no requests)."""
        return self.bad / self.n if self.n else 0.0


@dataclass(frozen=True)
class Verdict:
    """One look at one metric: the estimate, its always-valid interval and the decision."""

    decision: Decision
    diff: float
    lower: float
    upper: float
    canary: Tally
    stable: Tally

    def describe(self, name: str, allowed: float) -> str:
        """One line of evidence, e.g. for the rollout's transition log."""
        return (
            f"{name}: canary {self.canary.bad}/{self.canary.n} vs stable "
            f"{self.stable.bad}/{self.stable.n}, diff {self.diff:+.4f} in "
            f"[{self.lower:+.4f}, {self.upper:+.4f}], allowed {allowed:+.4f}: {self.decision}"
        )


def _smoothed(t: Tally) -> float:
    # Half a bad event and half a good one: a stream with no bad events yet still has a
    # variance, so a short clean run cannot look certain.
    return (t.bad + 0.5) / (t.n + 1.0)


def radius(information: float, alpha: float, rho: float = DEFAULT_RHO) -> float:
    """Half-width of the confidence sequence at ``information`` (1 / variance)."""
    if information <= 0:
        return math.inf
    total = information + rho
    return math.sqrt(total * math.log(total / (rho * alpha * alpha))) / information


def compare(
    canary: Tally,
    stable: Tally,
    allowed: float,
    alpha: float = 0.05,
    rho: float = DEFAULT_RHO,
    min_requests: int = 1,
) -> Verdict:
    """Judge ``canary`` against ``stable`` for one metric.

    ``allowed``: the largest tolerated increase of the bad-event rate (e.g. 0.005 for
    half a percentage point more errors). ``alpha``: the chance, over the whole rollout,
    that the interval ever misses the true difference. Below ``min_requests`` on either
    arm the decision is always ``continue``. Raises ValueError for alpha outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    diff = canary.rate - stable.rate
    if canary.n == 0 or stable.n == 0:
        return Verdict("continue", diff, -math.inf, math.inf, canary, stable)
    pc, ps = _smoothed(canary), _smoothed(stable)
    variance = pc * (1 - pc) / canary.n + ps * (1 - ps) / stable.n
    r = radius(1.0 / variance, alpha, rho)
    lower, upper = diff - r, diff + r
    decision: Decision = "continue"
    if min(canary.n, stable.n) >= min_requests:
        if lower > allowed:
            decision = "regression"
        elif upper < allowed:
            decision = "no_regression"
    return Verdict(decision, diff, lower, upper, canary, stable)
