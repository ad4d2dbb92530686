"""The margin screen (loadtests/margin_floor.py) on series whose answer is known."""

from __future__ import annotations

import math

import numpy as np

from loadtests.margin_floor import FEATURES, margins

SIGMA = 0.1
Z99 = 2.3263  # the standard normal's 99 % quantile


def test_white_noise_needs_its_own_quantile_as_margin() -> None:
    # A flat demand times iid log-normal noise: nothing in the past predicts the next
    # window, so the best 99 % bound is the noise's own quantile over its mean.
    rng = np.random.default_rng(5)
    rate = 100.0 * np.exp(SIGMA * rng.standard_normal(14 * 144))
    expected = math.exp(Z99 * SIGMA) / math.exp(SIGMA**2 / 2)
    for name, features in FEATURES.items():
        coverage, raw, fair = margins(rate, rate.copy(), features, 0.99, 8)
        assert 0.97 <= coverage <= 1.0, name
        assert abs(fair - expected) < 0.04, (name, fair, expected)
        assert raw > 1.0


def test_a_predictable_series_needs_almost_no_margin() -> None:
    # A pure daily cycle without noise is known two windows ahead from the windows before.
    t = np.arange(14 * 144)
    rate = 100.0 * np.exp(0.3 * np.sin(2 * np.pi * (t + 0.5) / 144))
    _, _, fair = margins(rate, rate.copy(), FEATURES["+ time of day"], 0.99, 8)
    assert fair < 1.02


def test_unknown_windows_are_not_scored() -> None:
    rng = np.random.default_rng(6)
    rate = 100.0 * np.exp(SIGMA * rng.standard_normal(14 * 144))
    truth = rate.copy()
    truth[9 * 144 : 10 * 144] = np.nan  # a day nobody reported
    observed = np.where(np.isfinite(truth), rate, 0.0)
    coverage, raw, fair = margins(observed, truth, FEATURES["the autoscaler's"], 0.99, 8)
    assert all(map(math.isfinite, (coverage, raw, fair)))
