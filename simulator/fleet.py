"""Pools as FIFO queues in front of replicas with batch slots, advanced event by event.

Each replica follows the simulated engine's latency model (simengine/perf_model.py):
a request holds a batch slot from admission; its first token comes out of prefill
(``prefill_ms(prompt)``); then every sequence on the replica emits a token each
``tpot_ms(running)``, ``running`` being the replica's occupancy at that moment (prefilling
sequences included), as the engine's streaming path does. All sequences on a replica share
that TPOT, so a replica keeps one decode clock ``v`` (tokens each decoding sequence has
emitted) and a sequence ends when ``v`` reaches its target: an occupancy change costs
O(log n). A pool admits its queue FIFO into the ready replica with the fewest running.

Replicas boot for the pool's provisioning time, then take requests; a drained replica
takes no new ones and is released when its last sequence ends. A replica is billed from
launch until it is released (or its boot is cancelled).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from base.types import FloatArray, IntArray
from router.snapshot import EWMA_ALPHA
from simulator.spec import FleetSpec

BOOTING, READY, DRAINING, GONE = 0, 1, 2, 3
_PREFILL, _DECODE, _READY = 0, 1, 2
_EPS_TOKENS = 1e-9


class Replica:
    """One replica's state. Times in s; ``v`` in tokens per decoding sequence."""

    __slots__ = (
        "decoding", "ended_s", "launched_s", "pool", "running", "state", "v", "v_at", "version"
    )  # fmt: skip

    def __init__(self, pool: int, launched_s: float, state: int) -> None:
        self.pool = pool
        self.launched_s = launched_s
        self.ended_s = math.inf
        self.state = state
        self.running = 0
        self.v = 0.0
        self.v_at = launched_s
        self.decoding: list[tuple[float, int]] = []
        self.version = 0


Event = tuple[float, int, int, Replica, int]


