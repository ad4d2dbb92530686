"""Per-request records (usage, demand), queued in process and written by the flush loop.

Records are kept until Redis has them: a flush that fails puts them back (up to a
bound), and the last flush at shutdown writes what is left, so a restart loses none.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)

MAX_PENDING = 200_000


class UsageLog(Generic[T]):
    """The replica's unwritten records of one kind, oldest first."""

    def __init__(self) -> None:
        self._pending: list[T] = []
        self.dropped = 0

    def record(self, record: T) -> None:
        """Queue one finished request."""
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
