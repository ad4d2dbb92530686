"""Cost-aware baselines a reviewer would accept, next to skyroute in every comparison.

The policies in :mod:`simulator.policies` other than skyroute ignore cost (round robin,
least latency, least queue) or ignore load (cheapest only), so beating them says little.
These four each use cost or load the way a real system does:

- ``cheapest-free-slot``: the cheapest pool with a free batch slot; when none has one,
  the pool with the fewest requests waiting per ready replica (cheapest among equals).
  The trivial cost-aware router.
- ``litellm-cost-cooldown``: LiteLLM's cost-based routing with its cooldowns: the
  cheapest pool not cooling down. A pool cools down for ``cooldown_s`` (LiteLLM's
  ``cooldown_time``, 5 s) after ``allowed_fails`` failures (LiteLLM's default, 3)
  within a minute; a response slower than ``timeout_factor`` × its SLO budget (TTFT
  target + output tokens × TPOT target) counts as a failure, as a client timeout would.
- ``llm-d-weighted``: llm-d's scorer stack with its default weights, queue-scorer 1 and
  kv-cache-utilization-scorer 1 (the prefix scorer has nothing to score here): each
  pool scores 1 - queue/max queue plus 1 - its batch-slot use; the highest wins.
- ``least-latency-budget``: least latency (LiteLLM's per-token latency window) among
  the pools whose $/token is within ``budget_factor`` (1.5) × the cheapest allowed one.

Every constant is the named system's documented default or stated here, the same for
every trace.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from base.types import FloatArray, IntArray
from simulator.fleet import Fleet
from simulator.policies import LeastLatency, RoutingPolicy
from simulator.spec import FleetSpec


def _ready_waiting(fleet: Fleet, pools: IntArray) -> FloatArray:
    """Requests waiting for a batch slot per ready replica, per pool."""
    waiting = np.asarray([fleet.waiting(int(p)) for p in pools], dtype=np.float64)
    out: FloatArray = waiting / np.maximum(fleet.ready[pools], 1)
    return out


def _slot_use(fleet: Fleet, pools: IntArray) -> FloatArray:
    """Share of each pool's ready batch slots holding a sequence (0-1)."""
    slots = np.asarray([fleet.slots[int(p)] for p in pools], dtype=np.float64)
    running = np.asarray([fleet.running(int(p)) for p in pools], dtype=np.float64)
    out: FloatArray = np.clip(running / np.maximum(slots * fleet.ready[pools], 1.0), 0.0, 1.0)
    return out


class CheapestFreeSlot(RoutingPolicy, name="cheapest-free-slot"):
    """The cheapest candidate with a free batch slot (see the module docstring)."""

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Cheapest pool with a free slot, else the least backed-up one."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        price = self.spec.usd_per_token[cands]
        free = _slot_use(fleet, cands) < 1.0
        if free.any():
            return int(cands[free][int(np.argmin(price[free]))])
        backlog = _ready_waiting(fleet, cands)
        least = backlog == backlog.min()
        return int(cands[least][int(np.argmin(price[least]))])


class LiteLLMCostCooldown(RoutingPolicy, name="litellm-cost-cooldown"):
    """The cheapest candidate not cooling down (see the module docstring)."""

    allowed_fails = 3
    fail_window_s = 60.0
    cooldown_s = 5.0
    timeout_factor = 2.0

    def __init__(self, spec: FleetSpec, rng: np.random.Generator) -> None:
        super().__init__(spec, rng)
        self.fails = [deque[float]() for _ in range(spec.size)]
        self.cool_until = np.full(spec.size, -np.inf)
        self.now = 0.0

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Cheapest candidate out of cooldown; all cooling down: cheapest of all."""
        self.now = now
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        warm = cands[self.cool_until[cands] <= now]
        pool = warm if len(warm) else cands
        return int(pool[int(np.argmin(self.spec.usd_per_token[pool]))])

    def observe(self, client: int, pool: int, latency_s: float, output_tokens: int) -> None:
        """A response past its timeout is a failure; enough of them start a cooldown."""
        slo = self.spec.slo
        budget_s = (slo.ttft_ms + output_tokens * slo.tpot_ms) / 1000.0
        if latency_s <= self.timeout_factor * budget_s:
            return
        fails = self.fails[pool]
        fails.append(self.now)
        while fails and fails[0] < self.now - self.fail_window_s:
            fails.popleft()
        if len(fails) >= self.allowed_fails:
            self.cool_until[pool] = self.now + self.cooldown_s
            fails.clear()


class LlmdWeighted(RoutingPolicy, name="llm-d-weighted"):
    """llm-d's queue and KV-utilisation scorers, weight 1 each (module docstring)."""

    queue_weight = 1.0
    kv_weight = 1.0

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Highest weighted score (seeded random among equals)."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        queue = np.asarray([fleet.waiting(int(p)) for p in cands], dtype=np.float64)
        queue_score = 1.0 - queue / queue.max() if queue.max() > 0 else np.ones(len(cands))
        kv_score = 1.0 - _slot_use(fleet, cands)
        score = self.queue_weight * queue_score + self.kv_weight * kv_score
        return self.pick(cands, -score)


class LeastLatencyBudget(LeastLatency, name="least-latency-budget"):
    """Least latency among candidates within the budget (module docstring)."""

    budget_factor = 1.5

    def choose(self, i: int, client: int, prompt: int, now: float, fleet: Fleet) -> int:
        """Least mean latency per token among the affordable candidates."""
        cands = self.candidates(client, fleet)
        if len(cands) == 0:
            return self.fallback(client, fleet)
        cheapest = self.spec.usd_per_token[self.allowed[client]].min()
        affordable = cands[self.spec.usd_per_token[cands] <= self.budget_factor * cheapest]
        pool = affordable if len(affordable) else cands
        return self.pick(pool, self.mean[client, pool])
