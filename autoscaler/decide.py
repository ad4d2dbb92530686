"""``decide()``: from demand history, pool status, prices and policy to a plan. Pure.

Each cycle:

1. forecast every (model, client region) over the horizon (``autoscaler.demand``);
2. correct each pool's goodput from what it measured while the SLO held;
3. recommend the cheapest mix for the forecast plus a margin (``autoscaler.milp``),
   and remember it for the stabilisation window. The spot cap applies to the forecast
   mean: the margin up to the upper quantile may sit on the cheapest pools, spot too.
   A model's lines get the share of their margins they need together
   (``autoscaler.pooling``); a line's tokens are priced by the batch-slot time they
   hold on each pool (``goodput.slot_load``), and a pool carries no more of a line than
   the share of its prompts it prefills within the TTFT, if a faster pool can take the rest;
4. plan the cheapest mix within this cycle's bounds: up by at most a step
   (``ScalerConfig.step``); down only after the cooldown, with a reliable forecast or
   demand recorded over at least the lead time (``_settled``), no lower than the
   stabilisation window holds (``autoscaler.stabilise``), and by at most a step. If
   the budget leaves no solution the bounds give way in that order (named in
   ``Plan.relaxed``);
5. make before break: a model's scale-down waits while its ready replicas after it
   would not cover the demand until replicas ordered now are ready.

No I/O and no clock: the time is ``history.now_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.demand import DemandHistory, LineForecast, forecast_lines, lead_time_s, line_key
from autoscaler.fleet import Fleet, PoolStatus, build_fleet
from autoscaler.goodput import slot_load
from autoscaler.milp import MixProblem, MixSolution, solve_mix
from autoscaler.plan import DemandLine, Plan
from autoscaler.reasons import explain
from autoscaler.stabilise import asked_window, stabilise
from autoscaler.state import ScalerState
from base.types import BoolArray, FloatArray, IntArray
from router.policy import Policy

__all__ = ["DEFAULT_CONFIG", "decide"]

DEFAULT_CONFIG = ScalerConfig()


# A pool serves a line if it meets the TTFT target for at least this share of the line's
# requests. Only the mean prompt is recorded, so the share assumes prompt lengths are
# exponential with that mean (the maximum-entropy law for a positive length of known
# mean; the Azure conversation trace's lengths fall off about that fast). Judging by the
# mean alone ruled out every A100 pool at a 12k-token mean although most requests fit.
FEASIBLE_SHARE = 0.5


def served_share(limit_tokens: float, mean_prompt_tokens: float) -> float:
    """Share of requests whose prompt is at most ``limit_tokens`` when prompt lengths are
    exponential with mean ``mean_prompt_tokens``; 0 if the limit is negative."""
    if limit_tokens < 0:
        return 0.0
    if mean_prompt_tokens <= 0:
        return 1.0
    return 1.0 - math.exp(-limit_tokens / mean_prompt_tokens)


def _in_time(fleet: Fleet, lines: Sequence[LineForecast], policy: Policy) -> FloatArray:
    """[pool, line]: share of the line's requests the pool serves within the TTFT target
    (RTT plus prefill, with the router's SLO margin; ``served_share``); 0 where the pool
    serves another model or may not serve the line's client region."""
    keep = 1.0 - policy.routing.slo_headroom
    out = np.zeros((fleet.size, len(lines)))
    for j, line in enumerate(lines):
        rtt = policy.client_regions[line.client_region].rtt_ms
        for i, s in enumerate(fleet.specs):
            if s.model != line.model or s.location not in rtt:
                continue
            slo = policy.slo_classes[policy.models[s.model].default_slo]
            spare_ms = slo.ttft_ms * keep - rtt[s.location]
            limit = spare_ms * s.goodput.prefill_tokens_per_s / 1000.0
            out[i, j] = served_share(limit, line.prompt_tokens)
    return out


def _countable(
    in_time: FloatArray,
    feasible: BoolArray,
    lines: Sequence[LineForecast],
    policy: Policy,
    config: ScalerConfig,
) -> FloatArray:
    """``in_time`` with a serving pool's share read as 1 where the requests it would not
    serve in time are fewer than one per cycle (``interval_s``) at the line's mean rate:
    a plan cannot place a fraction of a request, and a whole faster replica for one
    request an hour (a 13k-token TTFT limit against a 1,155-token mean) is no plan."""
    out = in_time.copy()
    for j, ln in enumerate(lines):
        embedding = policy.models[ln.model].kind == "embedding"
        per_request = ln.prompt_tokens if embedding else ln.output_tokens
        rate = ln.mean / per_request if per_request > 0 else 0.0  # requests/s
        late = (1.0 - in_time[:, j]) * rate * config.interval_s
        out[:, j] = np.where(feasible[:, j] & (late < 1.0), 1.0, in_time[:, j])
    return out


def _upper(line: LineForecast, lines: Sequence[LineForecast], feasible: BoolArray) -> float:
    """The upper bound ``line`` is planned for: its share of the margin its model's
    lines need together (``LineForecast.pooled_upper``) if some pool can serve every one
    of them, so that capacity held for one line's burst can serve another's (the router
    moves the others off it); else its own upper bound."""
    mine = [k for k, ln in enumerate(lines) if ln.model == line.model]
    shared = bool(feasible[:, mine].all(axis=1).any()) if feasible.size else False
    return line.pooled_upper if shared else line.upper


def _load(fleet: Fleet, lines: Sequence[LineForecast], policy: Policy) -> FloatArray:
    """[pool, line]: slot time a token/s of the line uses on the pool, per token/s of
    the pool's goodput (``goodput.slot_load`` of the line's mean prompt and output);
    1 for embedding models, whose goodput is already in the tokens they are asked for."""
    out = np.ones((fleet.size, len(lines)))
    for i, s in enumerate(fleet.specs):
        model = policy.models[s.model]
        if model.kind == "embedding":
            continue
        slo = policy.slo_classes[model.default_slo]
        correction = fleet.corrections.get(s.id, 1.0)
        for j, line in enumerate(lines):
            if line.model == s.model:
                out[i, j] = slot_load(
                    s.goodput, slo, line.prompt_tokens, line.output_tokens, correction
                )
    return out


def _problem(
    fleet: Fleet,
    lines: Sequence[LineForecast],
    in_time: FloatArray,
    load: FloatArray,
    demand: FloatArray,
    firm: FloatArray,
    lower: IntArray,
    upper: IntArray,
    config: ScalerConfig,
) -> MixProblem:
    models = sorted({s.model for s in fleet.specs} | {ln.model for ln in lines})
    return MixProblem(
        cost=fleet.cost,
        goodput=fleet.capacity,
        lower=np.where(fleet.adjustable, lower, fleet.current),
        upper=np.where(fleet.adjustable, np.maximum(upper, lower), fleet.current),
        current=fleet.current,
        spot=fleet.spot,
        pool_model=np.asarray([models.index(s.model) for s in fleet.specs], dtype=np.intp),
        demand=demand,
        line_model=np.asarray([models.index(ln.model) for ln in lines], dtype=np.intp),
        feasible=in_time >= FEASIBLE_SHARE,
        budget_usd_per_hour=config.budget_usd_per_hour,
        spot_cap=config.spot_cap,
        firm=firm,
        load=load,
        in_time=in_time,
    )


def _settled(lines: Sequence[LineForecast], policy: Policy) -> dict[str, bool]:
    """Per model: whether its pools may shrink on this cycle's forecast. A reliable one
    may. So may an unreliable one (the recent observed peak) once every line of the
    model has demand recorded over at least the model's lead time: shrinking to that
    peak, never below the largest recommendation of the stabilisation window, is what a
    reactive scaler (the HPA) does, and a replica held idle for one lead time has cost
    what a boot costs (ski rental). Holding every pool until the forecast settled kept a
    fleet sized for yesterday through the first ``min_buckets`` of telemetry. With less
    recorded (a new deployment, telemetry lost with Redis) the peak may miss demand
    nobody recorded, so the model's pools hold."""
    out = {}
    for model in policy.models:
        lead_s = lead_time_s(policy, model)
        mine = [ln for ln in lines if ln.model == model]
        out[model] = bool(mine) and all(ln.reliable or 0 < ln.observed_s >= lead_s for ln in mine)
    return out


def _make_before_break(
    fleet: Fleet,
    target: IntArray,
    lines: Sequence[LineForecast],
    load: FloatArray,
    config: ScalerConfig,
) -> tuple[IntArray, set[str]]:
    """Undo a model's scale-downs while its ready capacity after them would not cover
    its demand until replicas ordered now are ready (unless undoing them would break
    the budget). A pool's capacity counts at the heaviest ``load`` of the model's lines."""
    out = target.copy()
    waiting: set[str] = set()
    for model in sorted({s.model for s in fleet.specs}):
        members = [i for i, s in enumerate(fleet.specs) if s.model == model]
        shrinking = [i for i in members if out[i] < fleet.current[i]]
        if not shrinking:
            continue
        mine = [j for j, ln in enumerate(lines) if ln.model == model]
        need = sum(lines[j].upper_now * config.headroom for j in mine)
        heaviest = [max((float(load[i, j]) for j in mine), default=1.0) for i in range(len(out))]
        after = sum(fleet.capacity[i] * min(fleet.ready[i], out[i]) / heaviest[i] for i in members)
        kept = float(fleet.cost @ out) + sum(
            float(fleet.cost[i]) * int(fleet.current[i] - out[i]) for i in shrinking
        )
        affordable = config.budget_usd_per_hour is None or kept <= config.budget_usd_per_hour
        if after < need - 1e-6 and affordable:
            for i in shrinking:
                out[i] = fleet.current[i]
            waiting.add(model)
    return out, waiting


def decide(
    history: DemandHistory,
    pools: Sequence[PoolStatus],
    prices: Mapping[str, float],
    policy: Policy,
    state: ScalerState,
    config: ScalerConfig = DEFAULT_CONFIG,
) -> Plan:
    """The plan for ``history.now_s``: a target per policy pool with its reason.

    ``prices``: USD per GPU-hour per pool id (missing or NaN: unknown; such a pool
    keeps its size). A policy pool absent from ``pools`` is unmanaged at its initial
    size. Never raises for bad data: what cannot be planned is held, with a note.
    """
    now = history.now_s
    fleet = build_fleet(pools, prices, policy, state, config, now)
    lines = forecast_lines(history, policy, config, state.calibration)
    # A pool serves a line if it meets the TTFT for at least FEASIBLE_SHARE of its
    # requests, and then no more than that share of it (the longer prompts need a
    # faster prefill: MixProblem.in_time).
    in_time = _in_time(fleet, lines, policy)
    feasible = in_time >= FEASIBLE_SHARE
    in_time = _countable(in_time, feasible, lines, policy, config)
    load = _load(fleet, lines, policy)
    required = np.asarray(
        [_upper(ln, lines, feasible) * config.headroom for ln in lines],
        dtype=np.float64,
    )
    # The spot cap holds for the expected demand; the margin above it may go to spot.
    firm = np.asarray([ln.mean * config.headroom for ln in lines], dtype=np.float64)
    settled = _settled(lines, policy)

    def problem(lower: IntArray, upper: IntArray, demand: FloatArray) -> MixProblem:
        return _problem(fleet, lines, in_time, load, demand, firm, lower, upper, config)

    raw_upper = np.where(fleet.blocked, np.clip(fleet.current, fleet.low, fleet.high), fleet.high)
    asked_now = required * (1.0 + config.scale_down_margin)
    raw = solve_mix(problem(fleet.low, raw_upper, asked_now))
    asked, peak, known_since = asked_window(lines, asked_now, state, config, now)
    bounds = stabilise(
        fleet,
        raw,
        settled,
        state,
        config,
        now,
        lambda within: solve_mix(problem(np.minimum(fleet.low, within), within, peak)),
        known_since,
    )
    step_floor = np.maximum(fleet.low, fleet.current - config.step(fleet.current))
    damped = np.maximum(step_floor, np.minimum(bounds.stable, fleet.current))
    # Each attempt's lower bounds; if one leaves no solution (the budget forces a
    # shrink), the constraint it adds gives way next.
    # A cooling pool may not shrink, but one below its minimum (a new, empty node group)
    # still grows to it.
    held = np.maximum(fleet.current, fleet.low)
    attempts = [
        ("cooldown and stabilisation", np.where(bounds.cooling, held, damped)),
        ("max step", step_floor),
        ("", fleet.low),
    ]
    solution: MixSolution | None = None
    relaxed: list[str] = []
    for name, lower in attempts:
        solution = solve_mix(problem(np.minimum(lower, bounds.up), bounds.up, required))
        if solution is not None:
            break
        relaxed.append(name)
    notes: list[str] = []
    if solution is None:
        relaxed = []
        notes.append("no mix fits the budget with pinned pools and minimum sizes: holding")
        solution = MixSolution(
            fleet.current,
            np.zeros(feasible.shape),
            required.copy(),
            float(fleet.cost @ fleet.current),
        )
    target, waiting = _make_before_break(fleet, solution.replicas, lines, load, config)
    demand = tuple(
        DemandLine(
            model=ln.model,
            client_region=ln.client_region,
            mean=ln.mean,
            upper=ln.upper,
            required=float(required[j]),
            covered=float(solution.assigned[:, j].sum()),
            reliable=ln.reliable,
            pools=tuple(fleet.specs[i].id for i in np.flatnonzero(feasible[:, j])),
        )
        for j, ln in enumerate(lines)
    )
    changes = explain(fleet, target, bounds, raw, solution, demand, waiting, state, config, now)
    last_up = dict(state.last_up_s)
    last_down = dict(state.last_down_s)
    for change in changes:
        if change.delta > 0:
            last_up[change.pool_id] = now
        elif change.delta < 0:
            last_down[change.pool_id] = now
    new_state = state.model_copy(
        update={
            "updated_s": now,
            "cycles": state.cycles + 1,
            "recommendations": dict(bounds.recommendations),
            "asked": asked,
            "corrections": dict(fleet.corrections),
            "last_up_s": last_up,
            "last_down_s": last_down,
            "calibration": {line_key(ln.model, ln.client_region): ln.calibration for ln in lines},
        }
    )
    return Plan(
        now_s=now,
        changes=tuple(changes),
        demand=demand,
        usd_per_hour_before=float(fleet.cost @ fleet.current),
        usd_per_hour_after=float(fleet.cost @ target),
        budget_usd_per_hour=config.budget_usd_per_hour,
        state=new_state,
        relaxed=tuple(relaxed),
        notes=tuple(notes),
    )
