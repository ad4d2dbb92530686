"""Migrations apply to an empty database, and applying them again changes nothing."""

from __future__ import annotations

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
