"""Back-test of the autoscaler on 14 days of production load, against a reactive and an
oracle autoscaler. Prints three tables: the forecast's error and coverage next to simple
baselines, each autoscaler's GPU-hours, dollars and hours short of capacity, and where
this autoscaler's dollars over the oracle's go (point forecast, margin, damping). With
``--variants``, one table instead: the series and its synthetic variants (gaps, x0.1,
x10, a level shift, more noise), each replayed with the same settings.

    .venv/bin/python loadtests/backtest_autoscaler.py [--series FILE]
        [--quantiles 0.99,0.995] [--cooldown-s 0] [--scale-down-margin 0]
        [--scale-down-window-s 600] [--no-forecast-table]
    .venv/bin/python loadtests/backtest_autoscaler.py --variants [--series FILE]
        [--quantiles 0.99] [--jobs 2] [--seed 21]

How the replay is set up (assumptions, also printed):

- Demand: ``--series`` (default ../shared/data/load/servegen_m-large_aggregate_rate.csv,
  14 days of one large production model's request rate in 10-minute windows, ServeGen
  m-large; any ``window_start_s,total_rate_rps`` file of 600 s windows). Windows where
  nobody reported (0 amid traffic, ``autoscaler.gaps``) reach every autoscaler as 0, as
  telemetry would show them, and are not scored for shortfall. One request/s
  of it is one request/s of llama-3.1-70b with the demo policy's mean output
  (``expected_output_tokens``) and the Azure conversation trace's mean prompt (1,155
  tokens), split over the demo policy's client regions 60/25/15 % (us-east-1,
  us-central1, EU); EU clients may only use EU pools (the policy's data residency).
- Fleet: the demo policy's four llama-3.1-70b pools, priced per replica from the
  reference catalogs in ../shared/data/prices/ (the row each pool names); replicas 0-40
  per pool (the demo's max of 8 cannot carry the peak, which would test the bounds, not
  the autoscaler), 10 minutes from order to ready replica (boot plus loading 140 GB of
  weights), goodput from the policy's profiles, counted as ``decide()`` counts it: divided
  by the batch-slot time a 1,155/211-token request holds per output token
  (``goodput.slot_load``), for the oracle, the reactive scaler and the shortfall check alike.
- A decision every window, on the windows before it (so what it orders serves the window
  after next: a forecast 20 minutes ahead). Replicas are billed from the order until
  deleted; they serve from one window after the order; a scale-down is immediate.
- A window is short when the ready replicas' goodput, routed within the SLO, misses that
  window's mean demand by more than 0.1 %. Day 1 warms the forecaster up; every figure
  covers days 2-14 (312 hours) for all three autoscalers; % of hours short is of the
  hours whose demand is known.
- This autoscaler: ``autoscaler.decide`` with headroom 1.0 (the forecast quantile is the
  margin, and sits on the cheapest pool: the spot cap holds for the forecast mean), spot
  cap 50 %, max step 8 replicas or 25 % of the pool; no hysteresis, cooldown or longer
  scale-down window than one cycle (on 10-minute cycles they cost about 3 % of the
  oracle's USD and saved no short hours). The upper quantile targets 99 % coverage and
  is calibrated online (its realised coverage is tracked and corrected, gain 0.005,
  ``autoscaler.calibrate``). These settings are the same for every series and variant;
  they were chosen by replaying the original and the variants (see loadtests/README.md).
  Reactive: capacity for the last window's load at 80 % target utilisation (as an HPA or
  Knative's KPA would), cheapest mix, same bounds and spot cap. Oracle: knows every
  window's demand and orders exactly its cheapest mix one lead time ahead.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.config import ScalerConfig

# ``python loadtests/backtest_autoscaler.py`` puts this directory, not the project, on sys.path.
_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from loadtests.backtest_fleet import (  # noqa: E402
    MAX_REPLICAS,
    WARMUP,
    WINDOW_S,
    Mix,
    backtest_policy,
    catalog_prices,
    demand_tokens,
)
from loadtests.backtest_forecast import forecast_rows  # noqa: E402
from loadtests.backtest_replay import (  # noqa: E402
    QUANTILE,
    UTILISATION,
    Asked,
    Result,
    oracle,
    ours,
    reactive,
    replay,
    scaler_config,
)
from loadtests.backtest_series import (  # noqa: E402
    DEFAULT_SERIES,
    VARIANT_SEED,
    Series,
    read_series,
    variants,
    wape,
)


def decomposition(mix: Mix, asked: Asked, result: Result, best: Result) -> tuple[str, ...]:
    """Where ``result``'s USD over the oracle's (``best``) comes from, per window then
    summed: the point forecast (the cheapest mix for the forecast mean, against what
    the oracle ran), the quantile margin (the cheapest mix for the upper quantile,
    margin on the cheapest pools, against the one for the mean), and damping (what was
    ordered, after stabilisation, hysteresis, cooldown, max step and make before break,
    against the cheapest mix for the upper quantile)."""
    hours = WINDOW_S / 3600.0
    windows = range(WARMUP, WARMUP + len(result.usd_per_window))
    for_mean = np.asarray([float(mix.cheapest(asked.mean[k]) @ mix.cost) for k in windows])
    for_upper = np.asarray(
        [float(mix.cheapest(asked.upper[k], asked.mean[k]) @ mix.cost) for k in windows]
    )
    parts = (
        for_mean * hours - best.usd_per_window,
        (for_upper - for_mean) * hours,
        result.usd_per_window - for_upper * hours,
    )
    return (result.name, *(f"{100 * part.sum() / best.usd:+.1f} %" for part in parts))


def table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass(frozen=True)
class VariantResult:
    """One variant replayed: the oracle's and this autoscaler's USD, the share (%) of
    known hours short, the forecast's WAPE (%) and its upper bound's coverage (%), 20
    minutes ahead, over days 2 on; ``parts``: ``decomposition``'s three shares of the
    oracle's USD (point forecast, quantile margin, damping), formatted."""

    name: str
    note: str
    max_replicas: int
    oracle_usd: float
    usd: float
    short_pct: float
    wape_pct: float
    coverage_pct: float
    parts: tuple[str, ...] = ("-", "-", "-")

    @property
    def over_pct(self) -> float:
        return 100.0 * (self.usd / self.oracle_usd - 1.0)


