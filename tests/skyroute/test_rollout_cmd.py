"""``skyroute rollout``: the plan file with its golden requests read in, and what the
command prints of a rollout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from base.errors import CommandError
from router.rollout_plan import RolloutPlan
from skyroute.rollout_cmd import read_plan, render


def test_the_plan_carries_its_golden_requests_so_any_sidecar_can_run_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "golden.yaml").write_text(
        "- name: json\n"
        "  messages: [{role: user, content: 'reply {\"ok\": true}'}]\n"
        "  checks: {valid_json: true, contains: [ok], max_latency_ms: 2000}\n"
    )
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text("validation: {golden: golden.yaml}\nsteps: [{share: 0.05}]\n")

    plan = RolloutPlan.model_validate(read_plan(plan_file))

    assert plan.validation is not None
    (golden,) = plan.validation.requests
    assert golden.name == "json" and golden.checks.contains == ["ok"]


@pytest.mark.parametrize(
    ("plan", "golden", "message"),
    [
        ("steps: [", None, "cannot read the rollout plan"),
        ("validation: {golden: missing.yaml}\nsteps: [{share: 0.1}]\n", None, "golden"),
        ("validation: {golden: g.yaml}\nsteps: [{share: 0.1}]\n", "a: 1\n", "YAML list"),
    ],
)
def test_a_plan_that_cannot_be_read_is_one_clear_error(
    tmp_path: Path, plan: str, golden: str | None, message: str
) -> None:
    (tmp_path / "plan.yaml").write_text(plan)
    if golden is not None:
        (tmp_path / "g.yaml").write_text(golden)
    with pytest.raises(CommandError, match=message):
        read_plan(tmp_path / "plan.yaml")


def test_status_shows_the_split_the_bound_and_the_evidence() -> None:
    text = render({
        "model": "m", "stable": "v1", "canary": "v2", "stage": "canary", "step": 0,
        "steps": 3, "paused": False, "share": 0.01, "shadow_share": 0.0, "exposed": 12,
        "max_exposed": 5000, "stage_started_s": time.time() - 30,
        "evidence": ["error_rate: canary 0/40 vs stable 1/3000 ..."],
        "transitions": [{"at_s": time.time(), "from": "shadow", "to": "canary", "step": 0,
                         "reason": "shadow answers match stable"}],
    })  # fmt: skip
    assert "v1 -> v2  canary step 1/3" in text
    assert "1.0%" in text and "12 (bound 5000)" in text
    assert "error_rate: canary 0/40" in text and "shadow -> canary" in text
