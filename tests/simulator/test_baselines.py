"""The cost-aware baselines pick what the systems they stand for would pick."""

from __future__ import annotations

import numpy as np

from simulator.compare import POLICIES
from simulator.policies import RoutingPolicy
from tests.simulator.test_policies import CHEAP, DEAR, _choose, _setup

BASELINES = (
    "cheapest-free-slot",
    "litellm-cost-cooldown",
    "llm-d-weighted",
    "least-latency-budget",
)


def test_every_baseline_is_compared_by_default() -> None:
    assert set(BASELINES) <= set(POLICIES)
    assert set(BASELINES) <= set(RoutingPolicy.registry)


def test_cheapest_free_slot_takes_the_cheap_pool_until_its_slots_are_full() -> None:
    spec, fleet = _setup()
    assert _choose("cheapest-free-slot", spec, fleet) == CHEAP
    slots = int(spec.batch_slots[CHEAP])
    for i in range(slots):
        fleet.submit(i, CHEAP, 0.0)
    assert _choose("cheapest-free-slot", spec, fleet) == DEAR


def test_cheapest_free_slot_with_every_slot_full_joins_the_shorter_backlog() -> None:
    spec, fleet = _setup()
    n = 0
    for p, extra in ((CHEAP, 3), (DEAR, 0)):
        for _ in range(int(spec.batch_slots[p]) + extra):
            fleet.submit(n, p, 0.0)
            n += 1
    assert _choose("cheapest-free-slot", spec, fleet) == DEAR


def test_litellm_cools_a_pool_down_after_three_timeouts_and_takes_it_back_later() -> None:
    spec, fleet = _setup()
    router = RoutingPolicy.create("litellm-cost-cooldown", spec, np.random.default_rng(0))
    assert router.choose(0, 0, 100, 0.0, fleet) == CHEAP
    for _ in range(3):  # far past 2 x (TTFT target + 10 tokens x TPOT target)
        router.observe(0, CHEAP, 1e6, 10)
    assert router.choose(1, 0, 100, 1.0, fleet) == DEAR
    assert router.choose(2, 0, 100, 10.0, fleet) == CHEAP  # the 5 s cooldown is over


def test_litellm_counts_a_response_within_its_timeout_as_no_failure() -> None:
    spec, fleet = _setup()
    router = RoutingPolicy.create("litellm-cost-cooldown", spec, np.random.default_rng(0))
    router.choose(0, 0, 100, 0.0, fleet)
    for _ in range(5):
        router.observe(0, CHEAP, 0.001, 10)
    assert router.choose(1, 0, 100, 1.0, fleet) == CHEAP


def test_llm_d_weighted_prefers_the_emptier_pool_whatever_it_costs() -> None:
    spec, fleet = _setup()
    for i in range(3):
        fleet.submit(i, CHEAP, 0.0)
    assert _choose("llm-d-weighted", spec, fleet) == DEAR


def test_least_latency_budget_never_leaves_the_budget_for_speed() -> None:
    spec, fleet = _setup()  # DEAR costs 5 x CHEAP: outside the 1.5 x budget
    router = RoutingPolicy.create("least-latency-budget", spec, np.random.default_rng(0))
    router.observe(0, CHEAP, 10.0, 10)  # the cheap pool is slow
    router.observe(0, DEAR, 0.1, 10)
    assert router.choose(0, 0, 100, 0.0, fleet) == CHEAP
