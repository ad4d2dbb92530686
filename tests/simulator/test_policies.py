"""Each simulated routing policy picks the pool its real counterpart would."""

from __future__ import annotations

import numpy as np
import pytest

from router.scoring import RouteRequest, rank
from router.snapshot import PoolRow, Snapshot
from simulator.errors import SimulationError
from simulator.fleet import Fleet
from simulator.policies import RoutingPolicy
from simulator.spec import FleetSpec
from tests.simulator.conftest import policy, pool, spec_of

CHEAP, DEAR = 0, 1


def _setup(cheap_replicas: int = 1, dear_replicas: int = 1) -> tuple[FleetSpec, Fleet]:
    spec = spec_of(
        policy(
            [
                pool("cheap", usd_per_gpu_hour=1.0, replicas=(0, 4, cheap_replicas)),
                pool("dear", usd_per_gpu_hour=5.0, replicas=(0, 4, dear_replicas)),
            ]
        )
    )
    n = 50
    fleet = Fleet(spec, np.full(n, 100, dtype=np.intp), np.full((n, 2), 0.1))
    for p in range(spec.size):
        for _ in range(int(spec.initial_replicas[p])):
            fleet.launch(p, 0.0, 0.0)
    return spec, fleet


def _choose(name: str, spec: FleetSpec, fleet: Fleet, i: int = 0, prompt: int = 100) -> int:
    router = RoutingPolicy.create(name, spec, np.random.default_rng(0))
    return router.choose(i, 0, prompt, 0.0, fleet)


def test_every_compared_policy_is_registered_by_name() -> None:
    names = {"round-robin", "least-latency", "cheapest-only", "least-queue", "skyroute"}
    assert names <= set(RoutingPolicy.registry)


def test_unknown_policy_name_is_refused() -> None:
    spec, _ = _setup()
    with pytest.raises(SimulationError, match="unknown routing policy"):
        RoutingPolicy.create("fastest-ever", spec, np.random.default_rng(0))


def test_cheapest_only_ignores_a_full_queue() -> None:
    spec, fleet = _setup()
    for i in range(10):
        fleet.submit(i, CHEAP, 0.0)
    assert fleet.waiting(CHEAP) == 8
    assert _choose("cheapest-only", spec, fleet) == CHEAP


def test_round_robin_alternates_over_pools_with_replicas() -> None:
    spec, fleet = _setup()
    router = RoutingPolicy.create("round-robin", spec, np.random.default_rng(0))
    picks = [router.choose(i, 0, 100, 0.0, fleet) for i in range(4)]
    assert sorted(picks[:2]) == [CHEAP, DEAR]
    assert picks[2:] == picks[:2]


def test_policies_skip_a_pool_without_ready_replicas() -> None:
    spec, fleet = _setup(cheap_replicas=1, dear_replicas=0)
    router = RoutingPolicy.create("round-robin", spec, np.random.default_rng(0))
    assert {router.choose(i, 0, 100, 0.0, fleet) for i in range(4)} == {CHEAP}


def test_least_queue_picks_the_shorter_queue() -> None:
    spec, fleet = _setup()
    for i in range(3):
        fleet.submit(i, CHEAP, 0.0)
    assert _choose("least-queue", spec, fleet) == DEAR


def test_least_latency_tries_an_unmeasured_pool_then_the_faster_per_token() -> None:
    spec, fleet = _setup()
    router = RoutingPolicy.create("least-latency", spec, np.random.default_rng(0))
    router.observe(0, CHEAP, latency_s=2.0, output_tokens=100)
    assert router.choose(0, 0, 100, 0.0, fleet) == DEAR
    router.observe(0, DEAR, latency_s=3.0, output_tokens=100)
    assert router.choose(1, 0, 100, 0.0, fleet) == CHEAP


def test_skyroute_takes_the_first_pool_of_the_real_router_ranking() -> None:
    spec, fleet = _setup()
    for i in range(3):  # cheap: 2 slots busy and 1 queued; its wait breaks the 500 ms TTFT
        fleet.submit(i, CHEAP, 0.0)
    rows = {pid: PoolRow(ready_replicas=1.0) for pid in spec.pool_ids}
    snapshot = Snapshot.build(spec.compiled, rows, taken_at_s=0.0)
    request = RouteRequest("m", 400, None, "s", "aws:us-east-1")
    expected = rank(request, spec.compiled, snapshot, fleet.inflight).order[0]
    assert _choose("skyroute", spec, fleet, prompt=400) == DEAR == int(expected)


def test_skyroute_takes_the_cheapest_pool_while_it_meets_the_slo() -> None:
    spec, fleet = _setup()
    assert _choose("skyroute", spec, fleet, prompt=400) == CHEAP
    # With one sequence running, a second decodes at the profile's 20 ms (2 of 2 slots
    # busy), over the 15 ms TPOT SLO: the dear pool, idle, meets it.
    fleet.submit(0, CHEAP, 0.0)
    assert _choose("skyroute", spec, fleet, prompt=400) == DEAR
