"""The per-request arithmetic of ``router.scoring.rank``, in two implementations that give
the same answer: ``score_vector`` over NumPy arrays (the reference) and ``score_scalar``
pool by pool in Python floats, for models with few pools.

A NumPy call costs about half a microsecond whatever the size of its arrays, and the
vectorised scoring makes some forty of them: at a handful of pools that fixed cost is
nearly all of ``rank``'s time. This module computes the same predictions, feasibility and
order pool by pool with Python floats (IEEE doubles, the same operations in the same order
as the NumPy code, so the same bits), then packs the results into arrays with two calls.
``tests/router/test_score_core.py`` checks it against the vectorised path on random
inputs; a change to the scoring model must be made in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from base.types import BoolArray, FloatArray, IntArray
from router.compiled import CompiledPolicy
from router.snapshot import ModelView

# Up to this many pools per model the scalar path is faster: measured back to back on
# one model of n random pools, the two paths cost the same at about 16 (scalar 0.6x the
# vector's time at 4 pools, 2x at 64).
MAX_SCALAR_POOLS = 16


@dataclass(frozen=True, slots=True)
class TrafficMix:
    """A model's recent requests on average: prompt and output tokens per request.

    The queue model prices the requests waiting ahead of a new one by these; without
    them it falls back to the new request's own prompt and the policy's
    ``expected_output_tokens``, a constant written for one workload (it overstated a
    code-completion queue's drain time ~8x and understated a long-context one's).
    """

    prompt_tokens: float
    output_tokens: float


class Scored(NamedTuple):
    """The per-pool results of scoring one request, over the model's pools (policy order),
    and the order to try them in (indices into those pools). A NamedTuple, built
    positionally: a frozen dataclass took a tenth of a small model's scoring to build."""

    ttft_ms: FloatArray
    tpot_ms: FloatArray
    cost_usd: FloatArray
    load: FloatArray
    eligible: BoolArray
    feasible: BoolArray
    region_ok: BoolArray
    available: BoolArray
    local_order: IntArray
    order: IntArray  # local_order as indices into the policy's pools
    n_feasible: int


