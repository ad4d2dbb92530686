"""Schema migrations (Alembic), applied programmatically at start-up: ``await migrate(url)``.

The migrations ship in the package (``store/migrations/versions``); no ``alembic.ini``
is needed. ``env.py`` runs them on the connection handed over here, inside the async
engine's ``run_sync``, so one code path serves PostgreSQL (asyncpg) and SQLite
(aiosqlite).

SQLAlchemy and Alembic are imported only when there is something to migrate: a
database already stamped with the newest shipped revision (every start of a gateway but
the first) is checked with one SELECT on the store's own driver (``store.database``).
Importing Alembic (with Mako and Pygments) was a fifth of a gateway's start-up CPU, and
SQLAlchemy held about 19 MB of a worker's memory.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from base.errors import StoreError
from store.database import Database, open_database
from store.errors import store_errors

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"  # Alembic's default, which env.py keeps
_REVISION = re.compile(r"^revision(?:\s*:[^=\n]*)?\s*=\s*[\"']([^\"']+)[\"']\s*$", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=\n]*)?\s*=\s*(?:None|[\"']([^\"']+)[\"'])\s*$", re.M)
# The PostgreSQL advisory lock held while migrating (any constant, the same everywhere).
LOCK_KEY = 0x736B79726F757465  # "skyroute"
# What an upgrade imports (a caller may load them beforehand: ``migrate(before_upgrade=)``).
ALEMBIC_MODULES = (
    "alembic.command",
    "alembic.config",
    "alembic.script",
    "alembic.runtime.migration",
)


def alembic_config() -> Config:
    """The Alembic configuration of the shipped migrations (no ini file)."""
    from alembic.config import Config  # noqa: PLC0415 - see the module docstring

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest migration's revision id, as Alembic reads it."""
    from alembic.script import ScriptDirectory  # noqa: PLC0415 - see the module docstring

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "store/migrations/versions holds no migration"
    return head


def shipped_head() -> str | None:
    """The newest shipped migration's revision, read from the files without Alembic: the
    one revision that no migration names as its ``down_revision``. None when the files do
    not say it plainly (no migration, several heads, a merge's tuple of parents): then
    ``migrate`` asks Alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        text = path.read_text()
        rev, down = _REVISION.search(text), _DOWN.search(text)
        if rev is None or down is None:
            return None
        revisions.add(rev.group(1))
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


_HAS_VERSION_TABLE = {
    "postgresql": f"SELECT count(*) FROM pg_tables WHERE tablename = '{VERSION_TABLE}'"
    " AND schemaname = current_schema()",
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
    f" AND name = '{VERSION_TABLE}'",
}


async def stamped(db: Database) -> str | None:
    """The revision the database is stamped with (None: not migrated yet). Raises
    StoreError."""
    with store_errors("reading the schema revision"):
        async with db.connection() as conn:
            if not (await conn.fetch(_HAS_VERSION_TABLE[db.dialect]))[0][0]:
                return None
            rows = await conn.fetch(f"SELECT version_num FROM {VERSION_TABLE}")
    return str(rows[0][0]) if len(rows) == 1 else None


def _upgrade(connection: Connection, config: Config) -> None:
    from alembic import command  # noqa: PLC0415 - see the module docstring

    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415

    return MigrationContext.configure(connection).get_current_revision()


async def migrate(url: str, *, before_upgrade: Callable[[], Awaitable[None]] | None = None) -> str:
    """Bring the database at ``url`` to the newest schema; returns its revision.

    Idempotent (an up-to-date database is left alone) and transactional where the
    database allows DDL in a transaction (PostgreSQL, SQLite): a failed migration
    leaves the previous schema. ``before_upgrade`` is awaited when there is something
    to migrate, before Alembic is imported (``ALEMBIC_MODULES``; a serving gateway
    imports them off its event loop there). Raises StoreError."""
    head = shipped_head()
    if head is not None:
        db = open_database(url)
        try:
            if await stamped(db) == head:
                return head
        finally:
            await db.close()
    if before_upgrade is not None:
        await before_upgrade()
    return await _upgrade_to_head(url)


async def _upgrade_to_head(url: str) -> str:
    import sqlalchemy as sa  # noqa: PLC0415 - see the module docstring
    from sqlalchemy.exc import SQLAlchemyError  # noqa: PLC0415

    from store.engine import make_engine  # noqa: PLC0415

    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Replicas starting together migrate one after the other: the second
                # finds the schema at head (the lock is released at commit).
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            await conn.run_sync(_upgrade, alembic_config())
        async with engine.connect() as conn:
            revision = await conn.run_sync(_current)
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"migrating the store failed: {type(exc).__name__}: {exc}") from exc
    finally:
        await engine.dispose()
    if revision is None:
        raise StoreError("migrating the store left no schema revision")
    return revision
