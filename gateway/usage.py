"""Per-request records (usage, demand), queued in process and written by the flush loop.

Records are kept until Redis has them: a flush that fails puts them back (up to a
bound), and the last flush at shutdown writes what is left, so a restart loses none.
A log with a ``journal`` (``gateway.usage_journal``) also appends each record to it, so
that a process killed before its flush loses none either.
"""

from __future__ import annotations

import logging
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

logger = logging.getLogger(__name__)

MAX_PENDING = 200_000


class Journal(Protocol[T_contra]):
    """Where a log's records are also written as they are queued (crash safety)."""

    @property
    def position(self) -> int:
        """Records appended so far."""
        ...

    def append(self, record: T_contra) -> None:
        """Journal one record. Never raises."""
        ...

    def flushed(self, upto: int) -> None:
        """The records appended before ``position`` was ``upto`` are in Redis."""
        ...


class UsageLog(Generic[T]):
    """The replica's unwritten records of one kind, oldest first."""

    def __init__(self) -> None:
        self._pending: list[T] = []
        self.dropped = 0
        self.journal: Journal[T] | None = None

    def record(self, record: T) -> None:
        """Queue one finished request (and journal it, when there is a journal)."""
        if self.journal is not None:
            self.journal.append(record)
        self._pending.append(record)
        if len(self._pending) > MAX_PENDING:
            # Only during a long Redis outage: keep the newest, count what was lost.
            excess = len(self._pending) - MAX_PENDING
            del self._pending[:excess]
            self.dropped += excess
            logger.error("record backlog over %d; dropped %d", MAX_PENDING, excess)

    def take(self) -> list[T]:
        """Every queued record; the caller writes them or gives them back."""
        pending, self._pending = self._pending, []
        return pending

    def give_back(self, records: list[T]) -> None:
        """Re-queue records a failed flush did not write, ahead of newer ones."""
        self._pending[:0] = records

    def __len__(self) -> int:
        return len(self._pending)
