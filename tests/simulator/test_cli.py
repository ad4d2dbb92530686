"""``skyroute simulate`` end to end on a small trace."""

from __future__ import annotations

import pytest

from simulator.errors import SimulationError
from skyroute.simulate_cmd import parse_weights
from tests.simulator.conftest import simulate_cli


def test_simulate_prints_the_table_and_writes_the_result(tmp_path, capsys) -> None:
    doc = simulate_cli(
        tmp_path, "--policies", "skyroute,round-robin", "--seed", "3",
        "--client-regions", "aws:us-east-1=0.6,gcp:us-central1=0.2,aws:eu-west-1=0.2",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "| skyroute |" in out and "| LP bound |" in out
    assert doc["scenario"]["seed"] == 3
    assert [p["summary"]["policy"] for p in doc["policies"]] == ["skyroute", "round-robin"]


def test_client_region_weights_parse() -> None:
    assert parse_weights("aws:us-east-1=0.6, gcp:us-central1=0.4") == {
        "aws:us-east-1": 0.6,
        "gcp:us-central1": 0.4,
    }


def test_a_malformed_weight_is_refused() -> None:
    with pytest.raises(SimulationError, match="REGION=WEIGHT"):
        parse_weights("aws:us-east-1")


def test_simulate_runs_the_autoscalers_decide_when_asked(tmp_path, capsys) -> None:
    doc = simulate_cli(
        tmp_path, "--scaler", "planner", "--policies", "skyroute", "--bound-block-s", "0"
    )
    assert "| integer bound |" not in capsys.readouterr().out
    assert doc["scenario"]["scaler"] == "planner"
    assert doc["integer_bound"] is None


def test_a_static_fleet_bills_every_policy_the_same(tmp_path) -> None:
    doc = simulate_cli(
        tmp_path, "--scaler", "static", "--policies", "skyroute,round-robin", "--bound-block-s", "0"
    )
    costs = {run["summary"]["provisioned_usd"] for run in doc["policies"]}
    assert doc["scenario"]["scaler"] == "static"
    assert len(costs) == 1 and costs.pop() > 0
