"""The back-test's capacity model (``loadtests.backtest_fleet.Mix``) counts a replica as
``decide()`` does: goodput divided by the slot load of the back-test's request mix."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.goodput import slot_load
from loadtests.backtest_fleet import (
    DATA,
    MODEL,
    PROMPT_TOKENS,
    SHARES,
    Mix,
    backtest_policy,
    catalog_prices,
)

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")

EU = list(SHARES).index("aws:eu-west-1")


def _mix() -> Mix:
    policy = backtest_policy()
    return Mix(policy, catalog_prices(policy), spot_cap=0.5)


def _eu_load(mix: Mix) -> tuple[int, float]:
    """The EU spot pool's index and the slot load of the mix's requests there (> 1:
    a 1,155-token prefill on an A100 holds its slot longer than a decode step)."""
    policy = mix.policy
    (spot,) = [i for i, p in enumerate(policy.pools) if p.id == "aws:eu-west-1:a100-llama70b-spot"]
    model = policy.models[MODEL]
    profile = policy.pools[spot].goodput
    load = slot_load(
        profile, policy.slo_classes[model.default_slo], PROMPT_TOKENS, model.expected_output_tokens
    )
    return spot, load


def test_replicas_that_carry_the_demand_in_decode_alone_are_short_by_the_slot_load() -> None:
    mix = _mix()
    spot, load = _eu_load(mix)
    assert load > 1.003
    ready = np.zeros(len(mix.cost), dtype=np.intp)
    ready[spot] = 10
    demand = np.zeros(len(SHARES))
    demand[EU] = 10 * mix.policy.pools[spot].goodput.tokens_per_s  # decode goodput, exactly
    assert mix.short(demand, ready) == pytest.approx(1.0 - 1.0 / load, rel=1e-6)
    assert mix.short(demand, ready) > 1e-3  # what the replay counts as a short window


def test_the_oracle_buys_a_replica_for_the_prefill_slot_time_of_a_full_decode_load() -> None:
    mix = _mix()
    spot, load = _eu_load(mix)
    demand = np.zeros(len(SHARES))
    demand[EU] = 10 * mix.policy.pools[spot].goodput.tokens_per_s
    assert 10 * load < 11
    bought = mix.cheapest(demand)
    assert int(bought.sum()) == 11  # 10 replicas of decode, 10 x 1.0044 of slot time
    assert mix.short(demand, bought) == 0.0