def run_variant(series: Series, config: ScalerConfig, parts: bool = False) -> VariantResult:
    """Replay the oracle and this autoscaler on ``series``; the fleet's maximum grows
    with the series' scale above 1 (a x10 load on the x1 fleet would test the bounds,
    not the autoscaler). ``parts``: also split the cost over the oracle's
    (``decomposition``: two cheapest-mix programs a window, about doubling the time)."""
    max_replicas = math.ceil(MAX_REPLICAS * max(series.scale, 1.0))
    policy = backtest_policy(max_replicas)
    prices = catalog_prices(policy)
    mix = Mix(policy, prices, spot_cap=config.spot_cap)
    observed = demand_tokens(series.observed, policy)
    truth = demand_tokens(series.truth, policy)
    best = replay("oracle", truth, mix, oracle(mix, truth))
    plan, asked = ours(policy, prices, observed, config)
    mine = replay("this autoscaler", truth, mix, plan)
    ks = [k for k in range(WARMUP, len(truth) - 1) if k in asked.mean]
    actual = truth[[k + 1 for k in ks]].sum(axis=1)
    mean = np.asarray([asked.mean[k].sum() for k in ks])
    upper = np.asarray([asked.upper[k].sum() for k in ks])
    ok = np.isfinite(actual)
    result = VariantResult(
        series.name, series.note, max_replicas, best.usd, mine.usd,
        100.0 * mine.short_windows / max(mine.known_windows, 1), wape(mean, actual),
        100.0 * float(np.mean(upper[ok] >= actual[ok] * (1 - 1e-9))),
    )  # fmt: skip
    return replace(result, parts=decomposition(mix, asked, mine, best)[1:]) if parts else result


def variants_table(results: Sequence[VariantResult]) -> str:
    """The variants as one table (numbers that cannot be computed print as n/a)."""

    def num(value: float, fmt: str) -> str:
        return format(value, fmt) if math.isfinite(value) else "n/a"

    rows = [
        (r.name, r.note, str(r.max_replicas), f"{r.oracle_usd:,.0f}", f"{r.usd:,.0f}",
         num(r.over_pct, "+.1f") + " %", num(r.short_pct, ".2f") + " %",
         num(r.wape_pct, ".1f") + " %", num(r.coverage_pct, ".2f") + " %", *r.parts)
        for r in results
    ]  # fmt: skip
    head = ("variant", "what", "max/pool", "oracle USD", "USD", "vs oracle", "hours short",
            "WAPE 20 min", "upper covers", "point", "margin", "damping")  # fmt: skip
    return table(head, rows)


def print_variants(
    base: Series, path: Path, config: ScalerConfig, jobs: int, seed: int = VARIANT_SEED
) -> None:
    """Replay ``base`` and its variants (drawn with ``seed``) with ``config`` (``jobs``
    processes) and print the settings and one table."""
    every = variants(base, seed)
    print(f"series {path} ({base.days:g} days; {base.note}); variants (seed {seed}):")
    print(
        f"same settings for every variant: upper quantile q{100 * config.forecast.quantile:g} "
        f"calibrated online (gain {config.forecast.calibration_gain:g}), headroom "
        f"{config.headroom:g}, cooldown {config.cooldown_s:g} s, hysteresis "
        f"{config.scale_down_margin:.0%}, max step {config.max_step} or "
        f"{config.max_step_share:.0%}, spot cap {config.spot_cap:.0%}; fleet maximum "
        f"{MAX_REPLICAS} replicas per pool, times the scale above x1 (the x10 variant's "
        "peak exceeds the x1 fleet's maximum, so its maximum is x10 too)\n"
    )
    with ProcessPoolExecutor(max(jobs, 1)) as pool:
        replayed = list(pool.map(run_variant, every, [config] * len(every), [True] * len(every)))
    print(table_note(base))
    print(variants_table(replayed))


