"""The choice of a replica inside a pool, simulated: which in-pool policy finds the
prompts' cached prefixes, and what that does to time to first token.

Every pool of one model has its replicas; each replica is a simulated engine
(``simengine.perf_model``) with its batch slots, its own FIFO queue and a prefix KV
cache (``simengine.prefix_cache.PrefixCache``, an LRU of prompt blocks sized by the
replica's KV capacity). A request's pool is the cheapest per token with a free batch
slot within the TPOT SLO, else the least occupied (the same for every policy, so only
the in-pool choice differs); then the in-pool policy picks its replica at arrival, as
the gateway does, with the replicas' in-flight counts (running + queued) as load:

- ``random``: any replica;
- ``least-queue``: fewest in flight (ties drawn at random);
- ``least-wait``: ``router.replica_choice.ReplicaChooser`` without prefix affinity (the
  gateway's default: least predicted wait);
- ``prefix-affinity``: the same chooser with prefix affinity under bounded load, fed the
  trace's block ids and taught each choice (``record``) as the gateway is;
- ``ideal-cache``: least-queue over replicas that share one cache of their summed
  capacity: a reference for the hit rate no placement of prefixes on separate replicas
  can beat by much.

A request admitted to a slot looks its prompt up in the cache and prefills only the
uncached tokens (``prefill_ms`` of those), then decodes ``output - 1`` tokens at the TPOT
of the occupancy it found at its first token (a simplification of ``simulator.fleet``'s
exact decode clock: outputs here are short next to prefills). Times in s.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from base.types import FloatArray, IntArray
from router.policy import SLOClass
from router.replica_choice import (
    AffinitySettings,
    PoolTiming,
    ReplicaChooser,
    ReplicaRequest,
    ReplicaTable,
)
from simengine.perf_model import EngineProfile
from simengine.prefix_cache import PrefixCache
from simulator.errors import SimulationError
from simulator.prefix_trace import PrefixTrace
from simulator.spec import FleetSpec

__all__ = ["POLICIES", "InPoolPool", "InPoolResult", "InPoolSetup", "simulate_in_pool"]

POLICIES = ("random", "least-queue", "least-wait", "prefix-affinity", "ideal-cache")
_FIRST, _DONE = 0, 1


@dataclass(frozen=True)
class InPoolPool:
    """One pool: its engine profile, replicas, price (USD per replica-hour) and each
    replica's prefix-cache capacity in blocks."""

    id: str
    profile: EngineProfile
    replicas: int
    usd_per_replica_hour: float
    kv_blocks: int
    slo_slots: int


@dataclass(frozen=True)
class InPoolSetup:
    """The pools of one model, cheapest per token first, and the SLO requests are held to."""

    pools: tuple[InPoolPool, ...]
    slo: SLOClass
    block_tokens: int

    @classmethod
    def from_fleet(
        cls, spec: FleetSpec, replicas: IntArray | None = None, block_tokens: int = 512
    ) -> InPoolSetup:
        """The pools of ``spec`` with ``replicas`` each (default: the cheapest pool at its
        max, the others at their initial count). Each replica's prefix cache holds its
        profile's KV capacity: ``slice_profile`` scales batch slots, not memory."""
        order = np.argsort(spec.usd_per_token, kind="stable")
        if replicas is None:
            replicas = spec.initial_replicas.copy()
            replicas[order[0]] = spec.max_replicas[order[0]]
        pools = []
        for p in order:
            profile = spec.profiles[p]
            kv = profile.kv_cache_tokens // block_tokens
            pools.append(
                InPoolPool(
                    spec.pool_ids[p], profile, int(replicas[p]),
                    float(spec.usd_per_replica_hour[p]), kv, int(spec.slo_slots[p]),
                )
            )  # fmt: skip
        if not any(p.replicas for p in pools):
            raise SimulationError("no pool has a replica")
        return cls(tuple(pools), spec.slo, block_tokens)


