"""``score_vector``: ``router.score_core``'s scoring over NumPy arrays, for models of
more than ``MAX_SCALAR_POOLS`` pools; the same answer as ``score_scalar``.

A NumPy call costs about half a microsecond whatever the size of its arrays, more when it
takes a Python number or broadcasts a row over two: the predictions are worked out two
rows at a time against per-snapshot constants (``router.view_tables.Stacked``), the cost
order is the view's price order filtered, and the fallback pools are sorted only when
the whole order is read. ``tests/router/test_score_core.py`` checks it against the plain
vectorised reference on random inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import NamedTuple

import numpy as np

from base.types import BoolArray, FloatArray, IntArray
from router.score_core import TrafficMix, TriedPool
from router.snapshot import ModelView, RegionView

__all__ = ["VectorScored", "score_vector"]

# The attempts are read out in two parts, the first this long: a caller that stops after
# the first pools (the gateway) never converts the rest of a long order.
_HEAD = 4


class VectorScored(NamedTuple):
    """``score_vector``'s answer: ``ScalarScored``'s fields as NumPy arrays.

    The fallback (the eligible pools that are not feasible, by predicted TTFT) is sorted
    only when ``local_order`` is read: a caller that stops within the feasible pools
    (the gateway, mostly) never pays for it. ``feasible_order`` is the order before it,
    ``fallback`` whether the policy's fallback is ``fastest``, and ``memo`` holds the
    whole order once worked out."""

    ttft_ms: FloatArray
    tpot_ms: FloatArray
    load: FloatArray
    eligible: BoolArray
    feasible: BoolArray
    region_ok: BoolArray
    available: BoolArray
    feasible_order: IntArray
    n_feasible: int
    fallback: bool
    memo: list[IntArray]

    @property
    def local_order(self) -> IntArray:
        """The feasible pools in order, then (fallback ``fastest``) the eligible ones that
        are not feasible, by predicted TTFT (stable: equal ones in policy order)."""
        memo = self.memo
        if memo:
            return memo[0]
        order = self.feasible_order
        if self.fallback:
            # eligible ^ feasible: the eligible pools that are not feasible (feasible
            # ones are all eligible).
            slow = (self.eligible ^ self.feasible).nonzero()[0]
            if len(slow):
                by_ttft = self.ttft_ms[slow].argsort(kind="stable")
                order = np.concatenate((order, slow[by_ttft]))
        memo.append(order)
        return order

    @property
    def n_tried(self) -> int:
        """How many pools ``local_order`` lists (without sorting the fallback)."""
        if self.memo or not self.fallback:
            return len(self.local_order)
        return self.n_feasible + int(np.count_nonzero(self.eligible ^ self.feasible))

    def attempts(self, view: ModelView, est_tokens: int) -> Iterator[TriedPool]:
        """The pools of ``local_order`` as attempts: the first ``_HEAD`` gathered and
        converted to Python numbers apart from the rest, so stopping early is cheap.
        Each part is read out by ``zip`` over lists, so the attempts are made in C, not
        resumed one by one in a generator."""
        return chain.from_iterable(self._parts(view, est_tokens))

    def _parts(self, view: ModelView, est_tokens: int) -> Iterator[Iterator[TriedPool]]:
        # The head comes from the feasible pools alone when there are enough of them.
        order = self.feasible_order if self.n_feasible >= _HEAD else self.local_order
        head = order[:_HEAD]
        if not len(head):
            return
        members, price = view.members_py, view.price_py
        yield iter([
            (members[j], t, est_tokens * price[j], price[j])
            for j, t in zip(head.tolist(), self.ttft_ms[head].tolist(), strict=True)
        ])  # fmt: skip
        rest = self.local_order[_HEAD:]
        if len(rest):
            # members_obj and price_obj hold Python numbers: their gathers convert nothing.
            per_token = view.price_obj[rest].tolist()
            # t * p for a whole t is float(t) * p, as the scalar path prices (but 0 x inf,
            # an unpriced fallback's cost at no tokens, is NaN without a NumPy warning).
            cost = (
                (view.usd_per_token[rest] * float(est_tokens)).tolist()
                if est_tokens
                else [est_tokens * p for p in per_token]
            )
            members, ttft = view.members_obj[rest].tolist(), self.ttft_ms[rest].tolist()
            yield zip(members, ttft, cost, per_token, strict=True)


def score_vector(
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
) -> VectorScored:
    """Score the model's pools with NumPy; the same answer as ``score_scalar`` (same
    arguments). The steps are those of the ``router.scoring`` docstring; ``region`` is the
    view from the client's region.

    Each NumPy call costs about half a microsecond here whatever its size, more when it
    takes a Python number or broadcasts a row: the predictions are worked out two rows
    at a time against the view's ``Stacked`` constants, in place where that saves an
    allocation, and the cost order is the view's price order filtered (see
    ``_cost_order``). Every value is computed by the same operations in the same order
    as the scalar path, so to the same bits."""
    st = view.stacked
    # Row 0 becomes the TTFT, row 1 the load, then (a copy) the TPOT.
    if local_inflight is None:
        rows = st.inflight + st.offset
    else:
        rows = st.inflight + local_inflight[st.members]
        rows += st.offset
    wait, load = rows[0], rows[1]  # inflight + 1 - slots; inflight + 1
    room = None if region.slot_limit is None else load <= region.slot_limit
    prefill = float(prompt_tokens) * view.prefill_ms_per_token
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
    # ttft = rtt + max(inflight + 1 - slots, 0) * service / slots + prefill. The max is
    # taken after the products: with service and 1 / slots never negative, a wait <= 0
    # gives a product <= 0 (or NaN with it), a wait > 0 the same bits as before.
    wait *= service_ms
    rows *= st.inv_slots  # row 1: the load, (inflight + 1) / slots
    # TPOT grows with batch occupancy, counted fresh; a measured TPOT is only a floor
    # (ModelView explains why): max(base + span * min(load, 1), measured).
    pred = np.minimum(rows, st.upper)  # row 1: min(load, 1)
    np.maximum(pred, st.lower, out=pred)  # row 0: max(wait, 0)
    pred *= st.scale
    pred += region.rtt_base
    ttft, tpot = pred[0], pred[1]
    ttft += prefill
    np.maximum(tpot, view.tpot_measured_ms, out=tpot)

    region_ok = region.region_ok
    available = view.available
    # Predictions are estimates: keep a margin below the targets (routing.slo_headroom,
    # tpot_headroom), and far clients out of the slots reserved for near ones.
    if view.full_weight and local_blocked is None and region_allowed is None:
        # The common case: the eligible pools are the region's ready ones, and the
        # limits (per SLO class) are -inf for the others, so one comparison is enough.
        eligible = region.ready_ok
        ok = pred <= _limit_rows(region, ttft_limit_ms, tpot_limit_ms)
        feasible = ok[0] & ok[1]
    else:
        if region_allowed is not None:
            region_ok = region_ok & np.asarray(region_allowed, dtype=np.bool_)
        if view.full_weight and local_blocked is None:
            eligible = region_ok & view.ready
        else:
            if local_blocked is not None:
                available = available & ~local_blocked[view.members]
            eligible = region_ok & available & view.has_capacity
            # A readmitted pool ramps up relative to its healthy peers: it takes a share
            # of traffic they could serve. With no fully weighted peer left for this
            # request it takes all of it, so a ramp never refuses traffic that some pool
            # could serve.
            if (eligible & (view.weight >= 1.0)).any():
                ramped = view.weight > ramp_draw
                available, eligible = available & ramped, eligible & ramped
        feasible = ttft <= ttft_limit_ms
        feasible &= tpot <= tpot_limit_ms
        feasible &= eligible
        feasible &= view.priced
    if room is not None:
        feasible &= room

    order, n_feasible = _cost_order(view, feasible, load, est_tokens, near_tie)
    return VectorScored(
        ttft, tpot, load, eligible, feasible, region_ok, available, order, n_feasible,
        fallback_fastest, [],
    )  # fmt: skip


def _limit_rows(region: RegionView, ttft_limit_ms: float, tpot_limit_ms: float) -> FloatArray:
    """The (TTFT, TPOT) limits as two rows, -inf where a pool is not ready and priced in
    ``region`` (no prediction is -inf); kept in the region's memo per SLO class."""
    key = (ttft_limit_ms, tpot_limit_ms)
    limits = region.limits.get(key)
    if limits is None:
        limits = np.empty_like(region.rtt_base)
        limits[0], limits[1] = ttft_limit_ms, tpot_limit_ms
        limits[:, ~region.ready_priced] = -np.inf
        if len(region.limits) >= 16:  # a few SLO classes; never grows without bound
            region.limits.clear()
        region.limits[key] = limits
    return limits


