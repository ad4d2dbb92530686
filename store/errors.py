"""The store's one boundary for foreign exceptions: driver errors become
``base.errors.StoreError`` here."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from base.errors import StoreError


def _is_driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` means "the database failed": sqlite3's errors, OSError (a refused
    or dropped connection, a timeout) and asyncpg's, recognised by their module so that
    a SQLite store never imports asyncpg."""
    return isinstance(exc, sqlite3.Error | OSError) or type(exc).__module__.startswith("asyncpg.")


@contextmanager
def store_errors(what: str) -> Iterator[None]:
    """Turn a database failure inside the block into StoreError("{what} failed: ...")."""
    try:
        yield
    except Exception as exc:
        if not _is_driver_error(exc):
            raise
        raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
