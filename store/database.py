"""The store's connection to its database, on the drivers themselves: asyncpg for
PostgreSQL, sqlite3 (through aiosqlite) for SQLite.

SQLAlchemy and Alembic serve the migrations only (``store.migrate``), imported when a
schema has to change: a running gateway or store worker holds neither (they were about
19 MB of a gateway worker's 98 MB idle).

Every statement is written once, with PostgreSQL's numbered parameters (``$1``, ``$2``,
...); for SQLite each becomes a plain ``?`` with its argument put in place. A statement
is run in a ``transaction()`` (committed when the block ends, rolled back if it raises)
or, for reads, a ``connection()``. Driver failures leave as ``StoreError`` through
``store.errors.store_errors``, which callers wrap around each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from base.errors import StoreError
from store.url import POSTGRES_DRIVER, SQLITE_DRIVER, check_database_url

if TYPE_CHECKING:
    import aiosqlite
    import asyncpg

# How long a SQLite writer waits for another one's lock before failing (ms).
SQLITE_BUSY_TIMEOUT_MS = 10_000
# Every SQLite connection's settings (the migrations' too, ``store.engine``): WAL lets
# readers (GET /admin/usage, restore) run while the consumer writes, and the busy
# timeout makes a second writer wait instead of failing at once.
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
    "PRAGMA synchronous=NORMAL",
)
# PostgreSQL connections a store keeps (the consumer, restore, admin calls).
PG_MAX_CONNECTIONS = 10
_NUMBERED = re.compile(r"\$(\d+)")


class Connection(Protocol):
    """One connection, inside a transaction or not. ``sql`` uses ``$1``, ``$2``, ..."""

    async def execute(self, sql: str, *args: object) -> int:
        """Run one statement; the rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> int | None:
        """Run one statement per row; the rows changed (None where the driver does not
        tell: PostgreSQL)."""
        ...

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        """Every row a query returns, as tuples."""
        ...


class Database(Protocol):
    """A database the store can use; ``dialect`` is "postgresql" or "sqlite"."""

    dialect: str

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection in a transaction: committed when the block ends, rolled back if
        it raises."""
        ...

    def connection(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection for reads, each statement on its own."""
        ...

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        ...


def open_database(url: str) -> Database:
    """A database on ``url`` (``postgresql+asyncpg://...`` or ``sqlite+aiosqlite:///path``);
    connects on first use. Raises StoreError for an unsupported URL."""
    scheme, _, rest = check_database_url(url).partition("://")
    if scheme == POSTGRES_DRIVER:
        return PostgresDatabase(f"postgresql://{rest}")
    assert scheme == SQLITE_DRIVER
    path, _, query = rest.removeprefix("/").partition("?")
    if query:
        raise StoreError(f"invalid database URL {url!r}: SQLite takes no options")
    return SqliteDatabase(path or ":memory:")


@functools.lru_cache(maxsize=256)
def _sqlite_sql(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """``sql`` with each ``$N`` as a plain ``?``, and the argument each ``?`` takes, in
    order (None: the arguments as given). Not SQLite's own ``?N``: Python 3.12 deprecates
    binding those from a sequence, and 3.14 refuses it. The store's statements are a few
    constants: each is rewritten once."""
    order = tuple(int(n) - 1 for n in _NUMBERED.findall(sql))
    return _NUMBERED.sub("?", sql), None if order == tuple(range(len(order))) else order


def _in_order(args: Sequence[object], order: tuple[int, ...] | None) -> Sequence[object]:
    return args if order is None else tuple(args[i] for i in order)


def _sqlite_args(sql: str, args: Sequence[object]) -> tuple[str, Sequence[object]]:
    text, order = _sqlite_sql(sql)
    return text, _in_order(args, order)


def _rows_changed(status: str) -> int:
    # asyncpg answers a statement with its command tag: "UPDATE 2", "INSERT 0 1".
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class _PgConnection:
    def __init__(self, conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record]) -> None:
        self._conn = conn

    async def execute(self, sql: str, *args: object) -> int:
        return _rows_changed(await self._conn.execute(sql, *args))

    async def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> int | None:
        await self._conn.executemany(sql, rows)
        return None

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self._conn.fetch(sql, *args)]


class PostgresDatabase:
    """PostgreSQL through an asyncpg pool, made on first use.

    No ping before each transaction (SQLAlchemy's ``pool_pre_ping`` cost a round trip a
    transaction): a connection the server closed, as a restart does, is seen closed by
    asyncpg while it idles and replaced at the next acquire (checked: a PostgreSQL
    restart between two ledger writes, both succeeded). A connection cut without a word
    fails its next statement once (StoreError; the consumer retries its batch)."""

    dialect = "postgresql"

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def _acquire_pool(self) -> asyncpg.Pool:
        async with self._lock:
            if self._pool is None:
                import asyncpg  # noqa: PLC0415 - a SQLite store never loads it

                try:
                    self._pool = await asyncpg.create_pool(
                        self._dsn, min_size=0, max_size=PG_MAX_CONNECTIONS
                    )
                except ValueError as exc:  # asyncpg's word for a DSN it cannot parse
                    raise StoreError(f"invalid database URL: {exc}") from exc
            return self._pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        pool = await self._acquire_pool()
        async with pool.acquire() as conn:
            yield _PgConnection(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        pool = await self._acquire_pool()
        async with pool.acquire() as conn, conn.transaction():
            yield _PgConnection(conn)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


class _SqliteConnection:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, *args: object) -> int:
        async with self._conn.execute(*_sqlite_args(sql, args)) as cursor:
            return max(cursor.rowcount, 0)

    async def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> int | None:
        text, order = _sqlite_sql(sql)
        if order is not None:
            rows = [_in_order(row, order) for row in rows]
        async with self._conn.executemany(text, rows) as cursor:
            return max(cursor.rowcount, 0)

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        async with self._conn.execute(*_sqlite_args(sql, args)) as cursor:
            return [tuple(r) for r in await cursor.fetchall()]


class SqliteDatabase:
    """A SQLite file through aiosqlite: one connection for writes and one for reads, each
    used by one caller at a time (WAL lets the reads run beside a write)."""

    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        self._path = path
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._read_lock = asyncio.Lock()

    async def _connect(self) -> aiosqlite.Connection:
        import aiosqlite  # noqa: PLC0415 - loaded with the first statement

        # Autocommit (isolation_level None): transactions are begun explicitly below.
        conn = await aiosqlite.connect(self._path, isolation_level=None)
        try:
            for pragma in SQLITE_PRAGMAS:
                await conn.execute(pragma)
        except BaseException:
            await conn.close()
            raise
        return conn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        if self._path == ":memory:":
            # Every connection to ":memory:" is a database of its own: reads share the
            # writer's.
            async with self._write_lock:
                if self._writer is None:
                    self._writer = await self._connect()
                yield _SqliteConnection(self._writer)
            return
        async with self._read_lock:
            if self._reader is None:
                self._reader = await self._connect()
            yield _SqliteConnection(self._reader)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._write_lock:
            if self._writer is None:
                self._writer = await self._connect()
            conn = self._writer
            # IMMEDIATE takes the write lock now (waiting up to the busy timeout), so a
            # transaction never fails half-way on a lock another process holds.
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteConnection(conn)
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    async def close(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                await conn.close()
        self._writer = self._reader = None
