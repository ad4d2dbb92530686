"""The state of a model's rollout to a new version, and every move it can make.

    validating ──gate passed──► shadow ──judged equal──► canary step 0 … step k ──► promoted
        │                         │                          │
        └── gate failed ──────────┴──── regression ──────────┴──► rolled_back
                                      (or inconclusive, when the plan says rollback)

Operators may pause, resume, promote or abort at any point before the end. Each move
returns the new state and a :class:`Transition` carrying the evidence it was based on,
for the log, the metrics and the dashboard. Only the leader applies moves; the state
is a value that serialises to JSON for the store and Redis.

Traffic: during a canary step the new version takes ``share`` of the requests it could
serve (``assign``); a sticky key (session or tenant) is hashed to a point in [0, 1) and
goes to the canary while that point is below the share, so as shares grow a session
that reached the canary stays there. Pure: the caller passes the time and the tallies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Literal

from router.judge import Tally, Verdict, compare
from router.rollout_plan import MetricName, RolloutPlan


class Stage(StrEnum):
    VALIDATING = "validating"
    SHADOW = "shadow"
    CANARY = "canary"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"


TERMINAL = frozenset({Stage.PROMOTED, Stage.ROLLED_BACK})


@dataclass(frozen=True)
class Evidence:
    """Tallies of the current stage (shadow: mirrored answers; canary: this step), per
    judged metric and version, and the canary's requests in the stage."""

    canary: Mapping[MetricName, Tally]
    stable: Mapping[MetricName, Tally]
    canary_requests: int


@dataclass(frozen=True)
class Transition:
    """One move of a rollout: when, from where to where, why, and the evidence."""

    at_s: float
    from_stage: Stage
    to_stage: Stage
    step: int
    reason: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rollout:
    """A rollout of ``model`` from version ``stable`` to ``canary``. Times: unix s."""

    model: str
    stable: str
    canary: str
    stage: Stage
    step: int = 0
    stage_started_s: float = 0.0
    paused: bool = False
    exposed: int = 0  # user requests the canary version answered, over all steps

    @property
    def done(self) -> bool:
        return self.stage in TERMINAL

    def share(self, plan: RolloutPlan) -> float:
        """The canary's share of user traffic now (0 unless in a running canary step)."""
        if self.stage is Stage.PROMOTED:
            return 1.0
        if self.stage is not Stage.CANARY or self.paused:
            return 0.0
        return plan.steps[self.step].share

    def shadow_share(self, plan: RolloutPlan) -> float:
        """The share of requests mirrored to the canary (0 unless shadowing)."""
        if self.stage is not Stage.SHADOW or self.paused or plan.shadow is None:
            return 0.0
        return plan.shadow.share

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Rollout:
        data = json.loads(text)
        data["stage"] = Stage(data["stage"])
        return cls(**data)


def assign(rollout: Rollout, plan: RolloutPlan, point: float) -> Literal["canary", "stable"]:
    """Which version serves a request whose sticky key (or a fresh random draw, for
    ``sticky: none``) maps to ``point`` in [0, 1)."""
    return "canary" if point < rollout.share(plan) else "stable"


def start(model: str, stable: str, canary: str, plan: RolloutPlan, now: float) -> Rollout:
    """A new rollout at its first stage."""
    stage = Stage.VALIDATING if plan.validation else Stage.SHADOW if plan.shadow else Stage.CANARY
    return Rollout(model, stable, canary, stage, 0, now)


def _move(
    r: Rollout, to: Stage, now: float, reason: str, evidence: tuple[str, ...] = (), step: int = 0
) -> tuple[Rollout, Transition]:
    moved = replace(r, stage=to, step=step, stage_started_s=now, paused=False)
    return moved, Transition(now, r.stage, to, step, reason, evidence)


def validated(
    r: Rollout, plan: RolloutPlan, failures: int, report: tuple[str, ...], now: float
) -> tuple[Rollout, Transition]:
    """The golden suite's result. Raises ValueError unless the rollout is validating."""
    if r.stage is not Stage.VALIDATING or plan.validation is None:
        raise ValueError(f"rollout is {r.stage}, not validating")
    if failures > plan.validation.max_failures:
        return _move(r, Stage.ROLLED_BACK, now, f"{failures} golden request(s) failed", report)
    nxt = Stage.SHADOW if plan.shadow else Stage.CANARY
    return _move(r, nxt, now, "golden requests passed", report)