def score_scalar(
    view: ModelView,
    policy: CompiledPolicy,
    key: tuple[str, str],
    region_allowed: list[bool] | None,
    local_inflight: FloatArray | None,
    local_blocked: BoolArray | None,
    prompt_tokens: int,
    expected_output_tokens: int,
    est_tokens: int,
    ttft_limit_ms: float,
    tpot_limit_ms: float,
    ramp_draw: float,
    near_tie: float,
    fallback_fastest: bool,
    mix: TrafficMix | None = None,
) -> Scored:
    """Score the model's pools one by one; the same answer as ``score_vector``."""
    v = view.lists  # built once per snapshot
    rtts, caps, region_ok = policy.model_lists[key]
    n = len(v.members)
    inflight = v.inflight
    if local_inflight is not None:
        inflight = [
            a + b for a, b in zip(inflight, local_inflight[view.members].tolist(), strict=True)
        ]

    # Eligibility, as score_vector decides it (see the comments there).
    if region_allowed is not None:
        region_ok = [a and b for a, b in zip(region_ok, region_allowed, strict=True)]
    available = v.available
    if view.full_weight and local_blocked is None:
        eligible = [a and b for a, b in zip(region_ok, v.ready, strict=True)]
    else:
        if local_blocked is not None:
            blocked = local_blocked[view.members].tolist()
            available = [a and not b for a, b in zip(available, blocked, strict=True)]
        eligible = [
            r and a and c for r, a, c in zip(region_ok, available, v.has_capacity, strict=True)
        ]
        if any(e and w >= 1.0 for e, w in zip(eligible, v.weight, strict=True)):
            ramped = [w > ramp_draw for w in v.weight]
            available = [a and r for a, r in zip(available, ramped, strict=True)]
            eligible = [e and r for e, r in zip(eligible, ramped, strict=True)]

    ttft, tpot, cost, load, feasible = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n, [False] * n
    for j in range(n):
        prefill = prompt_tokens * v.prefill_ms_per_token[j]
        if mix is None:
            service_ms = prefill + expected_output_tokens * v.tpot_queue_ms[j]
        else:
            service_ms = (
                mix.prompt_tokens * v.prefill_ms_per_token[j]
                + mix.output_tokens * v.tpot_queue_ms[j]
            )
        inv = v.inv_slots[j]
        queued = max(inflight[j] + v.one_minus_slots[j], 0.0)
        t = rtts[j] + queued * service_ms * inv + prefill
        ld = (inflight[j] + 1.0) * inv
        tp = max(v.tpot_base_ms[j] + v.tpot_span_ms[j] * min(ld, 1.0), v.tpot_measured_ms[j])
        ttft[j], tpot[j], load[j] = t, tp, ld
        cost[j] = est_tokens * v.usd_per_token[j]
        feasible[j] = (
            eligible[j]
            and t <= ttft_limit_ms
            and tp <= tpot_limit_ms
            and v.priced[j]
            and (caps is None or _outside_reserve(inflight[j], v.one_minus_slots[j], caps[j]))
        )

    n_feasible = sum(feasible)
    order: list[int]
    if n_feasible == 1:
        order = [feasible.index(True)]
    elif n_feasible:
        cheapest = min([c for c, f in zip(cost, feasible, strict=True) if f])
        bound = cheapest * (1.0 + near_tie)
        ties = [j for j in range(n) if feasible[j] and cost[j] <= bound]
        rest = [j for j in range(n) if feasible[j] and not cost[j] <= bound]
        # sorted() is stable, like lexsort: equal keys keep policy order.
        order = sorted(ties, key=load.__getitem__) + sorted(rest, key=cost.__getitem__)
    else:
        order = []
    if fallback_fastest:
        slow = [j for j in range(n) if eligible[j] and not feasible[j]]
        order += sorted(slow, key=ttft.__getitem__)

    floats = np.array((ttft, tpot, cost, load))
    flags = np.array((eligible, feasible, region_ok, available), dtype=np.bool_)
    members = v.members
    orders = np.array((order, [members[j] for j in order]), dtype=np.intp).reshape(2, -1)
    return Scored(
        floats[0], floats[1], floats[2], floats[3], flags[0], flags[1], flags[2], flags[3],
        orders[0], orders[1], n_feasible,
    )  # fmt: skip


def _outside_reserve(inflight: float, one_minus_slots: float, cap: float) -> bool:
    """Whether one more request fits outside the slots reserved for near clients (a
    share ``1 - cap`` of the pool's slots, rounded down to whole slots); the scalar
    twin of ``score_vector``'s reserve rule, the same operations in the same order."""
    slots = max(1.0 - one_minus_slots, 1e-9)
    reserve = (1.0 - cap) * slots + 1e-9
    # np.floor keeps inf and nan (math.floor raises on them).
    reserve = float(math.floor(reserve)) if math.isfinite(reserve) else reserve
    return inflight + 1.0 <= slots - reserve


