"""Rollout records and transitions in the store, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from live.rollout_table import RolloutRecord, plan_from_yaml
from router.rollout import operator, start
from store.migrate import migrate
from store.store import Store

PLAN = plan_from_yaml("steps: [{share: 0.1}, {share: 0.5}]\n")


def test_records_only_move_forward_and_transitions_are_logged_once(db_url: str) -> None:
    async def scenario() -> tuple[dict[str, RolloutRecord], list[tuple[str, int, object]]]:
        await migrate(db_url)
        store = Store.open(db_url)
        try:
            first = start("m", "v1", "v2", PLAN, 100.0)
            record = RolloutRecord("r1", first, PLAN, 1, 100.0, 100.0)
            await store.rollouts.save(record)
            paused, moved = operator(first, "pause", 105.0)
            newer = RolloutRecord("r1", paused, PLAN, 2, 100.0, 105.0)
            assert await store.rollouts.save(newer, moved, expected_revision=1)
            assert not await store.rollouts.save(newer, moved)  # a retry: nothing new
            assert not await store.rollouts.save(record)  # an older revision never wins
            # Compare-and-set: a writer that read revision 1 loses to the one that wrote 2.
            _, aborted = operator(first, "abort", 106.0)
            late = RolloutRecord("r1", start("m", "v1", "v2", PLAN, 1.0), PLAN, 2, 100.0, 106.0)
            assert not await store.rollouts.save(late, aborted, expected_revision=1)
            other = RolloutRecord("r0", start("n", "a", "b", PLAN, 50.0), PLAN, 1, 50.0, 50.0)
            await store.rollouts.save(other)
            return await store.rollouts.latest(), list(await store.rollouts.history("m"))
        finally:
            await store.close()

    latest, history = asyncio.run(scenario())
    assert set(latest) == {"m", "n"}
    assert latest["m"].revision == 2 and latest["m"].rollout.paused
    assert [(rid, rev, t.reason) for rid, rev, t in history] == [  # type: ignore[attr-defined]
        ("r1", 2, "paused by operator")
    ]
