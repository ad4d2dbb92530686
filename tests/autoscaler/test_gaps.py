"""Missing windows: a zero amid traffic is a gap in telemetry, a zero amid quiet is idle."""

from __future__ import annotations

import numpy as np

from autoscaler.gaps import missing_windows

BUCKET = 600.0


def test_a_zero_run_amid_traffic_is_missing() -> None:
    counts = np.full(30, 5000.0)
    counts[10:14] = 0.0
    assert np.flatnonzero(missing_windows(counts, BUCKET)).tolist() == [10, 11, 12, 13]


def test_a_zero_amid_a_trickle_is_idle() -> None:
    counts = np.asarray([2.0, 1.0, 0.0, 3.0, 0.0, 0.0, 1.0])  # Poisson zeros are likely here
    assert not missing_windows(counts, BUCKET).any()


def test_a_zero_between_busy_and_quiet_sides_follows_the_quiet_side() -> None:
    counts = np.asarray([900.0, 900.0, 900.0, 0.0, 3.0, 2.0, 4.0])
    assert not missing_windows(counts, BUCKET).any()


def test_a_trailing_run_is_missing_until_it_has_lasted_long_enough_to_believe() -> None:
    counts = np.concatenate([np.full(20, 5000.0), np.zeros(5)])
    assert missing_windows(counts, BUCKET)[20:].all()
    assert not missing_windows(counts, BUCKET, max_trailing_s=4 * BUCKET)[20:].any()


def test_nan_is_always_missing_and_an_all_zero_series_is_idle() -> None:
    assert missing_windows(np.asarray([1.0, np.nan, 2.0]), BUCKET).tolist() == [False, True, False]
    assert not missing_windows(np.zeros(10), BUCKET).any()
