"""The store's one boundary for foreign exceptions: driver errors become
``base.errors.StoreError`` here."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from base.errors import StoreError


class DriverErrors:
    """The exception types that mean "the database failed". sqlite3's and OSError (a
    refused or dropped connection, a timeout) always; asyncpg's are added when a
    PostgreSQL store first connects, so that a SQLite store never imports asyncpg."""

    def __init__(self) -> None:
        self.types: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)

    def add(self, *types: type[BaseException]) -> None:
        """Count ``types`` as database failures too. Idempotent."""
        self.types = tuple(dict.fromkeys((*self.types, *types)))


DRIVER_ERRORS = DriverErrors()


@contextmanager
def store_errors(what: str) -> Iterator[None]:
    """Turn a database failure inside the block into StoreError("{what} failed: ...")."""
    try:
        yield
    except DRIVER_ERRORS.types as exc:
        raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
