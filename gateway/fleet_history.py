"""The fleet over time, for the dashboard: every pool's replicas and the fleet's cost rate.

Sampled from the routing snapshot this process already keeps (no Redis round trip of
its own), every ``every_s`` seconds, for the last ``horizon_s`` seconds. Replicas are
the ready ones the snapshot routes on (the autoscaler publishes them, with the target);
the cost rate is ready replicas × GPUs per replica × USD per GPU-hour, summed: what the
fleet costs per hour while it has that shape. A pool without a known price adds 0 and
is named in ``unpriced``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.routing_state import RoutingState

__all__ = ["FleetHistory"]


def _round(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


class FleetHistory:
    """A bounded ring of fleet samples (oldest dropped first)."""

    def __init__(self, horizon_s: float = 900.0, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self._samples: deque[dict[str, Any]] = deque(maxlen=max(int(horizon_s / every_s), 1))

    def sample(self, state: RoutingState, now_s: float) -> None:
        """Record the fleet as ``state``'s snapshot shows it at ``now_s`` (unix s). O(pools)."""
        snap = state.snapshot
        specs = state.policy.policy.pools
        if len(specs) != len(snap.pool_ids):
            return  # a policy swap in progress: the next sample will match
        ready: dict[str, float] = {}
        target: dict[str, float | None] = {}
        by_provider: dict[str, float] = {}
        unpriced: list[str] = []
        for i, spec in enumerate(specs):
            n = float(snap.ready[i])
            ready[spec.id] = n
            row = snap.rows.get(spec.id)
            target[spec.id] = _round(row.target_replicas) if row is not None else None
            price = float(snap.usd_per_gpu_hour[i])
            if not math.isfinite(price):
                unpriced.append(spec.id)
                continue
            usd = n * spec.gpus_per_replica * price
            by_provider[spec.provider] = by_provider.get(spec.provider, 0.0) + usd
        self._samples.append(
            {
                "t": round(now_s, 3),
                "ready": ready,
                "target": target,
                "usd_per_hour": round(sum(by_provider.values()), 4),
                "usd_per_hour_by_provider": {k: round(v, 4) for k, v in by_provider.items()},
                "unpriced": unpriced,
            }
        )

    def samples(self, since_s: float = 0.0) -> list[dict[str, Any]]:
        """The samples taken after ``since_s`` (unix s), oldest first."""
        return [s for s in self._samples if s["t"] > since_s]

    async def run(self, state: RoutingState, clock: Callable[[], float] = time.time) -> None:
        """Sample every ``every_s`` seconds until cancelled."""
        while True:
            self.sample(state, clock())
            await asyncio.sleep(self.every_s)
