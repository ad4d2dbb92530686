"""Everything the request path reads to choose a pool, held in process.

The policy and the snapshot are swapped whole (atomic under asyncio: a reference
assignment); the request path never awaits Redis. This replica's in-flight counts and
latency observations are kept here and flushed by ``gateway.sync``.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from base.types import BoolArray, FloatArray
from gateway.outlier import OutlierDetector
from gateway.replica_set import ReplicaSet
from gateway.replicas import ReplicaPick
from gateway.retry_budget import RetryBudget
from gateway.rollout_routing import RolloutCounts, active_rollouts
from live.rollout_table import RolloutRecord
from live.tables import PoolObservations
from router.compiled import CompiledPolicy
from router.health import PoolState
from router.policy import PoolSpec
from router.rollout_tally import expected_tpot_ms
from router.scoring import Ranking, RouteRequest, rank
from router.snapshot import PoolRow, Snapshot


class RoutingState:
    """The current compiled policy, live snapshot, local counters, outlier state and retry
    budget. ``swap_policy`` applies every setting of a reloaded policy."""

    def __init__(self, policy: CompiledPolicy) -> None:
        self.policy = policy
        self.snapshot = Snapshot.empty(policy)
        self.inflight: dict[str, int] = defaultdict(int)
        self._inflight_arr: FloatArray = np.zeros(policy.size)
        self.pending: dict[str, PoolObservations] = {}
        routing = policy.policy.routing
        self.outlier = OutlierDetector(routing.outlier, policy.policy.health)
        self.retry_budget = RetryBudget(
            routing.retry_budget_ratio, routing.retry_budget_min, routing.retry_budget_window_s
        )
        self.redis_ok = False
        self.replicas = ReplicaSet(policy)
        # Requests the engines report beyond this fleet's in-flight count, per pool (None:
        # none), and pools with no usable replica: both from the last scrape round.
        self._engine_extra: FloatArray | None = None
        self._unusable: list[int] = []
        # Every model's rollout record as last read, and what of it steers traffic now.
        self.rollout_records: dict[str, RolloutRecord] = {}
        self.rollouts = RolloutCounts()
        self.rollouts.expected_tpot = self.expected_tpot_ms

    # -- swaps --------------------------------------------------------------------------
    def swap_policy(self, policy: CompiledPolicy) -> None:
        """Route with ``policy`` from now on; live values carry over by pool id."""
        arr = np.zeros(policy.size)
        for pid, n in self.inflight.items():
            i = policy.index.get(pid)
            if i is not None:
                arr[i] = n
        snapshot = Snapshot.build(policy, self.snapshot.rows, self.snapshot.taken_at_s)
        # Ejections and the retry count are facts about the fleet, not the policy: they
        # survive a reload, and every new setting applies from the next request on.
        routing = policy.policy.routing
        self.outlier.settings = routing.outlier
        self.outlier.health = policy.policy.health
        self.retry_budget.reconfigure(
            routing.retry_budget_ratio, routing.retry_budget_min, routing.retry_budget_window_s
        )
        self.replicas.rebuild(policy, snapshot.rows, time.monotonic())
        self.policy, self.snapshot, self._inflight_arr = policy, snapshot, arr
        self._engine_extra, self._unusable = None, []
        self.rollouts.active = active_rollouts(self.rollout_records, policy)

    def set_rollouts(self, records: dict[str, RolloutRecord]) -> None:
        """Take the rollout records just read from Redis (``gateway.rollout_routing``)."""
        if records != self.rollout_records:
            self.rollout_records = records
            self.rollouts.active = active_rollouts(records, self.policy)

    def swap_snapshot(self, rows: dict[str, PoolRow], taken_at_s: float) -> None:
        """Replace the snapshot with freshly read rows; a pool the shared state has
        readmitted since this replica blocked it is unblocked here too, and the
        replicas its node group reports now are the ones requests choose among."""
        self.snapshot = Snapshot.build(self.policy, rows, taken_at_s, previous=self.snapshot)
        self.replicas.follow(rows, time.monotonic(), time.time())
        for pid in self.outlier.ejected_ids():
            row = rows.get(pid)
            if row is not None and row.state is PoolState.HEALTHY and row.health.readmitted_s:
                self.outlier.shared_readmitted(pid, row.health.readmitted_s, taken_at_s)

    def set_engine_load(self, engine_load: list[float]) -> None:
        """Take a scrape round's results: per pool (policy order), requests its engines
        report running or waiting.

        What exceeds the whole fleet's in-flight count there (the snapshot's other
        gateway replicas plus this one) is load that did not come through skyroute, and
        is added to the pool's queue depth until the next round. Subtracting the fleet's
        own requests keeps them from counting twice (they are in the engine's numbers
        too). Pools left with no usable replica are routed around like ejected ones."""
        if len(engine_load) != self.policy.size:
            return  # a policy reload raced the round; the next one aligns
        fleet = self.snapshot.inflight + self._inflight_arr
        extra = np.maximum(np.asarray(engine_load) - fleet, 0.0)
        self._engine_extra = extra if extra.any() else None
        self._unusable = self.replicas.unusable()

    def expected_tpot_ms(self, pool: PoolSpec) -> float:
        """The TPOT (ms) ``pool``'s goodput profile gives at its load now: requests in
        flight (the fleet's and this replica's) per ready replica."""
        i = self.policy.index.get(pool.id)
        running = 1.0
        if i is not None:
            ready = float(self.snapshot.ready[i]) or 1.0
            running = (float(self.snapshot.inflight[i]) + float(self._inflight_arr[i])) / ready
        g = pool.goodput
        return expected_tpot_ms(g.tpot_ms, g.max_concurrency, g.tokens_per_s, running)

    def engine_extra(self, pool_id: str) -> float:
        """Requests at ``pool_id``'s engines that did not come through this fleet."""
        i = self.policy.index.get(pool_id)
        extra = self._engine_extra
        return 0.0 if extra is None or i is None else float(extra[i])

    # -- the request path ---------------------------------------------------------------
    def rank(self, request: RouteRequest, now: float) -> Ranking:
        """Rank pools for ``request`` from the snapshot plus this replica's fresher state:
        its own in-flight counts, the engines' load from elsewhere, its own ejections and
        the pools left without a usable replica."""
        blocked_ids = self.outlier.blocked(now)
        blocked: BoolArray | None = None
        if blocked_ids or self._unusable:
            blocked = np.zeros(self.policy.size, dtype=np.bool_)
            blocked[self._unusable] = True
            for pid in blocked_ids:
                i = self.policy.index.get(pid)
                if i is not None:
                    blocked[i] = True
        local = self._inflight_arr
        if self._engine_extra is not None:
            local = local + self._engine_extra
        return rank(request, self.policy, self.snapshot, local, blocked)

    def acquire(self, pool_id: str, replica: ReplicaPick | None = None) -> None:
        """Count one more request in flight on ``pool_id`` and its ``replica`` (pair
        with ``release`` of the same)."""
        if replica is not None:
            replica.pool.acquire(replica.index)
        self.inflight[pool_id] += 1
        i = self.policy.index.get(pool_id)
        if i is not None:
            self._inflight_arr[i] += 1

    def release(self, pool_id: str, replica: ReplicaPick | None = None) -> None:
        """Count one request fewer in flight on ``pool_id`` and its ``replica``; never
        below zero."""
        if replica is not None:
            replica.pool.release(replica.index)
        if self.inflight.get(pool_id, 0) > 0:
            self.inflight[pool_id] -= 1
            i = self.policy.index.get(pool_id)
            if i is not None and self._inflight_arr[i] > 0:
                self._inflight_arr[i] -= 1

    def observe(
        self, pool_id: str, *, ok: bool, ttft_ms: float | None = None, tpot_ms: float | None = None
    ) -> None:
        """Queue one attempt's outcome and latencies (ms) for the next flush."""
        obs = self.pending.get(pool_id)
        if obs is None:
            obs = self.pending[pool_id] = PoolObservations()
        if ok:
            obs.ok += 1
        else:
            obs.errors += 1
        if ttft_ms is not None:
            obs.ttft_ms.append(ttft_ms)
        if tpot_ms is not None:
            obs.tpot_ms.append(tpot_ms)

    def take_pending(self) -> dict[str, PoolObservations]:
        """Observations since the last call (the flush loop owns them afterwards)."""
        pending, self.pending = self.pending, {}
        return pending

    def snapshot_age_s(self) -> float:
        """Seconds since the snapshot was read from Redis (inf if never)."""
        if not self.snapshot.taken_at_s:
            return float("inf")
        return max(0.0, time.time() - self.snapshot.taken_at_s)
