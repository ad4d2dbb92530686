"""Why a ranking put each pool where it did: ``Ranking.explain`` and
``Ranking.why_ineligible`` (``skyroute explain``, the gateway's error answers). Off the
request path; reads the ranking's arrays, built on first access."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from router.scoring import Ranking

__all__ = ["RankedPool", "explain", "why_ineligible"]


@dataclass(frozen=True, slots=True)
class RankedPool:
    """One pool's place in a ranking, with the reason for it. Times in ms, cost in USD."""

    pool_id: str
    feasible: bool
    eligible: bool
    ttft_ms: float
    tpot_ms: float
    cost_usd: float
    load: float
    reason: str


def explain(r: Ranking) -> list[RankedPool]:
    """Every candidate pool, tried ones first, with the reason for its place."""
    tried = [int(i) for i in r.order]
    rest = [int(i) for i in r.candidates if int(i) not in set(tried)]
    out: list[RankedPool] = []
    cheapest = float(r.cost_usd[r.feasible].min()) if r.n_feasible else 0.0
    for rank, i in enumerate(tried + rest):
        out.append(
            RankedPool(
                pool_id=r.pool_ids[i],
                feasible=bool(r.feasible[i]),
                eligible=bool(r.eligible[i]),
                ttft_ms=float(r.ttft_ms[i]),
                tpot_ms=float(r.tpot_ms[i]),
                cost_usd=float(r.cost_usd[i]),
                load=float(r.load[i]),
                reason=_reason_for(r, i, rank, cheapest),
            )
        )
    return out


def _reason_for(r: Ranking, i: int, rank: int, cheapest: float) -> str:
    if not r.eligible[i]:
        return r.why_ineligible[i]
    if r.feasible[i]:
        cost = float(r.cost_usd[i])
        if cost <= cheapest * (1.0 + r.near_tie):
            if rank == 0:
                return (
                    "cheapest feasible"
                    if cost <= cheapest
                    else "near-tie with the cheapest, lightest load"
                )
            return "near-tie with the cheapest, more loaded"
        return f"feasible, +${cost - cheapest:.2e} over the cheapest"
    misses: list[str] = []
    if r.ttft_ms[i] > r.ttft_limit_ms:
        misses.append(_miss("ttft", r.ttft_ms[i], r.ttft_limit_ms, r.slo_ttft_ms))
    if r.tpot_ms[i] > r.tpot_limit_ms:
        misses.append(_miss("tpot", r.tpot_ms[i], r.tpot_limit_ms, r.slo_tpot_ms))
    j = int(np.flatnonzero(r.candidates == i)[0])
    cap = r.local_load_cap
    slo_missed = bool(misses)
    if cap is not None and r.local_load[j] > cap[j]:
        misses.append(f"slots over {cap[j]:.0%} are kept for nearer clients")
    if not np.isfinite(r.cost_usd[i]):
        misses.append("no price")
    suffix = "fallback by speed" if i in r.order else "not tried (fallback: reject)"
    label = "misses SLO" if slo_missed else "not feasible"
    return f"{label}: {', '.join(misses)}; {suffix}"


def why_ineligible(r: Ranking) -> tuple[str, ...]:
    """Per pool, why it may not take the request ('' if it may)."""
    why = [""] * len(r.pool_ids)
    for j, i in enumerate(r.candidates):
        if not r.local_region_ok[j]:
            why[i] = "region not allowed for this client"
        elif not r.local_available[j]:
            state = r.view.states[j]
            weight = r.view.weight[j]
            if state != "healthy":
                why[i] = f"pool {state}"
            elif weight < 1.0:
                why[i] = f"ramping up after readmission ({weight:.0%} of traffic)"
            else:
                why[i] = "ejected by this gateway replica"
        elif not r.view.has_capacity[j]:
            why[i] = "no ready replicas"
    return tuple(why)


def _miss(what: str, predicted: float, limit: float, target: float) -> str:
    if limit < target:
        return f"{what} {predicted:.0f}ms > {limit:.0f}ms (slo {target:.0f}ms less headroom)"
    return f"{what} {predicted:.0f}ms > slo {target:.0f}ms"
