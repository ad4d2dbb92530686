"""The autoscaler's state is JSON: it survives a round trip, and bad JSON starts afresh."""

from __future__ import annotations

import pytest

from autoscaler.state import ScalerState


def test_state_survives_a_json_round_trip() -> None:
    state = ScalerState(
        recommendations={"p": [(1.0, 3)]}, last_up_s={"p": 2.0}, corrections={"p": 1.2},
        blocked_until_s={"p": 9.0}, blocked_reason={"p": "stockout"}, replacing={"p": ["i-1"]},
    )  # fmt: skip
    assert ScalerState.from_json(state.to_json()) == state


@pytest.mark.parametrize("text", [None, "", "{not json", '{"corrections": "x"}'])
def test_missing_or_unreadable_state_starts_afresh(text: str | None) -> None:
    assert ScalerState.from_json(text) == ScalerState()
