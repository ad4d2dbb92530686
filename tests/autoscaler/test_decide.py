"""``decide()`` as a pure function: which pools get capacity, and within which limits."""

from __future__ import annotations

import itertools

import numpy as np

from autoscaler.decide import decide, served_share
from autoscaler.demand import DemandHistory, line_key
from autoscaler.fleet import PoolStatus
from autoscaler.goodput import GoodputObservation
from autoscaler.plan import Plan
from autoscaler.state import ScalerState
from router.health import PoolState
from tests.autoscaler.conftest import (
    MODEL,
    T0,
    config,
    history,
    make_policy,
    pool_doc,
    prices,
    statuses,
    steady,
)


def _targets(plan: Plan) -> dict[str, int]:
    return {c.pool_id: c.target for c in plan.changes}


def test_the_cheaper_pool_gets_the_capacity() -> None:
    policy = make_policy(
        [
            pool_doc("aws:us-east-1:dear", usd=3.0),
            pool_doc("gcp:us-central1:cheap", provider="gcp", region="us-central1", usd=1.0),
        ]
    )
    plan = decide(
        history({"us": steady(2500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(),
    )
    assert _targets(plan) == {"aws:us-east-1:dear": 0, "gcp:us-central1:cheap": 3}


def test_capacity_is_priced_per_token_not_per_replica() -> None:
    # The dearer replica does three times the work for twice the price.
    policy = make_policy(
        [
            pool_doc("aws:us-east-1:small", usd=1.0),
            pool_doc("aws:us-east-1:big", usd=2.0, tokens_per_s=3000.0),
        ]
    )
    plan = decide(
        history({"us": steady(2500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(),
    )
    assert _targets(plan) == {"aws:us-east-1:small": 0, "aws:us-east-1:big": 1}


def test_a_latency_zone_forces_the_pricier_nearby_pool() -> None:
    # TTFT 500 ms: 500 prompt tokens prefill in 50 ms, so the far pool (600 ms away) cannot
    # serve the EU clients; US clients may use both and get the cheap far one.
    pools = [
        pool_doc("aws:us-east-1:cheap", usd=1.0),
        pool_doc("aws:eu-west-1:near", region="eu-west-1", usd=4.0),
    ]
    regions = {
        "us": {"aws:us-east-1": 5.0, "aws:eu-west-1": 80.0},
        "eu": {"aws:us-east-1": 600.0, "aws:eu-west-1": 5.0},
    }
    policy = make_policy(pools, regions, ttft_ms=500.0)
    demand = history({"us": steady(1500.0), "eu": steady(800.0)})
    plan = decide(demand, statuses(policy), prices(policy), policy, ScalerState(), config())
    assert _targets(plan) == {"aws:us-east-1:cheap": 2, "aws:eu-west-1:near": 1}
    eu = next(d for d in plan.demand if d.client_region == "eu")
    assert eu.pools == ("aws:eu-west-1:near",)


def test_the_budget_caps_the_fleet_and_the_shortfall_is_reported() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a", usd=2.0)])
    plan = decide(
        history({"us": steady(5500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(budget_usd_per_hour=7.0),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 3}
    assert plan.usd_per_hour_after <= 7.0
    assert round(plan.demand[0].shortfall) == 2500


def test_the_spot_cap_limits_the_share_spot_pools_carry() -> None:
    policy = make_policy(
        [
            pool_doc("aws:us-east-1:spot", usd=0.3, purchase="spot"),
            pool_doc("aws:us-east-1:od", usd=1.0),
        ]
    )
    plan = decide(
        history({"us": steady(3500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(spot_cap=0.5),
    )
    # 1750 tokens/s at most on spot: two spot replicas, the rest on demand.
    assert _targets(plan) == {"aws:us-east-1:spot": 2, "aws:us-east-1:od": 2}


def test_without_a_spot_cap_spot_carries_everything() -> None:
    policy = make_policy(
        [
            pool_doc("aws:us-east-1:spot", usd=0.3, purchase="spot"),
            pool_doc("aws:us-east-1:od", usd=1.0),
        ]
    )
    plan = decide(
        history({"us": steady(3500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(spot_cap=1.0),
    )
    assert _targets(plan) == {"aws:us-east-1:spot": 4, "aws:us-east-1:od": 0}


def test_a_pool_grows_by_at_most_max_step_per_cycle() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    plan = decide(
        history({"us": steady(9500.0)}),
        statuses(policy, {"aws:us-east-1:a": 1}),
        prices(policy),
        policy,
        ScalerState(),
        config(max_step=3),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 4}
    assert "max step" in plan.change("aws:us-east-1:a").reason


def test_a_step_share_lets_a_large_pool_move_in_proportion() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a", max_replicas=100)])
    plan = decide(
        history({"us": steady(60_000.0)}),
        statuses(policy, {"aws:us-east-1:a": 40}),
        prices(policy),
        policy,
        ScalerState(),
        config(max_step=3, max_step_share=0.25),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 50}  # 40 + 25 %, not 40 + 3
    assert "max step" in plan.change("aws:us-east-1:a").reason


def test_a_pool_never_passes_its_max_size() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a", max_replicas=5)])
    plan = decide(
        history({"us": steady(9500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 5}
    assert round(plan.demand[0].shortfall) == 4500


def test_a_pool_does_not_shrink_during_its_cooldown() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    demand = history({"us": steady(500.0)})
    state = ScalerState(last_up_s={"aws:us-east-1:a": demand.now_s - 60.0})
    plan = decide(
        demand,
        statuses(policy, {"aws:us-east-1:a": 4}),
        prices(policy),
        policy,
        state,
        config(cooldown_s=300.0),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 4}
    assert plan.change("aws:us-east-1:a").reason.startswith("cooldown")


def test_a_pool_shrinks_only_to_the_largest_recommendation_in_the_window() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    demand = history({"us": steady(500.0)})
    state = ScalerState(recommendations={"aws:us-east-1:a": [(demand.now_s - 120.0, 3)]})
    plan = decide(
        demand,
        statuses(policy, {"aws:us-east-1:a": 4}),
        prices(policy),
        policy,
        state,
        config(scale_down_window_s=600.0),
    )
    assert _targets(plan) == {"aws:us-east-1:a": 3}


def _two_mixes(asked_before: float | None) -> dict[str, int]:
    """Targets when the window recommended 3 of pool a, then 3 of its substitute b (a
    dearer mix, for demand ``asked_before`` tokens/s; None: not recorded), and both run
    3 now; demand is 2,500 tokens/s, which 3 replicas of either cover."""
    policy = make_policy(
        [pool_doc("aws:us-east-1:a", usd=1.0), pool_doc("aws:us-east-1:b", usd=1.2)]
    )
    demand = history({"us": steady(2500.0)})
    now = demand.now_s
    state = ScalerState(
        recommendations={
            "aws:us-east-1:a": [(now - 120.0, 3), (now - 60.0, 0)],
            "aws:us-east-1:b": [(now - 120.0, 0), (now - 60.0, 3)],
        },
        asked={}
        if asked_before is None
        else {line_key(MODEL, "us"): [(now - 120.0, 2500.0), (now - 60.0, asked_before)]},
    )
    plan = decide(
        demand,
        statuses(policy, {"aws:us-east-1:a": 3, "aws:us-east-1:b": 3}),
        prices(policy),
        policy,
        state,
        config(scale_down_window_s=600.0),
    )
    return _targets(plan)


def test_the_window_holds_the_demand_of_its_recommendations_not_every_mix() -> None:
    # Two mixes for the same demand are substitutes: holding each pool's largest
    # recommendation would keep both (6 replicas for 3 replicas' work).
    assert _two_mixes(asked_before=2500.0) == {"aws:us-east-1:a": 3, "aws:us-east-1:b": 0}


def test_the_window_holds_capacity_for_its_peak_demand() -> None:
    # A recommendation a minute ago was made for 5,000 tokens/s: the fleet keeps what
    # covers that, the cheapest part of what runs.
    assert _two_mixes(asked_before=5000.0) == {"aws:us-east-1:a": 3, "aws:us-east-1:b": 2}


def test_without_the_demand_behind_the_window_each_pool_keeps_its_maximum() -> None:
    # A state written before the demand was kept: the HPA's rule, per pool.
    assert _two_mixes(asked_before=None) == {"aws:us-east-1:a": 3, "aws:us-east-1:b": 3}


def test_noise_around_a_replica_boundary_does_not_make_the_plan_oscillate() -> None:
    assert _reversals(damped=True) <= 1


def test_without_damping_the_same_noise_makes_the_plan_oscillate() -> None:
    # The control for the test above: the noise is enough to flap an undamped planner.
    assert _reversals(damped=False) >= 5


def _reversals(damped: bool) -> int:
    """Direction changes of a pool's target over 40 cycles of demand that wanders ±8 %
    around 2600 tokens/s, one 300 s bucket per cycle: its upper quantile keeps crossing
    3000, the boundary between three and four replicas."""
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    knobs = (
        config(cooldown_s=900.0, scale_down_window_s=1800.0, scale_down_margin=0.1)
        if damped
        else config()
    )
    rng = np.random.default_rng(7)
    values = list(steady(2600.0, hours=6.0) * (1 + 0.08 * rng.standard_normal(72)))
    state, current, moves = ScalerState(), 3, []
    for _ in range(40):
        values.append(2600.0 * (1 + 0.08 * rng.standard_normal()))
        plan = decide(
            history({"us": values}),
            statuses(policy, {"aws:us-east-1:a": current}),
            prices(policy),
            policy,
            state,
            knobs,
        )
        target = plan.change("aws:us-east-1:a").target
        if target != current:
            moves.append(np.sign(target - current))
        state, current = plan.state, target
    return sum(1 for a, b in itertools.pairwise(moves) if a != b)


def test_a_short_history_shrinks_only_once_it_spans_the_lead_time() -> None:
    # Half an hour of demand is too little for the forecast (unreliable: the recent
    # peak). A pool whose replicas take an hour to boot holds; one that boots in 5
    # minutes shrinks to the peak, as a reactive scaler would.
    demand = history({"us": steady(500.0, hours=0.5)})

    def target(provisioning_s: float) -> int:
        doc = pool_doc("aws:us-east-1:a")
        doc["scaling"]["provisioning_s"] = provisioning_s
        policy = make_policy([doc])
        four = statuses(policy, {"aws:us-east-1:a": 4})
        plan = decide(demand, four, prices(policy), policy, ScalerState(), config())
        assert plan.demand[0].reliable is False
        return plan.change("aws:us-east-1:a").target

    assert target(3600.0) == 4
    assert target(300.0) == 1


def test_no_recorded_demand_shrinks_nothing() -> None:
    # Telemetry lost with Redis, or a new deployment: the recent peak is 0 because
    # nothing was recorded, not because nobody asks.
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    four = statuses(policy, {"aws:us-east-1:a": 4})
    nothing = DemandHistory(T0, {})
    plan = decide(nothing, four, prices(policy), policy, ScalerState(), config())
    assert _targets(plan) == {"aws:us-east-1:a": 4}


def test_a_shrink_waits_until_replicas_elsewhere_are_ready() -> None:
    # The cheap pool was just asked for 3 replicas; none is ready yet.
    policy = make_policy(
        [pool_doc("aws:us-east-1:dear", usd=3.0), pool_doc("aws:us-east-1:cheap", usd=1.0)]
    )
    pools = [PoolStatus("aws:us-east-1:dear", 3, 3), PoolStatus("aws:us-east-1:cheap", 3, 0)]
    plan = decide(
        history({"us": steady(2500.0)}), pools, prices(policy), policy, ScalerState(), config()
    )
    assert _targets(plan) == {"aws:us-east-1:dear": 3, "aws:us-east-1:cheap": 3}
    assert "waits" in plan.change("aws:us-east-1:dear").reason


def test_a_pool_out_of_capacity_is_not_grown_and_its_share_goes_elsewhere() -> None:
    policy = make_policy(
        [pool_doc("aws:us-east-1:dear", usd=3.0), pool_doc("aws:us-east-1:cheap", usd=1.0)]
    )
    demand = history({"us": steady(2500.0)})
    state = ScalerState(
        blocked_until_s={"aws:us-east-1:cheap": demand.now_s + 600},
        blocked_reason={"aws:us-east-1:cheap": "stockout"},
    )
    plan = decide(demand, statuses(policy), prices(policy), policy, state, config())
    assert _targets(plan) == {"aws:us-east-1:dear": 3, "aws:us-east-1:cheap": 0}


def test_an_ejected_pool_counts_no_capacity() -> None:
    policy = make_policy(
        [pool_doc("aws:us-east-1:dear", usd=3.0), pool_doc("aws:us-east-1:cheap", usd=1.0)]
    )
    pools = [
        PoolStatus("aws:us-east-1:dear", 0, 0),
        PoolStatus("aws:us-east-1:cheap", 3, 3, health=PoolState.EJECTED),
    ]
    plan = decide(
        history({"us": steady(2500.0)}), pools, prices(policy), policy, ScalerState(), config()
    )
    assert _targets(plan) == {"aws:us-east-1:dear": 3, "aws:us-east-1:cheap": 3}


def test_a_pool_flagged_needs_replacement_has_its_nodes_replaced() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    pools = [
        PoolStatus(
            "aws:us-east-1:a",
            2,
            2,
            health=PoolState.EJECTED,
            needs_replacement=True,
            nodes=("i-1", "i-2"),
        )
    ]
    plan = decide(
        history({"us": steady(500.0)}), pools, prices(policy), policy, ScalerState(), config()
    )
    assert plan.change("aws:us-east-1:a").replace == ("i-1", "i-2")


def test_failed_nodes_are_replaced_even_in_a_healthy_pool() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    pools = [PoolStatus("aws:us-east-1:a", 2, 1, nodes=("i-1", "i-2"), failed=("i-2",))]
    plan = decide(
        history({"us": steady(500.0)}), pools, prices(policy), policy, ScalerState(), config()
    )
    assert plan.change("aws:us-east-1:a").replace == ("i-2",)


def test_a_slower_than_profiled_pool_gets_more_replicas() -> None:
    # Measured TPOT twice the profile's at its batch, while the SLO held.
    policy = make_policy([pool_doc("aws:us-east-1:a")])
    slow = GoodputObservation(tpot_ms=40.0, ttft_ms=100.0, inflight=2.0, ready=2)
    state = ScalerState()
    for _ in range(20):
        plan = decide(
            history({"us": steady(2500.0)}),
            [PoolStatus("aws:us-east-1:a", 3, 2, observation=slow)],
            prices(policy),
            policy,
            state,
            config(),
        )
        state = plan.state
    assert state.corrections["aws:us-east-1:a"] > 1.5
    assert plan.change("aws:us-east-1:a").target >= 5


def test_a_pool_without_a_node_group_keeps_its_size() -> None:
    policy = make_policy([pool_doc("aws:us-east-1:a", usd=1.0)])
    pools = [PoolStatus("aws:us-east-1:a", 1, 1, managed=False)]
    plan = decide(
        history({"us": steady(2500.0)}), pools, prices(policy), policy, ScalerState(), config()
    )
    assert _targets(plan) == {"aws:us-east-1:a": 1}
    assert plan.actionable == ()


def test_the_plan_prints_as_a_table_with_a_reason_per_pool() -> None:
    policy = make_policy(
        [pool_doc("aws:us-east-1:dear", usd=3.0), pool_doc("aws:us-east-1:cheap", usd=1.0)]
    )
    plan = decide(
        history({"us": steady(2500.0)}),
        statuses(policy),
        prices(policy),
        policy,
        ScalerState(),
        config(),
    )
    lines = plan.table().splitlines()
    row = next(line for line in lines if line.startswith("aws:us-east-1:cheap"))
    assert "+3" in row and "covers us" in row


def test_a_new_empty_group_grows_to_its_minimum_before_any_demand_is_seen() -> None:
    # No demand recorded yet: the forecast is unreliable, so nothing may shrink, but a
    # pool below its minimum (a node group that starts empty, like the local provider's)
    # still grows to it.
    policy = make_policy([pool_doc("aws:us-east-1:floor", min_replicas=2)])
    nothing = DemandHistory(T0, {})
    plan = decide(nothing, statuses(policy), prices(policy), policy, ScalerState(), config())
    assert _targets(plan) == {"aws:us-east-1:floor": 2}
    # At its minimum, with still no demand, it stays there.
    at_min = statuses(policy, {"aws:us-east-1:floor": 2})
    held = decide(nothing, at_min, prices(policy), policy, plan.state, config())
    assert _targets(held) == {"aws:us-east-1:floor": 2}


def test_a_long_mean_prompt_does_not_rule_out_a_pool_most_requests_fit() -> None:
    # A 12k-token mean prefills in 1.5 s at 8k tokens/s, over the 1.4 s left of a 2 s TTFT
    # after the 30 % margin; yet ~60 % of the requests (exponential lengths) fit. The
    # EU clients may use only this pool: judged by the mean they got no capacity at all.
    pools = [pool_doc("aws:eu-west-1:a100", region="eu-west-1", prefill=8000.0)]
    policy = make_policy(pools, {"eu": {"aws:eu-west-1": 5.0}})
    demand = history({"eu": steady(1000.0)}, prompt_tokens=12_000.0)
    plan = decide(demand, statuses(policy), prices(policy), policy, ScalerState(), config())
    # Two replicas, not one: each request also holds a slot through its 1.5 s prefill.
    assert _targets(plan) == {"aws:eu-west-1:a100": 2}
    assert next(iter(plan.demand)).pools == ("aws:eu-west-1:a100",)


def test_long_prompts_hold_batch_slots_so_the_same_output_needs_more_replicas() -> None:
    # 4,000 output tokens/s at 100 tokens per request: 40 requests/s. With 500-token
    # prompts a request holds a slot 50 ms to prefill and 99 x 50 ms to decode, as if
    # decoding 100 tokens: 4 of the 1,000 tokens/s replicas. With 10,000-token prompts
    # the prefill takes 1 s: 5.95 s of slot time per 5 s of decode, so 4,760 tokens/s.
    policy = make_policy([pool_doc("aws:us-east-1:a", tokens_per_s=1000.0)])
    sizes = {}
    for prompt in (500.0, 10_000.0):
        demand = history({"us": steady(4000.0)}, prompt_tokens=prompt)
        plan = decide(demand, statuses(policy), prices(policy), policy, ScalerState(), config())
        sizes[prompt] = _targets(plan)["aws:us-east-1:a"]
    assert sizes[500.0] == 4
    assert sizes[10_000.0] == 5


def test_a_pool_that_fits_only_a_small_share_of_the_prompts_gets_none() -> None:
    # At 1k tokens/s only prompts under 1.4k tokens fit: 11 % of a 12k-token mean.
    pools = [
        pool_doc("aws:eu-west-1:slow", region="eu-west-1", prefill=1000.0, usd=0.5),
        pool_doc("aws:eu-west-1:fast", region="eu-west-1", prefill=20_000.0, usd=2.0),
    ]
    policy = make_policy(pools, {"eu": {"aws:eu-west-1": 5.0}})
    # 800 output tokens/s: with the fast pool's 0.6 s prefills, 890 tokens/s of slot time.
    demand = history({"eu": steady(800.0)}, prompt_tokens=12_000.0)
    plan = decide(demand, statuses(policy), prices(policy), policy, ScalerState(), config())
    assert _targets(plan) == {"aws:eu-west-1:slow": 0, "aws:eu-west-1:fast": 1}


def test_served_share_follows_the_exponential_law() -> None:
    assert served_share(-1.0, 1000.0) == 0.0
    assert served_share(1000.0, 0.0) == 1.0
    assert abs(served_share(1000.0 * np.log(2.0), 1000.0) - 0.5) < 1e-12


def test_a_sliver_of_prompts_too_long_for_the_cheap_pool_buys_no_fast_replica() -> None:
    # At 8k tokens/s the cheap pool prefills prompts up to ~14k tokens within the TTFT:
    # all but 4 in a million of a 1,155-token mean, far under one request per cycle.
    pools = [
        pool_doc("aws:us-east-1:slow", prefill=8000.0, usd=0.5),
        pool_doc("aws:us-east-1:fast", prefill=20_000.0, usd=2.0),
    ]
    policy = make_policy(pools)
    demand = history({"us": steady(5000.0)}, prompt_tokens=1155.0)
    plan = decide(demand, statuses(policy), prices(policy), policy, ScalerState(), config())
    assert _targets(plan)["aws:us-east-1:fast"] == 0
