"""A scaler that provisions the integer bound's plan, knowing the trace in advance.

It answers a question the bound alone cannot: could the bound's fleet actually serve the
trace? The bound's capacity is fluid (a window's tokens within replicas × goodput ×
window, no queueing), so its fleet may be too small once requests arrive in bursts and
wait for batch slots. Replaying a routing policy on the bound's fleet separates two parts
of a policy's optimality gap: what perfect foresight would save (the fleet) and what the
bound's fluid capacity model leaves out (the attainment lost on that fleet).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from base.types import FloatArray, IntArray
from simulator.scaler import DemandSample, FleetState


class HindsightScaler:
    """Targets the replicas a plan needs over the next provisioning time.

    ``replicas[w, p]`` is the plan's mean booted replicas of pool p in window w (of
    ``window_s``, window 0 starting at t = 0), for instance ``Bound.replicas``. A replica
    needed in window w must be launched a provisioning time before it, so the target at
    ``now`` is the largest whole count the plan needs in any window overlapping ``[now,
    now + provisioning_s[p]]``. Before t = 0 (the warm-up: unbilled, and replicas come at
    once) it is every pool's maximum, so the plan starts, as the bound does, with no
    backlog. Fractional means are rounded up: a whole replica serves them. Stateless and
    deterministic.
    """

    def __init__(self, replicas: FloatArray, window_s: float, provisioning_s: FloatArray) -> None:
        if replicas.ndim != 2 or len(replicas) == 0:
            raise ValueError("replicas must be a non-empty [window, pool] array")
        # 1e-6: a mean of 2.0000001 from the solver is two replicas, not three.
        self.whole = np.ceil(replicas - 1e-6).astype(np.intp)
        self.window_s = window_s
        self.provisioning_s = provisioning_s

    def decide(
        self, now: float, demand_history: Sequence[DemandSample], fleet_state: FleetState
    ) -> IntArray:
        """The plan's need over ``[now, now + provisioning]`` per pool, within bounds."""
        if now < 0:
            return fleet_state.max_replicas.copy()
        last = len(self.whole) - 1
        first = min(max(math.floor(now / self.window_s), 0), last)
        targets = np.empty(self.whole.shape[1], dtype=np.intp)
        for p in range(len(targets)):
            ahead = now + float(self.provisioning_s[p])
            end = min(max(math.floor(ahead / self.window_s), first), last)
            targets[p] = self.whole[first : end + 1, p].max()
        out: IntArray = np.clip(targets, fleet_state.min_replicas, fleet_state.max_replicas)
        return out
