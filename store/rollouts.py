"""Rollouts in the system of record: each rollout's newest record and its transitions.

Whoever moves a rollout (the leader's controller, an operator through the admin API)
writes here first and then to Redis (``live.rollout_table``), so Redis can always be
refilled from the store. Every method is one transaction, raises ``StoreError`` when the
database fails, and is safe to retry.
"""

from __future__ import annotations

import json

from live.rollout_table import RolloutRecord
from router.rollout import Stage, Transition
from store.database import Database
from store.errors import store_errors

_REVISION = "SELECT revision FROM rollouts WHERE id = $1"
_INSERT = (
    "INSERT INTO rollouts (id, model, record, revision, stage, created_ms, updated_ms)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING"
)
_UPDATE = (
    "UPDATE rollouts SET model = $2, record = $3, revision = $4, stage = $5,"
    " created_ms = $6, updated_ms = $7 WHERE id = $1 AND revision {guard} $8"
)
_LOG = (
    "INSERT INTO rollout_transitions (rollout_id, revision, at_ms, from_stage, to_stage,"
    " step, reason, evidence) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    " ON CONFLICT (rollout_id, revision) DO NOTHING"
)
_LATEST = "SELECT model, record FROM rollouts ORDER BY created_ms, id"
_HISTORY = (
    "SELECT t.rollout_id, t.revision, t.at_ms, t.from_stage, t.to_stage, t.step, t.reason,"
    " t.evidence FROM rollout_transitions t JOIN rollouts r ON r.id = t.rollout_id"
    " WHERE r.model = $1 ORDER BY t.at_ms DESC, t.revision DESC LIMIT $2"
)


class RolloutStore:
    """Rollout records and transitions in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

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
        row = (
            record.id, r.model, record.to_json(), record.revision, str(r.stage),
            round(record.created_s * 1000), round(record.updated_s * 1000),
        )  # fmt: skip
        with store_errors("save rollout"):
            async with self.db.transaction() as conn:
                exists = await conn.fetch(_REVISION, record.id)
                if not exists:
                    written = await conn.execute(_INSERT, *row)
                elif expected_revision is not None:
                    written = await conn.execute(_UPDATE.format(guard="="), *row, expected_revision)
                else:
                    written = await conn.execute(_UPDATE.format(guard="<"), *row, record.revision)
                if written and transition is not None:
                    await conn.execute(
                        _LOG, record.id, record.revision, round(transition.at_s * 1000),
                        str(transition.from_stage), str(transition.to_stage), transition.step,
                        transition.reason, json.dumps(list(transition.evidence)),
                    )  # fmt: skip
        return bool(written)

    async def latest(self) -> dict[str, RolloutRecord]:
        """Each model's newest rollout (by creation), finished ones included."""
        with store_errors("read rollouts"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(_LATEST)
        out: dict[str, RolloutRecord] = {}
        for model, record in rows:
            out[model] = RolloutRecord.from_json(record)
        return out

    async def history(self, model: str, limit: int = 50) -> list[tuple[str, int, Transition]]:
        """The newest ``limit`` transitions of ``model``'s rollouts, newest first, as
        (rollout id, revision, transition)."""
        with store_errors("read rollout history"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(_HISTORY, model, limit)
        return [
            (
                rollout_id,
                int(revision),
                Transition(
                    at_s=int(at_ms) / 1000,
                    from_stage=Stage(from_stage),
                    to_stage=Stage(to_stage),
                    step=int(step),
                    reason=str(reason),
                    evidence=tuple(json.loads(evidence)),
                ),
            )
            for rollout_id, revision, at_ms, from_stage, to_stage, step, reason, evidence in rows
        ]
