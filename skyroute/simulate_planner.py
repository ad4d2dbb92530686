"""The real autoscaler's ``decide()`` in the simulation loop, behind the ``Scaler`` protocol.

Every ``config.interval_s`` (the sidecar's cycle) the adapter turns the simulator's
demand samples into the ``DemandHistory`` the sidecar reads from Redis (requests, prompt
and output tokens per client region, one bucket per scaler tick), the fleet into
``PoolStatus`` rows (target = booting + ready, ready), and calls
``autoscaler.decide.decide`` with the scaled policy's prices. The plan's targets hold
until the next cycle. ``ScalerState`` (stabilisation window, cooldowns) is carried from
cycle to cycle as the sidecar stores it, so one adapter serves one run.

The policy ``decide()`` sees is the simulated fleet's: the same model's pools only,
scaled like the simulator's replicas, with each pool's provisioning time as simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoscaler.config import ScalerConfig
from autoscaler.decide import decide
from autoscaler.demand import DemandHistory
from autoscaler.fleet import PoolStatus
from autoscaler.forecast import ForecastConfig
from autoscaler.state import ScalerState
from base.types import IntArray
from live.demand_table import DemandSeries
from router.policy import Policy, ScalingSpec
from simulator.scaler import DemandSample, FleetState
from simulator.spec import FleetSpec, scale_policy

# Simulated time 0 as a unix time: decide() and the forecast work on unix seconds. Any
# fixed value gives the same plan on every run; a whole day keeps buckets aligned.
EPOCH_S = 19_675 * 86_400.0


def sim_config(**changes: object) -> ScalerConfig:
    """The sidecar's defaults, except what assumes days of real telemetry: demand is
    forecast on 60 s buckets over the last 2 h (the trace is an hour long), trusted after
    12 of them; and spot pools may carry all demand (``spot_cap`` 1), as the simulator
    does not model preemption. ``changes`` override fields."""
    base = ScalerConfig(
        spot_cap=1.0,
        forecast_bucket_s=60.0,
        history_s=7200.0,
        forecast=ForecastConfig(calibration_s=7200.0, selection_s=7200.0, min_buckets=12),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def sim_policy(policy: Policy, spec: FleetSpec) -> Policy:
    """``policy`` as the simulator runs it: scaled by ``spec.scale``, only the simulated
    model and its pools, each with the simulated provisioning time."""
    scaled = scale_policy(policy, spec.scale)
    pools = []
    for pool in scaled.pools:
        if pool.id not in spec.pool_ids:
            continue
        lead = float(spec.provisioning_s[spec.pool_ids.index(pool.id)])
        scaling = pool.scaling or ScalingSpec(group=pool.id)
        pools.append(
            pool.model_copy(update={"scaling": scaling.model_copy(update={"provisioning_s": lead})})
        )
    models = {spec.model: scaled.models[spec.model]}
    return scaled.model_copy(update={"pools": pools, "models": models})


@dataclass
class PlannerScaler:
    """Runs ``decide()`` every ``config.interval_s`` of simulated time; see the module
    docstring. Deterministic: the same run gives the same plans. Not reusable across runs
    (it keeps the autoscaler's state)."""

    spec: FleetSpec
    policy: Policy
    config: ScalerConfig
    state: ScalerState
    targets: IntArray | None = None
    next_cycle_s: float = -np.inf

    @classmethod
    def build(cls, policy: Policy, spec: FleetSpec, config: ScalerConfig) -> PlannerScaler:
        """An adapter for ``spec``'s fleet, given the unscaled ``policy`` it was built from."""
        return cls(spec, sim_policy(policy, spec), config, ScalerState())

    def decide(
        self, now: float, demand_history: Sequence[DemandSample], fleet_state: FleetState
    ) -> IntArray:
        """The last plan's targets; a new plan once ``config.interval_s`` has passed."""
        st = fleet_state
        if self.targets is not None and now < self.next_cycle_s:
            return self.targets
        unix = EPOCH_S + now
        pools = [
            PoolStatus(pid, int(st.booting[p] + st.ready[p]), int(st.ready[p]))
            for p, pid in enumerate(self.spec.pool_ids)
        ]
        prices = {
            pid: float(self.spec.usd_per_replica_hour[p]) / self._gpus(p)
            for p, pid in enumerate(self.spec.pool_ids)
        }
        plan = decide(
            self._history(unix, demand_history), pools, prices, self.policy, self.state, self.config
        )
        self.state = plan.state
        targets: IntArray = np.asarray(
            [plan.change(pid).target for pid in self.spec.pool_ids], dtype=np.intp
        )
        self.targets = targets
        self.next_cycle_s = now + self.config.interval_s - 1e-9
        return targets

    def _gpus(self, p: int) -> float:
        return float(self.spec.compiled.gpus[self.spec.members[p]])

    def _history(self, unix: float, samples: Sequence[DemandSample]) -> DemandHistory:
        """One series per client region, a bucket per tick, ending at ``unix``."""
        if not samples:
            return DemandHistory(unix, {})
        tick = samples[-1].duration_s
        start = EPOCH_S + samples[0].end_s - samples[0].duration_s
        arrivals = np.stack([s.arrivals.sum(axis=1) for s in samples], axis=1)
        prompt = np.stack([s.prompt_tokens.sum(axis=1) for s in samples], axis=1)
        output = np.stack([s.output_tokens.sum(axis=1) for s in samples], axis=1)
        zeros = np.zeros(len(samples))
        series = {
            (self.spec.model, region): DemandSeries(
                start, tick, arrivals[r], prompt[r], output[r], zeros
            )
            for r, region in enumerate(self.spec.regions)
        }
        return DemandHistory(unix, series)
