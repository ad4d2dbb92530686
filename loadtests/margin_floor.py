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
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from autoscaler.quantreg import quantile_regression
from base.types import FloatArray

try:
    from loadtests.backtest_series import DEFAULT_SERIES, VARIANT_SEED, read_series, variants
except ModuleNotFoundError:  # run as a script: this directory is on sys.path
    from backtest_series import (  # type: ignore[no-redef,import-not-found]
        DEFAULT_SERIES,
        VARIANT_SEED,
        read_series,
        variants,
    )

DAY = 144  # 600 s windows
AHEAD = 2  # the window after next: what the back-test orders for
LAGS = 6  # one hour of history in every feature set


def _own(x: FloatArray, t: int) -> list[float]:
    """The autoscaler's state (``autoscaler.forecast._state``) at window ``t``."""
    w = x[t - LAGS : t + 1]
    return [1.0, x[t], x[t - 1], x[t - 2], float(w.mean()), float(np.abs(np.diff(w)).mean())]


def _time_of_day(t: int) -> list[float]:
    a = 2.0 * math.pi * ((t + AHEAD) % DAY + 0.5) / DAY
    return [math.sin(a), math.cos(a), math.sin(2 * a), math.cos(2 * a)]


FEATURES: dict[str, Callable[[FloatArray, int], list[float]]] = {
    "the autoscaler's": _own,
    "+ hour's max": lambda x, t: [*_own(x, t), float(x[t - LAGS : t + 1].max())],
    "+ time of day": lambda x, t: [*_own(x, t), *_time_of_day(t)],
    "+ max, time of day, 6 h and 24 h means": lambda x, t: [
        *_own(x, t),
        float(x[t - LAGS : t + 1].max()),
        *_time_of_day(t),
        float(x[max(t - 36, 0) : t + 1].mean()),
        float(x[max(t - DAY, 0) : t + 1].mean()),
    ],
}


def margins(
    rate: FloatArray, truth: FloatArray, features: Callable[[FloatArray, int], list[float]],
    quantile: float, test_from_day: int,
) -> tuple[float, float, float]:  # fmt: skip
    """(coverage, margin, margin at the hindsight factor) of one feature set on one
    series: ``rate`` as observed (gaps held at the last value seen), ``truth`` the
    demand scored (NaN: not scored)."""
    seen = np.where(np.isfinite(truth) & (rate > 0), rate, np.nan)
    index = np.maximum.accumulate(np.where(np.isfinite(seen), np.arange(len(seen)), 0))
    x = np.log(np.maximum(seen[index], 1e-9))
    origins = np.arange(DAY, len(x) - AHEAD)
    design = np.asarray([features(x, int(t)) for t in origins])
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
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for i, row in enumerate([head, *rows]):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
