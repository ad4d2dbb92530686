"""The usage ledger and spend per budget period, in SQL.

``write`` is the only writer: one transaction stores a batch of rows, each at most once
(INSERT ... ON CONFLICT (idempotency_id) DO NOTHING), and adds to ``spend`` exactly
the rows it inserted. Replaying a batch after a crash therefore changes nothing.

The rows go to the database as they are (``LedgerRow`` tuples), not through SQLAlchemy's
per-row parameter processing, which cost the consumer ~12 us of CPU a row on either
database. Which rows a batch inserted is learnt two ways. PostgreSQL takes the batch as
one array per column (``unnest``: one statement, prepared once, whatever the batch's
size) and returns the ids it inserted (``RETURNING``). SQLite cannot return rows from
an ``executemany``; there, the ids already stored are looked up first (one statement:
the batch's ids as a JSON array), the others are inserted in one ``executemany``, and
the count the database reports must equal the rows it was given: if another writer
stored one of them in between, the transaction is rolled back and the batch fails
(StoreError; the consumer retries it), so no row is ever counted in ``spend`` without
being inserted.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from base.errors import StoreError
from store.dialect import upsert_insert_for
from store.errors import store_errors
from store.records import LedgerRow
from store.schema import spend, usage_ledger
from store.usage_rows import spend_deltas

GROUPS = ("pool", "model", "region", "provider", "total")
METRICS = ("requests", "prompt_tokens", "completion_tokens", "cost_nusd")


class Ledger:
    """The usage ledger of one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def write(self, rows: Sequence[LedgerRow]) -> list[LedgerRow]:
        """Store ``rows`` and their spend in one transaction; returns the rows that were
        new (the others were already stored and count nothing again). Idempotent.
        Raises StoreError, and then nothing of the batch is committed."""
        if not rows:
            return []
        # One lock order for every writer: two consumers replaying overlapping batches
        # on PostgreSQL must not deadlock on each other's uncommitted unique entries. A
        # row given twice is one row (the first): it must be stored and spent once, and
        # on SQLite it would otherwise fail the count check on every retry.
        ordered = sorted(
            {r.idempotency_id: r for r in reversed(rows)}.values(),
            key=lambda r: r.idempotency_id,
        )
        with store_errors("write usage"):
            async with self.engine.begin() as conn:
                if conn.dialect.name == "sqlite":
                    new = await _insert_sqlite(conn, ordered)
                else:
                    new = await _insert_postgres(conn, ordered)
                add_spend = _add_spend(conn.dialect.name)
                deltas = sorted(spend_deltas(new).items())
                if deltas:
                    # One executemany for every (tenant, period), in key order (the lock
                    # order again): one trip to the driver, not one per period.
                    await conn.execute(
                        add_spend,
                        [
                            {"tenant": t, "period": p, "cost_nusd": c, "requests": n}
                            for (t, p), (c, n) in deltas
                        ],
                    )
        return new

    async def spend(self, periods: Collection[str]) -> dict[tuple[str, str], int]:
        """(tenant, period) -> nano-USD spent, for every tenant in the given period ids."""
        with store_errors("read spend"):
            async with self.engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(spend.c.tenant, spend.c.period, spend.c.cost_nusd).where(
                            spend.c.period.in_(list(periods))
                        )
                    )
                ).all()
        return {(r.tenant, r.period): int(r.cost_nusd) for r in rows}

    async def totals(
        self, tenant: str, from_ms: int, to_ms: int, group_by: str
    ) -> dict[str, dict[str, int]]:
        """Usage of ``tenant`` in [from_ms, to_ms) grouped by pool, model, region, provider
        or total (one group, ``all``): value -> {requests, prompt_tokens,
        completion_tokens, cost_nusd}. Raises ValueError for another ``group_by``."""
        if group_by not in GROUPS:
            raise ValueError(f"group_by must be one of {GROUPS}")
        sums = (
            sa.func.count().label("requests"),
            sa.func.coalesce(sa.func.sum(usage_ledger.c.prompt_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage_ledger.c.completion_tokens), 0),
            sa.func.coalesce(sa.func.sum(usage_ledger.c.cost_nusd), 0),
        )
        where = (
            usage_ledger.c.tenant == tenant,
            usage_ledger.c.ts_ms >= from_ms,
            usage_ledger.c.ts_ms < to_ms,
        )
        if group_by == "total":
            # PostgreSQL refuses GROUP BY a constant: one aggregate row, labelled here.
            query = sa.select(sa.literal("all"), *sums).where(*where)
        else:
            column = usage_ledger.c[group_by]
            query = sa.select(column, *sums).where(*where).group_by(column)
        with store_errors("read usage"):
            async with self.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return {
            str(r[0]): dict(zip(METRICS, (int(v) for v in r[1:]), strict=True))
            for r in rows
            if r[1]
        }

    async def count(self) -> int:
        """Rows in the ledger."""
        with store_errors("count usage"):
            async with self.engine.connect() as conn:
                count = await conn.scalar(sa.select(sa.func.count()).select_from(usage_ledger))
        return int(count or 0)


@functools.cache
def _add_spend(dialect: str) -> Any:
    # Built once per dialect: constructing an upsert and deriving its cache key cost
    # about a millisecond of CPU per batch, more than SQLite's work on a small one.
    stmt = upsert_insert_for(dialect)(spend)
    return stmt.on_conflict_do_update(
        index_elements=[spend.c.tenant, spend.c.period],
        set_={
            "cost_nusd": spend.c.cost_nusd + stmt.excluded.cost_nusd,
            "requests": spend.c.requests + stmt.excluded.requests,
        },
    )


_COLUMNS = ", ".join(LedgerRow._fields)
# The type of each column's array, in LedgerRow's order.
_PG_ARRAYS = ("text",) * 7 + ("bigint",) * 3 + ("text", "bigint")
_PG_INSERT = (
    f"INSERT INTO usage_ledger ({_COLUMNS}) SELECT * FROM unnest("
    + ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(_PG_ARRAYS, 1))
    + ") ON CONFLICT (idempotency_id) DO NOTHING RETURNING idempotency_id"
)
_SQLITE_STORED = (
    "SELECT value FROM json_each(?) JOIN usage_ledger ON usage_ledger.idempotency_id = value"
)
_SQLITE_INSERT = (
    f"INSERT INTO usage_ledger ({_COLUMNS}) VALUES ({', '.join('?' * len(LedgerRow._fields))})"
    " ON CONFLICT (idempotency_id) DO NOTHING"
)


async def _insert_postgres(conn: AsyncConnection, ordered: list[LedgerRow]) -> list[LedgerRow]:
    columns = tuple(list(values) for values in zip(*ordered, strict=True))
    inserted = set((await conn.exec_driver_sql(_PG_INSERT, columns)).scalars())
    return [r for r in ordered if r.idempotency_id in inserted]


async def _insert_sqlite(conn: AsyncConnection, ordered: list[LedgerRow]) -> list[LedgerRow]:
    ids = orjson.dumps([r.idempotency_id for r in ordered]).decode()
    stored = set((await conn.exec_driver_sql(_SQLITE_STORED, (ids,))).scalars())
    new = [r for r in ordered if r.idempotency_id not in stored] if stored else ordered
    if new:
        result = await conn.exec_driver_sql(_SQLITE_INSERT, new)
        if result.rowcount != len(new):
            raise StoreError(
                f"write usage failed: {len(new) - result.rowcount} of {len(new)} rows were "
                "stored by another writer meanwhile; rolled back, to be retried"
            )
    return new
