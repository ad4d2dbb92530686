"""Back-test of the autoscaler on 14 days of production load, against a reactive and an
oracle autoscaler. Prints three tables: the forecast's error and coverage next to simple
baselines, each autoscaler's GPU-hours, dollars and hours short of capacity, and where
this autoscaler's dollars over the oracle's go (point forecast, margin, damping).

    .venv/bin/python loadtests/backtest_autoscaler.py [--quantiles 0.99,0.993,0.995]
        [--cooldown-s 1200] [--scale-down-margin 0.02] [--scale-down-window-s 600]
        [--no-forecast-table]

How the replay is set up (assumptions, also printed):

- Demand: ../shared/data/load/servegen_m-large_aggregate_rate.csv, 14 days of one large
  production model's request rate in 10-minute windows (ServeGen m-large). One request/s
  of it is one request/s of llama-3.1-70b with the demo policy's mean output
  (``expected_output_tokens``) and the Azure conversation trace's mean prompt (1,155
  tokens), split over the demo policy's client regions 60/25/15 % (us-east-1,
  us-central1, EU); EU clients may only use EU pools (the policy's data residency).
- Fleet: the demo policy's four llama-3.1-70b pools, priced per replica from the
  reference catalogs in ../shared/data/prices/ (the row each pool names); replicas 0-40
  per pool (the demo's max of 8 cannot carry the peak, which would test the bounds, not
  the autoscaler), 10 minutes from order to ready replica (boot plus loading 140 GB of
  weights), goodput from the policy's profiles.
- A decision every window, on the windows before it (so what it orders serves the window
  after next: a forecast 20 minutes ahead). Replicas are billed from the order until
  deleted; they serve from one window after the order; a scale-down is immediate.
- A window is short when the ready replicas' goodput, routed within the SLO, misses that
  window's mean demand by more than 0.1 %. Day 1 warms the forecaster up; every figure
  covers days 2-14 (312 hours) for all three autoscalers.
- This autoscaler: ``autoscaler.decide`` with headroom 1.0 (the forecast quantile is the
  margin, and sits on the cheapest pool: the spot cap holds for the forecast mean), spot
  cap 50 %, max step 8; hysteresis: scale down only below the mix for 2 % more demand;
  cooldown 20 min (no scale-down in the cycle after a scale-up); no longer scale-down
  window than one cycle. The quantile knob was chosen on this same series.
  Reactive: capacity for the last window's load at 80 % target utilisation (as an HPA or
  Knative's KPA would), cheapest mix, same bounds and spot cap. Oracle: knows every
  window's demand and orders exactly its cheapest mix one lead time ahead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.decide import decide
from autoscaler.demand import DemandHistory
from autoscaler.fleet import PoolStatus
from autoscaler.forecast import ForecastConfig, forecast_rate
from autoscaler.state import ScalerState
from base.types import FloatArray, IntArray
from live.demand_table import DemandSeries
from router.policy import Policy

try:
    from loadtests.backtest_fleet import (
        MODEL,
        PROMPT_TOKENS,
        SHARES,
        T0,
        WARMUP,
        WINDOW_S,
        Fleet,
        Mix,
        backtest_policy,
        catalog_prices,
        demand_tokens,
        load_rate,
    )
except ModuleNotFoundError:  # run as a script: this directory is on sys.path
    from backtest_fleet import (  # type: ignore[no-redef,import-not-found]
        MODEL,
        PROMPT_TOKENS,
        SHARES,
        T0,
        WARMUP,
        WINDOW_S,
        Fleet,
        Mix,
        backtest_policy,
        catalog_prices,
        demand_tokens,
        load_rate,
    )

UTILISATION = 0.8


@dataclass
class Result:
    """One autoscaler over days 2-14: totals, and the USD of each accounted window."""

    name: str
    gpu_hours: float
    usd: float
    short_windows: int
    short_hours: int
    badly_short_windows: int
    usd_per_window: FloatArray


Planner = Callable[[int, Fleet], IntArray]


@dataclass
class Asked:
    """What this autoscaler's forecast asked for at each decision (tokens/s per client
    region): the mean it expects and the upper quantile it covers."""

    mean: dict[int, FloatArray] = field(default_factory=dict)
    upper: dict[int, FloatArray] = field(default_factory=dict)


def replay(name: str, tokens: FloatArray, mix: Mix, plan: Planner) -> Result:
    """Run one autoscaler over the series; account days 2-14. Each window: what was
    ordered earlier becomes ready, the autoscaler decides on the fleet it sees, the
    window is billed for every replica ordered and checked against the ready ones."""
    fleet = Fleet(len(mix.cost))
    gpus = np.asarray([p.gpus_per_replica for p in mix.policy.pools])
    hours = WINDOW_S / 3600.0
    gpu_hours = 0.0
    usd: list[float] = []
    short: list[int] = []
    badly = 0
    for k in range(len(tokens)):
        fleet.start(k)
        fleet.order(k, plan(k, fleet))
        if k < WARMUP:
            continue
        gpu_hours += float(fleet.target @ gpus) * hours
        usd.append(float(fleet.target @ mix.cost) * hours)
        missing = mix.short(tokens[k], fleet.ready)
        if missing > 1e-3:
            short.append(k)
            badly += missing > 0.1
    clock_hours = len({k // 6 for k in short})
    spent = np.asarray(usd)
    return Result(name, gpu_hours, float(spent.sum()), len(short), clock_hours, badly, spent)


def scaler_config(
    quantile: float,
    cooldown_s: float = 1200.0,
    scale_down_margin: float = 0.02,
    scale_down_window_s: float = WINDOW_S,
) -> ScalerConfig:
    """The planning knobs of this autoscaler in the back-test (see the module docstring)."""
    return ScalerConfig(
        headroom=1.0, spot_cap=0.5, max_step=8, cooldown_s=cooldown_s,
        scale_down_window_s=scale_down_window_s, scale_down_margin=scale_down_margin,
        interval_s=WINDOW_S, forecast_bucket_s=WINDOW_S,
        forecast=ForecastConfig(quantile=quantile),
    )  # fmt: skip


def ours(
    policy: Policy, prices: dict[str, float], tokens: FloatArray, config: ScalerConfig
) -> tuple[Planner, Asked]:
    """This autoscaler: ``decide()`` on the windows before each decision; also returns
    what its forecast asked for, filled in as it runs."""
    out = policy.models[MODEL].expected_output_tokens
    requests = tokens / out * WINDOW_S
    state = [ScalerState()]
    asked = Asked()

    def plan(k: int, fleet: Fleet) -> IntArray:
        series = {
            (MODEL, region): DemandSeries(
                T0, WINDOW_S, requests[:k, j], requests[:k, j] * PROMPT_TOKENS,
                tokens[:k, j] * WINDOW_S, np.zeros(k),
            )
            for j, region in enumerate(SHARES)
        }  # fmt: skip
        pools = [PoolStatus(p.id, int(fleet.target[i]), int(fleet.ready[i]))
                 for i, p in enumerate(policy.pools)]  # fmt: skip
        result = decide(DemandHistory(T0 + k * WINDOW_S, series), pools, prices, policy,
                        state[0], config)  # fmt: skip
        state[0] = result.state
        lines = {d.client_region: d for d in result.demand}
        if all(region in lines for region in SHARES):
            asked.mean[k] = np.asarray([lines[r].mean * config.headroom for r in SHARES])
            asked.upper[k] = np.asarray([lines[r].required for r in SHARES])
        return np.asarray([c.target for c in result.changes], dtype=np.intp)

    return plan, asked


def reactive(mix: Mix, tokens: FloatArray) -> Planner:
    """Capacity for the last window's load at the target utilisation."""

    def plan(k: int, fleet: Fleet) -> IntArray:
        return mix.cheapest(tokens[k - 1] / UTILISATION) if k else fleet.target

    return plan


