"""Online calibration: the upper bound's misses settle at 1 - quantile, whatever the model."""

from __future__ import annotations

import numpy as np

from autoscaler.calibrate import MAX_PENDING, LineCalibration

Q = 0.99
GAIN = 0.05
BOUNDS = (-0.5, 1.0)


def _run(model_upper: float, outcomes: np.ndarray) -> tuple[LineCalibration, np.ndarray]:
    """Issue ``model_upper`` x the correction for each 1 s bucket, score it a step
    later; return the final calibration and whether each bound was missed."""
    cal = LineCalibration()
    missed = np.zeros(len(outcomes), dtype=bool)
    for t, actual in enumerate(outcomes):
        issued = model_upper * cal.factor
        cal = cal.issue(float(t), float(t + 1), issued)
        cal = cal.settle(outcomes[: t + 1], 0.0, 1.0, Q, GAIN, BOUNDS)
        missed[t] = actual > issued
    return cal, missed


def test_a_too_narrow_upper_bound_is_widened_until_it_covers_its_share() -> None:
    rng = np.random.default_rng(1)
    outcomes = 100.0 * np.exp(0.2 * rng.standard_normal(6000))
    narrow = 100.0 * np.exp(0.2 * 1.28)  # the 90 % quantile, sold as 99 %
    cal, missed = _run(narrow, outcomes)
    assert cal.shift > 0.15
    assert float(missed[2000:].mean()) < 0.02  # not the 10 % it started at
    assert cal.scored == len(outcomes) and cal.missed == int(missed.sum())


def test_a_too_wide_upper_bound_is_narrowed() -> None:
    rng = np.random.default_rng(2)
    outcomes = 100.0 * np.exp(0.05 * rng.standard_normal(3000))
    cal, missed = _run(200.0, outcomes)
    assert cal.shift < -0.3
    assert float(missed.mean()) < 0.02


def test_a_missing_outcome_scores_nothing() -> None:
    cal = LineCalibration().issue(0.0, 1.0, 10.0)
    after = cal.settle(np.asarray([np.nan]), 0.0, 1.0, Q, GAIN, BOUNDS)
    assert (after.shift, after.scored, after.pending) == (0.0, 0, [])


def test_a_bound_waits_until_its_span_is_in_the_history() -> None:
    cal = LineCalibration().issue(1.0, 2.0, 10.0)
    waiting = cal.settle(np.asarray([50.0]), 0.0, 1.0, Q, GAIN, BOUNDS)
    assert waiting.pending == cal.pending and waiting.scored == 0
    done = waiting.settle(np.asarray([50.0, 50.0]), 0.0, 1.0, Q, GAIN, BOUNDS)
    assert done.missed == 1 and done.shift == GAIN * Q


def test_pending_bounds_are_capped() -> None:
    cal = LineCalibration()
    for t in range(MAX_PENDING + 10):
        cal = cal.issue(float(t), float(t + 1), 1.0)
    assert len(cal.pending) == MAX_PENDING and cal.pending[0][0] == 10.0
