"""Why each pool gets its target: the text ``Plan`` carries for every change and hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.fleet import Fleet
from autoscaler.milp import MixSolution
from autoscaler.plan import DemandLine, PoolChange
from autoscaler.state import ScalerState
from base.types import IntArray

if TYPE_CHECKING:
    from autoscaler.stabilise import Bounds

__all__ = ["explain"]


def _fallbacks(fleet: Fleet, i: int, demand: Sequence[DemandLine]) -> tuple[str, ...]:
    """Adjustable pools of the same model that serve the same client regions, cheapest
    per token/s first."""
    me = fleet.specs[i]
    mine = [d for d in demand if me.id in d.pools]
    names = {p for d in mine for p in d.pools} if mine else {
        s.id for s in fleet.specs if s.model == me.model
    }  # fmt: skip
    others = [
        j
        for j, s in enumerate(fleet.specs)
        if s.id in names and j != i and fleet.adjustable[j] and fleet.capacity[j] > 0
    ]
    others.sort(key=lambda j: (fleet.cost[j] / fleet.capacity[j], fleet.specs[j].id))
    return tuple(fleet.specs[j].id for j in others)


def _replace(fleet: Fleet, i: int, state: ScalerState) -> tuple[str, ...]:
    st = fleet.status[i]
    if not st.managed:
        return ()
    busy = set(state.replacing.get(st.pool_id, []))
    bad = st.failed or (st.nodes if st.needs_replacement else ())
    return tuple(n for n in bad if n not in busy)


def _why(
    fleet: Fleet,
    i: int,
    target: int,
    bounds: Bounds,
    raw: MixSolution | None,
    solution: MixSolution,
    demand: Sequence[DemandLine],
    waiting: set[str],
    state: ScalerState,
    config: ScalerConfig,
    now: float,
) -> str:
    spec, st = fleet.specs[i], fleet.status[i]
    current = int(fleet.current[i])
    covers = [
        f"{d.client_region} {solution.assigned[i, j]:.0f}"
        for j, d in enumerate(demand)
        if solution.assigned[i, j] > 0.5
    ]
    served = f"covers {', '.join(covers)} tok/s" if covers else "no demand assigned"
    if not st.managed:
        return "not managed (no node group): size kept"
    if not fleet.priced[i]:
        return "no price known: size kept"
    if not st.usable:
        flag = ", needs replacement" if st.needs_replacement else ""
        return f"{st.health.value}{flag}: capacity not counted, size kept"
    need = sum(d.required for d in demand if d.model == spec.model)
    if target > current:
        step = int(config.step(np.asarray([current], dtype=np.intp))[0])
        limit = " (max step)" if target == current + step else ""
        limit = " (max size)" if target == fleet.high[i] and not limit else limit
        return f"{served} of {spec.model}'s {need:.0f} required{limit}"
    if target < current:
        window = config.scale_down_window_s
        return f"{spec.model} needs {need:.0f} tok/s; spare for {window:.0f}s ({served})"
    wanted = int(raw.replicas[i]) if raw is not None else current
    if wanted < current:
        if spec.model in waiting:
            return "shrink waits until replicas elsewhere are ready"
        if bounds.cooling[i]:
            ago = now - state.last_up_s.get(spec.id, -np.inf)
            if ago < config.cooldown_s:
                return f"cooldown: grew {ago:.0f}s ago"
            return "demand history too short to shrink on"
        if bounds.stable[i] >= current:
            return (
                f"stabilising: {bounds.stable[i]} needed within {config.scale_down_window_s:.0f}s"
            )
    if wanted > current:
        if fleet.blocked[i]:
            why = state.blocked_reason.get(spec.id, "blocked")
            return f"{why}: not grown until {state.blocked_until_s.get(spec.id, now) - now:.0f}s"
        if current >= fleet.high[i]:
            return f"at max size ({served})"
    return f"steady: {served}"


def explain(
    fleet: Fleet,
    target: IntArray,
    bounds: Bounds,
    raw: MixSolution | None,
    solution: MixSolution,
    demand: Sequence[DemandLine],
    waiting: set[str],
    state: ScalerState,
    config: ScalerConfig,
    now: float,
) -> list[PoolChange]:
    """One ``PoolChange`` per pool, in policy order."""
    out: list[PoolChange] = []
    for i, spec in enumerate(fleet.specs):
        replicas = int(target[i])
        reason = _why(fleet, i, replicas, bounds, raw, solution, demand, waiting, state, config,
                      now)  # fmt: skip
        out.append(
            PoolChange(
                pool_id=spec.id,
                model=spec.model,
                current=int(fleet.current[i]),
                target=replicas,
                reason=reason,
                usd_per_replica_hour=float(fleet.cost[i]) if fleet.priced[i] else float("nan"),
                goodput_tokens_per_s=float(fleet.goodput[i]),
                purchase=spec.price.purchase,
                managed=fleet.status[i].managed,
                replace=_replace(fleet, i, state),
                fallbacks=_fallbacks(fleet, i, demand),
            )
        )
    return out
