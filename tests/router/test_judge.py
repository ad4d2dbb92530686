"""The sequential comparison: always-valid intervals, decisions, and its error rates on
simulated streams (seeded, so every run sees the same draws)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from router.judge import Tally, compare, radius


def test_without_requests_on_both_sides_the_decision_is_to_continue() -> None:
    v = compare(Tally(0, 0), Tally(100, 1), allowed=0.01)
    assert v.decision == "continue" and v.lower == -math.inf and v.upper == math.inf


def test_a_tally_refuses_more_bad_events_than_requests() -> None:
    with pytest.raises(ValueError, match="not within"):
        Tally().add(3, 4)


def test_the_interval_narrows_with_information() -> None:
    assert radius(1e2, 0.05) > radius(1e4, 0.05) > radius(1e6, 0.05)
    assert radius(0.0, 0.05) == math.inf


def test_a_large_clean_canary_shows_no_regression() -> None:
    v = compare(Tally(5000, 50), Tally(50000, 500), allowed=0.01)
    assert v.decision == "no_regression" and v.upper < 0.01


def test_a_canary_with_ten_percent_errors_is_a_regression() -> None:
    v = compare(Tally(400, 40), Tally(40000, 40), allowed=0.005)
    assert v.decision == "regression" and v.lower > 0.005


def test_below_min_requests_nothing_is_decided() -> None:
    v = compare(Tally(400, 40), Tally(40000, 40), allowed=0.005, min_requests=500)
    assert v.decision == "continue"


def test_alpha_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        compare(Tally(1, 0), Tally(1, 0), 0.01, alpha=1.0)


def _stream(
    rng: np.random.Generator, pc: float, ps: float, share: float, looks: int, per_look: int
) -> list[tuple[Tally, Tally]]:
    c, s, out = Tally(), Tally(), []
    for _ in range(looks):
        nc = int(rng.binomial(per_look, share))
        c = c.add(nc, int(rng.binomial(nc, pc)))
        s = s.add(per_look - nc, int(rng.binomial(per_look - nc, ps)))
        out.append((c, s))
    return out


def test_the_interval_holds_at_every_look_in_all_but_alpha_of_runs() -> None:
    rng = np.random.default_rng(7)
    runs, misses, true_diff = 300, 0, 0.02 - 0.01
    for _ in range(runs):
        looks = _stream(rng, 0.02, 0.01, 0.2, looks=60, per_look=50)
        missed = False
        for c, s in looks:
            v = compare(c, s, allowed=0.0, alpha=0.05)
            missed |= not v.lower <= true_diff <= v.upper
        misses += missed
    assert misses <= 0.05 * runs


def test_identical_versions_are_never_rolled_back_in_200_runs() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        for c, s in _stream(rng, 0.01, 0.01, 0.05, looks=300, per_look=20):
            assert compare(c, s, allowed=0.005, alpha=0.05).decision != "regression"
