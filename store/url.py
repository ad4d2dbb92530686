"""Which database the store is on, chosen and checked without importing SQLAlchemy.

``SKYROUTE_DATABASE_URL`` selects the database: ``postgresql+asyncpg://user@host/db`` in
production, ``sqlite+aiosqlite:///path/to/file.db`` for one machine. Unset, the store is
an embedded SQLite file under ``$XDG_DATA_HOME/skyroute`` (``~/.local/share/skyroute``).

A gateway opens its store only after it is ready (``gateway.store_sync``), yet a URL
the store can never open must stop it at start, as it always did: this module is the
part of that choice that costs nothing to import.
"""

from __future__ import annotations

import os
from pathlib import Path

from base.errors import StoreError

SQLITE_DRIVER = "sqlite+aiosqlite"
POSTGRES_DRIVER = "postgresql+asyncpg"
# The store's SQL is written for these two drivers and no other.
DRIVERS = (POSTGRES_DRIVER, SQLITE_DRIVER)


def default_database_url(data_dir: Path | None = None) -> str:
    """The embedded SQLite file's URL (``data_dir``, else the user's data directory;
    the directory is created)."""
    if data_dir is None:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        data_dir = Path(base) / "skyroute"
    data_dir.mkdir(parents=True, exist_ok=True)
    return f"{SQLITE_DRIVER}:///{data_dir / 'skyroute.db'}"


def check_driver(drivername: str) -> None:
    """Raise StoreError unless ``drivername`` (a URL's scheme) is one of ``DRIVERS``."""
    if drivername not in DRIVERS:
        raise StoreError(
            f"unsupported database URL scheme {drivername!r}: "
            f"use {POSTGRES_DRIVER}://... or {SQLITE_DRIVER}:///..."
        )


def check_database_url(url: str) -> str:
    """``url``, if its scheme is one the store supports. Raises StoreError otherwise.
    Only the scheme is checked here; the rest is parsed when the store opens
    (``store.engine.make_engine``)."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise StoreError(f"invalid database URL {url!r}: expected scheme://...")
    check_driver(scheme)
    return url
