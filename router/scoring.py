"""Rank every pool that serves a request's model: the pure core of skyroute.

``rank(request, policy, snapshot, local_inflight)`` has no I/O, reads no clock and
touches no globals, so the gateway, the simulator and ``skyroute explain`` all get the
same answer from the same inputs. It is vectorised over the model's pools:

1. eligible  = serves the model, region allowed for the client, available, has replicas
2. TTFT      = RTT + queueing wait + prefill; TPOT = measured (else profile) value
3. feasible  = eligible and both predictions meet the SLO class and a price is known
4. cost      = (prompt + expected output tokens) × USD/token of the pool
5. order     = near-tie group of cheapest feasible (lightest load first), other feasible
               by cost, then — only if the policy's fallback is ``fastest`` — the
               infeasible-but-eligible pools by predicted TTFT.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from router.compiled import CompiledPolicy, usd_per_token
from router.errors import ModelNotFound
from router.snapshot import Snapshot
from router.types import BoolArray, FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What the router needs to know about one request.

    ``max_output_tokens`` is None when the client set no limit (the model's expected
    output is used to price it). ``allowed_regions`` (``provider:region``), if given,
    further restricts where the request may go, failover included.
    """

    model: str
    prompt_tokens: int
    max_output_tokens: int | None
    slo_class: str
    client_region: str
    allowed_regions: frozenset[str] | None = None


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


@dataclass(frozen=True, eq=False, slots=True)
class Ranking:
    """The router's answer. ``order`` lists pool indices to try, best first."""

    request: RouteRequest
    pool_ids: tuple[str, ...]
    candidates: IntArray
    order: IntArray
    n_feasible: int
    eligible: BoolArray
    feasible: BoolArray
    ttft_ms: FloatArray
    tpot_ms: FloatArray
    cost_usd: FloatArray
    load: FloatArray
    why_ineligible: tuple[str, ...]
    slo_ttft_ms: float
    slo_tpot_ms: float
    near_tie: float

    @property
    def reason(self) -> str:
        """Why the first pool in ``order`` is first (``no-eligible-pool`` if empty)."""
        if len(self.order) == 0:
            return "no-eligible-pool"
        return "cheapest-feasible" if self.n_feasible else "fallback-fastest"

    def attempts(self) -> Iterator[tuple[str, float, float]]:
        """(pool id, predicted TTFT ms, estimated cost USD) in the order to try them."""
        for i in self.order:
            yield self.pool_ids[i], float(self.ttft_ms[i]), float(self.cost_usd[i])

    def explain(self) -> list[RankedPool]:
        """Every candidate pool, tried ones first, with the reason for its place."""
        tried = [int(i) for i in self.order]
        rest = [int(i) for i in self.candidates if int(i) not in set(tried)]
        out: list[RankedPool] = []
        cheapest = float(self.cost_usd[self.feasible].min()) if self.n_feasible else 0.0
        for rank, i in enumerate(tried + rest):
            out.append(
                RankedPool(
                    pool_id=self.pool_ids[i],
                    feasible=bool(self.feasible[i]),
                    eligible=bool(self.eligible[i]),
                    ttft_ms=float(self.ttft_ms[i]),
                    tpot_ms=float(self.tpot_ms[i]),
                    cost_usd=float(self.cost_usd[i]),
                    load=float(self.load[i]),
                    reason=self._reason_for(i, rank, cheapest),
                )
            )
        return out

    def _reason_for(self, i: int, rank: int, cheapest: float) -> str:
        if not self.eligible[i]:
            return self.why_ineligible[i]
        if self.feasible[i]:
            cost = float(self.cost_usd[i])
            if cost <= cheapest * (1.0 + self.near_tie):
                if rank == 0:
                    return (
                        "cheapest feasible"
                        if cost <= cheapest
                        else "near-tie with the cheapest, lightest load"
                    )
                return "near-tie with the cheapest, more loaded"
            return f"feasible, +${cost - cheapest:.2e} over the cheapest"
        misses = []
        if self.ttft_ms[i] > self.slo_ttft_ms:
            misses.append(f"ttft {self.ttft_ms[i]:.0f}ms > slo {self.slo_ttft_ms:.0f}ms")
        if self.tpot_ms[i] > self.slo_tpot_ms:
            misses.append(f"tpot {self.tpot_ms[i]:.0f}ms > slo {self.slo_tpot_ms:.0f}ms")
        if not np.isfinite(self.cost_usd[i]):
            misses.append("no price")
        suffix = "fallback by speed" if i in self.order else "not tried (fallback: reject)"
        return f"misses SLO: {', '.join(misses)}; {suffix}"


