"""The demo policy's goodput profiles agree with the simulated engines that serve it."""

from __future__ import annotations

import pytest

from live.policy_file import load_policy
from simengine.perf_model import PROFILES
from skyroute.demo import demo_policy_path, engine_profile

POLICY = load_policy(demo_policy_path())
CHAT_POOLS = [p for p in POLICY.pools if POLICY.models[p.model].kind == "chat"]


@pytest.mark.parametrize("pool", CHAT_POOLS, ids=lambda p: p.id)
def test_chat_pool_goodput_is_the_engine_goodput_at_the_default_slo(pool) -> None:
    profile = PROFILES[engine_profile(pool)]
    slo = POLICY.slo_classes[POLICY.models[pool.model].default_slo]
    assert pool.goodput.tokens_per_s == round(profile.goodput_tokens_per_s(slo.tpot_ms))
    assert pool.goodput.max_concurrency == max(profile.max_running_within(slo.tpot_ms), 1)
    assert pool.goodput.prefill_tokens_per_s == profile.prefill_tokens_per_s
    assert pool.goodput.tpot_ms == profile.tpot_base_ms


def test_every_demo_pool_has_an_engine_profile() -> None:
    assert all(engine_profile(p) in PROFILES for p in POLICY.pools)
