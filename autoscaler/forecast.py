"""Demand forecast: a mean and an upper quantile per bucket ahead, with daily and weekly cycles.

The model works on the log of the rate, so that cycles and errors are relative:

- a seasonal shape ``s(t)``: a ridge regression over the whole history on Fourier terms
  of the time of day (the daily cycle) and on the day of the week (the weekly cycle:
  weekends are usually a step, not a sine);
- a local level: an exponentially weighted mean of the deseasonalised log rate, which
  follows bursts and slow drifts that no cycle explains;
- how much of the seasonal shape to trust, ``w`` in [0, 1]: chosen by rolling-origin
  error over the recent history, so a series with a weak cycle is not made worse by it;
- the mean and the median: the point forecast shifted by the mean and median of the
  model's own h-step errors over the recent history, one per step ahead;
- the upper quantile: a linear quantile regression (``autoscaler.quantreg``), one per
  step ahead, of the deseasonalised log rate h steps on from each past bucket, on that
  bucket's value, the two before it, the mean of the last hour and the mean absolute
  change over the last hour (the recent volatility). The margin so depends on the state
  of the series: wider when it is volatile, narrower where bursts tend to revert. With
  too little history (or ``conditional`` off) it is the empirical quantile of the h-step
  errors instead (split-conformal style).

Missing windows (NaN) are not demand: the seasonal fit skips them, the level holds the
last observed (deseasonalised) value through them, and no error is scored on them. A
zero is a zero (``autoscaler.gaps`` decides which zeros are really missing). Nothing in
the model has a unit: the log offset is a share of the series' own mean, so a series
times 10 gives the forecast times 10. How far the upper quantile can be trusted is
checked online against what then happened (``autoscaler.calibrate``).

Pure NumPy/SciPy; no clock reads. Times are unix seconds, rates are per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter  # type: ignore[import-untyped]

from autoscaler.quantreg import quantile_regression
from base.types import FloatArray

__all__ = ["Forecast", "ForecastConfig", "forecast_rate"]

DAY_S = 86_400.0


@dataclass(frozen=True)
class ForecastConfig:
    """Knobs of the forecast.

    - ``quantile``: the upper quantile reported (0.5-1);
    - ``daily_harmonics``: Fourier terms of the daily cycle; ``weekly``: a level per
      day of the week;
    - ``level_alpha``: EWMA weight of the newest bucket in the level (0-1];
    - ``selection_s``: the recent history whose errors choose the seasonal weight (a
      week, so that a weekend is in it);
    - ``calibration_s``: the recent history that the error shifts and the quantile
      regression learn from (long: an upper quantile is set by rare bursts);
    - ``conditional``: the upper quantile from the quantile regression (True) or from
      the unconditional errors; ``min_regression_buckets``: less history falls back
      to the unconditional errors;
    - ``min_buckets``: with less history the forecast is marked unreliable;
    - ``ridge``: shrinkage of the seasonal fit;
    - ``calibration_gain``: how fast the upper quantile's online correction moves, in
      log units per miss (``autoscaler.calibrate``; 0: off), within
      ``calibration_bounds`` (log units: -0.5 is x0.61, 1.0 is x2.7).
    """

    quantile: float = 0.95
    daily_harmonics: int = 3
    weekly: bool = True
    level_alpha: float = 0.5
    calibration_s: float = 14 * DAY_S
    conditional: bool = True
    min_regression_buckets: int = 288
    selection_s: float = 7 * DAY_S
    seasonal_weights: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    min_buckets: int = 12
    ridge: float = 1.0
    calibration_gain: float = 0.01
    calibration_bounds: tuple[float, float] = (-0.5, 1.0)


@dataclass(frozen=True, eq=False)
class Forecast:
    """Rates per second for the ``len(mean)`` buckets after ``start_s``.

    ``mean`` is the expected rate, ``median`` the point forecast that minimises absolute
    error (what MAPE scores), ``upper`` the ``quantile`` upper bound (>= both).
    ``reliable`` is False when the history was too short (or too full of missing
    windows) to calibrate: the values are then the recent observed peak, which callers
    should shrink capacity to only as a reactive scaler would, over enough recorded
    history (``autoscaler.decide``: one lead time). Every value is finite and >= 0.
    """

    start_s: float
    bucket_s: float
    mean: FloatArray
    median: FloatArray
    upper: FloatArray
    quantile: float
    seasonal_weight: float
    reliable: bool

    def peak(self, until_s: float, since_s: float | None = None) -> tuple[float, float]:
        """The highest (mean, upper) over the buckets that overlap [``since_s``,
        ``until_s``) (``since_s`` None: from the first bucket); at least one bucket, the
        one ``since_s`` falls in (clamped to the forecast)."""
        if len(self.mean) == 0:
            return 0.0, 0.0
        first = 0
        if since_s is not None:
            first = math.floor((since_s - self.start_s) / self.bucket_s)
            first = min(max(first, 0), len(self.mean) - 1)
        last = math.ceil((until_s - self.start_s) / self.bucket_s)
        last = max(first + 1, min(len(self.mean), last))
        return float(self.mean[first:last].max()), float(self.upper[first:last].max())


def _terms(centres: FloatArray, config: ForecastConfig) -> FloatArray:
    """Seasonal regressors at bucket centres (unix s): Fourier terms of the time of day,
    and one column per day of the week but the first (a weekday's level relative to it)."""
    cols: list[FloatArray] = []
    for k in range(1, config.daily_harmonics + 1):
        angle = 2.0 * np.pi * k * centres / DAY_S
        cols += [np.sin(angle), np.cos(angle)]
    if config.weekly:
        weekday = np.floor(centres / DAY_S).astype(np.int64) % 7
        cols += [(weekday == d).astype(np.float64) for d in range(1, 7)]
    if not cols:
        return np.zeros((len(centres), 0))
    return np.stack(cols, axis=1)


def _seasonal(x: FloatArray, past: FloatArray, future: FloatArray, ridge: float) -> FloatArray:
    """The fitted seasonal shape over past then future bucket centres (log units),
    fitted on the observed (finite) ``x`` only."""
    if past.shape[1] == 0:
        return np.zeros(len(past) + len(future))
    seen = np.isfinite(x)
    design = np.hstack([np.ones((len(past), 1)), past])[seen]
    penalty = ridge * int(seen.sum()) / 100.0 * np.eye(design.shape[1])
    penalty[0, 0] = 0.0  # the intercept is not shrunk
    beta = np.linalg.solve(design.T @ design + penalty, design.T @ x[seen])
    return np.concatenate([past @ beta[1:], future @ beta[1:]])


def _held(z: FloatArray) -> FloatArray:
    """``z`` with each missing (NaN) value replaced by the last observed one (before
    the first observation: the first one). Needs one observed value."""
    seen = np.isfinite(z)
    index = np.where(seen, np.arange(len(z)), -1)
    index = np.maximum.accumulate(index)
    index[index < 0] = int(np.argmax(seen))
    return z[index]


def _level(z: FloatArray, alpha: float) -> FloatArray:
    """Causal EWMA of ``z`` (finite), started at its first value."""
    filtered, _ = lfilter([alpha], [1.0, alpha - 1.0], z[1:], zi=[(1.0 - alpha) * z[0]])
    return np.concatenate([z[:1], np.asarray(filtered, dtype=np.float64)])


def _settled(alpha: float) -> int:
    """The first origin whose level rests on as many observations as the EWMA averages,
    (2 - ``alpha``) / ``alpha`` (the mean whose variance an EWMA's matches): 2 at 0.5.

    The level starts at the series' first value, so before that it is the first one
    or two buckets, not a forecast; scoring it counts a start-up transient (a partial or
    ramping first bucket) as forecast error, and on a short history that one outlier
    sets the upper quantile (it made the 95 % bound 1.5x the mean on an hour's trace)."""
    return max(math.ceil((2.0 - alpha) / alpha) - 1, 0)


def _errors(x: FloatArray, s: FloatArray, w: float, alpha: float, h: int, first: int) -> FloatArray:
    """h-step log errors of weight ``w`` for origins ``first`` .. n-1-h whose target
    was observed (a missing window scores nothing), from the level's ``_settled`` origin."""
    n = len(x)
    level = _level(_held(x - w * s[:n]), alpha)
    origins = np.arange(max(first, _settled(alpha)), n - h)
    err = x[origins + h] - (level[origins] + w * s[origins + h])
    return err[np.isfinite(err)]


_LAGS = 6  # buckets of recent history in the state: one hour at 10-minute buckets


def _state(z: FloatArray) -> FloatArray:
    """Regressors of the quantile regression per bucket t >= _LAGS (rows t - _LAGS ..):
    1, z[t], z[t-1], z[t-2], the mean of the last _LAGS values and the mean absolute
    change over them."""
    windows = np.lib.stride_tricks.sliding_window_view(z, _LAGS + 1)
    recent = windows[:, 1:]
    return np.stack(
        [
            np.ones(len(windows)),
            recent[:, -1],
            recent[:, -2],
            recent[:, -3],
            recent.mean(axis=1),
            np.abs(np.diff(windows, axis=1)).mean(axis=1),
        ],
        axis=1,
    )


def _conditional_upper(
    z: FloatArray, held: FloatArray, h: int, first: int, quantile: float
) -> float | None:
    """The ``quantile`` of z h buckets after the last, learnt from origins ``first`` ..
    len(z)-1-h whose target was observed; the state is read from ``held`` (z with
    missing values held). None if the regression has no solution."""
    state = _state(held)  # row i is bucket i + _LAGS
    origins = np.arange(max(first, _LAGS), len(z) - h)
    origins = origins[np.isfinite(z[origins + h])]
    beta = quantile_regression(state[origins - _LAGS], z[origins + h], quantile)
    if beta is None:
        return None
    return float(state[-1] @ beta)


def _unreliable(rate: FloatArray, start_s: float, bucket_s: float, horizon: int) -> Forecast:
    """The recent observed peak: of the last 12 buckets, or of all if none was seen."""
    seen = rate[np.isfinite(rate)]
    recent = rate[-12:][np.isfinite(rate[-12:])]
    peak = float(recent.max()) if len(recent) else float(seen.max()) if len(seen) else 0.0
    flat = np.full(horizon, peak)
    return Forecast(start_s, bucket_s, flat, flat.copy(), flat.copy(), 1.0, 0.0, reliable=False)


def forecast_rate(
    rate: FloatArray,
    start_s: float,
    bucket_s: float,
    horizon: int,
    config: ForecastConfig = ForecastConfig(),
) -> Forecast:
    """Forecast the ``horizon`` buckets after a history of rates.

    ``rate[i]`` is the mean rate (per second, >= 0; NaN: the bucket is missing) over
    the bucket that starts at ``start_s + i * bucket_s``; the forecast starts where the
    history ends. Raises ValueError if ``horizon`` < 1 or ``bucket_s`` <= 0.
    """
    if horizon < 1 or bucket_s <= 0:
        raise ValueError("need horizon >= 1 and bucket_s > 0")
    rate = np.asarray(rate, dtype=np.float64)
    rate = np.where(np.isfinite(rate), np.clip(rate, 0.0, None), np.nan)
    n = len(rate)
    end_s = start_s + n * bucket_s
    calib = max(int(config.calibration_s / bucket_s), 1)
    seen = rate[np.isfinite(rate)]
    if len(seen) < config.min_buckets or n - horizon < 2:
        return _unreliable(rate, end_s, bucket_s, horizon)
    # A share of the series' own mean, so the model has no unit; the floor only keeps
    # an all-zero series finite.
    offset = max(0.01 * float(seen.mean()), 1e-12)
    x = np.log(rate + offset)
    centres = np.asarray(start_s + (np.arange(n + horizon) + 0.5) * bucket_s, dtype=np.float64)
    terms = _terms(centres, config)
    s = _seasonal(x, terms[:n], terms[n:], config.ridge)
    first = n - calib - horizon
    alpha = config.level_alpha
    chosen_from = n - max(int(config.selection_s / bucket_s), 1) - horizon
    errors = {
        w: [_errors(x, s, w, alpha, h, chosen_from) for h in range(1, horizon + 1)]
        for w in config.seasonal_weights
    }
    if any(len(e) == 0 for per_h in errors.values() for e in per_h):
        return _unreliable(rate, end_s, bucket_s, horizon)  # nothing observed to score
    scores = [float(np.mean([np.abs(e).mean() for e in errors[w]])) for w in errors]
    w = config.seasonal_weights[int(np.argmin(scores))]
    z = x - w * s[:n]
    held = _held(z)
    point = _level(held, alpha)[-1] + w * s[n:]
    # Each step's error distribution turns the log-space point into a mean (smearing)
    # and a median; the upper quantile is a shift too, so that it is clipped alike.
    shifts = np.empty((3, horizon))
    observed = int(np.isfinite(z[max(first, _LAGS) :]).sum())
    conditional = config.conditional and observed - horizon >= config.min_regression_buckets
    for h in range(1, horizon + 1):
        err = _errors(x, s, w, alpha, h, first)
        if len(err) < config.min_buckets:
            return _unreliable(rate, end_s, bucket_s, horizon)
        upper = _conditional_upper(z, held, h, first, config.quantile) if conditional else None
        shifts[:, h - 1] = (
            math.log(float(np.mean(np.exp(err)))),
            float(np.median(err)),
            float(np.quantile(err, config.quantile))
            if upper is None
            else upper + w * s[n + h - 1] - point[h - 1],
        )
    values = np.exp(point + shifts) - offset
    if not np.isfinite(values).all():
        return _unreliable(rate, end_s, bucket_s, horizon)
    mean, median, upper = np.where(values > 1e-9 * offset, values, 0.0)
    upper = np.maximum(upper, np.maximum(mean, median))
    return Forecast(end_s, bucket_s, mean, median, upper, config.quantile, w, reliable=True)
