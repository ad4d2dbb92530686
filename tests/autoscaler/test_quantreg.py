"""Linear quantile regression against known answers."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.quantreg import quantile_regression


def test_an_intercept_alone_is_the_sample_quantile() -> None:
    y = np.arange(1.0, 101.0)
    beta = quantile_regression(np.ones((100, 1)), y, 0.9)
    assert beta is not None
    # Any value between the 90th and 91st order statistics minimises the pinball loss.
    assert 90.0 <= beta[0] <= 91.0


def test_a_spread_that_grows_with_x_gives_a_steeper_upper_quantile() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(1.0, 10.0, 4000)
    y = 2.0 * x + x * rng.standard_normal(4000)  # the 0.9 quantile is (2 + 1.2816) x
    features = np.stack([np.ones_like(x), x], axis=1)
    beta = quantile_regression(features, y, 0.9)
    assert beta is not None
    assert abs(beta[0]) < 0.5
    assert beta[1] == pytest.approx(3.28, abs=0.15)
    assert float(np.mean(y <= features @ beta)) == pytest.approx(0.9, abs=0.01)


def test_no_samples_or_bad_values_have_no_answer_and_bad_arguments_raise() -> None:
    assert quantile_regression(np.ones((0, 1)), np.zeros(0), 0.5) is None
    assert quantile_regression(np.ones((2, 1)), np.asarray([1.0, np.nan]), 0.5) is None
    with pytest.raises(ValueError):
        quantile_regression(np.ones((2, 1)), np.zeros(2), 1.0)
    with pytest.raises(ValueError):
        quantile_regression(np.ones((2, 1)), np.zeros(3), 0.5)
