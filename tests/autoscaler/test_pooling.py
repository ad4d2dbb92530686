"""Risk pooling of a model's demand lines: the margin they need together."""

from __future__ import annotations

import numpy as np

from autoscaler.forecast import ForecastConfig, forecast_rate
from autoscaler.pooling import pooled_share

BUCKET_S = 60.0
CONFIG = ForecastConfig(calibration_s=7200.0, selection_s=7200.0, min_buckets=12)
HORIZON = 6


def _share(rates: list[np.ndarray]) -> float:
    margins = []
    for rate in rates:
        fc = forecast_rate(rate, 0.0, BUCKET_S, HORIZON, CONFIG)
        mean, upper = fc.peak(len(rate) * BUCKET_S + 360.0, since_s=len(rate) * BUCKET_S + 300.0)
        margins.append(upper - mean)
    end = len(rates[0]) * BUCKET_S
    return pooled_share(rates, margins, 0.0, BUCKET_S, HORIZON, (end + 300.0, end + 360.0), CONFIG)


def test_independent_lines_need_less_than_the_sum_of_their_margins() -> None:
    rng = np.random.default_rng(3)
    rates = [100.0 * np.exp(rng.normal(0.0, 0.15, 100)) for _ in range(3)]
    share = _share(rates)
    # Three equal, independent lines: about 1 / sqrt(3) of the summed margins.
    assert 0.4 < share < 0.8


def test_lines_that_move_together_keep_their_whole_margin() -> None:
    rng = np.random.default_rng(3)
    base = 100.0 * np.exp(rng.normal(0.0, 0.15, 100))
    assert _share([0.6 * base, 0.25 * base, 0.15 * base]) > 0.95


def test_one_line_is_not_pooled() -> None:
    assert pooled_share([np.ones(50)], [10.0], 0.0, BUCKET_S, HORIZON, (0.0, 60.0), CONFIG) == 1.0
