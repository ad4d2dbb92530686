"""The usage stream read through a Redis consumer group: at-least-once delivery.

``AccessTables.add_usage`` XADDs one entry per request to ``{prefix}:usage``. Readers in
the group ``store`` each see an entry once (XREADGROUP ``>``); it stays in the reader's
pending list until acknowledged (XACK), so a reader that dies between reading and
acknowledging loses nothing: it reads its own pending entries again when it comes back
under the same name (XREADGROUP ``0``), and another reader claims them once they have
been idle long enough (XAUTOCLAIM). The stream is trimmed at about
``USAGE_STREAM_MAXLEN`` entries, acknowledged or not: a reader must keep up.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.exceptions import RedisError, ResponseError

from base.errors import TableError
from live.access_table import AccessTables

# (entry id, fields); fields are empty for an entry trimmed away while it was pending.
Entry = tuple[str, Mapping[str, str]]
T = TypeVar("T")
DEFAULT_GROUP = "store"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(raw: Any) -> list[Entry]:
    return [
        (_s(entry_id), {_s(k): _s(v) for k, v in (fields or {}).items()})
        for entry_id, fields in raw or []
    ]


async def backlog(tables: AccessTables, group: str = DEFAULT_GROUP) -> tuple[float, int]:
    """How far the ledger trails the gateways: (entries of the usage stream no reader of
    ``group`` has read yet, entries read and not yet acknowledged), by one XINFO GROUPS.
    Where Redis has no count of its own (before 7.0, or once entries were deleted out of
    order), the entries after the group's last-delivered id are counted by XRANGE, up to
    ``COUNT_CAP``; the first is NaN beyond that. No stream: (0, 0); a stream whose group
    is missing (Redis lost its data and the refill has not run): every entry is unread.
    Raises TableError."""
    stream = tables.key("usage")
    try:
        groups = await tables.redis.xinfo_groups(stream)
    except RedisError as exc:
        if isinstance(exc, ResponseError) and "no such key" in str(exc):
            return 0.0, 0
        raise TableError(f"reading the usage group failed: {exc}") from exc
    for info in groups:
        if _s(info["name"]) == group:
            lag = info.get("lag")
            if lag is None:
                lag = await _count_after(tables, stream, _s(info["last-delivered-id"]))
            return float(lag), int(info["pending"])
    try:
        return float(await tables.redis.xlen(stream)), 0
    except RedisError as exc:
        raise TableError(f"reading the usage stream failed: {exc}") from exc


# Entries counted one by one where Redis cannot count the backlog itself (``backlog``).
COUNT_CAP = 10_000
_PAGE = 1_000


async def _count_after(tables: AccessTables, stream: str, after: str) -> float:
    """Entries of ``stream`` after id ``after``; NaN past ``COUNT_CAP``. Raises TableError."""
    counted = 0
    try:
        while counted <= COUNT_CAP:
            # An exclusive start ("(" id) needs Redis 6.2, the oldest skyroute supports.
            page = await tables.redis.xrange(stream, f"({after}", "+", count=_PAGE) or []
            counted += len(page)
            if len(page) < _PAGE:
                return float(counted)
            after = _s(page[-1][0])
    except RedisError as exc:
        raise TableError(f"counting the usage backlog failed: {exc}") from exc
    return math.nan


class UsageStream:
    """One named reader (``consumer``) of the usage stream in consumer group ``group``.
    Every method raises TableError when Redis fails, or when the group is missing:
    it is created by ``ensure_group`` or by the refill, never implicitly."""

    def __init__(self, tables: AccessTables, consumer: str, group: str = DEFAULT_GROUP) -> None:
        self.redis = tables.redis
        self.stream = tables.key("usage")
        self.consumer = consumer
        self.group = group
        self._claim_cursor = "0-0"

    async def ensure_group(self) -> None:
        """Create the group (reading from the stream's first entry) if it is missing."""
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise TableError(f"creating usage group failed: {exc}") from exc
        except RedisError as exc:
            raise TableError(f"creating usage group failed: {exc}") from exc

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                # Redis lost its data. The reader must not recreate the group itself:
                # the refill does (live.access_refill), in the same transaction that adds
                # the spend in the store to Redis's counters, so nothing written after
                # the loss reaches the store before that spend is read from it.
                raise TableError(f"{what}: no usage group (waiting for the refill)") from exc
            raise TableError(f"{what} failed: {exc}") from exc
        except RedisError as exc:
            raise TableError(f"{what} failed: {exc}") from exc

    async def read_new(self, count: int, block_ms: int | None = None) -> list[Entry]:
        """Up to ``count`` entries no reader of the group has seen, waiting up to
        ``block_ms`` for one (None: do not wait). They are pending until ``ack``."""

        async def call() -> Any:
            return await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms
            )

        reply = await self._call("reading usage", call)
        return [e for _, raw in reply or [] for e in _entries(raw)]

    async def read_own_pending(self, count: int) -> list[Entry]:
        """Up to ``count`` entries this reader was given before and has not acknowledged
        (after a crash, or a write that failed), oldest first."""

        async def call() -> Any:
            return await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: "0"}, count=count
            )

        reply = await self._call("reading pending usage", call)
        return [e for _, raw in reply or [] for e in _entries(raw)]

    async def claim_idle(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over up to ``count`` entries pending for any reader (a dead one) for at
        least ``min_idle_ms``; they become this reader's pending entries. Successive
        calls walk the group's pending list and start over at its end."""

        async def call() -> Any:
            return await self.redis.xautoclaim(
                self.stream, self.group, self.consumer, min_idle_ms,
                start_id=self._claim_cursor, count=count,
            )  # fmt: skip

        reply = await self._call("claiming usage", call)
        self._claim_cursor = _s(reply[0])
        # Entries trimmed while pending (reply[2], Redis >= 7) left the pending list too.
        return _entries(reply[1])

    async def ack(self, entry_ids: Sequence[str]) -> None:
        """Acknowledge entries: no reader of the group is given them again."""
        if not entry_ids:
            return
        try:
            await self.redis.xack(self.stream, self.group, *entry_ids)
        except RedisError as exc:
            raise TableError(f"acknowledging usage failed: {exc}") from exc

    async def pending_count(self) -> int:
        """Entries given to some reader of the group and not yet acknowledged."""
        info = await self._call(
            "reading usage backlog", lambda: self.redis.xpending(self.stream, self.group)
        )
        return int(info["pending"]) if info else 0
