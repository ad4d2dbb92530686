"""The vectorised scoring as it stood before the per-snapshot cost order and the stacked
arithmetic (commit 72d2e47's ``router.score_core.score_vector``), kept verbatim as the
reference the request path's ``score_vector`` and ``score_scalar`` are checked against
on random inputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from base.types import BoolArray, FloatArray, IntArray
from router.score_core import TrafficMix, TriedPool
from router.snapshot import ModelView, RegionView


class ReferenceScored(NamedTuple):
    """``score_reference``'s answer, with the attempts read out as they were."""

    ttft_ms: FloatArray
    tpot_ms: FloatArray
    load: FloatArray
    eligible: BoolArray
    feasible: BoolArray
    region_ok: BoolArray
    available: BoolArray
    local_order: IntArray
    n_feasible: int

    def attempts(self, view: ModelView, est_tokens: int) -> Iterator[TriedPool]:
        """The pools of ``local_order`` as attempts."""
        order = self.local_order
        for part in (order[:4], order[4:]):
            if not len(part):
                return
            per_token = view.usd_per_token[part].tolist()
            for i, t, p in zip(
                view.members[part].tolist(), self.ttft_ms[part].tolist(), per_token, strict=True
            ):
                yield i, t, est_tokens * p, p


def score_reference(
    view: ModelView,
    region: RegionView,
    region_allowed: list[bool] | None,
    local_inflight: FloatArray | None,
    local_blocked: BoolArray | None,
    prompt_tokens: int,
    est_tokens: int,
    ttft_limit_ms: float,
    tpot_limit_ms: float,
    ramp_draw: float,
    near_tie: float,
    fallback_fastest: bool,
    mix: TrafficMix | None = None,
) -> ReferenceScored:
    """Score the model's pools with NumPy: the reference that ``score_scalar`` (same
    arguments, same answer) is checked against. The steps are those of the
    ``router.scoring`` docstring; ``region`` is the view from the client's region.

    Each NumPy call costs about a microsecond here whatever its size, so intermediate
    results are updated in place (``out=``, ``*=``) where that saves an allocation, in
    the same operation order as the scalar path (so the same bits)."""
    inflight = view.inflight
    if local_inflight is not None:
        inflight = inflight + local_inflight[view.members]
    prefill = prompt_tokens * view.prefill_ms_per_token
    # A request beyond the batch slots waits for a fraction of one service time per
    # queued request ahead of it, spread over every slot (M/D/c-style estimate). The
    # requests ahead hold their slots through their own prefill and decode: priced at
    # the traffic's mean prompt and output (the policy's expected output and this
    # request's prompt when unknown), decoded at the TPOT of a full batch.
    if mix is None:
        service_ms = prefill + view.queue_output_ms
    else:
        service_ms = (
            mix.prompt_tokens * view.prefill_ms_per_token + mix.output_tokens * view.tpot_queue_ms
        )
    # ttft = rtt + max(inflight + 1 - slots, 0) * service / slots + prefill
    queued = inflight + view.one_minus_slots
    np.maximum(queued, 0.0, out=queued)
    queued *= service_ms
    queued *= view.inv_slots
    ttft = region.rtt_ms + queued
    ttft += prefill
    plus_one = inflight + 1.0
    load = plus_one * view.inv_slots
    # TPOT grows with batch occupancy, counted fresh; a measured TPOT is only a floor
    # (ModelView explains why): max(base + span * min(load, 1), measured).
    tpot = np.minimum(load, 1.0)
    tpot *= view.tpot_span_ms
    tpot += view.tpot_base_ms
    np.maximum(tpot, view.tpot_measured_ms, out=tpot)

    region_ok = region.region_ok
    if region_allowed is not None:
        region_ok = region_ok & np.asarray(region_allowed, dtype=np.bool_)
    available = view.available
    if view.full_weight and local_blocked is None:
        if region_allowed is None:
            eligible, candidates = region.ready_ok, region.ready_priced
        else:
            eligible = region_ok & view.ready
            candidates = eligible & view.priced
    else:
        if local_blocked is not None:
            available = available & ~local_blocked[view.members]
        eligible = region_ok & available & view.has_capacity
        # A readmitted pool ramps up relative to its healthy peers: it takes a share of
        # traffic they could serve. With no fully weighted peer left for this request it
        # takes all of it, so a ramp never refuses traffic that some pool could serve.
        if np.any(eligible & (view.weight >= 1.0)):
            ramped = view.weight > ramp_draw
            available, eligible = available & ramped, eligible & ramped
        candidates = eligible & view.priced
    # Predictions are estimates: keep a margin below the targets (routing.slo_headroom,
    # tpot_headroom), and far clients out of the slots reserved for near ones.
    feasible = ttft <= ttft_limit_ms
    feasible &= tpot <= tpot_limit_ms
    feasible &= candidates
    if region.slot_limit is not None:
        feasible &= plus_one <= region.slot_limit

    f = np.flatnonzero(feasible)
    n_feasible = len(f)
    if n_feasible > 1:
        # Every feasible pool by cost (stable: equal costs keep policy order); the near
        # ties of the cheapest lead, as a group re-sorted by load from policy order.
        cost = est_tokens * view.usd_per_token[f]
        by_cost = np.argsort(cost, kind="stable")
        local_order = f[by_cost]
        sorted_cost = cost[by_cost]
        ties = int(np.searchsorted(sorted_cost, sorted_cost[0] * (1.0 + near_tie), "right"))
        if ties > 1:
            group = np.sort(local_order[:ties])
            local_order[:ties] = group[np.argsort(load[group], kind="stable")]
    else:
        local_order = f
    if fallback_fastest:
        # eligible ^ feasible: the eligible pools that are not feasible (feasible ones
        # are all eligible).
        slow = np.flatnonzero(eligible ^ feasible)
        if len(slow):
            local_order = np.concatenate((local_order, slow[np.argsort(ttft[slow], kind="stable")]))
    return ReferenceScored(
        ttft, tpot, load, eligible, feasible, region_ok, available, local_order, n_feasible
    )
