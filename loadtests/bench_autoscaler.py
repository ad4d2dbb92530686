"""What one autoscaler cycle costs: ``decide()`` and its solver calls, on the back-test.

Replays the first ``--days`` of the ../shared load series through the back-test's
autoscaler (``backtest_replay.ours``: ``decide()`` every 10-minute window, the same fleet
and settings as ``backtest_autoscaler.py``) and prints the CPU time of each cycle; then
times the two kinds of program a cycle solves, on the same data: the cheapest-mix MILP
(``solve_mix``, the oracle's problem of every window) and the quantile regression the
forecast fits (``quantile_regression``: the log rate two windows ahead on an intercept and
the last three log rates, over all the history up to each window).

    python loadtests/bench_autoscaler.py [--days 3]

Prints numbers only; nothing here is asserted (a 2-core machine is too noisy to time
tests). To compare two checkouts, run this file with the other checkout first on
PYTHONPATH.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # appended: a checkout first on PYTHONPATH still wins
    sys.path.append(str(ROOT))

from autoscaler.milp import solve_mix  # noqa: E402
from autoscaler.quantreg import quantile_regression  # noqa: E402
from loadtests.backtest_fleet import (  # noqa: E402
    WARMUP,
    Fleet,
    Mix,
    backtest_policy,
    catalog_prices,
    demand_tokens,
)
from loadtests.backtest_replay import ours, scaler_config  # noqa: E402
from loadtests.backtest_series import DEFAULT_SERIES, read_series  # noqa: E402

T = TypeVar("T")


def _timed(call: Callable[[], T]) -> tuple[float, T]:
    """CPU ms of ``call()`` (this process, all threads), and what it returned."""
    start = time.process_time()
    out = call()
    return (time.process_time() - start) * 1000.0, out


def _row(what: str, ms: Sequence[float]) -> str:
    a = np.asarray(ms)
    return (
        f"{what:<34} {len(a):>6} {np.percentile(a, 50):>9.2f} {np.percentile(a, 99):>9.2f} "
        f"{a.mean():>9.2f} {a.sum() / 1000.0:>8.1f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0, help="days of the series replayed")
    args = parser.parse_args(argv)
    windows = int(args.days * 144)
    series = read_series(DEFAULT_SERIES)
    policy = backtest_policy()
    prices = catalog_prices(policy)
    config = scaler_config()
    mix = Mix(policy, prices, spot_cap=config.spot_cap)
    observed = demand_tokens(series.observed[:windows], policy)
    truth = demand_tokens(series.truth[:windows], policy)

    plan, _ = ours(policy, prices, observed, config)
    fleet = Fleet(len(mix.cost))
    cycles = []
    for k in range(len(truth)):
        fleet.start(k)
        if k < WARMUP:
            fleet.order(k, plan(k, fleet))
            continue
        ms, ordered = _timed(partial(plan, k, fleet))
        cycles.append(ms)
        fleet.order(k, ordered)

    low = np.zeros(len(mix.cost), dtype=np.intp)
    problems = [mix.problem(np.nan_to_num(t), low, mix.max_replicas) for t in truth]
    mixes = [_timed(partial(solve_mix, problem))[0] for problem in problems]

    z = np.log(np.maximum(np.nan_to_num(series.truth[:windows]), 1e-3))
    lags, ahead = 3, 2
    fits = []
    for end in range(WARMUP, len(z), 6):
        rows = np.arange(lags, end - ahead)
        x = np.column_stack([np.ones(len(rows))] + [z[rows - j] for j in range(lags)])
        y = z[rows + ahead]
        fits.append(_timed(partial(quantile_regression, x, y, 0.99))[0])

    print(f"series {DEFAULT_SERIES.name}: {windows} windows ({args.days:g} days), day 1 warms up")
    print(f"{'CPU ms':<34} {'calls':>6} {'p50':>9} {'p99':>9} {'mean':>9} {'total s':>8}")
    print(_row("decide() cycle (forecast + MILPs)", cycles))
    print(_row("solve_mix, oracle's mix", mixes))
    print(_row(f"quantile_regression, {WARMUP}-{len(z)} rows", fits))


if __name__ == "__main__":
    main()
