"""Routing policies compared by the simulator, registered by name.

Each sees the simulated fleet the way its real counterpart sees its backends and picks one
pool (local index) per request. Only pools allowed for the client's region and with a
ready replica are candidates; when there is none, ``fallback`` queues the request where
capacity is coming (or at the cheapest allowed pool, which makes the scaler add one).
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

import numpy as np

from base.types import FloatArray, IntArray
from router.score_core import TrafficMix
from router.scoring import RouteRequest, rank
from router.snapshot import PoolRow, Snapshot
from simulator.errors import SimulationError
from simulator.fleet import Fleet
from simulator.spec import FleetSpec


class RoutingPolicy:
    """Base of the simulated routing policies; subclasses register with ``name=...``."""

    registry: ClassVar[dict[str, type[RoutingPolicy]]] = {}
    name: ClassVar[str] = ""

    def __init_subclass__(cls, *, name: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name
        RoutingPolicy.registry[name] = cls

    def __init__(self, spec: FleetSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        self.allowed = [np.flatnonzero(np.isfinite(row)) for row in spec.rtt_s]

    @classmethod
    def create(cls, name: str, spec: FleetSpec, rng: np.random.Generator) -> RoutingPolicy:
        """The policy registered as ``name``. Raises SimulationError if there is none."""
        try:
            return cls.registry[name](spec, rng)
        except KeyError:
            known = ", ".join(cls.registry)
            raise SimulationError(f"unknown routing policy {name!r}; known: {known}") from None

    def candidates(self, client: int, fleet: Fleet) -> IntArray:
        """Pools allowed for region ``client`` with at least one ready replica."""
        allowed = self.allowed[client]
        out: IntArray = allowed[fleet.ready[allowed] > 0]
        return out

    def fallback(self, client: int, fleet: Fleet) -> int:
        """No candidate: the allowed pool with the most replicas booting, else the
        cheapest allowed pool (its queue then makes the scaler add one)."""
        allowed = self.allowed[client]
        coming = np.asarray([fleet.counts(int(p))[0] for p in allowed])
        if coming.max() > 0:
            return int(allowed[int(np.argmax(coming))])
        return int(allowed[int(np.argmin(self.spec.usd_per_token[allowed]))])

    def pick(self, cands: IntArray, score: FloatArray) -> int:
        """The candidate with the lowest score; seeded random among equals."""
        best = cands[score == score.min()]
        return int(best[self.rng.integers(len(best))]) if len(best) > 1 else int(best[0])

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """The pool for request ``i`` from client region index ``client``."""
        raise NotImplementedError

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        """A response finished: end-to-end ``latency_s`` seen from ``client``'s gateway."""


class RoundRobin(RoutingPolicy, name="round-robin"):
    """Cycles over the candidates, one counter per client region."""

    def __init__(self, spec: FleetSpec, rng: np.random.Generator) -> None:
        super().__init__(spec, rng)
        self.turn = [0] * len(spec.regions)

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Next candidate in turn."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        self.turn[client] += 1
        return int(cands[self.turn[client] % len(cands)])


class LeastLatency(RoutingPolicy, name="least-latency"):
    """LiteLLM's latency-based routing: lowest mean of the last 10 latencies per output
    token seen from this client region; a pool never measured scores 0 and goes first."""

    window = 10

    def __init__(self, spec: FleetSpec, rng: np.random.Generator) -> None:
        super().__init__(spec, rng)
        shape = (len(spec.regions), spec.size)
        self.mean = np.zeros(shape)
        self.samples = [
            [deque[float](maxlen=self.window) for _ in range(spec.size)] for _ in spec.regions
        ]

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Candidate with the lowest mean latency per token (seeded random on ties)."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        return self.pick(cands, self.mean[client, cands])

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        """Record latency / output tokens for (client region, pool)."""
        window = self.samples[client][pool]
        window.append(latency_s / max(output_tokens, 1))
        self.mean[client, pool] = sum(window) / len(window)


class CheapestOnly(RoutingPolicy, name="cheapest-only"):
    """LiteLLM's cost-based routing: the lowest $/token candidate, whatever its load."""

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Cheapest candidate per token."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        return int(cands[int(np.argmin(self.spec.usd_per_token[cands]))])


class LeastQueue(RoutingPolicy, name="least-queue"):
    """llm-d's queue scorer: fewest requests waiting for a batch slot; ties at random."""

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Candidate with the shortest queue (seeded random among equals)."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        waiting = np.asarray([fleet.waiting(int(p)) for p in cands], dtype=np.float64)
        return self.pick(cands, waiting)


class Skyroute(RoutingPolicy, name="skyroute"):
    """The gateway's own ``router.scoring.rank`` on a Snapshot of the simulated fleet:
    ready replicas and TPOT EWMAs refreshed every ``refresh_s`` (or when replicas change),
    in-flight counts passed as the gateway replica's fresh ``local_inflight``, and the
    traffic mix (mean prompt and output tokens) the gateway has seen: a running mean
    over the last ~``mix_requests`` requests (prompts at arrival, outputs at
    completion), starting from the policy's expected output."""

    refresh_s = 1.0
    mix_requests = 256

    def __init__(self, spec: FleetSpec, rng: np.random.Generator) -> None:
        super().__init__(spec, rng)
        self.local = {int(g): p for p, g in enumerate(spec.members)}
        self.snapshot = Snapshot.empty(spec.compiled)
        self.taken_at = -np.inf
        self.version = -1
        self.prompt_mean, self.n_prompt = 0.0, 0
        self.output_mean = float(spec.compiled.policy.models[spec.model].expected_output_tokens)
        self.n_output = 0

    def _mean(self, mean: float, n: int, value: float) -> tuple[float, int]:
        n = min(n + 1, self.mix_requests)
        return mean + (value - mean) / n, n

    def _snapshot(self, now: float, fleet: Fleet) -> Snapshot:
        if fleet.ready_version != self.version or now - self.taken_at >= self.refresh_s:
            rows = {
                pid: PoolRow(
                    ready_replicas=float(fleet.ready[p]), tpot_ewma_ms=float(fleet.tpot_ewma_ms[p])
                )
                for p, pid in enumerate(self.spec.pool_ids)
            }
            self.snapshot = Snapshot.build(self.spec.compiled, rows, taken_at_s=now)
            self.taken_at, self.version = now, fleet.ready_version
        return self.snapshot

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """First pool of the router's ranking."""
        self.prompt_mean, self.n_prompt = self._mean(self.prompt_mean, self.n_prompt, prompt)
        request = RouteRequest(
            model=self.spec.model,
            prompt_tokens=prompt,
            max_output_tokens=None,
            slo_class=self.spec.slo_class,
            client_region=self.spec.regions[client],
        )
        mix = TrafficMix(self.prompt_mean, self.output_mean)
        snapshot = self._snapshot(now, fleet)
        ranking = rank(request, self.spec.compiled, snapshot, fleet.inflight, mix=mix)
        first = next(ranking.tried(), None)
        if first is None:
            return self.fallback(client, fleet)
        return self.local[first[0]]

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        """A response finished: its output joins the traffic mix."""
        self.output_mean, self.n_output = self._mean(self.output_mean, self.n_output, output_tokens)
