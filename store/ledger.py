"""The usage ledger and spend per budget period, in SQL.

``write`` is the only writer: one transaction stores a batch of rows, each at most once
(INSERT ... ON CONFLICT (idempotency_id) DO NOTHING), and adds to ``spend`` exactly
the rows it inserted. Replaying a batch after a crash therefore changes nothing.

The rows go to the database as they are (``LedgerRow`` tuples), not through an ORM's
per-row parameter processing (SQLAlchemy's cost the consumer ~12 us of CPU a row on
either database). Which rows a batch inserted is learnt two ways. PostgreSQL takes the batch as
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

from collections.abc import Collection, Sequence

import orjson

from base.errors import StoreError
from store.database import Connection, Database
from store.errors import store_errors
from store.records import LedgerRow
from store.usage_rows import spend_deltas

GROUPS = ("pool", "model", "region", "provider", "total")
METRICS = ("requests", "prompt_tokens", "completion_tokens", "cost_nusd")


class Ledger:
    """The usage ledger of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

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
            async with self.db.transaction() as conn:
                if self.db.dialect == "sqlite":
                    new = await _insert_sqlite(conn, ordered)
                else:
                    new = await _insert_postgres(conn, ordered)
                deltas = sorted(spend_deltas(new).items())
                if deltas:
                    # One executemany for every (tenant, period), in key order (the lock
                    # order again): one trip to the driver, not one per period.
                    await conn.executemany(_ADD_SPEND, [(t, p, c, n) for (t, p), (c, n) in deltas])
        return new

    async def spend(self, periods: Collection[str]) -> dict[tuple[str, str], int]:
        """(tenant, period) -> nano-USD spent, for every tenant in the given period ids."""
        wanted = list(periods)
        if not wanted:
            return {}
        marks = ", ".join(f"${i}" for i in range(1, len(wanted) + 1))
        query = f"SELECT tenant, period, cost_nusd FROM spend WHERE period IN ({marks})"
        with store_errors("read spend"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(query, *wanted)
        return {(tenant, period): int(cost) for tenant, period, cost in rows}

    async def totals(
        self, tenant: str, from_ms: int, to_ms: int, group_by: str
    ) -> dict[str, dict[str, int]]:
        """Usage of ``tenant`` in [from_ms, to_ms) grouped by pool, model, region, provider
        or total (one group, ``all``): value -> {requests, prompt_tokens,
        completion_tokens, cost_nusd}. Raises ValueError for another ``group_by``."""
        if group_by not in GROUPS:
            raise ValueError(f"group_by must be one of {GROUPS}")
        # PostgreSQL refuses GROUP BY a constant: the total is one aggregate row,
        # labelled here. ``group_by`` is one of GROUPS, never the caller's text.
        column, grouping = ("'all'", "") if group_by == "total" else (group_by, group_by)
        query = (
            f"SELECT {column}, count(*), coalesce(sum(prompt_tokens), 0),"
            " coalesce(sum(completion_tokens), 0), coalesce(sum(cost_nusd), 0)"
            " FROM usage_ledger WHERE tenant = $1 AND ts_ms >= $2 AND ts_ms < $3"
            + (f" GROUP BY {grouping}" if grouping else "")
        )
        with store_errors("read usage"):
            async with self.db.connection() as conn:
                rows = await conn.fetch(query, tenant, from_ms, to_ms)
        return {
            str(r[0]): dict(zip(METRICS, (int(v) for v in r[1:]), strict=True))
            for r in rows
            if r[1]
        }

    async def count(self) -> int:
        """Rows in the ledger."""
        with store_errors("count usage"):
            async with self.db.connection() as conn:
                rows = await conn.fetch("SELECT count(*) FROM usage_ledger")
        return int(rows[0][0])


_ADD_SPEND = (
    "INSERT INTO spend (tenant, period, cost_nusd, requests) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (tenant, period) DO UPDATE SET"
    " cost_nusd = spend.cost_nusd + excluded.cost_nusd,"
    " requests = spend.requests + excluded.requests"
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
    "SELECT value FROM json_each($1) JOIN usage_ledger ON usage_ledger.idempotency_id = value"
)
_SQLITE_INSERT = (
    f"INSERT INTO usage_ledger ({_COLUMNS}) VALUES "
    f"({', '.join(f'${i}' for i in range(1, len(LedgerRow._fields) + 1))})"
    " ON CONFLICT (idempotency_id) DO NOTHING"
)


async def _insert_postgres(conn: Connection, ordered: list[LedgerRow]) -> list[LedgerRow]:
    columns = tuple(list(values) for values in zip(*ordered, strict=True))
    inserted = {row[0] for row in await conn.fetch(_PG_INSERT, *columns)}
    return [r for r in ordered if r.idempotency_id in inserted]


async def _insert_sqlite(conn: Connection, ordered: list[LedgerRow]) -> list[LedgerRow]:
    ids = orjson.dumps([r.idempotency_id for r in ordered]).decode()
    stored = {row[0] for row in await conn.fetch(_SQLITE_STORED, ids)}
    new = [r for r in ordered if r.idempotency_id not in stored] if stored else ordered
    if new:
        count = await conn.executemany(_SQLITE_INSERT, new)
        if count != len(new):
            missing = len(new) - (count or 0)
            raise StoreError(
                f"write usage failed: {missing} of {len(new)} rows were "
                "stored by another writer meanwhile; rolled back, to be retried"
            )
    return new
