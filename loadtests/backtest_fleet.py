"""The back-test's world: the 70b fleet with catalog prices, and a fleet model that boots,
serves and bills replicas window by window (see backtest_autoscaler.py). The demand
series are read in backtest_series.py.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from autoscaler.goodput import goodput_tokens_per_s, slot_load
from autoscaler.milp import MixProblem, solve_mix
from base.types import FloatArray, IntArray
from live.policy_file import load_policy
from router.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
MODEL = "llama-3.1-70b"
WINDOW_S = 600.0
T0 = 1_700_438_400.0  # a Monday 00:00 UTC; the series' own clock starts at 0
SHARES = {"aws:us-east-1": 0.60, "gcp:us-central1": 0.25, "aws:eu-west-1": 0.15}
PROMPT_TOKENS = 1155.0
WARMUP = 144  # one day of windows
MAX_REPLICAS = 40


def backtest_policy(max_replicas: int = MAX_REPLICAS) -> Policy:
    """The demo policy, cut down to the 70b model's pools, with scaling sections and
    0 .. ``max_replicas`` replicas per pool."""
    doc = load_policy(ROOT / "skyroute" / "fleet" / "demo-policy.yaml").model_dump(mode="json")
    doc["models"] = {MODEL: doc["models"][MODEL]}
    doc["pools"] = [p for p in doc["pools"] if p["model"] == MODEL]
    for pool in doc["pools"]:
        pool["replicas"] = {"min": 0, "max": max_replicas, "initial": 0}
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
    out: dict[str, float] = {}
    for pool in policy.pools:
        on_demand, spot_usd = rows[(pool.location, pool.price.instance_type)]
        usd = spot_usd if pool.price.purchase == "spot" else on_demand
        out[pool.id] = usd / pool.gpus_per_replica
    return out


def demand_tokens(rate: FloatArray, policy: Policy) -> FloatArray:
    """Output tokens/s per (window, client region)."""
    out = policy.models[MODEL].expected_output_tokens
    return np.outer(rate, list(SHARES.values())) * out


@dataclass
class Fleet:
    """Replicas per pool: ordered (billed) and ready (serving), with orders in flight
    as (window it is ready in, pool, replicas)."""

    size: int
    target: IntArray = field(init=False)
    ready: IntArray = field(init=False)
    booting: list[tuple[int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.target = np.zeros(self.size, dtype=np.intp)
        self.ready = np.zeros(self.size, dtype=np.intp)

    def start(self, window: int) -> None:
        """The start of ``window``: orders due by then are ready, before anyone decides."""
        for item in [b for b in self.booting if b[0] <= window]:
            self.booting.remove(item)
            self.ready[item[1]] += item[2]

    def order(self, window: int, new: IntArray) -> None:
        """Apply targets at the start of ``window``: growth is ready next window, a
        shrink cancels orders in flight first, then removes ready replicas."""
        self.start(window)
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


class Mix:
    """The cheapest mix (and shortfall checks) for the back-test fleet.

    Capacity is counted as ``decide()`` counts it, so that the oracle, the reactive
    scaler and this autoscaler are judged on one capacity model: ``goodput`` is each
    pool's output tokens/s per replica within the SLO (``goodput_tokens_per_s``)
    divided by the batch-slot time a request of the back-test's mix holds per output
    token (``goodput.slot_load`` of ``PROMPT_TOKENS`` and the model's expected output),
    and ``load`` is that slot load (1.0013 on the H100 pools, 1.0044 on the A100 pools).
    """

    def __init__(self, policy: Policy, prices: dict[str, float], spot_cap: float) -> None:
        self.policy = policy
        pools = policy.pools
        model = policy.models[MODEL]
        slo = policy.slo_classes[model.default_slo]
        keep = 1.0 - policy.routing.slo_headroom
        self.cost = np.asarray([prices[p.id] * p.gpus_per_replica for p in pools])
        # Decode-only goodput would credit a replica with the prefill slot time the
        # planner pays for, and the oracle would be sized on capacity that is not there.
        self.load = np.asarray([
            slot_load(p.goodput, slo, PROMPT_TOKENS, model.expected_output_tokens)
            for p in pools
        ])  # fmt: skip
        self.goodput = np.asarray([goodput_tokens_per_s(p.goodput, slo) for p in pools]) / self.load
        self.feasible = np.asarray([
            [p.location in policy.client_regions[r].rtt_ms
             and policy.client_regions[r].rtt_ms[p.location]
             + PROMPT_TOKENS * 1000 / p.goodput.prefill_tokens_per_s <= slo.ttft_ms * keep
             for r in SHARES] for p in pools
        ])  # fmt: skip
        self.spot = np.asarray([p.price.purchase == "spot" for p in pools])
        self.spot_cap = spot_cap
        self.max_replicas = np.asarray([p.replicas.max for p in pools], dtype=np.intp)

    def problem(
        self,
        demand: FloatArray,
        low: IntArray,
        high: IntArray,
        firm: FloatArray | None = None,
    ) -> MixProblem:
        n = len(self.cost)
        return MixProblem(
            cost=self.cost, goodput=self.goodput, lower=low, upper=high,
            current=np.zeros(n, dtype=np.intp), spot=self.spot,
            pool_model=np.zeros(n, dtype=np.intp), demand=demand,
            line_model=np.zeros(len(demand), dtype=np.intp), feasible=self.feasible,
            spot_cap=self.spot_cap, firm=firm,
        )  # fmt: skip

    def cheapest(self, demand: FloatArray, firm: FloatArray | None = None) -> IntArray:
        """Replicas per pool of the cheapest mix for ``demand`` (tokens/s per client
        region), with the spot cap on ``firm`` (default: all of ``demand``)."""
        low = np.zeros(len(self.cost), dtype=np.intp)
        solution = solve_mix(self.problem(demand, low, self.max_replicas, firm))
        assert solution is not None
        return solution.replicas

    def short(self, demand: FloatArray, ready: IntArray) -> float:
        """The share of ``demand`` that ``ready`` replicas cannot serve within the SLO
        (no spot cap here: whatever runs may serve)."""
        problem = replace(self.problem(demand, ready, ready), spot_cap=1.0)
        solution = solve_mix(problem)
        assert solution is not None
        return float(solution.shortfall.sum()) / max(float(demand.sum()), 1e-9)
