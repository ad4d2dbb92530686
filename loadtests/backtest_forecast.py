"""The back-test's forecast table: error and coverage of this forecast next to baselines.

Errors are WAPE and MASE (``backtest_series``), never MAPE: a window with no demand
makes a percentage error infinite, and a window nobody reported is no error at all.
Missing windows (``autoscaler.gaps``) are withheld from every forecaster as NaN (the
baselines hold their last observed value) and score nothing.
"""

from __future__ import annotations

import numpy as np

from autoscaler.calibrate import LineCalibration
from autoscaler.forecast import ForecastConfig, forecast_rate
from autoscaler.gaps import missing_windows
from base.types import FloatArray
from loadtests.backtest_series import WINDOW_S, mase, wape

T0 = 1_700_438_400.0  # a Monday 00:00 UTC; the series' own clock starts at 0
WARMUP = 144  # one day of windows


def calibrated(upper: FloatArray, actual: FloatArray, h: int, config: ForecastConfig) -> FloatArray:
    """``upper`` (per origin, for the window h - 1 after it) as the online calibration
    (``autoscaler.calibrate``) corrects it: an outcome is scored once it is known, h
    origins later."""
    cal = LineCalibration()
    out = np.empty(len(upper))
    for j in range(len(upper)):
        if j >= h:
            cal = _score(cal, float(out[j - h]), float(actual[j - h]), config)
        out[j] = upper[j] * cal.factor
    return out


def _score(
    cal: LineCalibration, issued: float, actual: float, config: ForecastConfig
) -> LineCalibration:
    """``cal`` after the outcome ``actual`` of the bound ``issued`` (NaN: missing)."""
    return cal.issue(0.0, 1.0, issued).settle(
        np.asarray([actual]), 0.0, 1.0, config.quantile, config.calibration_gain,
        config.calibration_bounds,
    )  # fmt: skip


def forecast_rows(
    observed: FloatArray, truth: FloatArray, quantile: float
) -> list[tuple[str, ...]]:
    """WAPE and MASE of the point forecast, coverage of the upper quantile and mean
    upper/actual, at 10 and 20 minutes ahead, over days 2 on: this forecast (its upper
    from the quantile regression, as calibrated online, and from its unconditional
    errors), and two baselines with a conformal upper band (the quantile of each
    method's own past log errors over 14 days). ``observed``: req/s as telemetry shows
    it; ``truth``: the req/s scored against (NaN: unknown)."""
    rate = np.where(missing_windows(observed * WINDOW_S, WINDOW_S), np.nan, observed)
    held = rate.copy()
    for i in range(1, len(held)):  # the baselines' view: the last observed value
        if not np.isfinite(held[i]):
            held[i] = held[i - 1]
    n = len(rate)
    calib = int(14 * 86_400 / WINDOW_S)
    config = ForecastConfig(quantile=quantile)
    rows: list[tuple[str, ...]] = []
    for h in (1, 2):
        origins = np.arange(WARMUP, n - h + 1)  # data up to origin - 1 is known
        actual = truth[origins + h - 1]
        points: dict[str, FloatArray] = {}
        uppers: dict[str, FloatArray] = {}
        ours = [forecast_rate(rate[:i], T0, WINDOW_S, h, config) for i in origins]
        points["this forecast"] = np.asarray([f.median[h - 1] for f in ours])
        raw = np.asarray([f.upper[h - 1] for f in ours])
        name = "this forecast, calibrated online"
        points[name] = points["this forecast"]
        uppers[name] = calibrated(raw, actual, h, config)
        uppers["this forecast"] = raw
        flat = ForecastConfig(quantile=quantile, conditional=False)
        name = "this forecast, unconditional upper"
        points[name] = points["this forecast"]
        uppers[name] = np.asarray(
            [forecast_rate(rate[:i], T0, WINDOW_S, h, flat).upper[h - 1] for i in origins]
        )
        points["last value"] = held[origins - 1]
        points["moving average (1 h)"] = np.asarray([np.nanmean(held[i - 6 : i]) for i in origins])
        for name in ("last value", "moving average (1 h)"):
            uppers[name] = _conformal(points[name], actual, h, calib, quantile)
        for name, point in points.items():
            upper = uppers[name]
            ok = np.isfinite(upper) & np.isfinite(actual) & (actual > 0)
            rows.append((
                f"{int(h * WINDOW_S / 60)} min", name,
                f"{wape(point, actual):.1f} %", f"{mase(point, actual, truth):.2f}",
                f"{100 * np.mean(upper[ok] >= actual[ok]):.2f} %",
                f"{np.mean(upper[ok] / actual[ok]):.2f}",
            ))  # fmt: skip
    return rows


def _conformal(
    point: FloatArray, actual: FloatArray, h: int, calib: int, quantile: float
) -> FloatArray:
    """An upper band: ``point`` times the ``quantile`` of its own past log errors
    (known at each origin); inf until 20 are known."""
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.log(actual) - np.log(point)
    upper = np.full(len(point), np.inf)
    for j in range(len(point)):
        seen = err[: max(j - h + 1, 0)][-calib:]
        seen = seen[np.isfinite(seen)]
        if len(seen) >= 20:
            upper[j] = point[j] * float(np.exp(np.quantile(seen, quantile)))
    return upper
