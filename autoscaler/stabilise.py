"""Scale-down stabilisation: how far each pool may shrink this cycle. Pure.

Like the HPA, a pool shrinks no lower than the recommendations of the last
``ScalerConfig.scale_down_window_s`` ask for. The HPA holds one deployment at its largest
recommendation. Here the pools are substitutes, and two recommendations in the window may
be different mixes for the same demand (``[1 H100, 0 A100]`` then ``[0 H100, 2 A100]``
when the demand crosses a replica boundary): the per-pool maxima would hold both at once,
dearer than either. So the window holds the largest demand its recommendations were made
for (kept per demand line in ``ScalerState.asked``), on the cheapest part of what runs
within the maxima.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.demand import LineForecast, line_key
from autoscaler.fleet import Fleet
from autoscaler.milp import MixSolution
from autoscaler.state import ScalerState
from base.types import BoolArray, FloatArray, IntArray

__all__ = ["Bounds", "asked_window", "stabilise"]


@dataclass(frozen=True, eq=False)
class Bounds:
    """This cycle's limits per pool: ``stable`` is the least the stabilisation window
    holds (module docstring), ``cooling`` marks pools that may not shrink now (cooldown, or
    a forecast not yet settled: ``decide._settled``), ``up`` the most a pool may grow to."""

    up: IntArray
    stable: IntArray
    cooling: BoolArray
    recommendations: Mapping[str, list[tuple[float, int]]]


def asked_window(
    lines: Sequence[LineForecast],
    demand: FloatArray,
    state: ScalerState,
    config: ScalerConfig,
    now: float,
) -> tuple[dict[str, list[tuple[float, float]]], FloatArray, float]:
    """Per line, the demand (tokens/s) the recommendations in the stabilisation window
    were solved for, this cycle's ``demand`` included; the largest per line; and the
    time since which it is known for every line."""
    asked: dict[str, list[tuple[float, float]]] = {}
    peak = np.asarray(demand, dtype=np.float64).copy()
    since = -math.inf
    for j, ln in enumerate(lines):
        key = line_key(ln.model, ln.client_region)
        window = [
            (t, d) for t, d in state.asked.get(key, []) if now - t < config.scale_down_window_s
        ]
        window.append((now, float(demand[j])))
        asked[key] = window
        peak[j] = max(d for _, d in window)
        since = max(since, window[0][0])
    return asked, peak, since


def stabilise(
    fleet: Fleet,
    raw: MixSolution | None,
    settled: Mapping[str, bool],
    state: ScalerState,
    config: ScalerConfig,
    now: float,
    hold: Callable[[IntArray], MixSolution | None],
    known_since: float,
) -> Bounds:
    """This cycle's bounds, with ``raw`` (this cycle's recommendation) added to the window.

    ``hold(within)``: the cheapest mix of at most ``within`` replicas per pool that
    covers the largest demand a recommendation in the window was made for (None if
    the bounds or the budget leave none), which ``asked_window`` knows for the
    recommendations made since ``known_since``."""
    recommendations: dict[str, list[tuple[float, int]]] = {}
    for i, s in enumerate(fleet.specs):
        window = [
            (t, n)
            for t, n in state.recommendations.get(s.id, [])
            if now - t < config.scale_down_window_s
        ]
        if fleet.adjustable[i] and raw is not None:
            window.append((now, int(raw.replicas[i])))
        recommendations[s.id] = window
    stable = np.asarray(
        [
            max((n for _, n in recommendations[s.id]), default=int(fleet.current[i]))
            for i, s in enumerate(fleet.specs)
        ],
        dtype=np.intp,
    )
    # Where the maxima are one recommendation's mix, they are that mix (the HPA's rule).
    # Without the demand behind every recommendation (a state written before it was
    # kept) they stand too.
    by_time: dict[float, dict[int, int]] = {}
    for i, s in enumerate(fleet.specs):
        for t, n in recommendations[s.id]:
            by_time.setdefault(t, {})[i] = n
    one_mix = any(
        all(mix.get(int(i)) == stable[i] for i in np.flatnonzero(fleet.adjustable))
        for mix in by_time.values()
    )
    first = min(by_time, default=now)
    held = None
    if not one_mix and known_since <= first:
        held = hold(np.minimum(stable, fleet.current))
    if held is not None and float(held.shortfall.sum()) <= 1e-6:
        stable = held.replicas
    up = np.minimum(fleet.high, fleet.current + config.step(fleet.current))
    up = np.where(fleet.blocked, np.minimum(fleet.current, up), up)
    cooling = np.asarray(
        [
            now - state.last_up_s.get(s.id, -math.inf) < config.cooldown_s
            or not settled.get(s.model, False)
            for s in fleet.specs
        ],
        dtype=np.bool_,
    )
    return Bounds(up, stable, cooling, recommendations)
