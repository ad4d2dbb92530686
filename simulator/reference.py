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

A candidate's bill has a floor known before it is replayed: the replicas its scaler keeps
booting or ready from each tick to the next (``CandidateFleet.schedule``,
``cost_floor``; draining replicas only add to it). Candidates are replayed from the
lowest floor up; one whose schedule was already replayed under another label is not
replayed again, and one whose floor is at least the cheapest qualifying bill found so
far is not replayed at all, as it cannot be cheaper. The answer is the full search's.
"""

from __future__ import annotations

import math
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
from simulator.scaler import FleetState, Scaler, StaticScaler
from simulator.spec import FleetSpec, fluid_goodput_tokens_per_s

DERATINGS: tuple[float, ...] = (1.0, 0.95, 0.9, 0.8, 0.6)
FIXED_MULTIPLES: tuple[float, ...] = (1.0, 2.0)


@dataclass(frozen=True)
class Candidate:
    """One fleet of the search: its label, provisioned USD and SLO attainment (fraction).
    A candidate that was not replayed (``replayed`` False) has its cost floor as ``usd``
    and no attainment (NaN)."""

    label: str
    usd: float
    attainment: float
    replayed: bool = True


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


@dataclass(frozen=True, eq=False)
class CandidateFleet:
    """A candidate before it is replayed: a clairvoyant plan (``hindsight``: mean
    replicas per window, rounded up to whole ones by ``HindsightScaler``) or a fixed
    fleet (one row of whole replicas)."""

    label: str
    replicas: FloatArray
    window_s: float
    hindsight: bool

    def scaler(self, spec: FleetSpec) -> Scaler:
        """The scaler that runs this fleet (the fleet itself starts as ``spec``'s)."""
        if self.hindsight:
            return HindsightScaler(self.replicas, self.window_s, spec.provisioning_s)
        return StaticScaler()

    def replay(self, spec: FleetSpec, work: Workload, config: SimConfig) -> Candidate:
        """Replay the workload on this fleet with skyroute's routing."""
        if self.hindsight:
            return _replay(spec, work, self.scaler(spec), config, self.label)
        fleet = replace(spec, initial_replicas=self.replicas[0].astype(np.intp))
        return _replay(fleet, work, self.scaler(fleet), config, self.label)

    def schedule(self, spec: FleetSpec, work: Workload, config: SimConfig) -> FloatArray:
        """What the replay will keep booting or ready, without replaying: rows of (from
        s, to s, then each pool's replicas) within ``[0, horizon]``. A fixed fleet keeps
        its replicas throughout. A plan's scaler sets each pool's booting + ready
        replicas at every tick (``engine.simulate``'s schedule: every ``config.tick_s``
        from the workload's start) and depends on nothing else, and until the next tick
        none of them is released. Two fleets with one schedule replay alike. Pure."""
        horizon = work.horizon_s
        if not self.hindsight:
            kept = np.clip(self.replicas[0], spec.min_replicas, spec.max_replicas)
            return np.concatenate(([0.0, horizon], kept))[None, :]
        scaler, state = self.scaler(spec), FleetState.static(spec)
        ticks, tick = [], work.start_s + config.tick_s
        while tick <= horizon + config.tick_s:  # the engine's recurrence, to the bit
            ticks.append(tick)
            tick += config.tick_s
        rows = [
            np.concatenate(([max(now, 0.0), min(then, horizon)], scaler.decide(now, (), state)))
            for now, then in zip(ticks, [*ticks[1:], math.inf], strict=True)
            if min(then, horizon) > max(now, 0.0)
        ]
        return np.asarray(rows).reshape(len(rows), 2 + spec.size)


def cost_floor(spec: FleetSpec, schedule: FloatArray) -> float:
    """A lower bound (USD) on the provisioned cost of a replay that keeps ``schedule``
    (``CandidateFleet.schedule``): billing runs from a replica's launch to its release,
    and a scale-down drains replicas that are still billed, so the bill is never below
    the scheduled replicas' hours. Pure."""
    hours = (schedule[:, 1] - schedule[:, 0]) / 3600.0
    return float((hours[:, None] * schedule[:, 2:] * spec.usd_per_replica_hour).sum())


def candidate_fleets(
    spec: FleetSpec, work: Workload, plans: tuple[tuple[str, FloatArray, float], ...]
) -> list[CandidateFleet]:
    """Every candidate of the search, in the module docstring's order."""
    out: list[CandidateFleet] = []
    for name, replicas, step in plans:
        for derate in DERATINGS:
            derated = spill(spec, replicas / derate)
            out.append(CandidateFleet(f"{name} / {derate:g}", derated, step, True))
        mean: FloatArray = replicas.mean(axis=0)
        for multiple in FIXED_MULTIPLES:
            fixed: IntArray = np.clip(
                np.ceil(mean * multiple - 1e-6), spec.min_replicas, spec.max_replicas
            ).astype(np.intp)
            label = f"fixed {multiple:g} x {name} mean {fixed.tolist()}"
            out.append(
                CandidateFleet(label, fixed[None, :].astype(np.float64), work.horizon_s, False)
            )
    top = spec.max_replicas[None, :].astype(np.float64)
    out.append(CandidateFleet("every pool at its max", top, work.horizon_s, False))
    return out


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
    the relaxation, if already solved. ``candidates`` lists every fleet of the search in
    its fixed order, replayed or not. Raises SimulationError if a solve fails."""
    plan = plan or lower_bound(spec, work, window_s, integer=True)
    relaxed = relaxed or relaxation_bound(spec, work, target, window_s)
    threshold = target * attainable(spec, work)
    sources = (
        ("integer plan", plan.replicas, plan.window_s),
        ("relaxation plan", relaxed.replicas, relaxed.window_s),
    )
    plans = candidate_fleets(spec, work, sources)
    schedules = [c.schedule(spec, work, config) for c in plans]
    floors = [cost_floor(spec, sched) for sched in schedules]
    done: dict[tuple[bool, bytes], Candidate] = {}
    out: list[Candidate | None] = [None] * len(plans)
    best: Candidate | None = None
    for i in sorted(range(len(plans)), key=lambda i: floors[i]):
        cand = plans[i]
        key = (cand.hindsight, schedules[i].tobytes())
        if key in done:
            found = replace(done[key], label=cand.label)
        elif best is not None and floors[i] >= best.usd:
            out[i] = Candidate(cand.label, floors[i], float("nan"), replayed=False)
            continue
        else:
            found = done[key] = cand.replay(spec, work, config)
        out[i] = found
        if found.attainment >= threshold - 1e-9 and (best is None or found.usd < best.usd):
            best = found
    candidates = tuple(c for c in out if c is not None)
    return Reference(best, threshold, candidates)