def main() -> None:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--series", type=Path, default=DEFAULT_SERIES,
        help="window_start_s,total_rate_rps file of 600 s windows (default: ServeGen m-large)",
    )  # fmt: skip
    parser.add_argument(
        "--quantiles",
        default=f"{QUANTILE:g}",
        help="forecast upper quantiles (target coverage) to replay; --variants takes the first",
    )
    parser.add_argument("--cooldown-s", type=float, default=0.0)
    parser.add_argument("--scale-down-margin", type=float, default=0.0)
    parser.add_argument("--scale-down-window-s", type=float, default=WINDOW_S)
    parser.add_argument(
        "--no-forecast-table", action="store_true", help="skip the forecast table (faster)"
    )
    parser.add_argument(
        "--variants", action="store_true",
        help="replay the series and its synthetic variants with the same settings, one table",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="for --variants")
    parser.add_argument(
        "--seed", type=int, default=VARIANT_SEED,
        help="for --variants: draws other gaps and noise, variants the settings never saw",
    )  # fmt: skip
    args = parser.parse_args()
    base = read_series(args.series)
    damping = (args.cooldown_s, args.scale_down_margin, args.scale_down_window_s)
    if args.variants:
        config = scaler_config(float(args.quantiles.split(",")[0]), *damping)
        print_variants(base, args.series, config, args.jobs, args.seed)
        return
    policy = backtest_policy()
    prices = catalog_prices(policy)
    observed = demand_tokens(base.observed, policy)
    truth = demand_tokens(base.truth, policy)
    mix = Mix(policy, prices, spot_cap=0.5)
    print(__doc__.split("How the replay")[1].split("\n", 1)[1])
    print(f"series: {args.series} ({base.days:g} days; {base.note})")
    print("pools (USD per replica-hour from the catalogs, tokens/s per replica after slot load):")
    for p, cost, good in zip(policy.pools, mix.cost, mix.goodput, strict=True):
        print(f"  {p.id:34s} {p.price.purchase:9s} {cost:7.2f} $/h  {good:6.0f} tok/s")
    print(
        f"damping: cooldown {args.cooldown_s:g} s, hysteresis {args.scale_down_margin:.0%}, "
        f"scale-down window {args.scale_down_window_s:g} s (cycle {WINDOW_S:g} s)"
    )
    if not args.no_forecast_table:
        print(f"\nforecast, rolling origin over days 2 on (upper = q{100 * QUANTILE:g}):\n")
        columns = ("ahead", "method", "WAPE", "MASE", "upper covers", "upper/actual")
        print(table(columns, forecast_rows(base.observed, base.truth, QUANTILE)))
    results = [
        replay("oracle (knows the future)", truth, mix, oracle(mix, truth)),
        replay(f"reactive ({UTILISATION:.0%} target)", truth, mix, reactive(mix, observed)),
    ]
    parts: list[tuple[str, ...]] = []
    for q in (float(x) for x in args.quantiles.split(",")):
        plan, asked = ours(policy, prices, observed, scaler_config(q, *damping))
        results.append(replay(f"this autoscaler (q{q * 100:.4g})", truth, mix, plan))
        parts.append(decomposition(mix, asked, results[-1], results[0]))
    known_h = results[0].known_windows * WINDOW_S / 3600

    def share(hours: float) -> str:
        return f"{hours:.1f} ({100 * hours / known_h:.1f} %)"

    rows = [
        (
            r.name,
            f"{r.gpu_hours:,.0f}",
            f"{r.usd:,.0f}",
            f"{100 * (r.usd / results[0].usd - 1):+.1f} %",
            share(r.short_windows * WINDOW_S / 3600),
            share(r.badly_short_windows * WINDOW_S / 3600),
            share(r.short_hours),
        )
        for r in results
    ]
    head = ("autoscaler", "GPU-hours", "USD", "vs oracle", "hours short", "short > 10 %",
            "clock hours touched")  # fmt: skip
    print(f"\nautoscalers over days 2 on ({known_h:.0f} hours with known demand):\n")
    print(table(head, rows))
    print("\nwhere the cost over the oracle's comes from (share of the oracle's USD):\n")
    print(table(("autoscaler", "point forecast", "quantile margin", "damping"), parts))


def table_note(base: Series) -> str:
    """What the variants table's columns mean."""
    return (
        "vs oracle: this autoscaler's USD over the oracle's on the same variant and fleet; "
        "hours short: share of the hours with known demand\nwhere ready capacity missed "
        "it by > 0.1 %; WAPE and upper covers: the forecast 20 min ahead (what was ordered "
        f"for), days 2-{base.days:g}; point, margin, damping: where the USD over the\n"
        "oracle's goes, as shares of the oracle's USD (the third table without --variants)\n"
    )


if __name__ == "__main__":
    main()
