"""``skyroute simulate`` end to end on a small trace."""

from __future__ import annotations

import argparse
import json

import pytest

from skyroute.sim.cli import parse_weights, register
from skyroute.sim.errors import SimulationError
from tests.skyroute.sim.conftest import AZURE_HEAD


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="skyroute")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_simulate_prints_the_table_and_writes_the_result(tmp_path, capsys) -> None:
    args = _parse([
        "simulate", "--trace", str(AZURE_HEAD), "--scale-fleet", "1/64",
        "--policies", "skyroute,round-robin", "--warmup-s", "20", "--seed", "3",
        "--client-regions", "aws:us-east-1=0.6,gcp:us-central1=0.2,aws:eu-west-1=0.2",
        "--out", str(tmp_path), "--no-plots",
    ])  # fmt: skip
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| skyroute |" in out and "| LP bound |" in out
    doc = json.loads((tmp_path / "result.json").read_text())
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
    args = _parse([
        "simulate", "--trace", str(AZURE_HEAD), "--scale-fleet", "1/64", "--scaler", "planner",
        "--policies", "skyroute", "--warmup-s", "20", "--bound-block-s", "0",
        "--out", str(tmp_path), "--no-plots",
    ])  # fmt: skip
    assert args.func(args) == 0
    assert "| integer bound |" not in capsys.readouterr().out
    doc = json.loads((tmp_path / "result.json").read_text())
    assert doc["scenario"]["scaler"] == "planner"
    assert doc["integer_bound"] is None


def test_a_static_fleet_bills_every_policy_the_same(tmp_path) -> None:
    args = _parse([
        "simulate", "--trace", str(AZURE_HEAD), "--scale-fleet", "1/64", "--scaler", "static",
        "--policies", "skyroute,round-robin", "--warmup-s", "20", "--bound-block-s", "0",
        "--out", str(tmp_path), "--no-plots",
    ])  # fmt: skip
    assert args.func(args) == 0
    doc = json.loads((tmp_path / "result.json").read_text())
    costs = {run["summary"]["provisioned_usd"] for run in doc["policies"]}
    assert doc["scenario"]["scaler"] == "static"
    assert len(costs) == 1 and costs.pop() > 0
