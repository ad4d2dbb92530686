"""The hindsight scaler: the integer bound's plan, each replica launched in time."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.hindsight import HindsightScaler
from simulator.scaler import FleetState
from tests.simulator.conftest import policy, pool, simulate_cli, spec_of

SPEC = spec_of(
    policy([pool("cheap", replicas=(0, 3, 0)), pool("dear", replicas=(1, 8, 1))], tpot_ms=20.0)
)
STATE = FleetState.static(SPEC)
# Five 60 s windows; a replica takes 120 s to boot.
PLAN = np.array([[0.0, 1.0], [0.2, 1.0], [2.0000001, 1.0], [1.0, 0.4], [0.0, 0.0]])
LEAD = np.array([120.0, 120.0])


def test_a_replica_is_ordered_one_provisioning_time_before_its_window() -> None:
    scaler = HindsightScaler(PLAN, 60.0, LEAD)
    # At 0 s the plan's next 120 s reach into window 2 (two cheap replicas; 2.0000001 is
    # solver noise, not a third); at 130 s windows 2-4; at 200 s windows 3-4.
    targets = [scaler.decide(t, [], STATE).tolist() for t in (0.0, 10.0, 130.0, 200.0)]
    assert targets == [[2, 1], [2, 1], [2, 1], [1, 1]]


def test_past_the_plan_the_last_window_holds_and_pool_bounds_apply() -> None:
    scaler = HindsightScaler(PLAN, 60.0, LEAD)
    # Window 4 needs nothing, but "dear" keeps its minimum of one replica.
    assert scaler.decide(290.0, [], STATE).tolist() == [0, 1]
    assert scaler.decide(10_000.0, [], STATE).tolist() == [0, 1]


def test_the_warm_up_runs_every_pool_at_its_max_so_the_plan_starts_without_a_backlog() -> None:
    scaler = HindsightScaler(PLAN, 60.0, LEAD)
    state = replace(STATE, ready=np.array([1, 1]))
    assert scaler.decide(-300.0, [], state).tolist() == [3, 8]


def test_simulate_replays_the_integer_bounds_fleet_and_pays_at_least_the_bound(
    tmp_path, capsys
) -> None:
    doc = simulate_cli(tmp_path, "--scaler", "hindsight", "--policies", "skyroute,round-robin")
    assert "| integer bound |" in capsys.readouterr().out
    assert doc["scenario"]["scaler"] == "hindsight"
    bound = doc["integer_bound"]["total_usd"]
    for run in doc["policies"]:
        # The plan's fleet, whole replicas and boots billed, can cost no less than the
        # bound proven over every such fleet.
        assert run["summary"]["provisioned_usd"] >= bound - 1e-9
