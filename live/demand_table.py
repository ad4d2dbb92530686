"""Demand telemetry in Redis, and the autoscaler's persisted state.

What clients asked for, per model and client region, in fixed time buckets: the
autoscaler's forecast reads it back as time series. The gateway queues its records on
the pipeline of its periodic flush, so recording demand costs no extra round-trip.

Schema (under ``{prefix}``, default ``sr:v1``):

    demand:{model}|{client region}:{day}   hash    "{slot}:{metric}" -> integer count
                                                   (EXPIREAT end of day + retention)
    demand:index                            set     JSON ["model", "client region"] pairs
    {control}:autoscaler:state              string  the autoscaler's JSON state (fenced;
                                                    the lease's hash tag, live.lease)

``day`` is the UTC day number (unix seconds // 86400) and ``slot`` the bucket within
it (seconds of the day // ``bucket_s``). Metrics: ``n`` requests, ``p`` prompt tokens,
``o`` output tokens, ``m`` requests that missed their SLO.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from base.errors import TableError
from base.types import FloatArray
from live.keyspace import tagged
from live.lease import CONTROL, Fence
from live.redis_client import AnyPipeline, RedisClient, run_pipeline

__all__ = ["METRICS", "DemandRecord", "DemandSeries", "DemandTables"]

DAY_S = 86_400
METRICS = ("n", "p", "o", "m")

# Write the state only if the lease in KEYS[2] still holds ARGV[1].
_FENCED_SET_LUA = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


@dataclass(frozen=True, slots=True)
class DemandRecord:
    """One finished request as demand: when (unix s), which model, from which client
    region, its prompt and output tokens, and whether it met its SLO."""

    ts_s: float
    model: str
    client_region: str
    prompt_tokens: int
    output_tokens: int
    slo_met: bool = True


@dataclass(frozen=True, eq=False)
class DemandSeries:
    """Counts per bucket from ``start_s`` (unix s, bucket-aligned), ``bucket_s`` long.

    Arrays are aligned: ``requests``, ``prompt_tokens``, ``output_tokens`` and
    ``slo_misses`` per bucket (counts, not rates); a bucket with no record is 0.
    """

    start_s: float
    bucket_s: float
    requests: FloatArray
    prompt_tokens: FloatArray
    output_tokens: FloatArray
    slo_misses: FloatArray

    @property
    def end_s(self) -> float:
        """End of the last bucket (unix s)."""
        return self.start_s + self.bucket_s * len(self.requests)

    @classmethod
    def empty(cls, start_s: float, bucket_s: float, buckets: int = 0) -> DemandSeries:
        """``buckets`` buckets of zeros."""
        zeros = np.zeros(buckets)
        return cls(start_s, bucket_s, zeros, zeros.copy(), zeros.copy(), zeros.copy())


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class DemandTables:
    """Typed writer and reader of the demand tables over one Redis client.

    ``bucket_s`` (seconds, a divisor of a day) is the recording resolution and
    ``retention_s`` how long a day's buckets are kept after it ends. Every async method
    raises TableError when Redis fails.
    """

    def __init__(
        self,
        redis: RedisClient,
        prefix: str = "sr:v1",
        *,
        bucket_s: int = 60,
        retention_s: int = 15 * DAY_S,
    ) -> None:
        if bucket_s <= 0 or DAY_S % bucket_s:
            raise ValueError("bucket_s must be a positive divisor of 86400")
        self.redis = redis
        self.prefix = prefix
        self.bucket_s = bucket_s
        self.retention_s = retention_s
        self._fenced_set = redis.register_script(_FENCED_SET_LUA)

    def _day_key(self, model: str, region: str, day: int) -> str:
        return f"{self.prefix}:demand:{model}|{region}:{day}"

    @property
    def _index(self) -> str:
        return f"{self.prefix}:demand:index"

    @property
    def state_key(self) -> str:
        """Where the autoscaler's JSON state lives."""
        return tagged(self.prefix, CONTROL, "autoscaler", "state")

    # -- writing -----------------------------------------------------------------------
    def add(self, pipe: AnyPipeline, records: Iterable[DemandRecord]) -> None:
        """Queue ``records`` on ``pipe`` (the gateway's flush pipeline), summed per
        bucket first: one HINCRBY per (key, slot, metric) touched. Additive: the caller
        must not queue a record twice. Records with a non-finite time are skipped."""
        # Sum per (model, region, day, slot) first: a flush holds many requests of a
        # few such buckets, and the keys and field names are only built per bucket.
        buckets: dict[tuple[str, str, int, int], list[int]] = {}
        for r in records:
            if not math.isfinite(r.ts_s):
                continue
            day, second = divmod(int(r.ts_s), DAY_S)
            bkey = (r.model, r.client_region, day, second // self.bucket_s)
            sums = buckets.get(bkey)
            if sums is None:
                sums = buckets[bkey] = [0, 0, 0, 0]
            sums[0] += 1
            sums[1] += max(r.prompt_tokens, 0)
            sums[2] += max(r.output_tokens, 0)
            sums[3] += not r.slo_met
        pairs: set[str] = set()
        expiry: dict[str, int] = {}
        for (model, region, day, slot), sums in buckets.items():
            key = self._day_key(model, region, day)
            for metric, value in zip(("n", "p", "o", "m"), sums, strict=True):
                if value:
                    pipe.hincrby(key, f"{slot}:{metric}", value)
            pairs.add(json.dumps([model, region]))
            expiry[key] = (day + 1) * DAY_S + self.retention_s
        for key, at in expiry.items():
            pipe.expireat(key, at)
        if pairs:
            pipe.sadd(self._index, *sorted(pairs))

    async def record(self, records: Iterable[DemandRecord]) -> None:
        """Write ``records`` in one round-trip of their own (tools, tests, back-fills)."""
        pipe = self.redis.pipeline(transaction=False)
        self.add(pipe, records)
        await self._run(pipe)

    # -- reading -----------------------------------------------------------------------
    async def pairs(self) -> list[tuple[str, str]]:
        """Every (model, client region) ever recorded (within the index), sorted."""
        try:
            raw = await self.redis.smembers(self._index)
        except RedisError as exc:
            raise TableError(f"demand index read failed: {exc}") from exc
        out: list[tuple[str, str]] = []
        for member in raw:
            try:
                model, region = json.loads(_s(member))
            except (ValueError, TypeError):
                continue
            out.append((str(model), str(region)))
        return sorted(out)

    async def read(
        self, pairs: Sequence[tuple[str, str]], from_s: float, to_s: float
    ) -> dict[tuple[str, str], DemandSeries]:
        """The series of each (model, client region) over [from_s, to_s), bucket-aligned
        outwards, in one pipelined round-trip. Missing data reads as zeros."""
        b = self.bucket_s
        start = math.floor(from_s / b) * b
        buckets = max(math.ceil(to_s / b) - start // b, 0)
        last_day = (start + buckets * b - 1) // DAY_S
        days = list(range(start // DAY_S, last_day + 1)) if buckets else []
        pipe = self.redis.pipeline(transaction=False)
        for model, region in pairs:
            for day in days:
                pipe.hgetall(self._day_key(model, region, day))
        results = await self._run(pipe)
        out: dict[tuple[str, str], DemandSeries] = {}
        per_day = DAY_S // b
        for n, pair in enumerate(pairs):
            arrays = {m: np.zeros(buckets) for m in METRICS}
            for k, day in enumerate(days):
                raw = results[n * len(days) + k] or {}
                base = (day * DAY_S - start) // b  # bucket index of this day's slot 0
                for field, value in raw.items():
                    slot_text, _, metric = _s(field).partition(":")
                    if metric not in arrays or not slot_text.isdigit():
                        continue
                    index = base + int(slot_text)
                    if 0 <= index < buckets and int(slot_text) < per_day:
                        arrays[metric][index] += float(_s(value))
            out[pair] = DemandSeries(
                float(start), float(b), arrays["n"], arrays["p"], arrays["o"], arrays["m"]
            )
        return out

    # -- the autoscaler's state ----------------------------------------------------------
    async def load_state(self) -> str | None:
        """The autoscaler's last saved JSON state, or None."""
        try:
            raw = await self.redis.get(self.state_key)
        except RedisError as exc:
            raise TableError(f"autoscaler state read failed: {exc}") from exc
        return None if raw is None else _s(raw)

    async def save_state(self, payload: str, fence: Fence | None) -> bool:
        """Store the JSON state. With a ``fence``, only while that lease is still held
        (checked atomically); returns False, writing nothing, if it is not. Idempotent."""
        try:
            if fence is None:
                await self.redis.set(self.state_key, payload)
                return True
            keys = [self.state_key, fence.key]
            return bool(await self._fenced_set(keys=keys, args=[fence.value, payload]))
        except RedisError as exc:
            raise TableError(f"autoscaler state write failed: {exc}") from exc

    async def _run(self, pipe: AnyPipeline) -> list[Any]:
        return await run_pipeline(pipe, "demand tables")
