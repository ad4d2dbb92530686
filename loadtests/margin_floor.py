"""How much margin a 99 % upper bound of the demand 20 minutes ahead needs, whatever
the forecaster: a screen of the back-test's series and variants with hindsight.

    .venv/bin/python loadtests/margin_floor.py [--series FILE] [--seed 21]
        [--quantile 0.99] [--test-from-day 8]

The back-test (``backtest_autoscaler.py``) orders capacity for the upper quantile of
the window after next; what that costs above the oracle is mostly the margin, upper
over actual demand. This script asks how small the margin can be for any linear
quantile forecaster of the log rate, given more help than the autoscaler has:

- a linear quantile regression (``autoscaler.quantreg``) of the log rate two windows
  on, refitted each day on every earlier window (expanding, out of sample), with
  feature sets from the autoscaler's own (last three values, the hour's mean and
  mean absolute change) to richer ones (the hour's maximum, time-of-day terms, longer
  means);
- then, in hindsight, each set's bounds scaled by the one factor that makes them cover
  exactly ``--quantile`` of the test windows (what no online method knows).

It prints, per variant and feature set, the raw coverage and margin (sum of upper
bounds over sum of actual rates, days ``--test-from-day`` on) and the margin at the
hindsight factor. Windows whose demand is unknown are not scored. Prints numbers only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

# The forecast's own state and gap holding, so that "the autoscaler's" features are its.
from autoscaler.forecast import _LAGS, _held, _state
from autoscaler.quantreg import quantile_regression
from base.types import FloatArray, IntArray

# ``python loadtests/margin_floor.py`` puts this directory, not the project, on sys.path.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.backtest_autoscaler import table  # noqa: E402
from loadtests.backtest_series import DEFAULT_SERIES, VARIANT_SEED, read_series, variants  # noqa: E402

DAY = 144  # 600 s windows
AHEAD = 2  # the window after next: what the back-test orders for
Features = Callable[[FloatArray, IntArray], FloatArray]


def _own(x: FloatArray, t: IntArray) -> FloatArray:
    """The autoscaler's own regressors at windows ``t`` (``autoscaler.forecast._state``:
    the last three values, the hour's mean and mean absolute change), one row each."""
    return np.asarray(_state(x)[t - _LAGS], dtype=np.float64)


def _hour_max(x: FloatArray, t: IntArray) -> FloatArray:
    hour = np.lib.stride_tricks.sliding_window_view(x, _LAGS + 1).max(axis=1)
    return np.asarray(hour[t - _LAGS, None], dtype=np.float64)


def _time_of_day(_: FloatArray, t: IntArray) -> FloatArray:
    a = 2.0 * np.pi * ((t + AHEAD) % DAY + 0.5) / DAY
    return np.stack([np.sin(a), np.cos(a), np.sin(2 * a), np.cos(2 * a)], axis=1)


def _means(x: FloatArray, t: IntArray) -> FloatArray:
    """The means of the last 6 h and 24 h (windows ``t`` - 36 .. ``t`` and ``t`` - 144 ..
    ``t``; every origin has a day of history before it)."""
    total = np.concatenate([[0.0], np.cumsum(x)])
    return np.stack([(total[t + 1] - total[t - n]) / (n + 1) for n in (36, DAY)], axis=1)


def _joined(*parts: Features) -> Features:
    return lambda x, t: np.hstack([part(x, t) for part in parts])


FEATURES: dict[str, Features] = {
    "the autoscaler's": _own,
    "+ hour's max": _joined(_own, _hour_max),
    "+ time of day": _joined(_own, _time_of_day),
    "+ max, time of day, 6 h and 24 h means": _joined(_own, _hour_max, _time_of_day, _means),
}


def margins(
    rate: FloatArray, truth: FloatArray, features: Features, quantile: float, test_from_day: int
) -> tuple[float, float, float]:
    """(coverage, margin, margin at the hindsight factor) of one feature set on one
    series: ``rate`` as observed (gaps held at the last value seen, as the forecast
    holds them), ``truth`` the demand scored (NaN: not scored)."""
    seen = np.where(np.isfinite(truth) & (rate > 0), rate, np.nan)
    x = np.log(_held(seen))
    origins = np.arange(DAY, len(x) - AHEAD)
    design = features(x, origins)
    target = np.log(np.maximum(np.nan_to_num(truth[origins + AHEAD], nan=0.0), 1e-9))
    scored = np.isfinite(truth[origins + AHEAD])
    upper = np.full(len(origins), np.nan)
    days = len(x) // DAY
    for day in range(test_from_day - 1, days):
        fit = scored & (origins + AHEAD < day * DAY)
        test = (origins >= day * DAY) & (origins < (day + 1) * DAY)
        beta = quantile_regression(design[fit], target[fit], quantile)
        if beta is not None:
            upper[test] = design[test] @ beta
    ok = scored & np.isfinite(upper)
    up, actual = np.exp(upper[ok]), np.exp(target[ok])
    coverage = float(np.mean(up >= actual))
    # The one factor that makes the bounds cover exactly ``quantile`` of the windows.
    factor = float(np.quantile(actual / up, quantile))
    return coverage, float(up.sum() / actual.sum()), float((up * factor).sum() / actual.sum())


def main() -> None:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=Path, default=DEFAULT_SERIES)
    parser.add_argument("--seed", type=int, default=VARIANT_SEED)
    parser.add_argument("--quantile", type=float, default=0.99)
    parser.add_argument("--test-from-day", type=int, default=8)
    args = parser.parse_args()
    base = read_series(args.series)
    print(
        f"series {args.series}; variants seed {args.seed}; q{100 * args.quantile:g}, "
        f"{AHEAD} windows ahead, scored from day {args.test_from_day}; margin = sum of "
        "upper bounds / sum of actual rates (1.50 = 50 % above the demand)\n"
    )
    head = ("variant", "features", "covers", "margin", "margin at hindsight factor")
    rows = []
    for series in variants(base, args.seed):
        for name, features in FEATURES.items():
            cov, raw, fair = margins(
                series.observed, series.truth, features, args.quantile, args.test_from_day
            )
            rows.append((series.name, name, f"{100 * cov:.2f} %", f"{raw:.3f}", f"{fair:.3f}"))
    print(table(head, rows))


if __name__ == "__main__":
    main()