def _cost_order(
    view: ModelView, feasible: BoolArray, load: FloatArray, est_tokens: int, near_tie: float
) -> tuple[IntArray, int]:
    """The feasible pools by cost (stable: equal costs keep policy order), the near ties
    of the cheapest leading as a group re-sorted by load from policy order; and how many
    there are.

    The cost is ``est_tokens`` times the price, so the order by cost is the view's order
    by price filtered, with no sort per request, when ``view.price_order_exact`` says no
    two distinct prices give equal costs (a whole ``est_tokens`` below 2**53). Otherwise
    the costs are sorted as they are."""
    if view.price_order_exact and 0 < est_tokens < 2**53:
        keep = feasible[view.by_price]
        order = view.by_price[keep]
        n = len(order)
        if n > 1:
            price = view.price_py
            bound = est_tokens * price[order.item(0)] * (1.0 + near_tie)
            if est_tokens * price[order.item(1)] <= bound:  # else the cheapest stands alone
                cost = est_tokens * view.sorted_price[keep]
                _lightest_first(order, int(cost.searchsorted(bound, "right")), load)
        return order, n
    f = feasible.nonzero()[0]
    if len(f) > 1:
        cost = est_tokens * view.usd_per_token[f]
        by_cost = cost.argsort(kind="stable")
        order, cost = f[by_cost], cost[by_cost]
        _lightest_first(order, int(cost.searchsorted(cost[0] * (1.0 + near_tie), "right")), load)
        return order, len(f)
    return f, len(f)


def _lightest_first(order: IntArray, ties: int, load: FloatArray) -> None:
    """Re-sort the first ``ties`` pools of ``order`` by load, equal loads in policy order."""
    if ties > 1:
        group = order[:ties].copy()
        group.sort()
        order[:ties] = group[load[group].argsort(kind="stable")]