def judge(
    r: Rollout, plan: RolloutPlan, evidence: Evidence, now: float
) -> tuple[Rollout, Transition | None]:
    """Look at the current stage's evidence: roll back on a regression, move on when
    every metric shows none and the stage's minimums are met, apply the plan's rule
    when the stage runs out of time or exposure; otherwise nothing changes. A canary
    step that ends adds its canary requests to ``exposed``."""
    moved, t = _judge(r, plan, evidence, now)
    if t is not None and r.stage is Stage.CANARY and (moved.stage, moved.step) != (r.stage, r.step):
        moved = served(moved, evidence.canary_requests)
    return moved, t


def _judge(
    r: Rollout, plan: RolloutPlan, evidence: Evidence, now: float
) -> tuple[Rollout, Transition | None]:
    if r.done or r.paused or r.stage not in (Stage.SHADOW, Stage.CANARY):
        return r, None
    j = plan.judgement
    if r.stage is Stage.SHADOW:
        assert plan.shadow is not None
        min_req, min_s, max_s = (plan.shadow.min_requests, plan.shadow.min_duration_s,
                                 plan.shadow.max_duration_s)  # fmt: skip
    else:
        step = plan.steps[r.step]
        min_req, min_s, max_s = step.min_requests, step.min_duration_s, step.max_duration_s
    verdicts = _verdicts(plan, evidence)
    lines = tuple(v.describe(name, allowed) for name, allowed, v in verdicts)
    if any(v.decision == "regression" for _, _, v in verdicts):
        worse = ", ".join(name for name, _, v in verdicts if v.decision == "regression")
        return _move(r, Stage.ROLLED_BACK, now, f"regression in {worse}", lines, r.step)
    elapsed = now - r.stage_started_s
    clear = all(v.decision == "no_regression" for _, _, v in verdicts)
    if clear and evidence.canary_requests >= min_req and elapsed >= min_s:
        return _next(r, plan, now, lines)
    # The cap bounds what a version of unknown quality may touch over the whole rollout
    # (earlier steps' requests included); a clear one waiting out its step's minimum
    # duration is not undecided.
    exposed = r.exposed + evidence.canary_requests
    capped = r.stage is Stage.CANARY and not clear and exposed >= j.max_exposed_requests
    if elapsed >= max_s or capped:
        why = "inconclusive: out of time" if elapsed >= max_s else "inconclusive: exposure cap"
        if j.on_inconclusive == "rollback":
            return _move(r, Stage.ROLLED_BACK, now, why, lines, r.step)
        held = replace(r, paused=True)
        return held, Transition(now, r.stage, r.stage, r.step, f"{why}; held", lines)
    return r, None


def _verdicts(plan: RolloutPlan, evidence: Evidence) -> list[tuple[str, float, Verdict]]:
    j = plan.judgement
    return [
        (rule.name, rule.allowed, compare(evidence.canary.get(rule.name, Tally()),
         evidence.stable.get(rule.name, Tally()), rule.allowed, j.alpha, min_requests=1))
        for rule in j.metrics
    ]  # fmt: skip


def describe(plan: RolloutPlan, evidence: Evidence) -> tuple[str, ...]:
    """One line per judged metric: both versions' tallies, the interval and the verdict
    (what the next judgement would be based on; for status pages)."""
    return tuple(v.describe(name, allowed) for name, allowed, v in _verdicts(plan, evidence))


def _next(
    r: Rollout, plan: RolloutPlan, now: float, evidence: tuple[str, ...]
) -> tuple[Rollout, Transition]:
    if r.stage is Stage.SHADOW:
        return _move(r, Stage.CANARY, now, "shadow answers match stable", evidence, 0)
    if r.step + 1 < len(plan.steps):
        nxt = r.step + 1
        return _move(r, Stage.CANARY, now, f"step {r.step} passed", evidence, nxt)
    return _move(r, Stage.PROMOTED, now, "every step passed", evidence, r.step)


def operator(
    r: Rollout, action: Literal["pause", "resume", "promote", "abort"], now: float
) -> tuple[Rollout, Transition]:
    """An operator's command. Raises ValueError on a finished rollout or a no-op."""
    if r.done:
        raise ValueError(f"rollout already {r.stage}")
    if action in {"pause", "resume"}:
        if r.paused == (action == "pause"):
            raise ValueError(f"rollout is already {'paused' if r.paused else 'running'}")
        # A resumed stage starts its clock again: time paused is not evidence.
        moved = replace(r, paused=action == "pause", stage_started_s=now)
        return moved, Transition(now, r.stage, r.stage, r.step, f"{action}d by operator")
    if action == "promote":
        return _move(r, Stage.PROMOTED, now, "promoted by operator", step=r.step)
    return _move(r, Stage.ROLLED_BACK, now, "aborted by operator", step=r.step)


def served(r: Rollout, requests: int) -> Rollout:
    """Count ``requests`` more user requests answered by the canary version."""
    return replace(r, exposed=r.exposed + requests)
