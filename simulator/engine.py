"""The discrete-event loop: replay a workload through one routing policy and one scaler.

Arrivals come from the workload's sorted arrays, internal events (prefill done, decode
done, replica ready) from the fleet's heap, scaler decisions every ``tick_s``. At equal
times internal events go first, so a slot freed at t serves an arrival at t. The run
starts ``warmup_s`` before the trace, replaying its start with replicas provisioned at
once, so that every policy meets the trace with the fleet its scaler built for it (not
the policy file's initial replicas); the warm-up is neither measured nor billed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from base.types import FloatArray, IntArray
from simulator.fleet import Fleet
from simulator.scaler import DemandSample, FleetState, Scaler
from simulator.spec import FleetSpec
from simulator.trace import Trace

Progress = Callable[[int], None]


@dataclass(frozen=True)
class SimConfig:
    """Loop settings: scaler period and warm-up (s), seed of every random draw."""

    seed: int = 0
    tick_s: float = 10.0
    warmup_s: float = 600.0


@dataclass(frozen=True, eq=False)
class Workload:
    """A trace with a client region per request and the warm-up prepended.

    Requests ``[0, n_warm)`` are the warm-up (arrivals < 0); the measured ones arrive in
    ``[0, horizon_s]``. ``prefill_s[i, p]`` is request i's prefill on pool p.
    """

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    client: IntArray
    prefill_s: FloatArray
    n_warm: int
    horizon_s: float

    @classmethod
    def build(
        cls, trace: Trace, spec: FleetSpec, weights: Mapping[str, float], config: SimConfig
    ) -> Workload:
        """Prepend the first ``warmup_s`` of ``trace`` and draw client regions (seeded)."""
        warm = trace.before(config.warmup_s) if config.warmup_s > 0 else trace.head(0)
        shift = config.warmup_s if len(warm) else 0.0
        arrival = np.concatenate((warm.arrival_s - shift, trace.arrival_s))
        prompt = np.concatenate((warm.prompt_tokens, trace.prompt_tokens))
        output = np.concatenate((warm.output_tokens, trace.output_tokens))
        regions, p = spec.region_index(weights)
        rng = np.random.default_rng(config.seed)
        client = regions[rng.choice(len(regions), size=len(arrival), p=p)]
        return cls(
            arrival_s=arrival,
            prompt_tokens=prompt,
            output_tokens=output,
            client=client,
            prefill_s=spec.prefill_s(prompt),
            n_warm=len(warm),
            horizon_s=trace.duration_s,
        )

    @property
    def start_s(self) -> float:
        """When the run starts, s (<= 0)."""
        return min(float(self.arrival_s[0]), 0.0)


@dataclass(frozen=True, eq=False)
class RunResult:
    """One policy's run. Per request (workload order): pool, admission, first token at the
    pool and completion (s; NaN if never). Per replica: pool, launch and end (s; inf:
    never released). Per scaler tick (end time, s) and pool: running sequences, ready
    replicas, billed replicas (booting + ready + draining), queued requests, target."""

    policy: str
    pool_of: IntArray
    admit_s: FloatArray
    first_s: FloatArray
    done_s: FloatArray
    replica_pool: IntArray
    replica_start_s: FloatArray
    replica_end_s: FloatArray
    tick_s: FloatArray
    running: FloatArray
    ready: FloatArray
    billed: FloatArray
    waiting: FloatArray
    targets: FloatArray


class Router(Protocol):
    """What the loop needs from a routing policy (``policies.RoutingPolicy`` is one)."""

    @property
    def name(self) -> str:
        """Name in the report."""
        ...

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Pool (local index) for request i."""
        ...

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        """A response finished after ``latency_s`` end to end."""
        ...


