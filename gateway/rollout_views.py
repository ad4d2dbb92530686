"""Rollouts as the admin API, the CLI and the dashboard show them."""

from __future__ import annotations

from typing import Any

from base.errors import TableError
from live.rollout_table import RolloutRecord, RolloutTable
from router.rollout import Stage, Transition, describe
from router.rollout_tally import evidence


def view(record: RolloutRecord) -> dict[str, Any]:
    """A record as the API, the CLI and the dashboard show it."""
    r, plan = record.rollout, record.plan
    return {
        "id": record.id, "model": r.model, "stable": r.stable, "canary": r.canary,
        "stage": str(r.stage), "step": r.step, "steps": len(plan.steps), "paused": r.paused,
        "share": r.share(plan), "shadow_share": r.shadow_share(plan), "exposed": r.exposed,
        "max_exposed": plan.judgement.max_exposed_requests,
        "stage_started_s": r.stage_started_s, "revision": record.revision,
        "created_s": record.created_s, "updated_s": record.updated_s,
        "plan": plan.model_dump(mode="json", exclude={"validation": {"requests"}}),
    }  # fmt: skip


def transition_view(revision: int, t: Transition) -> dict[str, Any]:
    return {
        "revision": revision, "at_s": t.at_s, "from": str(t.from_stage), "to": str(t.to_stage),
        "step": t.step, "reason": t.reason, "evidence": list(t.evidence),
    }  # fmt: skip


async def with_evidence(table: RolloutTable, record: RolloutRecord) -> dict[str, Any]:
    """``view(record)`` and, under ``evidence``, one line per judged metric of the current
    stage (both versions' tallies, the interval, the verdict): what the leader's next
    judgement is based on. Empty outside shadow and canary, or if Redis does not answer."""
    r = record.rollout
    lines: list[str] = []
    if r.stage in (Stage.SHADOW, Stage.CANARY):
        try:
            counts = await table.read_counts(record.id, r.stage, r.step)
        except TableError:
            counts = None
        if counts is not None:
            lines = list(describe(record.plan, evidence(counts, r.stable, r.canary, record.plan)))
    return {**view(record), "evidence": lines}
