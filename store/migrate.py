"""Schema migrations (Alembic), applied programmatically at start-up: ``await migrate(url)``.

The migrations ship in the package (``store/migrations/versions``); no ``alembic.ini``
is needed. ``env.py`` runs them on the connection handed over here, inside the async
engine's ``run_sync``, so one code path serves PostgreSQL (asyncpg) and SQLite
(aiosqlite).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from base.errors import StoreError
from store.engine import make_engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The PostgreSQL advisory lock held while migrating (any constant, the same everywhere).
LOCK_KEY = 0x736B79726F757465  # "skyroute"


def alembic_config() -> Config:
    """The Alembic configuration of the shipped migrations (no ini file)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest migration's revision id."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "store/migrations/versions holds no migration"
    return head


def _upgrade(connection: Connection, config: Config) -> None:
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def migrate(url: str) -> str:
    """Bring the database at ``url`` to the newest schema; returns its revision.

    Idempotent (an up-to-date database is left alone) and transactional where the
    database allows DDL in a transaction (PostgreSQL, SQLite): a failed migration
    leaves the previous schema. Raises StoreError."""
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