class Fleet:
    """Every pool of one model: replicas, queues, and per-request timestamps (s).

    ``output_tokens[i]`` and ``prefill_s[i, p]`` describe request i; ``pool_of``,
    ``admit_s``, ``first_s`` (first token at the pool) and ``done_s`` are filled as the
    simulation runs (-1 / NaN until then). ``completed`` lists requests finished since
    the caller last cleared it.
    """

    def __init__(self, spec: FleetSpec, output_tokens: IntArray, prefill_s: FloatArray) -> None:
        n, size = len(output_tokens), spec.size
        self.spec = spec
        self.output = output_tokens.tolist()
        self.prefill = prefill_s
        self.slots = spec.batch_slots.tolist()
        self.tpot = [spec.tpot_table_s(p) for p in range(size)]
        self.events: list[Event] = []
        self._seq = 0
        self.replicas: list[list[Replica]] = [[] for _ in range(size)]
        self.all_replicas: list[Replica] = []
        self.queues: list[deque[int]] = [deque() for _ in range(size)]
        self.ready = np.zeros(size, dtype=np.intp)
        self.ready_version = 0
        self.inflight = np.zeros(spec.compiled.size)
        self.tpot_ewma_ms = np.full(size, np.nan)
        self.pool_of = np.full(n, -1, dtype=np.intp)
        self.admit_s = np.full(n, np.nan)
        self.first_s = np.full(n, np.nan)
        self.done_s = np.full(n, np.nan)
        self.completed: list[int] = []

    def _push(self, t: float, kind: int, replica: Replica, arg: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, replica, arg))

    def next_event_s(self) -> float:
        """Time of the next internal event, s (inf if none)."""
        return self.events[0][0] if self.events else math.inf

    def launch(self, p: int, now: float, ready_at: float) -> Replica:
        """Start a replica of pool p at ``now``; it takes requests from ``ready_at``."""
        r = Replica(p, now, BOOTING)
        self.replicas[p].append(r)
        self.all_replicas.append(r)
        if ready_at <= now:
            self._set_ready(r, now)
        else:
            self._push(ready_at, _READY, r, 0)
        return r

    def _set_ready(self, r: Replica, now: float) -> None:
        r.state = READY
        r.v_at = now
        self.ready[r.pool] += 1
        self.ready_version += 1
        self._admit(r.pool, now)

    def submit(self, i: int, p: int, now: float) -> None:
        """Request i arrives at pool p at ``now`` and queues FIFO for a batch slot."""
        self.pool_of[i] = p
        self.queues[p].append(i)
        self.inflight[self.spec.members[p]] += 1.0

        self._admit(p, now)

    def waiting(self, p: int) -> int:
        """Requests queued at pool p for a batch slot."""
        return len(self.queues[p])

    def _admit(self, p: int, now: float) -> None:
        queue, limit = self.queues[p], self.slots[p]
        while queue:
            best: Replica | None = None
            for r in self.replicas[p]:
                if (
                    r.state == READY
                    and r.running < limit
                    and (best is None or r.running < best.running)
                ):
                    best = r
            if best is None:
                return
            i = queue.popleft()
            self._advance(best, now)
            best.running += 1
            self._reschedule(best, now)
            self.admit_s[i] = now
            self._push(now + self.prefill[i, p], _PREFILL, best, i)

    def _advance(self, r: Replica, now: float) -> None:
        if r.decoding:
            r.v += (now - r.v_at) / self.tpot[r.pool][r.running]
        r.v_at = now

    def _reschedule(self, r: Replica, now: float) -> None:
        r.version += 1
        if r.decoding:
            dt = (r.decoding[0][0] - r.v) * self.tpot[r.pool][r.running]
            self._push(now + max(dt, 0.0), _DECODE, r, r.version)

    def step(self) -> float:
        """Process the next internal event; return its time, s."""
        now, _, kind, r, arg = heapq.heappop(self.events)
        if kind == _PREFILL:
            self.first_s[arg] = now
            self._advance(r, now)
            if self.output[arg] > 1:
                heapq.heappush(r.decoding, (r.v + self.output[arg] - 1, arg))
                self._reschedule(r, now)
            else:
                self._finish(arg, now)
                r.running -= 1
                self._released(r, now)
        elif kind == _DECODE:
            if arg == r.version:
                self._advance(r, now)
                limit = r.v + _EPS_TOKENS
                while r.decoding and r.decoding[0][0] <= limit:
                    self._finish(heapq.heappop(r.decoding)[1], now)
                    r.running -= 1
                self._released(r, now)
        elif r.state == BOOTING:
            self._set_ready(r, now)
        return now

    def _released(self, r: Replica, now: float) -> None:
        self._reschedule(r, now)
        if r.state == DRAINING and r.running == 0:
            self._end(r, now)
        else:
            self._admit(r.pool, now)

    def _finish(self, i: int, now: float) -> None:
        self.done_s[i] = now
        p = int(self.pool_of[i])
        self.inflight[self.spec.members[p]] -= 1.0

        out = self.output[i]
        if out > 1:
            tpot_ms = (now - self.first_s[i]) * 1000.0 / (out - 1)
            old = self.tpot_ewma_ms[p]
            self.tpot_ewma_ms[p] = (
                tpot_ms if math.isnan(old) else old + EWMA_ALPHA * (tpot_ms - old)
            )
        self.completed.append(i)

    def _end(self, r: Replica, now: float) -> None:
        r.state = GONE
        r.ended_s = now
        self.replicas[r.pool].remove(r)

    def counts(self, p: int) -> tuple[int, int, int]:
        """(booting, ready, draining) replicas of pool p."""
        states = [r.state for r in self.replicas[p]]
        return states.count(BOOTING), states.count(READY), states.count(DRAINING)

    def running(self, p: int) -> int:
        """Sequences holding a batch slot in pool p."""
        return sum(r.running for r in self.replicas[p])

    def scale_to(self, p: int, target: int, now: float, lead_s: float | None = None) -> None:
        """Make pool p's booting + ready replicas ``target``. Up: undrain, then launch
        (ready after the pool's provisioning time). Down: cancel boots (newest first), then
        drain the least-loaded ready replicas, keeping one while requests are queued.
        ``lead_s`` overrides the provisioning time. Idempotent."""
        live = [r for r in self.replicas[p] if r.state in (BOOTING, READY)]
        if target > len(live):
            draining = sorted(
                (r for r in self.replicas[p] if r.state == DRAINING), key=lambda r: -r.running
            )
            for r in draining[: target - len(live)]:
                r.state = READY
                self.ready[p] += 1
                self.ready_version += 1
            missing = target - len(live) - min(len(draining), target - len(live))
            for _ in range(missing):
                lead = float(self.spec.provisioning_s[p]) if lead_s is None else lead_s
                self.launch(p, now, now + lead)
            self._admit(p, now)
            return
        excess = len(live) - target
        booting = [r for r in live if r.state == BOOTING][::-1]
        for r in booting[:excess]:
            self._end(r, now)
        excess -= min(excess, len(booting))
        ready = sorted((r for r in live if r.state == READY), key=lambda r: r.running)
        if self.queues[p]:
            excess = min(excess, len(ready) - 1)  # the last one serves the queue out
        for r in ready[: max(excess, 0)]:
            r.state = DRAINING
            self.ready[p] -= 1
            self.ready_version += 1
            if r.running == 0:
                self._end(r, now)
