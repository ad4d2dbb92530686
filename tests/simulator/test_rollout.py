"""A rollout replayed in simulated time: a worse version is rolled back having served
fewer requests than the plan's bound, an identical one is promoted, and the command line
prints what happened."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from router.policy import SLOClass
from router.rollout import Stage
from router.rollout_plan import RolloutPlan
from simengine.perf_model import PROFILES
from simulator.rollout import VersionModel, replay_rollout, replicas_for
from simulator.trace import Trace, read_trace
from skyroute.simulate_cmd import register
from tests.simulator.conftest import AZURE_HEAD

PROFILE = PROFILES["a10g-llama-3.1-8b"]
SLO = SLOClass(ttft_ms=800, tpot_ms=60)
# Canary steps only (no shadow): a regression must be caught while users see it.
PLAN = RolloutPlan.model_validate({
    "steps": [
        {"share": 0.05, "min_requests": 100, "min_duration_s": 30},
        {"share": 0.3, "min_requests": 200, "min_duration_s": 30},
    ],
    "judgement": {
        "max_exposed_requests": 1500,
        "metrics": [
            {"name": "error_rate", "allowed": 0.005},
            {"name": "tpot_over_reference", "allowed": 0.05},
        ],
    },
})  # fmt: skip


def _trace(seed: int, rate: float = 40.0, seconds: float = 1800.0) -> Trace:
    sizes = read_trace(AZURE_HEAD)
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    pick = rng.integers(0, len(sizes), n)
    return Trace(
        np.cumsum(rng.exponential(1 / rate, n)),
        np.minimum(sizes.prompt_tokens[pick], 4000),
        np.clip(sizes.output_tokens[pick], 1, 500),
    )


@pytest.mark.parametrize(
    ("factor", "errors", "metric"),
    [(1.5, 0.0, "tpot_over_reference"), (1.0, 0.05, "error_rate")],
    ids=["tpot-x1.5", "errors-5pct"],
)
def test_a_worse_version_is_rolled_back_within_the_bound(
    factor: float, errors: float, metric: str
) -> None:
    trace = _trace(1)
    n = replicas_for(trace, PROFILE)
    out = replay_rollout(trace, PLAN, VersionModel(PROFILE, n),
                         VersionModel(PROFILE, n, factor, errors), SLO, seed=1)  # fmt: skip
    assert out.stage is Stage.ROLLED_BACK
    assert metric in out.transitions[-1].reason
    assert 0 < out.exposed < PLAN.judgement.max_exposed_requests
    assert out.decided_s is not None


def test_an_identical_version_is_promoted_through_every_step() -> None:
    trace = _trace(2)
    n = replicas_for(trace, PROFILE)
    out = replay_rollout(trace, PLAN, VersionModel(PROFILE, n), VersionModel(PROFILE, n),
                         SLO, seed=2)  # fmt: skip
    assert out.stage is Stage.PROMOTED
    assert [(t.to_stage, t.step) for t in out.transitions] == [
        (Stage.CANARY, 1),
        (Stage.PROMOTED, 1),
    ]


def test_simulate_replays_a_trace_through_a_rollout(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="skyroute")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([
        "simulate", "--trace", str(AZURE_HEAD), "--rollout", "default", "--canary-tpot", "1.5",
    ])  # fmt: skip
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "shadow -> rolled_back" in out and "regression in tpot_over_reference" in out
    assert "user requests the new version served: 0 of" in out
