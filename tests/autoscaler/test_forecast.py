"""The forecast: cycles, quantiles, and what it does with too little history."""

from __future__ import annotations

import numpy as np

from autoscaler.forecast import ForecastConfig, forecast_rate
from tests.autoscaler.conftest import T0

DAY = 86_400.0
BUCKET = 600.0
PER_DAY = int(DAY / BUCKET)


def _daily(days: int, rng: np.random.Generator, noise: float = 0.05) -> np.ndarray:
    """A rate with a strong daily cycle (x3 from night to day) and a little noise."""
    t = np.arange(days * PER_DAY) * BUCKET
    cycle = 100.0 * (2.0 + np.sin(2 * np.pi * t / DAY))
    return np.asarray(cycle * np.exp(noise * rng.standard_normal(len(t))), dtype=np.float64)


def _errors(rate: np.ndarray, horizon: int, config: ForecastConfig) -> tuple[float, float]:
    """Mean absolute % error of the median at ``horizon`` steps, and of the naive
    last value, over 60 origins in the last days."""
    ours, naive = [], []
    for end in range(len(rate) - 60 - horizon, len(rate) - horizon):
        fc = forecast_rate(rate[:end], T0, BUCKET, horizon, config)
        actual = rate[end + horizon - 1]
        ours.append(abs(fc.median[-1] - actual) / actual)
        naive.append(abs(rate[end - 1] - actual) / actual)
    return float(np.mean(ours)), float(np.mean(naive))


def test_a_daily_cycle_is_learnt_and_beats_the_last_value_a_few_hours_ahead() -> None:
    rate = _daily(7, np.random.default_rng(1))
    ours, naive = _errors(rate, horizon=18, config=ForecastConfig())
    assert ours < 0.5 * naive


def test_a_weekly_cycle_is_learnt_across_a_weekend() -> None:
    # Weekdays at 200/s, weekends at 60/s; forecast Saturday from Friday evening.
    rng = np.random.default_rng(2)
    days = [60.0 if d % 7 in (5, 6) else 200.0 for d in range(14)]
    rate = np.repeat(days, PER_DAY) * np.exp(0.05 * rng.standard_normal(14 * PER_DAY))
    friday_evening = 11 * PER_DAY + PER_DAY - 12  # two hours before Saturday of week 2
    fc = forecast_rate(rate[:friday_evening], T0, BUCKET, 36)
    assert fc.seasonal_weight > 0
    assert fc.median[-1] < 0.6 * rate[friday_evening - 1]


def test_the_upper_quantile_covers_about_its_share_of_outcomes() -> None:
    rng = np.random.default_rng(3)
    rate = 100.0 * np.exp(0.2 * rng.standard_normal(4 * PER_DAY))
    covered = [
        forecast_rate(rate[:end], T0, BUCKET, 1).upper[0] >= rate[end]
        for end in range(2 * PER_DAY, 4 * PER_DAY - 1)
    ]
    assert 0.88 <= float(np.mean(covered)) <= 0.99


def test_the_upper_quantile_widens_with_the_horizon() -> None:
    rng = np.random.default_rng(4)
    walk = 100.0 * np.exp(np.cumsum(0.05 * rng.standard_normal(3 * PER_DAY)))
    fc = forecast_rate(walk, T0, BUCKET, 6)
    spread = fc.upper / fc.median
    assert spread[-1] > spread[0]


def test_too_short_a_history_is_unreliable_and_forecasts_its_recent_peak() -> None:
    fc = forecast_rate(np.asarray([5.0, 9.0, 7.0]), T0, BUCKET, 3)
    assert fc.reliable is False
    assert list(fc.upper) == [9.0, 9.0, 9.0]


def test_no_demand_forecasts_none() -> None:
    fc = forecast_rate(np.zeros(PER_DAY), T0, BUCKET, 2)
    assert fc.reliable and float(fc.upper.max()) == 0.0


def test_peak_takes_the_highest_bucket_before_the_deadline() -> None:
    rate = np.linspace(50.0, 150.0, 2 * PER_DAY)
    fc = forecast_rate(rate, T0, BUCKET, 4)
    mean, upper = fc.peak(fc.start_s + 2 * BUCKET)
    assert (mean, upper) == (float(fc.mean[:2].max()), float(fc.upper[:2].max()))


def test_peak_since_takes_only_the_buckets_from_then() -> None:
    rate = np.linspace(50.0, 150.0, 2 * PER_DAY)
    fc = forecast_rate(rate, T0, BUCKET, 4)
    mean, upper = fc.peak(fc.start_s + 3 * BUCKET, since_s=fc.start_s + BUCKET)
    assert (mean, upper) == (float(fc.mean[1:3].max()), float(fc.upper[1:3].max()))
    # A span inside one bucket still takes that bucket.
    assert fc.peak(fc.start_s + 2.5 * BUCKET, since_s=fc.start_s + 2.2 * BUCKET) == (
        float(fc.mean[2]),
        float(fc.upper[2]),
    )


