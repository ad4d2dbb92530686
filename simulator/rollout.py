"""A rollout replayed in simulated time: a trace's requests split between a stable and a
new version, counted and judged exactly as the gateways and the leader do.

Each version is a fleet of engines of one ``simengine.perf_model`` profile (the same
latency model the simulated engine sleeps by), ``batch_slots`` sequences each; the new
version's fleet is ``replicas`` times its current share (at least one), as an autoscaler
would size it for the traffic it gets:
a request starts when a slot is free (FIFO), its TTFT is the wait plus its prefill, its
TPOT the profile's at the occupancy it joins, times the version's ``tpot_factor``. A
request of the new version fails with probability ``error_rate``; it is then retried on
stable (the gateway fails over), so the user is still served, but the failure counts.

The counts of a finished request go to its stage's ``router.rollout_tally.StageCounts``
(as a gateway's flush would), and every ``tick_s`` the rollout is judged
(``router.rollout.judge``, as the leader does). The validation gate is not modelled: a
replay starts at the plan's shadow stage, or its first canary step. Pure and
deterministic for a seed.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from router.policy import SLOClass
from router.rollout import Rollout, Stage, Transition, judge
from router.rollout_plan import RolloutPlan
from router.rollout_tally import StageCounts, evidence
from simengine.perf_model import EngineProfile
from simulator.trace import Trace


@dataclass(frozen=True)
class VersionModel:
    """One version's fleet: ``replicas`` engines of ``profile``; the new version's
    regression as a TPOT multiplier and a failure probability."""

    profile: EngineProfile
    replicas: int = 4
    tpot_factor: float = 1.0
    error_rate: float = 0.0


@dataclass
class _Fleet:
    model: VersionModel
    replicas: int
    # Per replica, a heap of its running requests' ends (s).
    finishes: list[list[float]] = field(default_factory=list)

    def serve(self, now: float, prompt: int, output: int) -> tuple[float, float, float, float]:
        """Start a request arriving at ``now`` (s) on the least-loaded replica (as the
        gateway's in-pool choice does): its TTFT and TPOT (ms), its end (s), and the TPOT
        the profile expects at that replica's load (ms; what the gateway divides by)."""
        while len(self.finishes) < self.replicas:
            self.finishes.append([])
        live = self.finishes[: self.replicas]
        for ends in live:
            while ends and ends[0] <= now:
                heapq.heappop(ends)
        ends = min(live, key=len)
        start = now
        if len(ends) >= self.model.profile.batch_slots:
            start = heapq.heappop(ends)
        expected = self.model.profile.tpot_ms(len(ends) + 1)
        tpot = expected * self.model.tpot_factor
        ttft = (start - now) * 1000.0 + self.model.profile.prefill_ms(prompt)
        end = start + (ttft / 1000.0 - (start - now)) + max(output - 1, 0) * tpot / 1000.0
        heapq.heappush(ends, end)
        return ttft, tpot, end, expected


def replicas_for(trace: Trace, profile: EngineProfile) -> int:
    """Replicas of ``profile`` a version needs for ``trace``: batch slots for twice the
    mean number of requests decoding at once (Little's law at the profile's base TPOT),
    so the stable version meets its SLO and a shifted one shows its shift, not a queue."""
    if len(trace) < 2 or trace.duration_s <= 0:
        return 1
    rate = len(trace) / trace.duration_s
    mean_s = float(trace.output_tokens.clip(1).mean()) * profile.tpot_base_ms / 1000.0
    return max(1, math.ceil(2.0 * rate * mean_s / profile.batch_slots))


@dataclass(frozen=True)
class RolloutReplay:
    """What happened: the moves, the final stage, and what the new version touched.

    ``exposed``: user requests the new version answered (or failed) before the end;
    ``window``: user requests from the start to the decision (or the trace's end);
    ``shadow``: mirrored copies; ``decided_s``: seconds from the start to promotion or
    rollback (None if the trace ended first)."""

    transitions: tuple[Transition, ...]
    stage: Stage
    exposed: int
    window: int
    shadow: int
    decided_s: float | None


def replay_rollout(
    trace: Trace,
    plan: RolloutPlan,
    stable: VersionModel,
    canary: VersionModel,
    slo: SLOClass,
    *,
    seed: int = 0,
    tick_s: float = 1.0,
) -> RolloutReplay:
    """Replay ``trace`` through a rollout of ``canary`` over ``stable`` under ``plan``."""
    rng = random.Random(seed)
    fleets = {"stable": _Fleet(stable, stable.replicas), "canary": _Fleet(canary, 1)}
    stage = Stage.SHADOW if plan.shadow else Stage.CANARY
    t0 = float(trace.arrival_s[0]) if len(trace) else 0.0
    r = Rollout("model", "stable", "canary", stage, 0, t0)
    counts = StageCounts()
    pending: list[tuple[float, int, str, bool, bool, float, float | None, int]] = []
    moves: list[Transition] = []
    exposed = shadow = window = 0
    next_tick = t0 + tick_s
    seq = 0

    def settle(until: float) -> None:
        while pending and pending[0][0] <= until:
            _, _, version, ok, miss, ttft, tpot, out = heapq.heappop(pending)
            counts.record(version, ok=ok, slo_miss=miss, ttft_ms=ttft, tpot_ms=tpot,
                          output_tokens=out)  # fmt: skip

    def run(version: str, now: float, prompt: int, output: int) -> bool:
        nonlocal seq
        ttft, tpot, end, expected = fleets[version].serve(now, prompt, output)
        model = fleets[version].model
        ok = not (model.error_rate and rng.random() < model.error_rate)
        miss = ttft > slo.ttft_ms or (output > 1 and tpot > slo.tpot_ms)
        seq += 1
        when = now + (0.0 if not ok else end - now)
        # TPOT is counted as a percentage of the expected one, as the gateway counts it.
        ratio = 100.0 * tpot / expected if output > 1 else None
        heapq.heappush(pending, (when, seq, version, ok, miss, ttft, ratio, output))
        return ok

    for now, prompt, output in zip(
        trace.arrival_s.tolist(),
        trace.prompt_tokens.tolist(),
        trace.output_tokens.tolist(),
        strict=True,
    ):
        while next_tick <= now and not r.done:
            settle(next_tick)
            moved, t = judge(r, plan, evidence(counts, "stable", "canary", plan), next_tick)
            if t is not None:
                moves.append(t)
                if (moved.stage, moved.step) != (r.stage, r.step):
                    counts = StageCounts()
                    pending.clear()  # late answers belong to the stage that ended
            r = moved
            next_tick += tick_s
        # The new version's pools are sized for the share they get (as the autoscaler
        # sizes pools by the demand routed to them), so both versions run at about the
        # same load per replica: a latency comparison then compares the versions, not
        # an idle fleet with a busy one.
        share = max(r.share(plan), r.shadow_share(plan))
        fleets["canary"].replicas = max(1, math.ceil(canary.replicas * share))
        if r.done:
            break
        window += 1
        version = "canary" if rng.random() < r.share(plan) else "stable"
        if version == "canary":
            exposed += 1
            if not run("canary", now, prompt, output):
                run("stable", now, prompt, output)  # failed over
        else:
            run("stable", now, prompt, output)
            if r.shadow_share(plan) and rng.random() < r.shadow_share(plan):
                shadow += 1
                run("canary", now, prompt, output)
    decided = moves[-1].at_s - t0 if r.done and moves else None
    return RolloutReplay(tuple(moves), r.stage, exposed, window, shadow, decided)
