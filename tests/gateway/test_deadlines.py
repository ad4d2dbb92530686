"""Attempt deadlines scale with the SLO and the request, not with a constant."""

from __future__ import annotations

import math

import pytest

from gateway.deadlines import first_byte_deadline_s
from router.policy import RoutingSettings

ROUTING = RoutingSettings(default_client_region="us")  # factor 2, floor 1 s, cap 60 s


def _deadline(stream: bool, predicted: float = 300.0, tokens: int = 16) -> float:
    return first_byte_deadline_s(
        ROUTING, stream=stream, slo_ttft_ms=800.0, slo_tpot_ms=60.0,
        predicted_ttft_ms=predicted, output_tokens=tokens,
    )  # fmt: skip


def test_a_stream_waits_twice_the_ttft_target_not_a_minute() -> None:
    assert _deadline(stream=True) == pytest.approx(1.6)


def test_a_slow_predicted_pool_gets_twice_its_own_prediction() -> None:
    assert _deadline(stream=True, predicted=2000.0) == pytest.approx(4.0)


def test_a_long_non_streaming_request_gets_time_for_every_token_it_asked_for() -> None:
    # 6000 tokens x 60 ms, plus the TTFT target, twice over: 721.6 s, far past the cap.
    assert _deadline(stream=False, tokens=6000) == pytest.approx(2 * (0.8 + 6000 * 0.06))


def test_streams_are_capped_and_every_deadline_has_a_floor() -> None:
    assert _deadline(stream=True, predicted=10**6) == pytest.approx(60.0)
    tiny = first_byte_deadline_s(ROUTING, stream=True, slo_ttft_ms=10.0, slo_tpot_ms=1.0,
                                 predicted_ttft_ms=5.0, output_tokens=0)  # fmt: skip
    assert tiny == pytest.approx(1.0)


def test_an_unknown_prediction_falls_back_to_the_target() -> None:
    assert _deadline(stream=True, predicted=math.inf) == pytest.approx(1.6)
