"""Rollouts in the system of record: each rollout's newest record and its transitions.

Whoever moves a rollout (the leader's controller, an operator through the admin API)
writes here first and then to Redis (``live.rollout_table``), so Redis can always be
refilled from the store. Every method is one transaction, raises ``StoreError`` when the
database fails, and is safe to retry.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from live.rollout_table import RolloutRecord
from router.rollout import Stage, Transition
from store.dialect import upsert_insert
from store.errors import store_errors
from store.schema import rollout_transitions, rollouts


class RolloutStore:
    """Rollout records and transitions in one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def save(
        self,
        record: RolloutRecord,
        transition: Transition | None = None,
        *,
        expected_revision: int | None = None,
    ) -> bool:
        """Store ``record`` and log ``transition`` under the record's revision.

        With ``expected_revision`` this is a compare-and-set, the arbiter between the
        leader and an operator: an existing row is replaced only while it is still at
        that revision, a new rollout is inserted only if its id is new. Without it the
        record is written unless the store holds the rollout at a newer or equal
        revision (a refill). Returns whether the record was written; saving the same
        record and transition again writes nothing."""
        r = record.rollout
        row = {
            "id": record.id, "model": r.model, "record": record.to_json(),
            "revision": record.revision, "stage": str(r.stage),
            "created_ms": round(record.created_s * 1000),
            "updated_ms": round(record.updated_s * 1000),
        }  # fmt: skip
        with store_errors("save rollout"):
            async with self.engine.begin() as conn:
                exists = await conn.scalar(
                    sa.select(rollouts.c.revision).where(rollouts.c.id == record.id)
                )
                if exists is None:
                    stmt = upsert_insert(conn, rollouts).values(**row)
                    result = await conn.execute(stmt.on_conflict_do_nothing())
                else:
                    guard = (
                        rollouts.c.revision == expected_revision
                        if expected_revision is not None
                        else rollouts.c.revision < record.revision
                    )
                    result = await conn.execute(
                        sa.update(rollouts)
                        .where(rollouts.c.id == record.id, guard)
                        .values({k: v for k, v in row.items() if k != "id"})
                    )
                written = bool(result.rowcount)
                if written and transition is not None:
                    t = upsert_insert(conn, rollout_transitions).values(
                        rollout_id=record.id, revision=record.revision,
                        at_ms=round(transition.at_s * 1000),
                        from_stage=str(transition.from_stage), to_stage=str(transition.to_stage),
                        step=transition.step, reason=transition.reason,
                        evidence=json.dumps(list(transition.evidence)),
                    )  # fmt: skip
                    await conn.execute(t.on_conflict_do_nothing())
        return written

    async def latest(self) -> dict[str, RolloutRecord]:
        """Each model's newest rollout (by creation), finished ones included."""
        with store_errors("read rollouts"):
            async with self.engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(rollouts.c.model, rollouts.c.record).order_by(
                            rollouts.c.created_ms, rollouts.c.id
                        )
                    )
                ).all()
        out: dict[str, RolloutRecord] = {}
        for row in rows:
            out[row.model] = RolloutRecord.from_json(row.record)
        return out

    async def history(self, model: str, limit: int = 50) -> list[tuple[str, int, Transition]]:
        """The newest ``limit`` transitions of ``model``'s rollouts, newest first, as
        (rollout id, revision, transition)."""
        t, r = rollout_transitions, rollouts
        with store_errors("read rollout history"):
            async with self.engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(t)
                        .join(r, r.c.id == t.c.rollout_id)
                        .where(r.c.model == model)
                        .order_by(t.c.at_ms.desc(), t.c.revision.desc())
                        .limit(limit)
                    )
                ).all()
        return [(row.rollout_id, row.revision, _transition(row)) for row in rows]


def _transition(row: sa.Row[tuple[object, ...]]) -> Transition:
    m = row._mapping
    return Transition(
        at_s=int(str(m["at_ms"])) / 1000,
        from_stage=Stage(m["from_stage"]),
        to_stage=Stage(m["to_stage"]),
        step=int(str(m["step"])),
        reason=str(m["reason"]),
        evidence=tuple(json.loads(str(m["evidence"]))),
    )
