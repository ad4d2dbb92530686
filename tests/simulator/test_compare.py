"""Whole comparisons on the first 400 Azure requests: determinism, JSON and plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from live.policy_file import load_policy
from simulator.compare import POLICIES, Comparison, compare
from simulator.engine import SimConfig, Workload
from simulator.report import PLOTS, format_table, write_json, write_plots
from simulator.spec import FleetSpec
from simulator.trace import read_trace
from tests.simulator.conftest import AZURE_HEAD

DEMO_POLICY = Path(__file__).resolve().parents[2] / "skyroute" / "fleet" / "demo-policy.yaml"
REGIONS = {"aws:us-east-1": 0.6, "gcp:us-central1": 0.2, "aws:eu-west-1": 0.2}


def _compare(seed: int) -> Comparison:
    spec = FleetSpec.build(load_policy(DEMO_POLICY), scale=1 / 64)
    config = SimConfig(seed=seed, warmup_s=20.0)
    work = Workload.build(read_trace(AZURE_HEAD), spec, REGIONS, config)
    return compare(spec, work, config)


@pytest.fixture(scope="module")
def result() -> Comparison:
    return _compare(seed=7)


def test_same_seed_gives_the_same_result(result: Comparison) -> None:
    again = _compare(seed=7)
    assert again.summaries == result.summaries
    for a, b in zip(again.runs, result.runs, strict=True):
        assert np.array_equal(a.pool_of, b.pool_of)
        assert np.array_equal(a.done_s, b.done_s, equal_nan=True)


def test_another_seed_draws_other_client_regions(result: Comparison) -> None:
    other = _compare(seed=8)
    assert not np.array_equal(other.work.client, result.work.client)


def test_every_policy_runs_against_both_bounds(result: Comparison) -> None:
    assert [s.policy for s in result.summaries] == list(POLICIES)
    assert result.integer_bound is not None
    assert result.integer_bound.total_usd >= result.bound.total_usd * (1 - 1e-6) > 0
    assert all(s.gap is not None and s.gap_integer is not None for s in result.summaries)


def test_plots_are_written(result: Comparison, tmp_path) -> None:
    paths = write_plots(result, tmp_path)
    assert [p.name for p in paths] == list(PLOTS)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_holds_every_policy_and_the_bound(result: Comparison, tmp_path) -> None:
    doc = json.loads(write_json(result, {"seed": 7}, tmp_path / "r.json").read_text())
    assert [p["summary"]["policy"] for p in doc["policies"]] == list(POLICIES)
    assert doc["bound"]["total_usd"] == pytest.approx(result.bound.total_usd)
    assert doc["integer_bound"]["kind"] == "integer"


def test_table_has_a_row_per_policy_and_per_bound(result: Comparison) -> None:
    rows = [r for r in format_table(result).splitlines() if r.startswith("|")]
    assert len(rows) == 2 + len(POLICIES) + 2
    assert rows[-2].startswith("| LP bound |")
    assert rows[-1].startswith("| integer bound |")