@dataclass(frozen=True, eq=False)
class InPoolResult:
    """One run: per request its pool (index into the setup), TTFT and TPOT (s), whether
    it met the SLO; the prefix-cache hit rate (prompt tokens reused / looked up), the
    provisioned cost (USD, every replica over the run), and the load imbalance (max /
    mean time-averaged in-flight per replica, the worst of the pools that served at
    least 5 % of the requests)."""

    policy: str
    pool: IntArray
    ttft_s: FloatArray
    tpot_s: FloatArray
    met: np.ndarray
    hit_rate: float
    cost_usd: float
    imbalance: float
    duration_s: float

    def ttft_ms(self, q: float) -> float:
        """TTFT percentile ``q`` (0-100), ms."""
        return float(np.percentile(self.ttft_s, q) * 1000.0)

    @property
    def slo_attainment(self) -> float:
        """Share of requests that met both TTFT and TPOT targets."""
        return float(np.mean(self.met))


class _Replica:
    __slots__ = ("area", "cache", "changed_s", "queue", "running")

    def __init__(self, cache: PrefixCache) -> None:
        self.cache = cache
        self.running = 0
        self.queue: deque[int] = deque()
        self.area = 0.0  # integral of in-flight over time
        self.changed_s = 0.0


class _Pool:
    """One pool's replicas, their load table and chooser during a run."""

    def __init__(self, spec: InPoolPool, block_tokens: int, mean_output: float, shared: bool):
        self.spec = spec
        n = spec.replicas
        common = PrefixCache(spec.kv_blocks * n, block_tokens) if shared else None
        self.replicas = [
            _Replica(common if common is not None else PrefixCache(spec.kv_blocks, block_tokens))
            for _ in range(n)
        ]
        self.table = ReplicaTable.build([f"{spec.id}/{r}" for r in range(n)])
        self.table.engine_queue[:] = math.nan  # load is the in-flight count alone
        profile = spec.profile
        self.timing = PoolTiming(
            slots=profile.batch_slots,
            prefill_ms_per_token=1000.0 / profile.prefill_tokens_per_s,
            tpot_base_ms=profile.tpot_base_ms,
            tpot_full_ms=profile.tpot_full_ms,
            mean_output_tokens=mean_output,
        )
        blocks = max(spec.kv_blocks, 1)
        self.chooser = ReplicaChooser(AffinitySettings(block_tokens=block_tokens,
                                                       blocks_per_replica=blocks))  # fmt: skip
        self.capacity = max(n * spec.slo_slots, 1)

    def touch(self, r: int, now: float) -> None:
        replica = self.replicas[r]
        replica.area += self.table.inflight[r] * (now - replica.changed_s)
        replica.changed_s = now


def _pick_pool(pools: list[_Pool]) -> int:
    for k, pool in enumerate(pools):
        if pool.spec.replicas and pool.table.inflight.sum() < pool.capacity:
            return k
    fill = [p.table.inflight.sum() / p.capacity if p.spec.replicas else math.inf for p in pools]
    return int(np.argmin(fill))


