"""Unit tests of the pure engine latency model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simengine.perf_model import PROFILES, EngineProfile, get_profile

REQUIRED = {
    "h100-llama-3.1-70b",
    "a100-llama-3.1-70b",
    "h100-llama-3.1-8b",
    "a100-llama-3.1-8b",
    "l4-llama-3.1-8b",
    "a10g-llama-3.1-8b",
    "v100-llama-3.1-8b",
    "a10g-bge-large",
}


def _profile(**overrides: float) -> EngineProfile:
    fields = {
        "name": "t",
        "batch_slots": 11,
        "prefill_tokens_per_s": 1000.0,
        "tpot_base_ms": 10.0,
        "tpot_full_ms": 30.0,
        "embed_tokens_per_s": 500.0,
        "max_context": 4096,
    }
    fields.update(overrides)
    return EngineProfile(**fields)  # type: ignore[arg-type]


def test_prefill_is_linear_in_prompt_tokens() -> None:
    assert _profile().prefill_ms(250) == pytest.approx(250.0)
    assert _profile().embed_ms(250) == pytest.approx(500.0)


def test_tpot_interpolates_linearly_between_base_and_full() -> None:
    p = _profile()
    assert p.tpot_ms(1) == pytest.approx(10.0)
    assert p.tpot_ms(6) == pytest.approx(20.0)
    assert p.tpot_ms(11) == pytest.approx(30.0)


def test_tpot_clips_running_to_batch_slots() -> None:
    p = _profile()
    assert p.tpot_ms(0) == p.tpot_ms(1)
    assert p.tpot_ms(500) == p.tpot_ms(11)


def test_tpot_of_single_slot_profile_is_base() -> None:
    p = _profile(batch_slots=1, tpot_full_ms=99.0)
    assert p.tpot_ms(5) == pytest.approx(10.0)
    assert p.goodput_tokens_per_s(10.0) == pytest.approx(100.0)


def test_tpot_ms_many_matches_scalar() -> None:
    p = _profile()
    running = np.array([0, 1, 3, 11, 40])
    expected = [p.tpot_ms(int(r)) for r in running]
    np.testing.assert_allclose(p.tpot_ms_many(running), expected)


def test_service_is_prefill_plus_remaining_decode_steps() -> None:
    p = _profile()
    # First token comes out of prefill: 100 ms prefill + 9 steps at 20 ms (6 running).
    assert p.service_ms(100, 10, 6) == pytest.approx(100.0 + 9 * 20.0)
    assert p.service_ms(100, 1, 6) == pytest.approx(100.0)


def test_goodput_fills_batch_up_to_slo() -> None:
    p = _profile()
    # tpot(r) = 10 + 2 (r - 1) <= 17 -> r* = 4 at tpot 16 ms.
    assert p.max_running_within(17.0) == 4
    assert p.goodput_tokens_per_s(17.0) == pytest.approx(4 / 16.0 * 1000)


def test_goodput_on_exact_step_includes_that_step() -> None:
    assert _profile().max_running_within(16.0) == 4


def test_goodput_is_full_batch_when_slo_is_loose() -> None:
    assert _profile().goodput_tokens_per_s(1000.0) == pytest.approx(11 / 30.0 * 1000)


def test_goodput_is_zero_when_slo_below_base_tpot() -> None:
    assert _profile().goodput_tokens_per_s(9.9) == 0.0


@pytest.mark.parametrize(
    "overrides",
    [{"batch_slots": 0}, {"prefill_tokens_per_s": 0.0}, {"tpot_full_ms": 5.0}],
)
def test_profile_rejects_invalid_numbers(overrides: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        _profile(**overrides)


def test_catalogue_has_required_profiles_keyed_by_name() -> None:
    assert set(PROFILES) >= REQUIRED
    assert all(name == p.name for name, p in PROFILES.items())


def test_newer_gpu_is_faster_for_same_model() -> None:
    for model in ("llama-3.1-70b", "llama-3.1-8b"):
        h100, a100 = PROFILES[f"h100-{model}"], PROFILES[f"a100-{model}"]
        assert h100.tpot_base_ms < a100.tpot_base_ms
        assert h100.prefill_tokens_per_s > a100.prefill_tokens_per_s
        assert h100.goodput_tokens_per_s(50.0) > a100.goodput_tokens_per_s(50.0)


def test_large_model_is_slower_than_small_on_same_gpu() -> None:
    assert PROFILES["h100-llama-3.1-70b"].tpot_base_ms > PROFILES["h100-llama-3.1-8b"].tpot_base_ms


def test_goodput_is_finite_and_positive_at_loose_slo() -> None:
    for p in PROFILES.values():
        goodput = p.goodput_tokens_per_s(200.0)
        assert goodput > 0 and math.isfinite(goodput)


def test_get_profile_returns_catalogue_entry() -> None:
    assert get_profile("l4-llama-3.1-8b") is PROFILES["l4-llama-3.1-8b"]


def test_get_profile_unknown_lists_valid_names() -> None:
    with pytest.raises(KeyError, match=r"h100-llama-3\.1-70b"):
        get_profile("tpu-v9-gpt-9")
