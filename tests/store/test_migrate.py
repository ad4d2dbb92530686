"""Migrations apply to an empty database, and applying them again changes nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from store.engine import make_engine
from store.migrate import head_revision, migrate, shipped_head
from tests.aio import run_async


async def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))
    finally:
        await engine.dispose()


@run_async
async def test_migrations_apply_to_an_empty_database(db_url: str) -> None:
    assert await _tables(db_url) == set()
    assert await migrate(db_url) == head_revision()
    assert await _tables(db_url) == {
        "alembic_version", "tenants", "api_keys", "usage_ledger", "spend", "rollouts",
        "rollout_transitions",
    }  # fmt: skip


@run_async
async def test_migrating_twice_is_a_no_op(db_url: str) -> None:
    first = await migrate(db_url)
    assert await migrate(db_url) == first


@run_async
async def test_the_hook_before_an_upgrade_runs_only_when_there_is_one(db_url: str) -> None:
    calls: list[str] = []

    async def before_upgrade() -> None:
        calls.append("upgrade")

    await migrate(db_url, before_upgrade=before_upgrade)
    await migrate(db_url, before_upgrade=before_upgrade)
    assert calls == ["upgrade"]


@run_async
async def test_replicas_migrating_together_all_succeed(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite: a replica that loses the race retries (gateway.store_sync)")
    # Without the advisory lock the DDL of concurrent migrations blocks: a deadline
    # turns that into a failure instead of a hung suite.
    revisions = await asyncio.wait_for(
        asyncio.gather(*(migrate(db_url) for _ in range(3))), timeout=60
    )
    assert revisions == [head_revision()] * 3


def test_the_head_read_from_the_files_is_alembics() -> None:
    assert shipped_head() == head_revision()


ROOT = Path(__file__).resolve().parents[2]
# A fresh interpreter (this one imported Alembic above): the check at start, then a
# store at work (a write and the reads a refill makes), as a gateway or store worker runs.
AT_HEAD = """
import asyncio, sys
from store.migrate import migrate
from store.records import LedgerRow
from store.store import Store

async def main(url):
    revision = await migrate(url)
    store = Store.open(url)
    row = LedgerRow("u/1", "r1", "acme", "m", "p", "aws", "us-east-1", 1, 2, 3, "ok", 0)
    try:
        written = await store.ledger.write([row])
        await store.keys(), await store.tenants(), await store.rollouts.latest()
    finally:
        await store.close()
    loaded = [m for m in ("sqlalchemy", "alembic") if m in sys.modules]
    print(revision, len(written), ",".join(loaded) or "-")

asyncio.run(main(sys.argv[1]))
"""


def test_a_store_at_the_head_runs_without_sqlalchemy_or_alembic(db_url: str) -> None:
    asyncio.run(migrate(db_url))
    out = subprocess.run(
        [sys.executable, "-c", AT_HEAD, db_url], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout.split()  # fmt: skip
    assert out == [head_revision(), "1", "-"]
