"""Alembic's environment for the store's migrations.

``store.migrate.migrate`` hands over a connection (``config.attributes["connection"]``)
opened by the async engine; run from the ``alembic`` command line instead (with
``-x url=...``), this opens an async engine itself.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection

from store.engine import make_engine
from store.schema import metadata


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite alters a table by copying it; Alembic's batch mode does that.
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("run with -x url=postgresql+asyncpg://... (or use store.migrate)")
    asyncio.run(_run_with_own_engine(url))


_main()
