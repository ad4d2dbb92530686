"""SQLAlchemy's async engine on the store's database, for the migrations
(``store.migrate``) only: the store itself runs on the drivers (``store.database``)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from base.errors import StoreError
from store.database import SQLITE_PRAGMAS
from store.url import POSTGRES_DRIVER, check_driver


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def make_engine(url: str) -> AsyncEngine:
    """An async engine for ``url`` (``postgresql+asyncpg`` or ``sqlite+aiosqlite``).
    Raises StoreError for any other driver: the store's SQL is written for these two."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL: {exc}") from exc
    check_driver(parsed.drivername)
    if parsed.drivername == POSTGRES_DRIVER:
        # pool_pre_ping: a PostgreSQL restart must not fail the first query after it.
        return create_async_engine(parsed, pool_pre_ping=True, pool_size=5, max_overflow=5)
    engine = create_async_engine(parsed)  # SQLITE_DRIVER
    sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine
