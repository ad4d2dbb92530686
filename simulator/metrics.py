"""What a run measured: costs, SLO attainment, latencies and shares, in total and over time.

Only the trace's requests (not the warm-up) count, and replicas are billed over
``[0, horizon]``. A request that never finished misses its SLO.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from base.types import BoolArray, FloatArray
from simulator.engine import RunResult, Workload
from simulator.spec import FleetSpec


@dataclass(frozen=True)
class Summary:
    """One policy's totals. USD; attainment as fractions; latencies in ms; goodput per s.

    ``usd_per_mtok`` is provisioned USD per million tokens (prompt + output) served;
    ``gap`` is provisioned cost over the LP bound minus 1 and ``gap_integer`` over the
    integer bound (None without that bound).
    """

    policy: str
    requests: int
    provisioned_usd: float
    attributed_usd: float
    usd_per_mtok: float
    attributed_usd_per_mtok: float
    slo_attainment: float
    ttft_attainment: float
    tpot_attainment: float
    goodput_rps: float
    goodput_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    provider_share: dict[str, float]
    pool_share: dict[str, float]
    unfinished: int
    gap: float | None
    gap_integer: float | None = None


@dataclass(frozen=True, eq=False)
class Series:
    """Over time: per window (end s) provisioned USD and SLO attainment (by arrival); per
    scaler tick (s) and pool, utilisation (running / batch slots of ready replicas) and
    billed replicas."""

    window_end_s: FloatArray
    window_usd: FloatArray
    window_attainment: FloatArray
    tick_s: FloatArray
    utilisation: FloatArray
    billed: FloatArray


def _percentile_ms(values_s: FloatArray, q: float) -> float:
    """Nearest-rank percentile in ms (inf where it lands on an unfinished request)."""
    if len(values_s) == 0:
        return float("nan")
    return float(np.percentile(values_s, q, method="inverted_cdf")) * 1000.0


def latencies(spec: FleetSpec, work: Workload, run: RunResult) -> tuple[FloatArray, FloatArray]:
    """TTFT (client-side: queue + prefill + RTT) and mean TPOT, s, of measured requests;
    inf where a request did not finish, TPOT 0 for single-token outputs."""
    m = slice(work.n_warm, None)
    pool = np.maximum(run.pool_of[m], 0)
    rtt = spec.rtt_s[work.client[m], pool]
    ttft = np.nan_to_num(run.first_s[m] - work.arrival_s[m], nan=np.inf) + rtt
    steps = work.output_tokens[m] - 1
    decode = np.nan_to_num(run.done_s[m] - run.first_s[m], nan=np.inf)
    tpot = np.where(steps > 0, decode / np.maximum(steps, 1), 0.0)
    return ttft, tpot


def servable(spec: FleetSpec, work: Workload) -> BoolArray:
    """Per measured request: some pool its client may use meets its TTFT alone (RTT +
    prefill) and the TPOT SLO with one sequence running. What no policy can beat."""
    m = slice(work.n_warm, None)
    ttft_ms = (spec.rtt_s[work.client[m]] + work.prefill_s[m]) * 1000.0
    tpot_ok = np.asarray([pr.tpot_base_ms <= spec.slo.tpot_ms for pr in spec.profiles])
    out: BoolArray = ((ttft_ms <= spec.slo.ttft_ms + 1e-6) & tpot_ok[None, :]).any(axis=1)
    return out


def attainable(spec: FleetSpec, work: Workload) -> float:
    """The attainable SLO attainment: the share of measured requests ``servable``."""
    ok = servable(spec, work)
    return float(ok.mean()) if len(ok) else 1.0


def window_cost(spec: FleetSpec, run: RunResult, edges: FloatArray) -> FloatArray:
    """Provisioned USD per window between consecutive ``edges`` (s)."""
    start, end = run.replica_start_s[:, None], run.replica_end_s[:, None]
    overlap = np.clip(
        np.minimum(end, edges[None, 1:]) - np.maximum(start, edges[None, :-1]), 0, None
    )
    price = spec.usd_per_replica_hour[run.replica_pool][:, None] / 3600.0
    out: FloatArray = (overlap * price).sum(axis=0)
    return out


def summarize(
    spec: FleetSpec,
    work: Workload,
    run: RunResult,
    window_s: float = 60.0,
    bound_usd: float | None = None,
    integer_bound_usd: float | None = None,
) -> tuple[Summary, Series]:
    """Totals and time series of ``run``; gaps against the bounds given (USD)."""
    m = slice(work.n_warm, None)
    horizon = max(work.horizon_s, 1e-9)
    ttft, tpot = latencies(spec, work, run)
    # A nanosecond of slack keeps float rounding from failing a request right at the SLO.
    ok_ttft = ttft * 1000.0 <= spec.slo.ttft_ms + 1e-6
    ok_tpot = tpot * 1000.0 <= spec.slo.tpot_ms + 1e-6
    ok = ok_ttft & ok_tpot
    pool = run.pool_of[m]
    served = pool >= 0
    tokens = (work.prompt_tokens[m] + work.output_tokens[m]).astype(np.float64)
    attributed = float((tokens[served] * spec.usd_per_token[pool[served]]).sum())
    edges = np.append(np.arange(0.0, horizon, window_s), horizon)
    cost = window_cost(spec, run, edges)
    provisioned = float(cost.sum())
    n = len(ttft)
    by_pool = np.bincount(pool[served], minlength=spec.size) / max(n, 1)
    providers = sorted(set(spec.providers))
    shares = {
        prov: float(sum(by_pool[p] for p in range(spec.size) if spec.providers[p] == prov))
        for prov in providers
    }
    win = np.minimum((work.arrival_s[m] / window_s).astype(np.intp), len(edges) - 2)
    hits = np.bincount(win, weights=ok.astype(np.float64), minlength=len(edges) - 1)
    count = np.bincount(win, minlength=len(edges) - 1)
    slots = spec.batch_slots[None, :] * run.ready
    util = np.divide(run.running, slots, out=np.zeros_like(run.running), where=slots > 0)
    finite = np.isfinite(ttft)
    total_tokens = max(float(tokens.sum()), 1.0)
    summary = Summary(
        policy=run.policy,
        requests=n,
        provisioned_usd=provisioned,
        attributed_usd=attributed,
        usd_per_mtok=provisioned / total_tokens * 1e6,
        attributed_usd_per_mtok=attributed / total_tokens * 1e6,
        slo_attainment=float(ok.mean()),
        ttft_attainment=float(ok_ttft.mean()),
        tpot_attainment=float(ok_tpot.mean()),
        goodput_rps=float(ok.sum()) / horizon,
        goodput_tokens_per_s=float(work.output_tokens[m][ok].sum()) / horizon,
        ttft_p50_ms=_percentile_ms(ttft, 50),
        ttft_p99_ms=_percentile_ms(ttft, 99),
        tpot_p50_ms=_percentile_ms(tpot[finite], 50),
        provider_share=shares,
        pool_share={spec.pool_ids[p]: float(by_pool[p]) for p in range(spec.size)},
        unfinished=int((~np.isfinite(run.done_s[m])).sum()),
        gap=None if not bound_usd else provisioned / bound_usd - 1.0,
        gap_integer=None if not integer_bound_usd else provisioned / integer_bound_usd - 1.0,
    )
    series = Series(
        window_end_s=edges[1:],
        window_usd=cost,
        window_attainment=np.divide(hits, count, out=np.full(len(count), np.nan), where=count > 0),
        tick_s=run.tick_s,
        utilisation=util,
        billed=run.billed,
    )
    return summary, series
