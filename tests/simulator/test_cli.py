"""``skyroute simulate`` end to end on a small trace."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pytest

from simulator.errors import SimulationError
from skyroute.simulate_cmd import parse_weights, register
from tests.simulator.conftest import AZURE_HEAD, DATA, simulate_cli

MOONCAKE_HASH = DATA / "mooncake_hash_first300.jsonl"


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


def test_the_planners_headroom_can_be_swept(tmp_path) -> None:
    # Stretched to 22 minutes: the forecast is trusted (and the headroom applied) after
    # 12 buckets of 60 s.
    runs = [
        simulate_cli(tmp_path / h, "--scaler", "planner", "--policies", "skyroute",
                     "--bound-block-s", "0", "--speedup", "0.08", "--planner-headroom", h)
        for h in ("1", "1.5")
    ]  # fmt: skip
    assert [doc["scenario"]["planner_headroom"] for doc in runs] == [1.0, 1.5]
    low, high = (doc["policies"][0]["summary"]["provisioned_usd"] for doc in runs)
    assert low < high


def test_a_headroom_below_one_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        simulate_cli(tmp_path, "--scaler", "planner", "--planner-headroom", "0.9")
    assert "headroom must be >= 1" in capsys.readouterr().err


def test_a_static_fleet_bills_every_policy_the_same(tmp_path) -> None:
    doc = simulate_cli(
        tmp_path, "--scaler", "static", "--policies", "skyroute,round-robin", "--bound-block-s", "0"
    )
    costs = {run["summary"]["provisioned_usd"] for run in doc["policies"]}
    assert doc["scenario"]["scaler"] == "static"
    assert len(costs) == 1 and costs.pop() > 0


def test_without_out_the_results_go_to_a_new_temp_directory_not_the_working_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        parser = argparse.ArgumentParser(prog="skyroute")
        register(parser.add_subparsers(dest="command", required=True))
        parsed = parser.parse_args([
            "simulate", "--trace", str(AZURE_HEAD), "--scale-fleet", "1/64", "--warmup-s", "20",
            "--no-plots", "--no-progress", "--policies", "round-robin",
        ])  # fmt: skip
        assert parsed.func(parsed) == 0
    finally:
        tempfile.tempdir = None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # nothing in the cwd
    (run,) = (tmp_path / "tmp").iterdir()
    assert run.name.startswith("skyroute-sim-") and (run / "result.json").exists()
    assert f"wrote {run}/result.json" in capsys.readouterr().out


def test_simulate_says_which_timestamp_unit_it_used(tmp_path, capsys) -> None:
    trace = str(AZURE_HEAD.parent / "mooncake_first200.jsonl")
    args = ("--trace", trace, "--policies", "round-robin", "--bound-block-s", "0", "--warmup-s", "5")  # fmt: skip
    doc = simulate_cli(tmp_path / "auto", *args)
    assert "timestamps read as ms (detected" in capsys.readouterr().out
    assert doc["scenario"]["time_unit"] == "ms" and doc["scenario"]["duration_s"] < 60
    doc = simulate_cli(tmp_path / "given", *args, "--time-unit", "s", "--max-requests", "20")
    assert "timestamps read as s (given)" in capsys.readouterr().out
    assert doc["scenario"]["time_unit"] == "s"


def test_the_valid_bound_is_under_the_achievable_reference_on_a_variant(tmp_path: Path) -> None:
    doc = simulate_cli(
        tmp_path, "--variant", "code", "--reference", "--policies", "skyroute,cheapest-free-slot"
    )
    ref = doc["reference"]
    assert doc["scenario"]["variant"] == "code"
    assert len(ref["candidates"]) == 15
    assert ref["best"] is not None
    assert 0 < doc["relaxation_bound"]["total_usd"] <= ref["best"]["usd"]


def test_simulate_in_pool_compares_the_replica_choices_on_a_block_id_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["simulate", "--in-pool", "--trace", str(MOONCAKE_HASH), "--model", "llama-3.1-70b"]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "(timestamps read as ms)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line[:1].isalpha()}
    for choice in ("random", "least-queue", "least-wait", "prefix-affinity", "ideal-cache"):
        assert choice in rows, out
    # The ideal cache bounds every real choice's hit rate; affinity beats ignoring prefixes.
    hit = {name: float(rows[name][1]) for name in rows if name != "policy"}
    assert max(hit.values()) == hit["ideal-cache"]
    assert hit["prefix-affinity"] > hit["least-queue"]


def test_simulate_in_pool_refuses_a_trace_without_block_ids(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"timestamp": 1000, "input_length": 9, "output_length": 1}\n')
    args = parser.parse_args(["simulate", "--in-pool", "--trace", str(plain)])
    with pytest.raises(SimulationError, match="hash_ids"):
        args.func(args)
