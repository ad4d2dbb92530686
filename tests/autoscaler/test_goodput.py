"""Goodput profiles from the policy and their online correction (pure functions)."""

from __future__ import annotations

import pytest

from autoscaler.goodput import (
    GoodputObservation,
    goodput_tokens_per_s,
    observed_correction,
    slot_load,
    update_correction,
)
from router.policy import GoodputProfile, SLOClass
from simengine.perf_model import PROFILES

# The demo fleet's A10G Llama-8B profile, derived from the engine at TPOT 60 ms.
A10G = GoodputProfile(tokens_per_s=533, prefill_tokens_per_s=2200, max_concurrency=32, tpot_ms=30)


def _slo(tpot_ms: float) -> SLOClass:
    return SLOClass(ttft_ms=1000.0, tpot_ms=tpot_ms)


def test_goodput_at_a_tighter_slo_matches_the_engines_own_model() -> None:
    engine = PROFILES["a10g-llama-3.1-8b"]
    assert goodput_tokens_per_s(A10G, _slo(40.0)) == pytest.approx(
        engine.goodput_tokens_per_s(40.0), rel=0.01
    )


def test_no_goodput_when_even_one_sequence_misses_the_slo() -> None:
    assert goodput_tokens_per_s(A10G, _slo(25.0)) == 0.0


def test_a_slower_measured_tpot_gives_a_correction_above_one() -> None:
    # 16 running per replica: the profile predicts about 44.5 ms.
    seen = observed_correction(A10G, _slo(60.0), GoodputObservation(55.0, 200.0, 32.0, 2))
    assert seen == pytest.approx(55.0 / 44.52, rel=0.01)


def test_a_measurement_taken_while_the_slo_was_missed_is_ignored() -> None:
    assert observed_correction(A10G, _slo(60.0), GoodputObservation(70.0, 200.0, 32.0, 2)) is None


def test_a_measurement_at_light_load_is_ignored() -> None:
    assert observed_correction(A10G, _slo(60.0), GoodputObservation(35.0, 200.0, 1.0, 2)) is None


def test_a_correction_lowers_goodput() -> None:
    assert goodput_tokens_per_s(A10G, _slo(60.0), 1.3) < 0.8 * goodput_tokens_per_s(
        A10G, _slo(60.0)
    )


def test_corrections_are_smoothed_and_bounded() -> None:
    factor = 1.0
    for _ in range(50):
        factor = update_correction(factor, 10.0)
    assert factor == 2.0
    assert update_correction(1.0, 1.5, alpha=0.5) == pytest.approx(1.5**0.5)


def test_an_embedding_pool_is_measured_in_input_tokens() -> None:
    embed = GoodputProfile(
        tokens_per_s=30000, prefill_tokens_per_s=30000, max_concurrency=64, tpot_ms=1
    )
    assert goodput_tokens_per_s(embed, _slo(60.0), embedding=True) == 30000


# The 70B A100 replica as the simulator slices it to 1/32: 8 slots, 25-75 ms TPOT.
A100_SLICE = GoodputProfile(
    tokens_per_s=3413 / 32, prefill_tokens_per_s=8000, max_concurrency=8, tpot_ms=25
)


def test_slot_load_counts_the_prefill_and_the_first_token_it_emits() -> None:
    # TPOT at the full 8 slots is 75 ms: 2,048 prompt tokens take 256 ms of the slot,
    # then 27 decode steps give the other tokens.
    load = slot_load(A100_SLICE, _slo(100.0), 2048.0, 28.0)
    assert load == pytest.approx((256.0 + 27 * 75.0) / (28 * 75.0), rel=1e-3)
    assert load > 1.08


def test_slot_load_of_a_conversation_mix_is_about_one() -> None:
    assert slot_load(A100_SLICE, _slo(100.0), 1155.0, 211.0) == pytest.approx(1.0, abs=0.01)


def test_slot_load_is_one_when_the_mix_is_unknown() -> None:
    assert slot_load(A100_SLICE, _slo(100.0), 1155.0, 0.0) == 1.0
    assert slot_load(A100_SLICE, _slo(20.0), 1155.0, 211.0) == 1.0


def test_a_slower_replica_loads_less_per_token_of_prefill() -> None:
    # Corrected 1.2x slower, the SLO's batch shrinks and each decode step takes longer,
    # so the same prefill is a smaller share of a token's slot time.
    assert slot_load(A100_SLICE, _slo(100.0), 2048.0, 28.0, 1.2) < slot_load(
        A100_SLICE, _slo(100.0), 2048.0, 28.0
    )
