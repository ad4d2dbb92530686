"""The scalar and the vectorised scoring paths give exactly the reference's answer, on
random inputs.

``rank`` scores models with few pools in Python floats (``score_scalar``) and others with
NumPy (``score_vector``). Both must agree bit for bit with the straightforward vectorised
scoring kept in ``score_reference`` (and so with each other) on every output:
predictions, cost, load, every flag and the order. The inputs are drawn with a seeded
generator over what the live tables can hold: pools with and without a price, with no
ready replica, ejected, draining or ramping after readmission, clients near and far (the
near-client reserve), regions a client may not use, per-request region restrictions,
this replica's in-flight counts and ejections, both fallbacks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import pytest

from router.compiled import CompiledPolicy, compile_policy
from router.health import HealthRecord, PoolState
from router.policy import Policy
from router.score_core import MAX_SCALAR_POOLS, ScalarScored, TrafficMix, score_scalar
from router.score_numpy import VectorScored, score_vector
from router.scoring import RouteRequest, rank
from router.snapshot import ModelView, PoolRow, Snapshot, price_order_exact
from tests.router.score_reference import ReferenceScored, score_reference

LOCATIONS = ["aws:us-east-1", "aws:eu-west-1", "gcp:us-central1", "azure:eastus"]
CASES = 400


def random_policy(rng: np.random.Generator, max_pools: int = MAX_SCALAR_POOLS) -> CompiledPolicy:
    n = int(rng.integers(1, max_pools + 1))
    pools: list[dict[str, Any]] = []
    for k in range(n + int(rng.integers(1, 3))):  # and a pool or two of another model
        provider, region = LOCATIONS[int(rng.integers(len(LOCATIONS)))].split(":")
        price = (
            {"usd_per_gpu_hour": float(rng.choice([0.5, 1.0, 1.01, 2.0, 7.0]))}
            if rng.random() < 0.85
            else {"source": provider, "instance_type": "x"}  # no price until a feed has one
        )
        pools.append({
            "id": f"{provider}:{region}:p{k}", "provider": provider, "region": region,
            "model": "m" if k < n else "other", "upstream_model": "org/m", "gpu_type": "H100",
            "gpus_per_replica": int(rng.choice([1, 2, 8])),
            "endpoints": ["http://127.0.0.1:9/v1"], "price": price,
            "goodput": {"tokens_per_s": float(rng.choice([300.0, 1000.0, 6000.0])),
                        "prefill_tokens_per_s": float(rng.choice([2000.0, 10000.0])),
                        "max_concurrency": int(rng.choice([1, 8, 64])),
                        "tpot_ms": float(rng.choice([9.0, 30.0, 55.0]))},
            "replicas": {"min": 0, "max": 8, "initial": int(rng.integers(0, 3))},
        })  # fmt: skip
    used = sorted({f"{p['provider']}:{p['region']}" for p in pools})
    # "near" may use every location; "far" only some (the others are +inf: not allowed).
    regions = {
        name: {"rtt_ms": {loc: float(rng.choice([1.0, 20.0, 80.0, 300.0])) for loc in used
                          if name == "near" or loc == used[0] or rng.random() < 0.7}}
        for name in ("near", "far")
    }  # fmt: skip
    policy = Policy.model_validate({
        "slo_classes": {"interactive": {"ttft_ms": 800, "tpot_ms": 60},
                        "batch": {"ttft_ms": 30000, "tpot_ms": 500}},
        "models": {"m": {"default_slo": "interactive", "expected_output_tokens": 211},
                   "other": {"default_slo": "batch", "expected_output_tokens": 50}},
        "pools": pools, "client_regions": regions,
        "routing": {"default_client_region": "near",
                    "fallback": "fastest" if rng.random() < 0.7 else "reject",
                    "near_tie": float(rng.choice([0.0, 0.02, 0.5])),
                    "slo_headroom": float(rng.choice([0.0, 0.3])),
                    "near_reserve": float(rng.choice([0.0, 0.25])), "near_rtt_ms": 50},
    })  # fmt: skip
    return compile_policy(policy)


def random_row(rng: np.random.Generator) -> PoolRow:
    health = HealthRecord()
    roll = rng.random()
    if roll < 0.1:
        health = HealthRecord(state=PoolState.EJECTED, until_s=60.0)
    elif roll < 0.15:
        health = HealthRecord(state=PoolState.DRAINING)
    elif roll < 0.3:
        health = HealthRecord(readmitted_s=90.0)  # ramping at the snapshot's time
    return PoolRow(
        # Small counts often, so loads land exactly on the near-client reserve's cap.
        inflight=float(rng.integers(0, 12 if rng.random() < 0.5 else 200)),
        ready_replicas=float(rng.choice([0.0, 1.0, 3.0])) if rng.random() < 0.8 else float("nan"),
        tpot_ewma_ms=float(rng.choice([20.0, 70.0])) if rng.random() < 0.3 else float("nan"),
        tpot_at_s=95.0,
        usd_per_gpu_hour=float(rng.choice([0.9, 3.0])) if rng.random() < 0.5 else float("nan"),
        health=health,
    )


class Both(NamedTuple):
    fast: ScalarScored
    ref: ReferenceScored
    view: ModelView
    est_tokens: int
    near_tie: float
    vector: VectorScored


def both(rng: np.random.Generator, max_pools: int = MAX_SCALAR_POOLS) -> Both:
    """The scalar path's, the reference's and the vector path's answers to one random
    request on a random policy of up to ``max_pools`` pools for the model."""
    policy = random_policy(rng, max_pools)
    snap = Snapshot.build(policy, {p: random_row(rng) for p in policy.pool_ids}, 100.0)
    view = snap.views["m"]
    region = str(rng.choice(["near", "far"]))
    members = view.members.tolist()
    allowed = (
        [policy.regions[i] in {"aws:us-east-1", "gcp:us-central1"} for i in members]
        if rng.random() < 0.2
        else None
    )
    local = rng.integers(0, 5, policy.size).astype(float) if rng.random() < 0.8 else None
    blocked = rng.random(policy.size) < 0.2 if rng.random() < 0.3 else None
    slo = policy.slo[str(rng.choice(["interactive", "batch"]))]
    # A draw equal to some pool's weight now and then: the boundary of the ramp test.
    ramp_draw = float(rng.choice(view.weight)) if rng.random() < 0.3 else float(rng.random())
    routing = policy.policy.routing
    # Half the cases price the queue by a traffic mix (what the simulator passes).
    mix = (
        TrafficMix(float(rng.uniform(10, 12_000)), float(rng.uniform(1, 600)))
        if rng.random() < 0.5
        else None
    )
    est_tokens = int(rng.integers(10, 6000)) if rng.random() < 0.95 else int(rng.integers(0, 2))
    args = (
        view, view.regions[region], allowed, local, blocked, int(rng.integers(1, 4000)),
        est_tokens, slo.ttft_ms * policy.keep_ttft,
        slo.tpot_ms * policy.keep_tpot, ramp_draw, routing.near_tie,
        routing.fallback == "fastest", mix,
    )  # fmt: skip
    return Both(
        score_scalar(*args), score_reference(*args), view, est_tokens, routing.near_tie,
        score_vector(*args),
    )  # fmt: skip


@pytest.mark.parametrize("block", range(4))
def test_scalar_scoring_equals_the_vectorised_reference(block: int) -> None:
    for seed in range(block, CASES, 4):
        fast, ref, view, est_tokens, _, vector = both(np.random.default_rng(seed))
        check_same(seed, fast, ref, view, est_tokens)
        check_same(seed, vector, ref, view, est_tokens)


@pytest.mark.parametrize("block", range(4))
def test_vector_scoring_of_many_pools_equals_the_reference(block: int) -> None:
    """The vector path (per-snapshot price order, stacked rows) against the reference, on
    models of up to 80 pools: many feasible pools, ties and fallbacks at once."""
    for seed in range(block, CASES // 2, 4):
        _, ref, view, est_tokens, _, vector = both(np.random.default_rng(10_000 + seed), 80)
        check_same(seed, vector, ref, view, est_tokens)


def check_same(
    seed: int, fast: ScalarScored | VectorScored, ref: ReferenceScored, view: ModelView,
    est_tokens: int,
) -> None:  # fmt: skip
    # Counted before the (lazy) fallback order is sorted, and after.
    assert fast.n_tried == len(ref.local_order), seed
    for name in ("ttft_ms", "tpot_ms", "load"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(ref, name), f"{name} {seed}")
    for name in ("eligible", "feasible", "region_ok", "available"):
        assert np.asarray(getattr(fast, name)).tolist() == getattr(ref, name).tolist(), (name, seed)
    assert np.asarray(fast.local_order).tolist() == ref.local_order.tolist(), seed
    assert fast.n_feasible == ref.n_feasible, seed
    # The attempts (pool, TTFT, cost, USD per token), as the request path reads them.
    # (By repr: exact for floats, and NaN, the cost of no tokens at no price, equals NaN.)
    got, want = list(fast.attempts(view, est_tokens)), list(ref.attempts(view, est_tokens))
    assert repr(got) == repr(want), seed
    assert fast.n_tried == len(ref.local_order), seed
    if isinstance(fast, VectorScored):  # again, with the fallback not sorted yet
        fresh = fast._replace(memo=[])
        assert repr(list(fresh.attempts(view, est_tokens))) == repr(want), seed
        assert repr(next(fast._replace(memo=[]).attempts(view, est_tokens), None)) == repr(
            next(iter(want), None)
        ), seed


def test_the_random_cases_reach_every_kind_of_ranking() -> None:
    """The property above means little unless the draws produce single and several
    feasible pools, near-ties, fallbacks and empty orders."""
    seen = set()
    ties_seen = set()
    for seed in range(CASES):
        _, ref, view, est_tokens, near_tie, _ = both(np.random.default_rng(seed))
        fallback = len(ref.local_order) > ref.n_feasible
        seen.add((min(ref.n_feasible, 2), fallback, len(ref.local_order) == 0))
        cost = est_tokens * view.usd_per_token[ref.feasible]
        if len(cost):
            ties = np.count_nonzero(cost <= cost.min() * (1.0 + near_tie))
            ties_seen.add((min(int(ties), 2), ties < len(cost)))
    assert {(0, False, True), (1, False, False), (2, False, False), (0, True, False),
            (2, True, False)} <= seen  # fmt: skip
    # A lone cheapest and a group of near ties, each with and without dearer pools after.
    assert ties_seen == {(1, False), (1, True), (2, False), (2, True)}


def test_rank_gives_the_same_ranking_above_and_below_the_scalar_threshold() -> None:
    """A model just over the threshold is scored by NumPy; its ranking is the one the
    scalar path gives the same pools (checked through the public ``rank``)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        policy = random_policy(rng)
        snap = Snapshot.build(policy, {p: random_row(rng) for p in policy.pool_ids}, 100.0)
        request = RouteRequest("m", 700, None, "interactive", "far")
        ranking = rank(request, policy, snap)
        view = snap.views["m"]
        slo = policy.slo["interactive"]
        ref = score_reference(
            view, view.regions["far"], None, None, None, 700, ranking.est_tokens,
            slo.ttft_ms * policy.keep_ttft, slo.tpot_ms * policy.keep_tpot, 0.0,
            policy.policy.routing.near_tie, policy.policy.routing.fallback == "fastest",
        )  # fmt: skip
        assert ranking.order.tolist() == view.members[ref.local_order].tolist()
        np.testing.assert_array_equal(ranking.local_ttft_ms, ref.ttft_ms)


