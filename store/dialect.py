"""INSERT ... ON CONFLICT for the two databases the store supports (the statement is
dialect-specific in SQLAlchemy, the SQL it renders is the same)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection


def upsert_insert(conn: AsyncConnection, table: sa.Table) -> Any:
    """An INSERT on ``table`` offering ``on_conflict_do_nothing`` / ``on_conflict_do_update``
    and ``.excluded`` for the connection's database (PostgreSQL or SQLite)."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
