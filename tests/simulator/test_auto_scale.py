"""--scale-fleet auto: the fleet carries a trace's mean load in busy batch slots,
prefill included."""

from __future__ import annotations

from router.policy import Policy
from simulator.spec import FleetSpec, auto_scale
from tests.simulator.conftest import policy, pool, profile_of


def _policy() -> Policy:
    return policy([pool("cheap", "FAST", usd_per_gpu_hour=1.0, replicas=(0, 4, 1))])


def test_prompt_load_takes_slots_too() -> None:
    pol = _policy()
    out_only = auto_scale(pol, 50.0, profile_of=profile_of)
    long_prompts = auto_scale(pol, 50.0, mean_prompt_tokens_per_s=60_000.0, profile_of=profile_of)
    assert long_prompts > out_only


def test_the_scale_is_whole_slots_in_zero_to_one() -> None:
    pol = _policy()
    spec = FleetSpec.build(pol, profile_of=profile_of)
    slots = int(spec.batch_slots[0])
    for out, prompt in ((0.0, 0.0), (1.0, 1.0), (1e9, 1e9)):
        scale = auto_scale(pol, out, mean_prompt_tokens_per_s=prompt, profile_of=profile_of)
        assert 0 < scale <= 1
        assert abs(scale * slots - round(scale * slots)) < 1e-9
