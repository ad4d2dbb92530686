"""From recorded demand to what must be covered: one forecast per model and client region.

Demand is counted in tokens/s: output tokens for chat models (what a replica's goodput
is measured in), input tokens for embedding models. Two spans matter. Until the model's
longest pool provisioning time (the lead time) has passed, only the replicas ready now
can serve, so scale-downs must leave them enough (``upper_now``). What is ordered now
serves from then until the next cycle's order lands, one cycle later (``mean`` and
``upper``).

Windows where a line saw no request although the windows around it were busy are
missing telemetry, not idle demand (``autoscaler.gaps``): they reach the forecast as
NaN. Each line's upper bound is corrected by how well it covered what happened
(``autoscaler.calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from autoscaler.calibrate import LineCalibration
from autoscaler.config import ScalerConfig
from autoscaler.forecast import Forecast, forecast_rate
from autoscaler.gaps import missing_windows
from autoscaler.pooling import pooled_share
from base.types import FloatArray
from live.demand_table import DemandSeries
from router.policy import Policy

__all__ = ["DemandHistory", "LineForecast", "forecast_lines", "lead_time_s", "line_key"]

DEFAULT_PROVISIONING_S = 300.0
_FIELDS = ("requests", "prompt_tokens", "output_tokens", "slo_misses")


@dataclass(frozen=True)
class DemandHistory:
    """Recorded demand up to ``now_s`` (unix s, the decision time) per (model, client
    region). Buckets that end after ``now_s`` are ignored as incomplete."""

    now_s: float
    series: Mapping[tuple[str, str], DemandSeries]


@dataclass(frozen=True, slots=True)
class LineForecast:
    """Forecast demand of one (model, client region), tokens/s.

    ``mean``/``upper``: the highest from when capacity ordered now is ready until the
    next order would be (lead time to lead time + one cycle); ``upper_now``: the highest
    until capacity ordered now is ready (what ready replicas must cover meanwhile).
    ``prompt_tokens``: mean prompt length (tokens), for the TTFT check.
    ``calibration``: the line's upper-quantile correction after this cycle (already
    applied to ``upper`` and ``upper_now``), for the next state.
    ``output_tokens``: mean output length (tokens per request; 0: unknown), which with
    ``prompt_tokens`` prices the batch-slot time of a token (``goodput.slot_load``).
    ``pooled``: ``mean`` plus the share of this line's margin its model's lines need
    together (``autoscaler.pooling``; NaN: not pooled); ``upper`` stays the line's own
    bound, which the calibration scores.
    ``observed_s``: seconds of history behind the forecast with demand recorded
    (missing windows not counted); an unreliable forecast (the recent peak) is only as
    good as the span it was taken over.
    """

    model: str
    client_region: str
    mean: float
    upper: float
    upper_now: float
    prompt_tokens: float
    reliable: bool
    calibration: LineCalibration = field(default_factory=LineCalibration)
    output_tokens: float = 0.0
    pooled: float = math.nan
    observed_s: float = 0.0

    @property
    def pooled_upper(self) -> float:
        """The upper bound this line needs when its model's lines share capacity
        (``autoscaler.pooling``): its mean plus the pooled share of its margin; its own
        ``upper`` when not pooled."""
        return self.upper if math.isnan(self.pooled) else self.pooled


def lead_time_s(policy: Policy, model: str) -> float:
    """Longest provisioning time (s) of the model's pools (default 300 s where unset)."""
    leads = [
        p.scaling.provisioning_s if p.scaling else DEFAULT_PROVISIONING_S
        for p in policy.pools
        if p.model == model
    ]
    return max(leads, default=DEFAULT_PROVISIONING_S)


def _on_grid(
    values: FloatArray, series: DemandSeries, start_s: float, n: int, bucket_s: float
) -> FloatArray:
    """Sum ``values`` (aligned with ``series``) into the ``n`` buckets of ``bucket_s``
    from ``start_s``; recorded buckets outside the grid are dropped."""
    out = np.zeros(n)
    if len(values) == 0:
        return out
    centres = series.start_s + (np.arange(len(values)) + 0.5) * series.bucket_s
    index = np.floor((centres - start_s) / bucket_s).astype(np.intp)
    inside = (index >= 0) & (index < n)
    np.add.at(out, index[inside], values[inside])
    return out


