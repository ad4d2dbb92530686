"""What one autoscaler cycle costs: ``decide()`` and its solver calls, on the back-test.

Replays the first ``--days`` of the ../shared load series through the back-test's
autoscaler (``backtest_replay.ours``: ``decide()`` every 10-minute window, the same fleet
and settings as ``backtest_autoscaler.py``) and prints the CPU time of each cycle; then
times the two kinds of program a cycle solves, on the same data: the cheapest-mix MILP
(``solve_mix``, the oracle's problem of every window) and the quantile regression the
forecast fits (``quantile_regression``: the log rate two windows ahead on an intercept and
the last three log rates, over all the history up to each window); and, for fleets bigger
than the back-test's four pools, ``solve_mix`` on random mixes of ``--pools`` pools.

    python loadtests/bench_autoscaler.py [--days 3] [--pools 20,60,100]

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

from autoscaler.milp import MixProblem, solve_mix  # noqa: E402
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


def _random_mix(rng: np.random.Generator, pools: int) -> MixProblem:
    """A fleet bigger than the back-test's: ``pools`` pools of pools // 10 models, a
    line per 3 pools (each pool serves 70 % of its model's lines), a third of the pools
    spot under a 50 % cap, up to 40 replicas each, some running now."""
    lines, models = max(pools // 3, 1), max(pools // 10, 1)
    pool_model = rng.integers(0, models, pools).astype(np.intp)
    line_model = rng.integers(0, models, lines).astype(np.intp)
    return MixProblem(
        cost=rng.uniform(1.0, 100.0, pools), goodput=rng.uniform(500.0, 6000.0, pools),
        lower=np.zeros(pools, dtype=np.intp), upper=np.full(pools, 40, dtype=np.intp),
        current=rng.integers(0, 5, pools).astype(np.intp), spot=rng.random(pools) < 0.3,
        pool_model=pool_model, demand=rng.uniform(0.0, 30_000.0, lines), line_model=line_model,
        feasible=(pool_model[:, None] == line_model[None, :]) & (rng.random((pools, lines)) < 0.7),
        spot_cap=0.5, load=rng.uniform(1.0, 1.2, (pools, lines)),
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0, help="days of the series replayed")
    parser.add_argument(
        "--pools", type=lambda text: [int(n) for n in text.split(",")], default=[20, 60, 100],
        help="also time solve_mix on 4 random mixes of each many pools (comma-separated)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=3, help="seeds the random mixes")
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
    rng = np.random.default_rng(args.seed)
    for pools in args.pools:
        times = [_timed(partial(solve_mix, _random_mix(rng, pools)))[0] for _ in range(4)]
        print(_row(f"solve_mix, random {pools} pools", times))


if __name__ == "__main__":
    main()