def score_vector(
    view: ModelView,
    policy: CompiledPolicy,
    key: tuple[str, str],
    region_allowed: list[bool] | None,
    local_inflight: FloatArray | None,
    local_blocked: BoolArray | None,
    prompt_tokens: int,
    expected_output_tokens: int,
    est_tokens: int,
    ttft_limit_ms: float,
    tpot_limit_ms: float,
    ramp_draw: float,
    near_tie: float,
    fallback_fastest: bool,
    mix: TrafficMix | None = None,
) -> Scored:
    """Score the model's pools with NumPy: the reference that ``score_scalar`` (same
    arguments, same answer) is checked against. The steps are those of the
    ``router.scoring`` docstring; ``key`` is (client region, model), resolved."""
    m = view.members
    rtt, load_cap = policy.model_rtt_ms[key], policy.model_load_cap[key]
    inflight = view.inflight if local_inflight is None else view.inflight + local_inflight[m]
    prefill = prompt_tokens * view.prefill_ms_per_token
    # A request beyond the batch slots waits for a fraction of one service time per
    # queued request ahead of it, spread over every slot (M/D/c-style estimate). The
    # requests ahead hold their slots through their own prefill and decode: priced at
    # the traffic's mean prompt and output (the policy's expected output and this
    # request's prompt when unknown), decoded at the TPOT of a full batch.
    if mix is None:
        service_ms = prefill + expected_output_tokens * view.tpot_queue_ms
    else:
        service_ms = (
            mix.prompt_tokens * view.prefill_ms_per_token + mix.output_tokens * view.tpot_queue_ms
        )
    queued = np.maximum(inflight + view.one_minus_slots, 0.0)
    ttft = rtt + queued * service_ms * view.inv_slots + prefill
    load = (inflight + 1.0) * view.inv_slots
    # TPOT grows with batch occupancy, counted fresh; a measured TPOT is only a floor
    # (ModelView explains why).
    tpot = np.maximum(
        view.tpot_base_ms + view.tpot_span_ms * np.minimum(load, 1.0), view.tpot_measured_ms
    )

    region_ok = np.isfinite(rtt)
    if region_allowed is not None:
        region_ok = region_ok & np.asarray(region_allowed, dtype=np.bool_)
    if view.full_weight and local_blocked is None:
        available, eligible = view.available, region_ok & view.ready
    else:
        available = view.available
        if local_blocked is not None:
            available = available & ~local_blocked[m]
        eligible = region_ok & available & view.has_capacity
        # A readmitted pool ramps up relative to its healthy peers: it takes a share of
        # traffic they could serve. With no fully weighted peer left for this request it
        # takes all of it, so a ramp never refuses traffic that some pool could serve.
        if np.any(eligible & (view.weight >= 1.0)):
            ramped = view.weight > ramp_draw
            available, eligible = available & ramped, eligible & ramped
    cost = est_tokens * view.usd_per_token
    # Predictions are estimates: keep a margin below the targets (routing.slo_headroom,
    # tpot_headroom), and far clients out of the slots reserved for near ones.
    feasible = eligible & (ttft <= ttft_limit_ms) & (tpot <= tpot_limit_ms) & view.priced
    if load_cap is not None:
        # The reserve is whole slots, the share kept for near clients rounded down: a
        # pool of a few slots (long prompts make slots dear) is not kept from far
        # clients for a fraction of a slot that nobody can use.
        # (At least 1e-9 slots: a pool with none is not eligible, and -inf x 0 is NaN.)
        slots = np.maximum(1.0 - view.one_minus_slots, 1e-9)
        feasible &= inflight + 1.0 <= slots - np.floor((1.0 - load_cap) * slots + 1e-9)

    n_feasible = int(np.count_nonzero(feasible))
    if n_feasible == 1:
        local_order = np.flatnonzero(feasible)
    elif n_feasible:
        cheapest = cost[feasible].min()
        tie = feasible & (cost <= cheapest * (1.0 + near_tie))
        group = np.where(tie, 0, np.where(feasible, 1, 2))
        secondary = np.where(tie, load, np.where(feasible, cost, ttft))
        local_order = np.lexsort((secondary, group))
        local_order = local_order[group[local_order] < 2]
    else:
        local_order = np.empty(0, dtype=np.intp)
    if fallback_fastest:
        fallback = np.flatnonzero(eligible & ~feasible)
        if len(fallback):
            local_order = np.concatenate(
                (local_order, fallback[np.argsort(ttft[fallback], kind="stable")])
            )
    return Scored(
        ttft, tpot, cost, load, eligible, feasible, region_ok, available, local_order,
        m[local_order], n_feasible,
    )  # fmt: skip
