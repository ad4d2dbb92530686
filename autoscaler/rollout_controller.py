"""The leader's half of rollouts: run the validation gate, judge each stage's counts,
and move every running rollout along its plan.

Runs in the autoscaler sidecar; only the sidecar holding the lease calls ``tick``.
Every move is written to the store first, then to Redis by compare-and-set on the
record's revision (an operator's command through the admin API may have moved it
meanwhile: then nothing is written and the next tick looks again). A record Redis lost
(restarted empty) is put back from the store before anything is judged. Each move is
logged with its evidence and counted by ``on_transition``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

import httpx

from autoscaler.golden import run_gate
from base.errors import StoreError
from live.rollout_table import RolloutRecord, RolloutTable
from router.policy import Policy
from router.rollout import Stage, Transition, judge, validated
from router.rollout_tally import evidence
from store.rollouts import RolloutStore

logger = logging.getLogger(__name__)

# Seconds between two looks at the running rollouts (the leader's tick).
TICK_S = 1.0


class RolloutController:
    """Advances rollouts for the leader (see the module doc)."""

    def __init__(
        self,
        table: RolloutTable,
        store: RolloutStore | None,
        policy: Callable[[], Policy],
        endpoints: Callable[[str], Awaitable[Mapping[str, str]]],
        *,
        clock: Callable[[], float] = time.time,
        on_transition: Callable[[str, Transition], None] | None = None,
    ) -> None:
        """``policy()``: the running policy. ``endpoints(model)``: one live engine
        address per pool id of ``model``, where known. ``store`` None: Redis only (a
        sidecar without a store; nothing then survives Redis losing its data)."""
        self.table = table
        self.store = store
        self.policy = policy
        self.endpoints = endpoints
        self.clock = clock
        self.on_transition = on_transition
        self._client: httpx.AsyncClient | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def tick(self) -> list[Transition]:
        """One look at every rollout. Returns the moves made. Raises TableError when Redis
        fails (nothing is then half-written: the store may be ahead, and is re-read)."""
        records = await self.table.read_all()
        if self.store is not None:
            records = await self._refill(records)
        moves: list[Transition] = []
        for record in records.values():
            r = record.rollout
            if r.done or r.paused:
                continue
            moved, transition = await self._look(record)
            if transition is not None and await self._commit(record, moved, transition):
                moves.append(transition)
        return moves

    async def _refill(self, records: dict[str, RolloutRecord]) -> dict[str, RolloutRecord]:
        # The store is the arbiter: Redis may have lost records (restarted empty) or
        # missed a write (a move whose Redis write failed after the store's).
        try:
            stored = await self.store.latest() if self.store is not None else {}
        except StoreError as exc:
            logger.warning("rollouts: store unreadable, judging from Redis: %s", exc)
            return records
        behind = {
            m: rec
            for m, rec in stored.items()
            if m not in records or records[m].revision < rec.revision
        }
        if behind and await self.table.restore(behind):
            logger.info("rollouts: Redis caught up with the store for %s", sorted(behind))
            records = await self.table.read_all()
        return records

    async def _look(self, record: RolloutRecord) -> tuple[RolloutRecord, Transition | None]:
        r, plan, now = record.rollout, record.plan, self.clock()
        if r.stage is Stage.VALIDATING:
            gate = plan.validation
            assert gate is not None  # a rollout only validates under a gate
            policy = self.policy()
            pools = [p for p in policy.pools if p.model == r.model and p.version == r.canary]
            if self._client is None:
                self._client = httpx.AsyncClient()
            endpoints = await self.endpoints(r.model)
            result = await run_gate(gate, pools, endpoints, self._client)
            report = (f"{result.failures}/{result.checked} golden check(s) failed",
                      *result.report)  # fmt: skip
            moved, transition = validated(r, plan, result.failures, report, now)
            return replace(record, rollout=moved), transition
        counts = await self.table.read_counts(record.id, r.stage, r.step)
        moved, maybe = judge(r, plan, evidence(counts, r.stable, r.canary, plan), now)
        return replace(record, rollout=moved), maybe

    async def _commit(self, old: RolloutRecord, new: RolloutRecord, transition: Transition) -> bool:
        record = replace(new, revision=old.revision + 1, updated_s=transition.at_s)
        if self.store is not None:
            try:
                saved = await self.store.save(record, transition, expected_revision=old.revision)
            except StoreError as exc:
                # Not moved in Redis either: the store must never be behind a move.
                logger.warning("rollout %s: store unwritable, move postponed: %s", old.id, exc)
                return False
            if not saved:
                logger.info("rollout %s moved meanwhile (an operator); looking again", old.id)
                return False
        written = await self.table.write(record, old.revision, (transition,))
        # With a store, the store took the move, so it stands (Redis catches up on the
        # next tick); without one, Redis is the arbiter.
        if not written and self.store is None:
            logger.info("rollout %s moved meanwhile (an operator); looking again", old.id)
            return False
        logger.info(
            "rollout %s of %s: %s -> %s (step %d): %s%s",
            old.id, old.rollout.model, transition.from_stage, transition.to_stage,
            transition.step, transition.reason,
            "".join(f"\n  {line}" for line in transition.evidence),
        )  # fmt: skip
        if self.on_transition is not None:
            self.on_transition(old.rollout.model, transition)
        return True
