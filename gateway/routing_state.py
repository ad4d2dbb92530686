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
from gateway.retry_budget import RetryBudget
from live.tables import PoolObservations
from router.compiled import CompiledPolicy
from router.health import PoolState
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
        self.policy, self.snapshot, self._inflight_arr = policy, snapshot, arr

    def swap_snapshot(self, rows: dict[str, PoolRow], taken_at_s: float) -> None:
        """Replace the snapshot with freshly read rows; a pool the shared state has
        readmitted since this replica blocked it is unblocked here too."""
        self.snapshot = Snapshot.build(self.policy, rows, taken_at_s)
        for pid in self.outlier.ejected_ids():
            row = rows.get(pid)
            if row is not None and row.state is PoolState.HEALTHY and row.health.readmitted_s:
                self.outlier.shared_readmitted(pid, row.health.readmitted_s, taken_at_s)

    # -- the request path ---------------------------------------------------------------
    def rank(self, request: RouteRequest, now: float) -> Ranking:
        """Rank pools for ``request`` from the snapshot plus this replica's fresher state."""
        blocked_ids = self.outlier.blocked(now)
        blocked: BoolArray | None = None
        if blocked_ids:
            blocked = np.zeros(self.policy.size, dtype=np.bool_)
            for pid in blocked_ids:
                i = self.policy.index.get(pid)
                if i is not None:
                    blocked[i] = True
        return rank(request, self.policy, self.snapshot, self._inflight_arr, blocked)

    def acquire(self, pool_id: str) -> None:
        """Count one more request in flight on ``pool_id`` (pair with ``release``)."""
        self.inflight[pool_id] += 1
        i = self.policy.index.get(pool_id)
        if i is not None:
            self._inflight_arr[i] += 1

    def release(self, pool_id: str) -> None:
        """Count one request fewer in flight on ``pool_id``; never below zero."""
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