def test_the_price_order_is_exact_only_when_no_two_prices_can_cost_the_same() -> None:
    p = np.array([1e-7, 1e-7, 2e-7, 3e-7, np.inf])
    assert price_order_exact(p)
    assert price_order_exact(np.array([np.inf, np.inf]))
    # One rounding step apart: some token count gives both the same cost.
    assert not price_order_exact(np.array([1e-7, np.nextafter(1e-7, 1.0), np.inf]))
    assert not price_order_exact(np.array([5e-324, 1e-7]))  # subnormal: no relative bound
    close = np.array([1.9, np.nextafter(1.9, 2.0)])
    assert (5 * close[0] == 5 * close[1]) and close[0] < close[1]  # what the guard is for


def test_prices_a_rounding_step_apart_are_ordered_by_cost_as_the_reference_does() -> None:
    """Where two distinct prices give the same cost, the cost order keeps policy order:
    the vector path sorts the costs then (``price_order_exact`` is False), with the
    reference's answer."""
    for seed in range(60):
        rng = np.random.default_rng(20_000 + seed)
        _, _, view, _, _, _ = both(rng, 40)
        price = view.usd_per_token.copy()
        finite = np.flatnonzero(np.isfinite(price))
        cheapest = finite[np.argmin(price[finite])]
        dearer = finite[finite != cheapest]
        if len(dearer) < 2:
            continue
        # Half the other priced pools (two at least) move to the dearest price or a
        # rounding step above it, in shuffled policy positions: equal costs of distinct
        # prices, behind a cheaper pool (not near ties then).
        base = price[finite].max()
        for k, j in enumerate(rng.permutation(dearer)[: max(2, len(dearer) // 2)]):
            price[j] = np.nextafter(base, np.inf) if k % 2 else base
        by_price = np.argsort(price, kind="stable")
        odd = replace(
            view, usd_per_token=price, by_price=by_price, sorted_price=price[by_price],
            price_order_exact=price_order_exact(price[by_price]),
            price_py=price.tolist(), price_obj=np.array(price.tolist(), dtype=object),
        )  # fmt: skip
        assert not odd.price_order_exact
        for est_tokens in (5, 11, 27, 1001, 4097):
            args = (
                odd, odd.regions["near"], None, None, None, 500, est_tokens, 1e9, 1e9, 0.0,
                0.0, True, None,
            )  # fmt: skip
            ref = score_reference(*args)
            check_same(seed, score_vector(*args), ref, odd, est_tokens)
            check_same(seed, score_scalar(*args), ref, odd, est_tokens)
