"""The achievable reference: the cheapest fleet, found by a search fixed in advance, that
reaches the target attainment when replayed in the same simulator. Not a bound: a
better fleet may exist; it says what a fleet that knew the trace could have cost.

The search, the same for every trace: two clairvoyant plans (replicas per window), the
integer bound's (decode tokens only) and the valid relaxation's (prefill too), each with
its goodput derated by each of ``DERATINGS`` (replicas ÷ derating, launched in time by
``HindsightScaler``); fixed fleets of ``FIXED_MULTIPLES`` × each plan's mean replicas per
pool (rounded up, never changed); and every pool at its max. Each is replayed with
skyroute's routing; the cheapest that reaches ``target`` × the attainable share is the
reference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from base.types import FloatArray, IntArray
from simulator.bound import Bound, lower_bound
from simulator.compare import policy_rng
from simulator.engine import SimConfig, Workload, simulate
from simulator.hindsight import HindsightScaler
from simulator.metrics import attainable, summarize
from simulator.policies import RoutingPolicy
from simulator.relaxation import Relaxation, relaxation_bound
from simulator.scaler import Scaler, StaticScaler
from simulator.spec import FleetSpec, fluid_goodput_tokens_per_s

DERATINGS: tuple[float, ...] = (1.0, 0.95, 0.9, 0.8, 0.6)
FIXED_MULTIPLES: tuple[float, ...] = (1.0, 2.0)


@dataclass(frozen=True)
class Candidate:
    """One fleet tried: its label, provisioned USD and SLO attainment (fraction)."""

    label: str
    usd: float
    attainment: float


@dataclass(frozen=True)
class Reference:
    """The cheapest candidate reaching ``threshold`` (None if none did), and every one."""

    best: Candidate | None
    threshold: float
    candidates: tuple[Candidate, ...]


def _replay(
    spec: FleetSpec, work: Workload, scaler: Scaler, config: SimConfig, label: str
) -> Candidate:
    router = RoutingPolicy.create("skyroute", spec, policy_rng(config.seed, "skyroute"))
    summary, _ = summarize(spec, work, simulate(spec, work, router, scaler, config))
    return Candidate(label, summary.provisioned_usd, summary.slo_attainment)


def spill(spec: FleetSpec, replicas: FloatArray) -> FloatArray:
    """``replicas`` ([window, pool]) with each pool capped at its max and the excess, in
    fluid goodput, added to the other pools from the cheapest per token up."""
    goodput = np.asarray([fluid_goodput_tokens_per_s(pr, spec.slo.tpot_ms) for pr in spec.profiles])
    top = spec.max_replicas.astype(np.float64)
    out: FloatArray = np.minimum(replicas, top)
    tokens = ((replicas - out) * goodput).sum(axis=1)
    for p in np.argsort(spec.usd_per_token, kind="stable"):
        if goodput[p] <= 0:
            continue
        take = np.minimum(top[p] - out[:, p], tokens / goodput[p])
        out[:, p] += take
        tokens = tokens - take * goodput[p]
    return out


def _fixed(
    spec: FleetSpec, work: Workload, replicas: IntArray, config: SimConfig, label: str
) -> Candidate:
    fleet = replace(spec, initial_replicas=replicas)
    return _replay(fleet, work, StaticScaler(), config, label)


def achievable_reference(
    spec: FleetSpec,
    work: Workload,
    config: SimConfig,
    target: float = 0.99,
    plan: Bound | None = None,
    window_s: float = 60.0,
    relaxed: Relaxation | None = None,
) -> Reference:
    """Run the search (module docstring) and return the cheapest fleet reaching
    ``target`` × ``metrics.attainable``. ``plan`` and ``relaxed``: the integer bound and
    the relaxation, if already solved. Raises SimulationError if a solve fails."""
    plan = plan or lower_bound(spec, work, window_s, integer=True)
    relaxed = relaxed or relaxation_bound(spec, work, target, window_s)
    threshold = target * attainable(spec, work)
    out: list[Candidate] = []
    plans = (("integer plan", plan.replicas, plan.window_s),
             ("relaxation plan", relaxed.replicas, relaxed.window_s))  # fmt: skip
    for name, replicas, step in plans:
        for derate in DERATINGS:
            derated = spill(spec, replicas / derate)
            scaler = HindsightScaler(derated, step, spec.provisioning_s)
            out.append(_replay(spec, work, scaler, config, f"{name} / {derate:g}"))
        mean: FloatArray = replicas.mean(axis=0)
        for multiple in FIXED_MULTIPLES:
            fixed: IntArray = np.clip(
                np.ceil(mean * multiple - 1e-6), spec.min_replicas, spec.max_replicas
            ).astype(np.intp)
            label = f"fixed {multiple:g} x {name} mean {fixed.tolist()}"
            out.append(_fixed(spec, work, fixed, config, label))
    out.append(_fixed(spec, work, spec.max_replicas, config, "every pool at its max"))
    ok = [c for c in out if c.attainment >= threshold - 1e-9]
    best = min(ok, key=lambda c: c.usd) if ok else None
    return Reference(best, threshold, tuple(out))
