"""A quick screen for forecast changes: the back-test's variants through ``forecast_rate``
alone, before the full ``backtest_autoscaler.py --variants`` (about a minute per variant
on an idle core, against several for the full replay).

One line (the total rate), a forecast every window from day 2 on, on the windows before
it (missing windows, ``autoscaler.gaps``, as NaN), for the window after next (20 minutes
ahead, what the back-test's decisions buy), at the back-test's quantile, corrected by
the online calibration at the back-test's gain (``backtest_forecast.calibrated``).
Printed per variant, over the windows whose demand is known and not 0:

- ``err std``: std of the log error of the median; ``WAPE`` of the median;
- ``raw covers`` / ``cal covers``: share of windows the upper bound covers, before and
  after the online correction;
- ``fluid raw`` / ``fluid cal``: the sum of the upper bounds over the sum of the demand,
  minus 1 (no replicas, pools or spot: only differences between runs mean anything);
- ``hindsight``: the one factor that makes the raw bound cover exactly the quantile
  (chosen after the fact), and ``fluid hindsight``, the margin at that coverage: the
  fairest comparison of two bounds, as their coverages then match.

    .venv/bin/python loadtests/replay_forecast.py [--seed 21]
        [--variants original,level shift,noisier] [--jobs 2]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: this directory is on sys.path, not the root
    sys.path.insert(0, str(_ROOT))

from autoscaler.forecast import ForecastConfig, forecast_rate  # noqa: E402
from autoscaler.gaps import missing_windows  # noqa: E402
from loadtests.backtest_forecast import WARMUP, calibrated  # noqa: E402
from loadtests.backtest_replay import CALIBRATION_GAIN, QUANTILE  # noqa: E402
from loadtests.backtest_series import (  # noqa: E402
    VARIANT_SEED,
    WINDOW_S,
    Series,
    read_series,
    variants,
    wape,
)

AHEAD = 2  # the window after next: what a decision now buys (10 minutes to ready)
HISTORY = int(14 * 86_400 / WINDOW_S)  # the autoscaler's history (ScalerConfig.history_s)


def screen(series: Series) -> str:
    """One row of figures (the module docstring) for ``series``."""
    config = ForecastConfig(quantile=QUANTILE, calibration_gain=CALIBRATION_GAIN)
    rate = np.where(missing_windows(series.observed * WINDOW_S, WINDOW_S), np.nan, series.observed)
    ends = range(WARMUP, len(rate) - AHEAD + 1)  # windows before ``end`` are known
    median, upper = np.empty(len(ends)), np.empty(len(ends))
    for i, end in enumerate(ends):
        start = max(end - HISTORY, 0)
        fc = forecast_rate(rate[start:end], start * WINDOW_S, WINDOW_S, AHEAD, config)
        median[i], upper[i] = fc.median[-1], fc.upper[-1]
    actual = series.truth[[end + AHEAD - 1 for end in ends]]
    cal = calibrated(upper, actual, AHEAD, config)
    ok = np.isfinite(actual) & (actual > 0)
    a, up, cu = actual[ok], upper[ok], cal[ok]
    err = np.log(a) - np.log(np.maximum(median[ok], 1e-12))
    factor = float(np.quantile(a / up, QUANTILE))
    return (
        f"{series.name:12s} err std {err.std():.4f}  WAPE {wape(median, actual):.1f} %  "
        f"raw covers {100 * np.mean(up >= a):.2f} %  cal covers {100 * np.mean(cu >= a):.2f} %  "
        f"fluid raw {100 * (up.sum() / a.sum() - 1):+.1f} %  "
        f"fluid cal {100 * (cu.sum() / a.sum() - 1):+.1f} %  hindsight x{factor:.3f}  "
        f"fluid hindsight {100 * (factor * up.sum() / a.sum() - 1):+.1f} %"
    )


def main() -> None:
    """Parse the arguments and print one row per variant asked for."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=VARIANT_SEED)
    parser.add_argument("--variants", default="original,level shift,noisier")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    names = set(args.variants.split(","))
    chosen = [v for v in variants(read_series(), args.seed) if v.name in names]
    print(
        f"seed {args.seed}, q{100 * QUANTILE:g}, gain {CALIBRATION_GAIN:g}, {AHEAD} windows ahead"
    )
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        for row in pool.map(screen, chosen):
            print(row)


if __name__ == "__main__":
    main()
