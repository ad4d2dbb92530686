"""The store's own connection layer (``store.database``) on every backend: statements with
numbered parameters, transactions that commit or roll back whole, failures as StoreError."""

from __future__ import annotations

import pytest

from base.errors import StoreError
from store.database import open_database
from store.errors import store_errors
from tests.aio import run_async


@run_async
async def test_a_transaction_commits_at_the_end_and_rolls_back_if_it_raises(db_url: str) -> None:
    db = open_database(db_url)
    try:
        async with db.transaction() as conn:
            await conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BIGINT NOT NULL)")
            assert await conn.execute("INSERT INTO t (k, v) VALUES ($1, $2)", "a", 1) == 1
        with pytest.raises(RuntimeError):
            async with db.transaction() as conn:
                await conn.execute("UPDATE t SET v = $1 WHERE k = $2", 5, "a")
                await conn.executemany("INSERT INTO t (k, v) VALUES ($1, $2)", [("b", 2)])
                raise RuntimeError("the caller fails half-way")
        async with db.connection() as conn:
            assert await conn.fetch("SELECT k, v FROM t ORDER BY k") == [("a", 1)]
            # A parameter used twice is bound once, by its number.
            rows = await conn.fetch("SELECT k FROM t WHERE v = $1 OR v = $1 + $2", 1, 100)
            assert rows == [("a",)]
    finally:
        await db.close()
        await db.close()  # idempotent


@run_async
async def test_a_failing_statement_is_a_store_error_and_the_database_stays_usable(
    db_url: str,
) -> None:
    db = open_database(db_url)
    try:
        with pytest.raises(StoreError, match="read nothing failed"), store_errors("read nothing"):
            async with db.connection() as conn:
                await conn.fetch("SELECT * FROM no_such_table")
        async with db.connection() as conn:
            assert await conn.fetch("SELECT 1") == [(1,)]
    finally:
        await db.close()


@run_async
async def test_an_in_memory_store_reads_what_it_wrote() -> None:
    db = open_database("sqlite+aiosqlite://")
    try:
        async with db.transaction() as conn:
            await conn.execute("CREATE TABLE t (v INTEGER)")
            assert await conn.execute("INSERT INTO t (v) VALUES ($1), ($2)", 1, 2) == 2
        async with db.connection() as conn:
            assert await conn.fetch("SELECT v FROM t ORDER BY v") == [(1,), (2,)]
    finally:
        await db.close()


def test_a_url_the_store_cannot_use_is_refused() -> None:
    with pytest.raises(StoreError, match="SQLite takes no options"):
        open_database("sqlite+aiosqlite:///x.db?mode=ro")
    with pytest.raises(StoreError, match="unsupported database URL scheme"):
        open_database("mysql+aiomysql://u@db/skyroute")
