"""The normalised GPU price table in Redis, and each price feed's last status.

Schema (under ``{prefix}:{control}``, default prefix ``sr:v1``; the lease's hash tag, so a
fenced write is one script on one Redis Cluster node):

    prices:rows     hash   "{provider}|{region}|{instance_type}|{purchase}" -> PriceRow JSON
    prices:feeds    hash   feed name -> FeedStatus JSON

Rows are only ever added or replaced, never deleted: a feed that fails, or that no
longer returns a row, leaves the last good price in place, with its ``fetched_at_s``
telling how old it is. Per-pool prices, which the gateways route on, live in the live
tables (``price:{id}``, written through ``live.tables.LiveTables.set_price``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from redis.exceptions import RedisError

from base.errors import TableError
from live.keyspace import tagged
from live.lease import CONTROL, Fence
from live.redis_client import RedisClient

logger = logging.getLogger(__name__)

FeedState = Literal["ok", "partial", "error", "skipped"]

# Write rows and statuses only if the lease in KEYS[3] still holds ARGV[1]. ARGV[2] = 1
# to replace every row, ARGV[3] = number of row pairs that follow, then status pairs.
# KEYS: rows, feeds[, the lease key]; ARGV[1]: the fence's value ('' without KEYS[3]),
# ARGV[2]: '1' to replace every row, ARGV[3]: row pair count, then rows and statuses.
_FENCED_WRITE_LUA = """
if #KEYS == 3 and redis.call('GET', KEYS[3]) ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end
local n = tonumber(ARGV[3])
local i = 4
for _ = 1, n do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
return 1
"""


@dataclass(frozen=True, order=True)
class PriceKey:
    """What a price is for: one instance type, bought one way, in one provider region."""

    provider: str
    region: str
    instance_type: str
    purchase: str

    def __str__(self) -> str:
        return f"{self.provider}|{self.region}|{self.instance_type}|{self.purchase}"

    @classmethod
    def parse(cls, text: str) -> PriceKey:
        """The key ``str(key)`` spelled. Raises ValueError."""
        provider, region, instance_type, purchase = text.split("|")
        return cls(provider, region, instance_type, purchase)


@dataclass(frozen=True)
class PriceRow:
    """One validated price. USD; ``fetched_at_s`` is when a feed last confirmed it (unix s).

    ``purchase`` is ``on_demand`` or ``spot``; ``usd_per_gpu_hour`` is
    ``usd_per_hour / gpu_count``; ``source`` names the feed (aws, gcp, azure, static).
    """

    provider: str
    region: str
    instance_type: str
    gpu_type: str
    gpu_count: int
    purchase: str
    usd_per_hour: float
    usd_per_gpu_hour: float
    source: str
    fetched_at_s: float

    @property
    def key(self) -> PriceKey:
        """The row's key in the table."""
        return PriceKey(self.provider, self.region, self.instance_type, self.purchase)

    def age_s(self, now_s: float) -> float:
        """Seconds since a feed last confirmed this price."""
        return max(now_s - self.fetched_at_s, 0.0)


@dataclass(frozen=True)
class FeedStatus:
    """What one feed's last refresh did.

    ``state``: ``ok`` (every wanted row came back), ``partial`` (some were missing or
    rejected; the others were updated), ``error`` (nothing was updated) or ``skipped``
    (the feed had nothing to do; ``error`` says why). ``reason``
    is a short label (``timeout``, ``bad_payload``, ``missing``…), ``error`` the message.
    Times are unix seconds; ``last_ok_s`` is 0 if the feed never succeeded.
    """

    feed: str
    state: FeedState
    reason: str = ""
    error: str = ""
    last_attempt_s: float = 0.0
    last_ok_s: float = 0.0
    rows: int = 0
    rejected: int = 0
    missing: tuple[str, ...] = field(default_factory=tuple)

    def age_s(self, now_s: float) -> float:
        """Seconds since the last good refresh; +inf if there never was one."""
        return max(now_s - self.last_ok_s, 0.0) if self.last_ok_s > 0 else math.inf


def _dump(value: Any) -> str:
    return json.dumps(asdict(value), separators=(",", ":"))


class PriceTable:
    """Typed reader and writer of the price table over one Redis client.

    Every method either completes or raises TableError; none retries by itself.
    """

    def __init__(self, redis: RedisClient, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._fenced = redis.register_script(_FENCED_WRITE_LUA)

    @property
    def _rows(self) -> str:
        return tagged(self.prefix, CONTROL, "prices", "rows")

    @property
    def _feeds(self) -> str:
        return tagged(self.prefix, CONTROL, "prices", "feeds")

    async def write(
        self,
        rows: Iterable[PriceRow],
        statuses: Iterable[FeedStatus],
        fence: Fence | None = None,
        *,
        replace: bool = False,
    ) -> bool:
        """Store ``rows`` (replacing rows with the same key; with ``replace``, every row
        not in ``rows`` is deleted) and ``statuses``, atomically.

        With a ``fence``, nothing is written unless the lease still holds it; the result
        is False then. Idempotent.
        """
        row_pairs = [(str(r.key), _dump(r)) for r in rows]
        status_pairs = [(s.feed, _dump(s)) for s in statuses]
        args: list[Any] = ["" if fence is None else fence.value, "1" if replace else "0"]
        args.append(len(row_pairs))
        for pair in (*row_pairs, *status_pairs):
            args.extend(pair)
        keys = [self._rows, self._feeds]
        if fence is not None:
            keys.append(fence.key)
        try:
            # A script, fenced or not: atomic on one server and on a cluster alike.
            return bool(await self._fenced(keys=keys, args=args))
        except RedisError as exc:
            raise TableError(f"price table write failed: {exc}") from exc

    async def read_rows(self) -> dict[PriceKey, PriceRow]:
        """Every stored row. A row that cannot be decoded is skipped with a warning."""
        raw = await self._hgetall(self._rows)
        out: dict[PriceKey, PriceRow] = {}
        for name, value in raw.items():
            try:
                row = PriceRow(**json.loads(value))
                out[row.key] = row
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                logger.warning("price table: skipping undecodable row %s: %s", name, exc)
        return out

    async def read_statuses(self) -> dict[str, FeedStatus]:
        """Every feed's last status, by feed name."""
        raw = await self._hgetall(self._feeds)
        out: dict[str, FeedStatus] = {}
        for name, value in raw.items():
            try:
                data = json.loads(value)
                data["missing"] = tuple(data.get("missing", ()))
                out[name] = FeedStatus(**data)
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                logger.warning("price table: skipping undecodable status %s: %s", name, exc)
        return out

    async def clear(self) -> None:
        """Forget every row and status (tests, and a deliberate reset)."""
        try:
            await self.redis.delete(self._rows, self._feeds)
        except RedisError as exc:
            raise TableError(f"price table clear failed: {exc}") from exc

    async def _hgetall(self, key: str) -> dict[str, str]:
        try:
            raw = await self.redis.hgetall(key)
        except RedisError as exc:
            raise TableError(f"price table read failed: {exc}") from exc
        return {_s(k): _s(v) for k, v in raw.items()}


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
