"""Migrations apply to an empty database, and applying them again changes nothing."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from store.engine import make_engine
from store.migrate import head_revision, migrate
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
        "alembic_version", "tenants", "api_keys", "usage_ledger", "spend",
    }  # fmt: skip


@run_async
async def test_migrating_twice_is_a_no_op(db_url: str) -> None:
    first = await migrate(db_url)
    assert await migrate(db_url) == first


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