def simulate(
    spec: FleetSpec,
    work: Workload,
    policy: Router,
    scaler: Scaler,
    config: SimConfig,
    progress: Progress | None = None,
) -> RunResult:
    """Run ``work`` through ``policy`` with ``scaler`` deciding replicas. Deterministic:
    the same inputs give the same result. ``progress`` is called with requests routed."""
    fleet = Fleet(spec, work.output_tokens, work.prefill_s)
    start = work.start_s
    for p in range(spec.size):
        for _ in range(int(spec.initial_replicas[p])):
            fleet.launch(p, start, start)
    static = FleetState.static(spec)
    size = spec.size
    arrivals, prompts = work.arrival_s.tolist(), work.prompt_tokens.tolist()
    clients, outputs = work.client.tolist(), work.output_tokens.tolist()
    rtt = spec.rtt_s.tolist()
    acc = np.zeros((3, len(spec.regions), size))
    history: list[DemandSample] = []
    log: list[FloatArray] = []
    next_tick, last_tick = start + config.tick_s, start
    end_ticks = work.horizon_s + config.tick_s
    n, i, every = len(arrivals), 0, max(1, len(arrivals) // 200)
    while True:
        t_arr = arrivals[i] if i < n else math.inf
        t_tick = next_tick if next_tick <= end_ticks else math.inf
        t_ev = fleet.events[0][0] if fleet.events else math.inf
        if t_ev <= t_arr and t_ev <= t_tick and t_ev < math.inf:
            fleet.step()
            for j in fleet.completed:
                p = int(fleet.pool_of[j])
                latency = float(fleet.done_s[j]) - arrivals[j] + rtt[clients[j]][p]
                policy.observe(clients[j], p, latency, outputs[j])
            fleet.completed.clear()
        elif t_arr <= t_tick and t_arr < math.inf:
            c = clients[i]
            p = policy.choose(i, c, prompts[i], t_arr, fleet)
            fleet.submit(i, p, t_arr)
            acc[0, c, p] += 1.0
            acc[1, c, p] += prompts[i]
            acc[2, c, p] += outputs[i]
            i += 1
            if progress is not None and i % every == 0:
                progress(every)
        elif t_tick < math.inf:
            now = t_tick
            counts = np.asarray([fleet.counts(p) for p in range(size)], dtype=np.intp)
            running = np.asarray([fleet.running(p) for p in range(size)], dtype=np.float64)
            waiting = np.asarray([fleet.waiting(p) for p in range(size)], dtype=np.float64)
            history.append(
                DemandSample(
                    now,
                    now - last_tick,
                    acc[0].copy(),
                    acc[1].copy(),
                    acc[2].copy(),
                    running,
                    waiting,
                )
            )
            acc[:] = 0.0
            state = replace(static, booting=counts[:, 0], ready=counts[:, 1], draining=counts[:, 2])
            targets = scaler.decide(now, history, state)
            # During the warm-up replicas come at once, as if the fleet had been running.
            lead = 0.0 if now < 0 else None
            for p in range(size):
                fleet.scale_to(p, int(targets[p]), now, lead)
            log.append(np.stack((running, counts[:, 1], counts.sum(axis=1), waiting, targets)))
            log[-1] = np.vstack((np.full((1, size), now), log[-1]))
            last_tick, next_tick = now, now + config.tick_s
        else:
            break
    if progress is not None:
        progress(n % every)
    reps = fleet.all_replicas
    ticks = np.stack(log) if log else np.zeros((0, 6, size))
    return RunResult(
        policy=policy.name,
        pool_of=fleet.pool_of,
        admit_s=fleet.admit_s,
        first_s=fleet.first_s,
        done_s=fleet.done_s,
        replica_pool=np.asarray([r.pool for r in reps], dtype=np.intp),
        replica_start_s=np.asarray([r.launched_s for r in reps]),
        replica_end_s=np.asarray([r.ended_s for r in reps]),
        tick_s=ticks[:, 0, 0],
        running=ticks[:, 1],
        ready=ticks[:, 2],
        billed=ticks[:, 3],
        waiting=ticks[:, 4],
        targets=ticks[:, 5],
    )
