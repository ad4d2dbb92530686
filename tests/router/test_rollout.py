"""The rollout state machine: stages, judgement, operator commands, traffic split."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router.judge import Tally
from router.rollout import Evidence, Rollout, Stage, assign, judge, operator, start, validated
from router.rollout_plan import RolloutPlan

T0 = 1_000_000.0
PLAN = RolloutPlan.model_validate(
    {
        "validation": {"golden": "golden.yaml"},
        "shadow": {"share": 0.05, "min_requests": 100, "min_duration_s": 30},
        "steps": [
            {"share": 0.01, "min_requests": 200, "min_duration_s": 60, "max_duration_s": 600},
            {"share": 0.2, "min_requests": 500, "min_duration_s": 60},
        ],
        "judgement": {"max_exposed_requests": 3000,
                      "metrics": [{"name": "error_rate", "allowed": 0.01}]},
    }
)  # fmt: skip


def _evidence(canary_bad: int, n: int = 4000, stable_rate: float = 0.01) -> Evidence:
    """``n`` canary requests with ``canary_bad`` errors; ten times as many stable ones."""
    return Evidence(
        canary={"error_rate": Tally(n, canary_bad)},
        stable={"error_rate": Tally(10 * n, round(10 * n * stable_rate))},
        canary_requests=n,
    )


GOOD = _evidence(canary_bad=40)


def _canary(step: int = 0, started: float = T0) -> Rollout:
    return Rollout("m", "v1", "v2", Stage.CANARY, step, started)


def test_a_rollout_starts_at_its_first_configured_stage() -> None:
    assert start("m", "v1", "v2", PLAN, T0).stage is Stage.VALIDATING
    bare = RolloutPlan(steps=PLAN.steps)
    assert start("m", "v1", "v2", bare, T0).stage is Stage.CANARY


def test_a_failed_golden_suite_rolls_back_before_any_user_traffic() -> None:
    r = start("m", "v1", "v2", PLAN, T0)
    r, t = validated(r, PLAN, failures=1, report=("prompt 3: not JSON",), now=T0 + 5)
    assert r.stage is Stage.ROLLED_BACK and r.share(PLAN) == 0.0
    assert t.evidence == ("prompt 3: not JSON",)


def test_a_healthy_version_is_promoted_through_every_stage() -> None:
    r = start("m", "v1", "v2", PLAN, T0)
    r, _ = validated(r, PLAN, 0, (), T0)
    assert r.stage is Stage.SHADOW and r.shadow_share(PLAN) == 0.05 and r.share(PLAN) == 0.0
    now = T0
    stages = []
    while not r.done:
        now += 61
        r, t = judge(r, PLAN, GOOD, now)
        assert t is not None
        stages.append((t.to_stage, r.step))
    assert stages == [(Stage.CANARY, 0), (Stage.CANARY, 1), (Stage.PROMOTED, 1)]
    assert r.share(PLAN) == 1.0


def test_a_regression_rolls_back_at_once_with_its_evidence() -> None:
    r, t = judge(_canary(), PLAN, _evidence(canary_bad=400), T0 + 1)
    assert r.stage is Stage.ROLLED_BACK and t is not None
    assert t.reason == "regression in error_rate"
    assert "canary 400/4000" in t.evidence[0]


def test_a_step_waits_for_its_minimum_duration_and_requests() -> None:
    assert judge(_canary(), PLAN, GOOD, T0 + 10) == (_canary(), None)
    few = _evidence(canary_bad=0, n=150)
    assert judge(_canary(), PLAN, few, T0 + 61)[1] is None


def test_an_inconclusive_step_rolls_back_or_holds_as_the_plan_says() -> None:
    unclear = _evidence(canary_bad=8, n=400)  # 2 % against 1 %: neither side is clear
    r, t = judge(_canary(), PLAN, unclear, T0 + 601)
    assert r.stage is Stage.ROLLED_BACK and t is not None and "out of time" in t.reason
    hold = PLAN.model_copy(update={"judgement": PLAN.judgement.model_copy(
        update={"on_inconclusive": "hold"})})  # fmt: skip
    r, t = judge(_canary(), hold, unclear, T0 + 601)
    assert r.stage is Stage.CANARY and r.paused and r.share(hold) == 0.0


def test_the_exposure_cap_ends_an_undecided_step() -> None:
    unclear = _evidence(canary_bad=60, n=3000)  # 2 % against 1 %, at the cap
    r, t = judge(_canary(), PLAN, unclear, T0 + 61)
    assert r.stage is Stage.ROLLED_BACK and t is not None and "exposure cap" in t.reason


def test_operator_commands_and_their_refusals() -> None:
    r, _ = operator(_canary(), "pause", T0)
    assert r.paused and r.share(PLAN) == 0.0
    with pytest.raises(ValueError, match="already paused"):
        operator(r, "pause", T0)
    r, _ = operator(r, "resume", T0 + 100)
    assert not r.paused and r.stage_started_s == T0 + 100
    done, t = operator(r, "abort", T0 + 101)
    assert done.stage is Stage.ROLLED_BACK and t.reason == "aborted by operator"
    with pytest.raises(ValueError, match="already"):
        operator(done, "promote", T0 + 102)
    assert operator(r, "promote", T0)[0].stage is Stage.PROMOTED


def test_a_sticky_point_that_reached_the_canary_stays_there_as_shares_grow() -> None:
    point = 0.05
    assert assign(_canary(step=0), PLAN, point) == "stable"  # share 0.01
    assert assign(_canary(step=1), PLAN, point) == "canary"  # share 0.2
    assert assign(_canary(step=1), PLAN, 0.005) == "canary"  # canary at 0.01 stays canary


def test_the_state_survives_json() -> None:
    r = _canary(step=1)
    assert Rollout.from_json(r.to_json()) == r


def test_plans_with_decreasing_shares_or_a_metric_twice_are_refused() -> None:
    with pytest.raises(ValidationError, match="must not decrease"):
        RolloutPlan.model_validate({"steps": [{"share": 0.5}, {"share": 0.1}]})
    with pytest.raises(ValidationError, match="judged twice"):
        RolloutPlan.model_validate(
            {
                "steps": [{"share": 0.5}],
                "judgement": {
                    "metrics": [
                        {"name": "error_rate", "allowed": 0.01},
                        {"name": "error_rate", "allowed": 0.02},
                    ]
                },
            }
        )
