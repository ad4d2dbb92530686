"""The per-request arithmetic of ``router.scoring.rank``, in two implementations that give
the same answer: ``score_vector`` over NumPy arrays (``router.score_numpy``) and, here,
``score_scalar`` pool by pool in Python floats, for models with few pools.

A NumPy call costs about half a microsecond whatever the size of its arrays (more when
it takes a Python number or broadcasts), and the vectorised scoring makes some twenty of
them: at a handful of pools that fixed cost is nearly all of ``rank``'s time. The scalar
path computes the same predictions, feasibility and order pool by pool with Python
floats (IEEE doubles, the same operations in the same order as the NumPy code, so the
same bits), and answers in lists: ``router.scoring.Ranking`` makes arrays of them only
when asked (explain, tests), as the request path reads just the order and the first
pools' values. ``tests/router/test_score_core.py`` checks both against a plain vectorised
reference (``tests/router/score_reference.py``) on random inputs; a change to the
scoring model must be made in all three.

Whatever depends on the snapshot and the client's region but not on the request (the
eligible pools when nothing ramps, the near-client reserve in slots, the model's expected
output priced at the drain TPOT, the pools in price order, the vector path's stacked
constants) is worked out once per snapshot (``ModelView`` and its ``RegionView``s), not
here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from base.types import BoolArray, FloatArray
from router.snapshot import ModelView, RegionView

# Up to this many pools per model the scalar path is faster: measured back to back on
# one model of n random pools, the two paths cost the same at about 16 (scalar 0.6x the
# vector's time at 4 pools, 2x at 64); re-measured in instructions after the vector path
# lost half its NumPy calls, still about 16 (vector 0.8x the scalar's at 24 pools, 0.7x at 32).
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


# One attempt as ``Ranking.tried`` yields it: (pool index into the policy, predicted TTFT
# ms, estimated cost USD, USD per token).
TriedPool = tuple[int, float, float, float]


class ScalarScored(NamedTuple):
    """The per-pool results of ``score_scalar``, as Python lists over the model's pools
    (policy order), and the order to try them in (indices into those pools). A
    NamedTuple, built positionally: a frozen dataclass took a tenth of a small model's
    scoring to build."""

    ttft_ms: list[float]
    tpot_ms: list[float]
    load: list[float]
    eligible: list[bool]
    feasible: list[bool]
    region_ok: list[bool]
    available: list[bool]
    local_order: list[int]
    n_feasible: int

    @property
    def n_tried(self) -> int:
        """How many pools ``local_order`` lists."""
        return len(self.local_order)

    def attempts(self, view: ModelView, est_tokens: int) -> Iterator[TriedPool]:
        """The pools of ``local_order`` as attempts, one by one."""
        v = view.lists
        members, ttft, per_token = v.members, self.ttft_ms, v.usd_per_token
        for j in self.local_order:
            p = per_token[j]
            yield members[j], ttft[j], est_tokens * p, p


def score_scalar(
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
) -> ScalarScored:
    """Score the model's pools one by one; the same answer as ``score_vector``."""
    v, rl = view.lists, region.lists  # built once per snapshot
    n = len(v.members)
    inflight = v.inflight
    if local_inflight is not None:
        inflight = [
            a + b for a, b in zip(inflight, local_inflight[view.members].tolist(), strict=True)
        ]

    # Eligibility, as score_vector decides it (see the comments there).
    region_ok = rl.region_ok
    if region_allowed is not None:
        region_ok = [a and b for a, b in zip(region_ok, region_allowed, strict=True)]
    available = v.available
    if view.full_weight and local_blocked is None:
        if region_allowed is None:
            eligible = rl.ready_ok
        else:
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

    rtts, limits, priced = rl.rtt_ms, rl.slot_limit, v.priced
    ttft, tpot, load, feasible = [0.0] * n, [0.0] * n, [0.0] * n, [False] * n
    order: list[int] = []  # the feasible pools, in policy order until sorted below
    slow: list[int] = []  # the eligible pools that are not feasible
    # Conditional expressions stand for max() and min() below: the same result (NaN and
    # -0.0 included, for these argument orders) at a fraction of a builtin call's cost.
    for j, (pf, out_ms, tq, inv, oms, base, span, measured) in enumerate(view.rows):
        prefill = prompt_tokens * pf
        if mix is None:
            service_ms = prefill + out_ms
        else:
            service_ms = mix.prompt_tokens * pf + mix.output_tokens * tq
        queued = inflight[j] + oms
        if queued < 0.0:  # noqa: PLR1730  # max(queued, 0.0), without the call
            queued = 0.0
        t = rtts[j] + queued * service_ms * inv + prefill
        plus_one = inflight[j] + 1.0
        ld = plus_one * inv
        tp = base + span * (1.0 if ld > 1.0 else ld)  # min(ld, 1.0)
        if measured > tp:  # noqa: PLR1730  # max(tp, measured), without the call
            tp = measured
        ttft[j], tpot[j], load[j] = t, tp, ld
        if eligible[j]:
            if (
                t <= ttft_limit_ms
                and tp <= tpot_limit_ms
                and priced[j]
                and (limits is None or plus_one <= limits[j])
            ):
                feasible[j] = True
                order.append(j)
            else:
                slow.append(j)

    n_feasible = len(order)
    if n_feasible > 1:
        cost = [est_tokens * p for p in v.usd_per_token]
        cheapest = min([cost[j] for j in order])
        bound = cheapest * (1.0 + near_tie)
        ties = [j for j in order if cost[j] <= bound]
        rest = [j for j in order if not cost[j] <= bound]
        # sorted() is stable, like argsort(kind="stable"): equal keys keep policy order.
        order = sorted(ties, key=load.__getitem__) + sorted(rest, key=cost.__getitem__)
    if fallback_fastest and slow:
        order += sorted(slow, key=ttft.__getitem__)
    return ScalarScored(
        ttft, tpot, load, eligible, feasible, region_ok, available, order, n_feasible
    )
