"""The store's one boundary for foreign exceptions: SQLAlchemy and driver errors become
``base.errors.StoreError`` here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import SQLAlchemyError

from base.errors import StoreError


@contextmanager
def store_errors(what: str) -> Iterator[None]:
    """Turn a database failure inside the block into StoreError("{what} failed: ...").
    OSError covers a refused or dropped connection that the driver raises as is."""
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