def oracle(mix: Mix, tokens: FloatArray) -> Planner:
    """Exactly each window's cheapest mix, ordered one lead time ahead."""
    need = [mix.cheapest(t) for t in tokens]

    def plan(k: int, fleet: Fleet) -> IntArray:
        return np.maximum(need[k], need[min(k + 1, len(need) - 1)])

    return plan


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


def forecast_rows(rate: FloatArray, quantile: float = 0.95) -> list[tuple[str, ...]]:
    """MAPE of the point forecast, coverage of the upper quantile and mean upper/actual,
    at 10 and 20 minutes ahead: this forecast (its upper quantile from the quantile
    regression, and from its unconditional errors), and two baselines with a conformal
    upper band (the quantile of each method's own past log errors, 14 days as ours)."""
    n = len(rate)
    calib = int(14 * 86_400 / WINDOW_S)
    rows: list[tuple[str, ...]] = []
    for h in (1, 2):
        origins = np.arange(WARMUP, n - h + 1)  # data up to origin - 1 is known
        actual = rate[origins + h - 1]
        points: dict[str, FloatArray] = {}
        uppers: dict[str, FloatArray] = {}
        ours_fc = [forecast_rate(rate[:i], T0, WINDOW_S, h, ForecastConfig(quantile=quantile))
                   for i in origins]  # fmt: skip
        points["this forecast"] = np.asarray([f.median[h - 1] for f in ours_fc])
        uppers["this forecast"] = np.asarray([f.upper[h - 1] for f in ours_fc])
        flat = ForecastConfig(quantile=quantile, conditional=False)
        name = "this forecast, unconditional upper"
        points[name] = points["this forecast"]
        uppers[name] = np.asarray(
            [forecast_rate(rate[:i], T0, WINDOW_S, h, flat).upper[h - 1] for i in origins]
        )
        points["last value"] = rate[origins - 1]
        points["moving average (1 h)"] = np.asarray([rate[i - 6 : i].mean() for i in origins])
        for name in ("last value", "moving average (1 h)"):
            err = np.log(actual) - np.log(points[name])
            upper = np.empty(len(origins))
            for j in range(len(origins)):
                seen = err[: max(j - h + 1, 0)][-calib:]  # outcomes known at this origin
                upper[j] = (
                    points[name][j] * float(np.exp(np.quantile(seen, quantile)))
                    if len(seen) >= 20
                    else np.inf
                )
            uppers[name] = upper
        for name, point in points.items():
            upper = uppers[name]
            ok = np.isfinite(upper)
            rows.append((
                f"{int(h * WINDOW_S / 60)} min", name,
                f"{100 * np.mean(np.abs(point - actual) / actual):.1f} %",
                f"{100 * np.mean(upper[ok] >= actual[ok]):.1f} %",
                f"{np.mean(upper[ok] / actual[ok]):.2f}",
            ))  # fmt: skip
    return rows


