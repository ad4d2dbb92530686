"""INSERT ... ON CONFLICT for the two databases the store supports (the statement is
dialect-specific in SQLAlchemy, the SQL it renders is the same).

Each dialect's module is imported when a connection of its database first asks for
it: SQLAlchemy's PostgreSQL dialect package loads every PostgreSQL driver it knows
(2 MB and a tenth of the store's import time), which a SQLite store never needs, and
the other way round.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection


def upsert_insert(conn: AsyncConnection, table: sa.Table) -> Any:
    """An INSERT on ``table`` offering ``on_conflict_do_nothing`` / ``on_conflict_do_update``
    and ``.excluded`` for the connection's database (PostgreSQL or SQLite)."""
    return upsert_insert_for(conn.dialect.name)(table)


def upsert_insert_for(dialect: str) -> Any:
    """The ``insert`` construct of ``dialect`` ("postgresql"; any other name: SQLite)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # noqa: PLC0415 - see the module doc

        return insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert  # noqa: PLC0415

    return sqlite_insert
