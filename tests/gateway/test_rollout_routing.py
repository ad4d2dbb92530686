"""The pure part of a gateway under a rollout: which records steer traffic, which version
a request gets, and which counts its attempts go to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.rollout_routing import RolloutCounts, active_rollouts
from gateway.shadow import answer_text, similarity
from live.rollout_table import RolloutRecord, plan_from_yaml
from router.compiled import compile_policy
from router.policy import Policy
from router.rollout import Rollout, Stage

FIXTURE = Path(__file__).parent.parent / "fixtures" / "router_policy.yaml"
BIG = "llama-3.1-70b"
PLAN = plan_from_yaml("sticky: session\nshadow: {share: 0.2}\nsteps: [{share: 0.25}]\n")


def _policy(serving: str = "v1") -> Any:
    doc: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
    for p, version in zip(doc["pools"][:2], ("v1", "v2"), strict=True):
        p["version"] = version
    doc["models"][BIG]["version"] = serving
    return compile_policy(Policy.model_validate(doc))


def _record(stage: Stage, canary: str = "v2", paused: bool = False) -> RolloutRecord:
    return RolloutRecord("r1", Rollout(BIG, "v1", canary, stage, 0, 0.0, paused), PLAN, 3)


def test_only_records_the_policy_can_act_on_steer_traffic() -> None:
    policy = _policy()
    assert set(active_rollouts({BIG: _record(Stage.CANARY)}, policy)) == {BIG}
    assert not active_rollouts({BIG: _record(Stage.ROLLED_BACK)}, policy)
    assert not active_rollouts({BIG: _record(Stage.CANARY, canary="v9")}, policy)
    promoted = active_rollouts({BIG: _record(Stage.PROMOTED)}, policy)[BIG]
    assert promoted.promoted and promoted.version_for(None, "t", 0.99) == "v2"
    # Once the policy serves v2 itself, the promoted record has nothing left to do.
    assert not active_rollouts({BIG: _record(Stage.PROMOTED)}, _policy(serving="v2"))


def test_a_session_keeps_its_version_and_the_share_holds_over_many_sessions() -> None:
    active = active_rollouts({BIG: _record(Stage.CANARY)}, _policy())[BIG]
    assert active.share == 0.25 and active.counted
    picks = [active.version_for(f"session-{i}", "t", 0.0) for i in range(4000)]
    assert abs(picks.count("v2") / 4000 - 0.25) < 0.03
    assert all(active.version_for(f"session-{i}", "t", 0.99) == picks[i] for i in range(200))
    # Without a session the draw decides.
    assert active.version_for(None, "t", 0.1) == "v2"
    assert active.version_for(None, "t", 0.3) == "v1"
    # Paused, or in the shadow stage: no user request goes to the new version.
    for record in (_record(Stage.CANARY, paused=True), _record(Stage.SHADOW)):
        held = active_rollouts({BIG: record}, _policy())[BIG]
        assert held.version_for(None, "t", 0.0) == "v1"
    assert active_rollouts({BIG: _record(Stage.SHADOW)}, _policy())[BIG].shadow_share == 0.2


def test_attempts_are_counted_by_stage_and_version_only_while_judged() -> None:
    policy = _policy()
    counts = RolloutCounts()
    v1, v2, small = (policy.policy.pools[i] for i in range(3))
    counts.attempt(v1, ok=True)  # no rollout yet: nothing counted
    assert not counts.take()

    counts.active = active_rollouts({BIG: _record(Stage.CANARY)}, policy)
    counts.attempt(v1, ok=True, ttft_ms=100.0, output_tokens=10)
    counts.attempt(v2, ok=False)
    counts.attempt(small, ok=True)  # another model
    taken = counts.take()
    assert set(taken) == {("r1", "canary", 0)}
    versions = taken[("r1", "canary", 0)].versions
    assert (versions["v1"].n, versions["v2"].err) == (1, 1)
    counts.lost(taken)
    assert counts.dropped == 2 and not counts.take()

    counts.active = active_rollouts({BIG: _record(Stage.VALIDATING)}, policy)
    counts.attempt(v1, ok=True)
    assert not counts.take()


def test_shadow_answers_are_compared_by_their_words() -> None:
    chat = b'{"choices": [{"message": {"content": "The cat sat"}}]}'
    text = b'{"choices": [{"text": "the cat sat down"}]}'
    assert answer_text(chat) == "The cat sat" and answer_text(text) == "the cat sat down"
    assert answer_text(b"not json") == answer_text(b'{"choices": [1]}') == ""
    assert similarity("The cat sat", "the cat sat down") == 0.75
    assert similarity("", "") == 1.0 and similarity("a", "b") == 0.0