def _volatile_then_calm(rng: np.random.Generator, days: int) -> np.ndarray:
    """Log-normal noise whose spread switches every 6 hours between 0.05 and 0.4."""
    n = days * PER_DAY
    regime = (np.arange(n) // 36) % 2 == 0
    sigma = np.where(regime, 0.4, 0.05)
    return np.asarray(100.0 * np.exp(sigma * rng.standard_normal(n)), dtype=np.float64)


def test_the_conditional_quantile_is_narrow_when_calm_and_wide_when_volatile() -> None:
    rate = _volatile_then_calm(np.random.default_rng(5), 6)
    calm_end = 5 * PER_DAY + 36 + 30  # 30 buckets into a calm regime
    wild_end = 5 * PER_DAY + 30  # 30 buckets into a volatile one
    calm = forecast_rate(rate[:calm_end], T0, BUCKET, 1, ForecastConfig(quantile=0.9))
    wild = forecast_rate(rate[:wild_end], T0, BUCKET, 1, ForecastConfig(quantile=0.9))
    flat = forecast_rate(
        rate[:calm_end], T0, BUCKET, 1, ForecastConfig(quantile=0.9, conditional=False)
    )
    assert calm.upper[0] / calm.median[0] < 1.3 < wild.upper[0] / wild.median[0]
    # The unconditional quantile pays the volatile regime's margin in the calm one.
    assert flat.upper[0] / flat.median[0] > 1.3


def test_the_conditional_quantile_covers_about_its_share_across_regimes() -> None:
    rate = _volatile_then_calm(np.random.default_rng(6), 5)
    ends = range(3 * PER_DAY, 5 * PER_DAY - 1, 3)
    config = ForecastConfig(quantile=0.9)
    covered = [
        forecast_rate(rate[:end], T0, BUCKET, 1, config).upper[0] >= rate[end] for end in ends
    ]
    assert 0.82 <= float(np.mean(covered)) <= 0.97


def test_missing_windows_are_not_a_demand_drop() -> None:
    rate = _daily(4, np.random.default_rng(7))
    gapped = rate.copy()
    gapped[-9:] = np.nan  # the last 1.5 h never reported
    clean = forecast_rate(rate[:-9], T0, BUCKET, 12)
    fc = forecast_rate(gapped, T0, BUCKET, 3)
    assert fc.reliable
    # It forecasts the windows after the gap as the clean history would, not zero.
    assert np.allclose(fc.median, clean.median[-3:], rtol=0.2)
    assert float(fc.median.min()) > 0.5 * float(np.nanmin(rate[-9:]))


def test_gaps_and_zero_windows_give_finite_forecasts() -> None:
    rng = np.random.default_rng(8)
    rate = _daily(3, rng)
    rate[rng.choice(len(rate), 40, replace=False)] = np.nan
    rate[rng.choice(len(rate), 40, replace=False)] = 0.0
    for r in (rate, np.where(rng.random(len(rate)) < 0.7, 0.0, 1.0), np.zeros(len(rate))):
        fc = forecast_rate(r, T0, BUCKET, 3)
        for values in (fc.mean, fc.median, fc.upper):
            assert np.isfinite(values).all() and (values >= 0).all()


def test_a_history_that_is_mostly_missing_is_unreliable_and_keeps_its_seen_peak() -> None:
    rate = np.full(PER_DAY, np.nan)
    rate[:5] = [3.0, 8.0, 4.0, 5.0, 6.0]
    fc = forecast_rate(rate, T0, BUCKET, 2)
    assert not fc.reliable and fc.upper.tolist() == [8.0, 8.0]


def test_the_forecast_has_no_unit_a_scaled_series_gives_a_scaled_forecast() -> None:
    rate = _daily(3, np.random.default_rng(9), noise=0.2)
    base = forecast_rate(rate, T0, BUCKET, 2)
    for factor in (0.1, 10.0):
        fc = forecast_rate(rate * factor, T0, BUCKET, 2)
        for ours, theirs in ((fc.median, base.median), (fc.upper, base.upper)):
            assert np.allclose(ours, theirs * factor, rtol=1e-4)


def test_a_level_shift_is_followed_within_hours() -> None:
    rate = _daily(5, np.random.default_rng(10))
    rate[4 * PER_DAY :] *= 2.0  # demand doubles at the start of day 5
    end = 4 * PER_DAY + 12  # two hours later
    fc = forecast_rate(rate[:end], T0, BUCKET, 2)
    assert np.allclose(fc.median, rate[end : end + 2], rtol=0.25)


def test_a_low_first_bucket_does_not_set_the_upper_bound() -> None:
    # An hour of steady demand with 5 % noise whose first bucket caught only half a
    # minute: the level starts there, and scored as a forecast that start-up error
    # would be the largest error of the hour.
    rng = np.random.default_rng(5)
    rate = 100.0 * np.exp(rng.normal(0.0, 0.05, 30))
    rate[0] = 50.0
    config = ForecastConfig(calibration_s=7200.0, selection_s=7200.0, min_buckets=12)
    fc = forecast_rate(rate, 0.0, 60.0, 6, config)
    assert fc.reliable
    assert float(fc.upper.max()) < 1.25 * float(fc.mean.max())