def line_key(model: str, client_region: str) -> str:
    """The key of a demand line in ``ScalerState.calibration``."""
    return f"{model}|{client_region}"


def forecast_lines(
    history: DemandHistory,
    policy: Policy,
    config: ScalerConfig,
    calibration: Mapping[str, LineCalibration] | None = None,
) -> list[LineForecast]:
    """One forecast per (model, client region) with recorded demand, plus a zero line
    (in the default client region) for each model with none. A client region the
    policy does not know counts as the default one. History starts at the first bucket
    with any request of any model, so a model nobody asks for is known to be idle only
    once telemetry has run long enough. ``calibration``: each line's correction from
    the last cycle (by ``line_key``; absent: none yet)."""
    fb = config.forecast_bucket_s
    end = math.floor(history.now_s / fb) * fb
    n = max(int(config.history_s / fb), 1)
    start = end - n * fb
    default = policy.routing.default_client_region
    grids: dict[tuple[str, str], dict[str, FloatArray]] = {}
    for (model, region), series in sorted(history.series.items()):
        if model not in policy.models:
            continue
        key = (model, region if region in policy.client_regions else default)
        grid = grids.setdefault(key, {f: np.zeros(n) for f in _FIELDS})
        for f in _FIELDS:
            grid[f] += _on_grid(getattr(series, f), series, start, n, fb)
    for model in policy.models:
        if not any(m == model for m, _ in grids):
            grids[(model, default)] = {f: np.zeros(n) for f in _FIELDS}
    busy = [np.flatnonzero(g["requests"]) for g in grids.values()]
    first = min((int(b[0]) for b in busy if len(b)), default=n)
    out: list[LineForecast] = []
    fc_config = config.forecast
    # Per model: each reliable line's rate and uncorrected margin, for risk pooling.
    pooling: dict[str, list[tuple[FloatArray, float]]] = {}
    for (model, region), grid in grids.items():
        embedding = policy.models[model].kind == "embedding"
        tokens = grid["prompt_tokens" if embedding else "output_tokens"][first:]
        rate = np.where(missing_windows(grid["requests"][first:], fb), np.nan, tokens / fb)
        since_s = start + first * fb
        cal = (calibration or {}).get(line_key(model, region), LineCalibration())
        cal = cal.settle(
            rate, since_s, fb, fc_config.quantile, fc_config.calibration_gain,
            fc_config.calibration_bounds,
        )  # fmt: skip
        ready_s = history.now_s + lead_time_s(policy, model)
        until = ready_s + config.interval_s
        horizon = max(math.ceil((until - end) / fb), 1)
        fc: Forecast = forecast_rate(rate, since_s, fb, horizon, fc_config)
        mean, upper = fc.peak(until, since_s=ready_s)
        _, upper_now = fc.peak(ready_s)
        if fc.reliable:
            pooling.setdefault(model, []).append((rate, upper - mean))
        if fc.reliable and fc_config.calibration_gain > 0:
            # An unreliable forecast is the recent peak, not the model: neither
            # corrected nor scored.
            upper, upper_now = max(upper * cal.factor, mean), upper_now * cal.factor
            cal = cal.issue(ready_s, until, upper)
        day = max(n - int(86_400 / fb), first)
        requests = float(grid["requests"][day:].sum())
        prompt = float(grid["prompt_tokens"][day:].sum())
        prompt_mean = prompt / requests if requests else float(config.default_prompt_tokens)
        output_mean = float(grid["output_tokens"][day:].sum()) / requests if requests else 0.0
        line = LineForecast(model, region, mean, upper, upper_now, prompt_mean, fc.reliable)
        observed_s = float(np.isfinite(rate).sum()) * fb
        out.append(replace(line, calibration=cal, output_tokens=output_mean, observed_s=observed_s))
    shares = {}
    for model, seen in pooling.items():
        ready_s = history.now_s + lead_time_s(policy, model)
        until = ready_s + config.interval_s
        horizon = max(math.ceil((until - end) / fb), 1)
        rates, margins = [r for r, _ in seen], [m for _, m in seen]
        since_s = start + first * fb
        span = (ready_s, until)
        shares[model] = pooled_share(rates, margins, since_s, fb, horizon, span, fc_config)
    return [
        replace(ln, pooled=ln.mean + shares[ln.model] * (ln.upper - ln.mean))
        if ln.reliable and ln.model in shares
        else ln
        for ln in out
    ]
