"""Back-test of the autoscaler on 14 days of production load, against a reactive and an
oracle autoscaler. Prints two tables: the forecast's error and coverage next to simple
baselines, and each autoscaler's GPU-hours, dollars and hours short of capacity.

    .venv/bin/python loadtests/backtest_autoscaler.py [--quantiles 0.9,0.95,0.99]

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
- A decision every window, on the windows before it. Replicas are billed from the order
  until deleted; they serve from one window after the order; a scale-down is immediate.
- A window is short when the ready replicas' goodput, routed within the SLO, misses that
  window's mean demand by more than 0.1 %. Day 1 warms the forecaster up; every figure
  covers days 2-14 (312 hours) for all three autoscalers.
- This autoscaler: ``autoscaler.decide`` with headroom 1.0 (the forecast quantile is the
  margin), spot cap 50 %, max step 8, cooldown 10 min, 20 min scale-down window.
  Reactive: capacity for the last window's load at 80 % target utilisation (as an HPA or
  Knative's KPA would), cheapest mix, same bounds and spot cap. Oracle: knows every
  window's demand and orders exactly its cheapest mix one lead time ahead.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.decide import decide
from autoscaler.demand import DemandHistory
from autoscaler.fleet import PoolStatus
from autoscaler.forecast import ForecastConfig, forecast_rate
from autoscaler.milp import MixProblem, solve_mix
from autoscaler.state import ScalerState
from router.demand_table import DemandSeries
from router.policy import Policy
from router.policy_loader import load_policy

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
MODEL = "llama-3.1-70b"
WINDOW_S = 600.0
T0 = 1_700_438_400.0  # a Monday 00:00 UTC; the series' own clock starts at 0
SHARES = {"aws:us-east-1": 0.60, "gcp:us-central1": 0.25, "aws:eu-west-1": 0.15}
PROMPT_TOKENS = 1155.0
WARMUP = 144  # one day of windows
MAX_REPLICAS = 40
UTILISATION = 0.8


def load_rate() -> np.ndarray:
    """Requests/s per 10-minute window."""
    path = DATA / "load" / "servegen_m-large_aggregate_rate.csv"
    return np.loadtxt(path, delimiter=",", skiprows=1)[:, 1]


def backtest_policy() -> Policy:
    """The demo policy, cut down to the 70b model's pools, with scaling sections."""
    doc = load_policy(ROOT / "skyroute" / "fleet" / "demo-policy.yaml").model_dump(mode="json")
    doc["models"] = {MODEL: doc["models"][MODEL]}
    doc["pools"] = [p for p in doc["pools"] if p["model"] == MODEL]
    for pool in doc["pools"]:
        pool["replicas"] = {"min": 0, "max": MAX_REPLICAS, "initial": 0}
        pool["scaling"] = {"group": pool["id"].replace(":", "-"), "provisioning_s": WINDOW_S}
    locations = {f"{p['provider']}:{p['region']}" for p in doc["pools"]}
    for region in doc["client_regions"].values():
        region["rtt_ms"] = {k: v for k, v in region["rtt_ms"].items() if k in locations}
    doc["tenants"] = {}
    return Policy.model_validate(doc)


def catalog_prices(policy: Policy) -> dict[str, float]:
    """USD per GPU-hour of each pool from the catalog row it names (instance type and
    region; for spot, the region's cheapest zone quote that is a discount)."""
    skypilot = ("InstanceType", "Region", "Price", "SpotPrice")
    sources = {
        "aws": ("aws_gpu_vms_skypilot_catalog_v8_subset.csv", *skypilot),
        "azure": ("azure_gpu_vms_skypilot_catalog_v6.csv", *skypilot),
        "gcp": ("gcp_gpu_instances_cyclenerd.csv", "instance_type", "region", "hour", "hour_spot"),
    }
    rows: dict[tuple[str, str], tuple[float, float]] = {}
    for provider, (name, kind, region, od, spot) in sources.items():
        with (DATA / "prices" / name).open() as f:
            for r in csv.DictReader(f):
                price, quote = float(r[od] or "nan"), float(r[spot] or "nan")
                key = (f"{provider}:{r[region]}", r[kind])
                best = rows.get(key, (price, np.inf))[1]
                rows[key] = (price, min(best, quote) if quote < price else best)
    out = {}
    for pool in policy.pools:
        on_demand, spot = rows[(pool.location, pool.price.instance_type)]
        usd = spot if pool.price.purchase == "spot" else on_demand
        out[pool.id] = usd / pool.gpus_per_replica
    return out


