"""The autoscaler's decide() behind the simulator's Scaler protocol."""

from __future__ import annotations

import numpy as np

from simulator.scaler import DemandSample, FleetState
from skyroute.simulate_planner import PlannerScaler, sim_config
from tests.simulator.conftest import policy, pool, spec_of

# Two pools of 2-slot replicas at 100 output tok/s within the 20 ms TPOT SLO (profile:
# 100 tok/s, 2 sequences, 10 ms alone), $1/h and $5/h; the cheap one holds 3 at most.
POLICY = policy(
    [
        pool("cheap", usd_per_gpu_hour=1.0, replicas=(0, 3, 0)),
        pool("dear", usd_per_gpu_hour=5.0, replicas=(0, 8, 0)),
    ],
    tpot_ms=20.0,
)
SPEC = spec_of(POLICY)


def _samples(requests_per_tick: float, ticks: int) -> list[DemandSample]:
    """10 s ticks in which the client region sent that many (0 prompt, 101 output)."""
    out = []
    for k in range(1, ticks + 1):
        arrivals = np.array([[requests_per_tick, 0.0]])
        out.append(
            DemandSample(
                10.0 * k, 10.0, arrivals, np.zeros_like(arrivals), arrivals * 101,
                np.zeros(2), np.zeros(2),
            )
        )  # fmt: skip
    return out


def _scaler() -> PlannerScaler:
    return PlannerScaler.build(POLICY, SPEC, sim_config())


def test_demand_within_the_cheap_pool_goes_there_with_the_planners_headroom() -> None:
    # 5 per 10 s × 101 tokens = 50.5 tok/s; × 1.05 headroom = 53.0: one cheap replica.
    targets = _scaler().decide(60.0, _samples(5, 6), FleetState.static(SPEC))
    assert targets.tolist() == [1, 0]


def test_demand_beyond_the_cheap_pools_max_takes_the_dear_pool() -> None:
    # 40 per 10 s = 404 tok/s, 424 with headroom: 3 cheap (300) and 2 dear (200).
    targets = _scaler().decide(60.0, _samples(40, 6), FleetState.static(SPEC))
    assert targets.tolist() == [3, 2]


def test_targets_hold_until_the_next_cycle() -> None:
    scaler = _scaler()
    state = FleetState.static(SPEC)
    first = scaler.decide(60.0, _samples(5, 6), state)
    # 50 s later (before the 60 s cycle) the plan stands, whatever the demand.
    assert scaler.decide(110.0, _samples(40, 11), state).tolist() == first.tolist()
    assert scaler.decide(120.0, _samples(40, 12), state).tolist() == [3, 2]
