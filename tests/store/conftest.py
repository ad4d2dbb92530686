"""Fixtures for the store tests: a fresh database per test on every backend that
answers (SQLite always; the PostgreSQL on 127.0.0.1:5432 when it answers, or the one
``SKYROUTE_TEST_DATABASE_URL`` names), and a Redis key prefix of the test's own."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.live.conftest import RedisTarget, live_redis  # noqa: F401 - a fixture

PG_ADMIN_URL = os.environ.get(
    "SKYROUTE_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def _pg_answers(url: str) -> bool:
    parsed = sa.make_url(url)
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 5432), 0.5):
            pass
    except OSError:
        return False

    async def probe() -> bool:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except Exception:
            return False
        finally:
            await engine.dispose()
        return True

    return asyncio.run(probe())


BACKENDS = ["sqlite", *(["postgresql"] if _pg_answers(PG_ADMIN_URL) else [])]


async def _admin(statement: str) -> None:
    # CREATE/DROP DATABASE cannot run inside a transaction.
    engine = create_async_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database that belongs to this test (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
        return
    name = f"srtest_{uuid.uuid4().hex}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
