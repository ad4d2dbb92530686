"""Which database, and the async engine on it.

``SKYROUTE_DATABASE_URL`` selects the database: ``postgresql+asyncpg://user@host/db`` in
production, ``sqlite+aiosqlite:///path/to/file.db`` for one machine. Unset, the store is
an embedded SQLite file under ``$XDG_DATA_HOME/skyroute`` (``~/.local/share/skyroute``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from base.errors import StoreError

# How long a SQLite writer waits for another one's lock before failing (ms).
SQLITE_BUSY_TIMEOUT_MS = 10_000


def default_database_url(data_dir: Path | None = None) -> str:
    """The embedded SQLite file's URL (``data_dir``, else the user's data directory;
    the directory is created)."""
    if data_dir is None:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        data_dir = Path(base) / "skyroute"
    data_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{data_dir / 'skyroute.db'}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers (GET /admin/usage, restore) run while the consumer writes, and
    # the busy timeout makes a second writer wait instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> AsyncEngine:
    """An async engine for ``url`` (``postgresql+asyncpg`` or ``sqlite+aiosqlite``).
    Raises StoreError for any other driver: the store's SQL is written for these two."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL: {exc}") from exc
    if parsed.drivername == "sqlite+aiosqlite":
        engine = create_async_engine(parsed)
        sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql+asyncpg":
        # pool_pre_ping: a PostgreSQL restart must not fail the first query after it.
        return create_async_engine(parsed, pool_pre_ping=True, pool_size=5, max_overflow=5)
    raise StoreError(
        f"unsupported database URL scheme {parsed.drivername!r}: "
        "use postgresql+asyncpg://... or sqlite+aiosqlite:///..."
    )