def simulate_in_pool(
    trace: PrefixTrace, setup: InPoolSetup, policy: str, seed: int = 0
) -> InPoolResult:
    """Replay ``trace`` through ``setup`` with the in-pool ``policy`` (one of
    ``POLICIES``). Deterministic for a seed. Raises SimulationError for an unknown
    policy."""
    if policy not in POLICIES:
        raise SimulationError(f"unknown in-pool policy {policy!r}; one of {', '.join(POLICIES)}")
    rng = np.random.default_rng(seed)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    mean_output = float(np.mean(trace.output_tokens)) if n else 1.0
    pools = [
        _Pool(p, setup.block_tokens, mean_output, policy == "ideal-cache") for p in setup.pools
    ]
    pool_of = np.full(n, -1, dtype=np.intp)
    replica_of = np.zeros(n, dtype=np.intp)
    first_s = np.full(n, math.nan)
    tpot_s = np.zeros(n)
    done_s = np.full(n, math.nan)
    events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, request)
    seq = 0

    def push(t: float, kind: int, i: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, i))

    def admit(pool: _Pool, r: int, now: float) -> None:
        replica = pool.replicas[r]
        profile = pool.spec.profile
        while replica.queue and replica.running < profile.batch_slots:
            i = replica.queue.popleft()
            replica.running += 1
            cached = replica.cache.admit(trace.blocks[i], prompt[i])
            push(now + profile.prefill_ms(prompt[i] - cached) / 1000.0, _FIRST, i)

    def step() -> None:
        now, _, kind, i = heapq.heappop(events)
        pool = pools[pool_of[i]]
        r = int(replica_of[i])
        replica = pool.replicas[r]
        if kind == _FIRST:
            first_s[i] = now
            tpot = pool.spec.profile.tpot_ms(replica.running) / 1000.0
            tpot_s[i] = tpot
            push(now + max(output[i] - 1, 0) * tpot, _DONE, i)
            return
        done_s[i] = now
        pool.touch(r, now)
        pool.table.inflight[r] -= 1.0
        replica.running -= 1
        admit(pool, r, now)

    for i in range(n):
        now = arrival[i]
        while events and events[0][0] <= now:
            step()
        k = _pick_pool(pools)
        pool = pools[k]
        r = _choose(pool, policy, trace.blocks[i], prompt[i], rng)
        pool_of[i], replica_of[i] = k, r
        pool.touch(r, now)
        pool.table.inflight[r] += 1.0
        pool.replicas[r].queue.append(i)
        admit(pool, r, now)
    while events:
        step()
    return _result(policy, trace, setup, pools, pool_of, first_s, tpot_s, done_s)


def _choose(pool: _Pool, policy: str, blocks: tuple[int, ...], prompt: int,
            rng: np.random.Generator) -> int:  # fmt: skip
    inflight = pool.table.inflight
    if len(inflight) == 1:
        return 0
    if policy == "random":
        return int(rng.integers(len(inflight)))
    if policy in ("least-queue", "ideal-cache"):
        ties = np.flatnonzero(inflight == inflight.min())
        return int(ties[rng.integers(len(ties))]) if len(ties) > 1 else int(ties[0])
    affinity = policy == "prefix-affinity"
    request = ReplicaRequest(prompt, blocks if affinity else ())
    choice = pool.chooser.choose(request, pool.table, pool.timing, prefix_affinity=affinity)
    pool.chooser.record(request, choice.replica_id, prefix_affinity=affinity)
    return choice.index


def _result(
    policy: str, trace: PrefixTrace, setup: InPoolSetup, pools: list[_Pool],
    pool_of: IntArray, first_s: FloatArray, tpot_s: FloatArray, done_s: FloatArray,
) -> InPoolResult:  # fmt: skip
    start = float(trace.arrival_s[0]) if len(trace) else 0.0
    end = float(np.nanmax(done_s)) if len(trace) else 0.0
    duration = max(end - start, 1e-9)
    ttft = first_s - trace.arrival_s
    slo = setup.slo
    met = (ttft * 1000.0 <= slo.ttft_ms) & (
        (trace.output_tokens <= 1) | (tpot_s * 1000.0 <= slo.tpot_ms)
    )
    caches = {id(r.cache): r.cache for p in pools for r in p.replicas}.values()
    queried = sum(c.queries_tokens for c in caches)
    hit_rate = sum(c.hits_tokens for c in caches) / queried if queried else 0.0
    cost = sum(p.spec.replicas * p.spec.usd_per_replica_hour for p in pools) * duration / 3600
    served = np.bincount(pool_of, minlength=len(pools))
    imbalance = 1.0
    for k, pool in enumerate(pools):
        if served[k] < 0.05 * len(trace) or pool.spec.replicas < 2:
            continue
        for r in range(pool.spec.replicas):
            pool.touch(r, end)
        mean_load = np.asarray([r.area / duration for r in pool.replicas])
        if mean_load.mean() > 0:
            imbalance = max(imbalance, float(mean_load.max() / mean_load.mean()))
    return InPoolResult(policy, pool_of, ttft, tpot_s, met, hit_rate, cost, imbalance, duration)