def table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quantiles", default="0.99,0.993,0.995", help="forecast upper quantiles to replay"
    )
    parser.add_argument("--cooldown-s", type=float, default=1200.0)
    parser.add_argument("--scale-down-margin", type=float, default=0.02)
    parser.add_argument("--scale-down-window-s", type=float, default=WINDOW_S)
    parser.add_argument(
        "--no-forecast-table", action="store_true", help="skip the forecast table (faster)"
    )
    args = parser.parse_args()
    rate = load_rate()
    policy = backtest_policy()
    prices = catalog_prices(policy)
    tokens = demand_tokens(rate, policy)
    mix = Mix(policy, prices, spot_cap=0.5)
    print(__doc__.split("How the replay")[1].split("\n", 1)[1])
    print("pools (USD per replica-hour from the catalogs, goodput tokens/s per replica):")
    for p, cost, good in zip(policy.pools, mix.cost, mix.goodput, strict=True):
        print(f"  {p.id:34s} {p.price.purchase:9s} {cost:7.2f} $/h  {good:6.0f} tok/s")
    print(
        f"damping: cooldown {args.cooldown_s:g} s, hysteresis {args.scale_down_margin:.0%}, "
        f"scale-down window {args.scale_down_window_s:g} s (cycle {WINDOW_S:g} s)"
    )
    if not args.no_forecast_table:
        print("\nforecast, rolling origin over days 2-14 (upper = q95):\n")
        columns = ("ahead", "method", "MAPE", "q95 coverage", "upper/actual")
        print(table(columns, forecast_rows(rate)))
    results = [
        replay("oracle (knows the future)", tokens, mix, oracle(mix, tokens)),
        replay(f"reactive ({UTILISATION:.0%} target)", tokens, mix, reactive(mix, tokens)),
    ]
    parts: list[tuple[str, ...]] = []
    for q in (float(x) for x in args.quantiles.split(",")):
        config = scaler_config(q, args.cooldown_s, args.scale_down_margin, args.scale_down_window_s)
        plan, asked = ours(policy, prices, tokens, config)
        results.append(replay(f"this autoscaler (q{q * 100:.4g})", tokens, mix, plan))
        parts.append(decomposition(mix, asked, results[-1], results[0]))
    total_h = (len(rate) - WARMUP) * WINDOW_S / 3600

    def share(hours: float) -> str:
        return f"{hours:.1f} ({100 * hours / total_h:.1f} %)"

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
    print(f"\nautoscalers over days 2-14 ({total_h:.0f} hours):\n")
    print(table(head, rows))
    print("\nwhere the cost over the oracle's comes from (share of the oracle's USD):\n")
    print(table(("autoscaler", "point forecast", "quantile margin", "damping"), parts))


if __name__ == "__main__":
    main()