def rank(
    request: RouteRequest,
    policy: CompiledPolicy,
    snapshot: Snapshot,
    local_inflight: FloatArray | None = None,
    local_blocked: BoolArray | None = None,
) -> Ranking:
    """Rank the pools serving ``request.model``. Pure; raises ModelNotFound only.

    ``local_inflight`` (requests, aligned with the policy) is this gateway replica's own
    in-flight count, fresher than the snapshot's sum over the other replicas.
    An unknown client region or SLO class falls back to the policy defaults.
    """
    members = policy.by_model.get(request.model)
    if members is None:
        raise ModelNotFound(request.model)
    pol = policy.policy
    slo = policy.slo.get(request.slo_class) or policy.slo[pol.models[request.model].default_slo]
    rtt_all = policy.rtt_ms.get(request.client_region)
    if rtt_all is None:
        rtt_all = policy.rtt_ms[pol.routing.default_client_region]
    out_tokens = request.max_output_tokens
    if out_tokens is None:
        out_tokens = pol.models[request.model].expected_output_tokens

    n = policy.size
    inflight = snapshot.inflight if local_inflight is None else snapshot.inflight + local_inflight
    m = members
    rtt = rtt_all[m]
    ready = snapshot.ready[m]
    slots = ready * policy.concurrency[m]
    measured_tpot = snapshot.tpot_ms[m]
    tpot = np.where(np.isnan(measured_tpot), policy.tpot_ms[m], measured_tpot)
    prefill = request.prompt_tokens / policy.prefill_tps[m] * 1000.0
    # A request beyond the batch slots waits for a fraction of one service time per
    # queued request ahead of it, spread over every slot (M/D/c-style estimate). The
    # requests ahead are priced at the model's typical output, not at this one's.
    typical_out = pol.models[request.model].expected_output_tokens
    service_ms = prefill + typical_out * tpot
    with np.errstate(divide="ignore", invalid="ignore"):
        load = np.where(slots > 0, (inflight[m] + 1.0) / slots, np.inf)
        queued = np.maximum(inflight[m] + 1.0 - slots, 0.0)
        wait = np.where(slots > 0, queued * service_ms / slots, np.inf)
    ttft = rtt + wait + prefill

    region_ok = np.isfinite(rtt)
    if request.allowed_regions is not None:
        locs = policy.regions
        region_ok &= np.asarray([locs[i] in request.allowed_regions for i in m], dtype=np.bool_)
    available = snapshot.available[m]
    if local_blocked is not None:
        available = available & ~local_blocked[m]
    has_capacity = ready > 0
    eligible = region_ok & available & has_capacity
    price = snapshot.usd_per_gpu_hour[m]
    cost = (request.prompt_tokens + out_tokens) * usd_per_token(
        price, policy.gpus[m], policy.goodput_tps[m]
    )
    cost = np.where(np.isnan(cost), np.inf, cost)
    feasible = eligible & (ttft <= slo.ttft_ms) & (tpot <= slo.tpot_ms) & np.isfinite(cost)

    n_feasible = int(feasible.sum())
    if n_feasible:
        cheapest = cost[feasible].min()
        tie = feasible & (cost <= cheapest * (1.0 + pol.routing.near_tie))
        group = np.where(tie, 0, np.where(feasible, 1, 2))
        secondary = np.where(tie, load, np.where(feasible, cost, ttft))
    else:
        group = np.where(eligible, 2, 3)
        secondary = ttft
    include = feasible | (eligible & (pol.routing.fallback == "fastest"))
    local_order = np.lexsort((secondary, group))
    local_order = local_order[include[local_order]]

    def full(values: FloatArray, fill: float) -> FloatArray:
        out = np.full(n, fill)
        out[m] = values
        return out

    def full_bool(values: BoolArray) -> BoolArray:
        out = np.zeros(n, dtype=np.bool_)
        out[m] = values
        return out

    why = [""] * n
    for j, i in enumerate(m):
        if not region_ok[j]:
            why[i] = "region not allowed for this client"
        elif not available[j]:
            why[i] = (
                f"pool {snapshot.rows[policy.pool_ids[i]].state.value}"
                if snapshot.rows
                else "unavailable"
            )
        elif not has_capacity[j]:
            why[i] = "no ready replicas"
    return Ranking(
        request=request,
        pool_ids=policy.pool_ids,
        candidates=m,
        order=m[local_order],
        n_feasible=n_feasible,
        eligible=full_bool(eligible),
        feasible=full_bool(feasible),
        ttft_ms=full(ttft, np.inf),
        tpot_ms=full(tpot, np.inf),
        cost_usd=full(cost, np.inf),
        load=full(load, np.inf),
        why_ineligible=tuple(why),
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        near_tie=pol.routing.near_tie,
    )