def demand_tokens(rate: np.ndarray, policy: Policy) -> np.ndarray:
    """Output tokens/s per (window, client region)."""
    out = policy.models[MODEL].expected_output_tokens
    return np.outer(rate, list(SHARES.values())) * out


@dataclass
class Fleet:
    """Replicas per pool: ordered (billed) and ready (serving), with orders in flight."""

    size: int
    target: np.ndarray = field(init=False)
    ready: np.ndarray = field(init=False)
    booting: list[tuple[int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.target = np.zeros(self.size, dtype=np.intp)
        self.ready = np.zeros(self.size, dtype=np.intp)

    def order(self, window: int, new: np.ndarray) -> None:
        """Apply targets at the start of ``window``: growth is ready next window, a
        shrink cancels orders in flight first, then removes ready replicas."""
        for p in range(self.size):
            delta = int(new[p] - self.target[p])
            if delta > 0:
                self.booting.append((window + 1, p, delta))
            while delta < 0:
                mine = [b for b in self.booting if b[1] == p]
                if mine:
                    at, _, n = mine[-1]
                    self.booting.remove(mine[-1])
                    if n + delta > 0:
                        self.booting.append((at, p, n + delta))
                    delta = min(n + delta, 0)
                else:
                    self.ready[p] += delta
                    delta = 0
        self.target = np.asarray(new, dtype=np.intp).copy()
        for item in [b for b in self.booting if b[0] <= window]:
            self.booting.remove(item)
            self.ready[item[1]] += item[2]


class Mix:
    """The cheapest mix (and shortfall checks) for the back-test fleet."""

    def __init__(self, policy: Policy, prices: dict[str, float], spot_cap: float) -> None:
        self.policy = policy
        pools = policy.pools
        slo = policy.slo_classes[policy.models[MODEL].default_slo]
        keep = 1.0 - policy.routing.slo_headroom
        self.cost = np.asarray([prices[p.id] * p.gpus_per_replica for p in pools])
        self.goodput = np.asarray([p.goodput.tokens_per_s for p in pools])
        self.feasible = np.asarray([
            [p.location in policy.client_regions[r].rtt_ms
             and policy.client_regions[r].rtt_ms[p.location]
             + PROMPT_TOKENS * 1000 / p.goodput.prefill_tokens_per_s <= slo.ttft_ms * keep
             for r in SHARES] for p in pools
        ])  # fmt: skip
        self.spot = np.asarray([p.price.purchase == "spot" for p in pools])
        self.spot_cap = spot_cap

    def problem(self, demand: np.ndarray, low: np.ndarray, high: np.ndarray) -> MixProblem:
        n = len(self.cost)
        return MixProblem(
            cost=self.cost, goodput=self.goodput, lower=low, upper=high,
            current=np.zeros(n, dtype=np.intp), spot=self.spot,
            pool_model=np.zeros(n, dtype=np.intp), demand=demand,
            line_model=np.zeros(len(demand), dtype=np.intp), feasible=self.feasible,
            spot_cap=self.spot_cap,
        )  # fmt: skip

    def cheapest(self, demand: np.ndarray) -> np.ndarray:
        n = len(self.cost)
        low, high = np.zeros(n, dtype=np.intp), np.full(n, MAX_REPLICAS, dtype=np.intp)
        solution = solve_mix(self.problem(demand, low, high))
        assert solution is not None
        return solution.replicas

    def short(self, demand: np.ndarray, ready: np.ndarray) -> float:
        """The share of ``demand`` that ``ready`` replicas cannot serve within the SLO
        (no spot cap here: whatever runs may serve)."""
        problem = self.problem(demand, ready, ready)
        problem = MixProblem(**{**problem.__dict__, "spot_cap": 1.0})
        solution = solve_mix(problem)
        assert solution is not None
        return float(solution.shortfall.sum()) / max(float(demand.sum()), 1e-9)


@dataclass
class Result:
    name: str
    gpu_hours: float
    usd: float
    short_windows: int
    short_hours: int
    badly_short_windows: int


def replay(
    name: str, tokens: np.ndarray, mix: Mix, plan: Callable[[int, Fleet], np.ndarray]
) -> Result:
    """Run one autoscaler over the series; account days 2-14."""
    fleet = Fleet(len(mix.cost))
    gpus = np.asarray([p.gpus_per_replica for p in mix.policy.pools])
    hours = WINDOW_S / 3600.0
    gpu_hours = usd = 0.0
    short: list[int] = []
    badly = 0
    for k in range(len(tokens)):
        fleet.order(k, plan(k, fleet))
        if k < WARMUP:
            continue
        gpu_hours += float(fleet.target @ gpus) * hours
        usd += float(fleet.target @ mix.cost) * hours
        missing = mix.short(tokens[k], fleet.ready)
        if missing > 1e-3:
            short.append(k)
            badly += missing > 0.1
    clock_hours = len({k // 6 for k in short})
    return Result(name, gpu_hours, usd, len(short), clock_hours, badly)


def ours(
    policy: Policy, prices: dict[str, float], tokens: np.ndarray, quantile: float
) -> Callable[[int, Fleet], np.ndarray]:
    """This autoscaler: ``decide()`` on the windows before each decision."""
    config = ScalerConfig(
        headroom=1.0, spot_cap=0.5, max_step=8, cooldown_s=600.0, scale_down_window_s=1200.0,
        scale_down_margin=0.05, interval_s=WINDOW_S, forecast_bucket_s=WINDOW_S,
        forecast=ForecastConfig(quantile=quantile),
    )  # fmt: skip
    out = policy.models[MODEL].expected_output_tokens
    requests = tokens / out * WINDOW_S
    state = [ScalerState()]

    def plan(k: int, fleet: Fleet) -> np.ndarray:
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
        return np.asarray([c.target for c in result.changes], dtype=np.intp)

    return plan


def reactive(mix: Mix, tokens: np.ndarray) -> Callable[[int, Fleet], np.ndarray]:
    """Capacity for the last window's load at the target utilisation."""

    def plan(k: int, fleet: Fleet) -> np.ndarray:
        return mix.cheapest(tokens[k - 1] / UTILISATION) if k else fleet.target

    return plan


def oracle(mix: Mix, tokens: np.ndarray) -> Callable[[int, Fleet], np.ndarray]:
    """Exactly each window's cheapest mix, ordered one lead time ahead."""
    need = [mix.cheapest(t) for t in tokens]

    def plan(k: int, fleet: Fleet) -> np.ndarray:
        return np.maximum(need[k], need[min(k + 1, len(need) - 1)])

    return plan


def forecast_rows(rate: np.ndarray, quantile: float = 0.95) -> list[tuple[str, ...]]:
    """MAPE of the point forecast, coverage of the upper quantile and mean upper/actual,
    at 10 and 20 minutes ahead, for this forecast and two baselines with the same
    conformal upper band (the quantile of each method's own past log errors, 3 days)."""
    n = len(rate)
    calib = int(3 * 86_400 / WINDOW_S)
    rows = []
    for h in (1, 2):
        origins = np.arange(WARMUP, n - h + 1)  # data up to origin - 1 is known
        actual = rate[origins + h - 1]
        points: dict[str, np.ndarray] = {}
        uppers: dict[str, np.ndarray] = {}
        ours_fc = [forecast_rate(rate[:i], T0, WINDOW_S, h, ForecastConfig(quantile=quantile))
                   for i in origins]  # fmt: skip
        points["this forecast"] = np.asarray([f.median[h - 1] for f in ours_fc])
        uppers["this forecast"] = np.asarray([f.upper[h - 1] for f in ours_fc])
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


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quantiles", default="0.9,0.95,0.99", help="forecast upper quantiles to replay"
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
    print("\nforecast, rolling origin over days 2-14 (upper = q95):\n")
    print(table(("ahead", "method", "MAPE", "q95 coverage", "upper/actual"), forecast_rows(rate)))
    results = [
        replay("oracle (knows the future)", tokens, mix, oracle(mix, tokens)),
        replay(f"reactive ({UTILISATION:.0%} target)", tokens, mix, reactive(mix, tokens)),
    ]
    for q in (float(x) for x in args.quantiles.split(",")):
        plan = ours(policy, prices, tokens, q)
        results.append(replay(f"this autoscaler (q{q * 100:g})", tokens, mix, plan))
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


if __name__ == "__main__":
    main()
