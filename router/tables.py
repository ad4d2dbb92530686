"""The live tables in Redis: the only code in skyroute that spells a Redis key.

Schema (all keys under ``{prefix}``, default ``sr:v1``):

    pool:{id}:stats      hash   ttft_ewma_ms, tpot_ewma_ms, rtt_ms, samples, errors  (EWMA, Lua)
    pool:{id}:ttft       list   recent TTFT samples, ms (newest first, capped)
    pool:{id}:tpot       list   recent TPOT samples, ms
    pool:{id}:replicas   hash   ready, target                                 (fleet/autoscaler)
    pool:{id}:health     hash   state, weight, reason, until_s                 (health)
    price:{id}           hash   usd_per_gpu_hour, source, fetched_at_s         (price feeds)
    inflight:{replica}   hash   pool id -> requests in flight on that gateway replica (TTL)
    replicas             zset   gateway replica id -> last heartbeat, unix ms
    events               pub/sub channel: a table changed, refresh the snapshot now

Each gateway replica writes its own absolute in-flight counts under its own key with a
short TTL, so a replica that dies takes its counts with it and nothing can drift
negative; readers sum the live replicas' shares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from router.errors import TableError
from router.snapshot import PoolRow, PoolState

SAMPLES_KEPT = 256
EWMA_ALPHA = 0.2

# EWMA over a batch of n observations with mean x: the same result as n single updates
# with an equal value, so flush batching does not change the estimate's time constant.
_EWMA_LUA = """
local alpha = tonumber(ARGV[1])
local function upd(field, n, mean)
  if n <= 0 then return end
  local cur = redis.call('HGET', KEYS[1], field)
  if not cur then
    redis.call('HSET', KEYS[1], field, mean)
  else
    local w = 1 - math.pow(1 - alpha, n)
    redis.call('HSET', KEYS[1], field, tonumber(cur) + w * (mean - tonumber(cur)))
  end
end
upd('ttft_ewma_ms', tonumber(ARGV[2]), tonumber(ARGV[3]))
upd('tpot_ewma_ms', tonumber(ARGV[4]), tonumber(ARGV[5]))
redis.call('HINCRBY', KEYS[1], 'samples', ARGV[6])
redis.call('HINCRBY', KEYS[1], 'errors', ARGV[7])
return 1
"""

_RTT_LUA = """
local cur = redis.call('HGET', KEYS[1], 'rtt_ms')
local x = tonumber(ARGV[2])
if cur then x = tonumber(cur) + tonumber(ARGV[1]) * (x - tonumber(cur)) end
redis.call('HSET', KEYS[1], 'rtt_ms', x)
return 1
"""

# Sum every live replica's in-flight share, server-side, in the same round-trip as the
# rest of the snapshot read. Replicas whose heartbeat is older than ARGV[1] are skipped,
# and so is ARGV[3], the reading replica, which adds its own fresher local count.
_INFLIGHT_LUA = """
local live = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf')
local sums = {}
for _, r in ipairs(live) do
  if r ~= ARGV[3] then
    local kv = redis.call('HGETALL', ARGV[2] .. r)
    for i = 1, #kv, 2 do
      sums[kv[i]] = (sums[kv[i]] or 0) + tonumber(kv[i + 1])
    end
  end
end
local out = {}
for k, v in pairs(sums) do
  table.insert(out, k)
  table.insert(out, tostring(v))
end
return out
"""


@dataclass
class PoolObservations:
    """Observations of one pool gathered in-process between two flushes (ms)."""

    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0


@dataclass(frozen=True)
class HealthUpdate:
    """A pool's new health state. ``until_s`` (unix s) bounds an ejection: past it,
    readers treat the pool as probing even if nobody wrote again."""

    state: PoolState
    reason: str
    weight: float = 1.0
    until_s: float = 0.0

    def fields(self) -> dict[str, str]:
        """The hash fields to store."""
        return {
            "state": self.state.value,
            "reason": self.reason,
            "weight": f"{self.weight:.4f}",
            "until_s": f"{self.until_s:.3f}",
        }


@dataclass(frozen=True)
class PriceEntry:
    """A pool's price as the feeds last saw it."""

    usd_per_gpu_hour: float
    source: str
    fetched_at_s: float


def _f(raw: Mapping[str, str], key: str, default: float = float("nan")) -> float:
    value = raw.get(key)
    if value is None:
        return default
    try:
        out = float(value)
    except ValueError:
        return default
    return out if math.isfinite(out) else default


def _percentiles(samples: list[str]) -> tuple[float, float]:
    if not samples:
        return float("nan"), float("nan")
    values = np.asarray([float(s) for s in samples])
    p50, p99 = np.percentile(values, [50, 99])
    return float(p50), float(p99)


class LiveTables:
    """Typed reader and writer of the live tables over one ``redis.asyncio.Redis``.

    Every method either completes or raises TableError (from the redis exception);
    none retries by itself: the caller's background loop decides.
    """

    def __init__(self, redis: Redis, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._ewma = redis.register_script(_EWMA_LUA)
        self._inflight = redis.register_script(_INFLIGHT_LUA)
        self._rtt = redis.register_script(_RTT_LUA)

    # -- key spelling -------------------------------------------------------------------
    def _pool(self, pool_id: str, table: str) -> str:
        return f"{self.prefix}:pool:{pool_id}:{table}"

    def _price(self, pool_id: str) -> str:
        return f"{self.prefix}:price:{pool_id}"

    def _inflight_key(self, replica_id: str) -> str:
        return f"{self.prefix}:inflight:{replica_id}"

    @property
    def events_channel(self) -> str:
        """The pub/sub channel that announces table changes."""
        return f"{self.prefix}:events"

    @property
    def _replicas(self) -> str:
        return f"{self.prefix}:replicas"

    # -- the gateway's batched write -----------------------------------------------------
    async def flush(
        self,
        replica_id: str,
        *,
        now_ms: int,
        inflight: Mapping[str, int],
        inflight_ttl_ms: int,
        observations: Mapping[str, PoolObservations],
        health: Mapping[str, HealthUpdate] | None = None,
    ) -> None:
        """Write one gateway replica's in-flight counts, observations and health changes in
        ONE round-trip.

        ``inflight`` holds absolute counts (requests), so repeating a flush is harmless.
        Observations are additive: flushing the same batch twice counts it twice.
        """
        pipe = self.redis.pipeline(transaction=False)
        key = self._inflight_key(replica_id)
        if inflight:
            pipe.hset(key, mapping={k: str(v) for k, v in inflight.items()})
        pipe.pexpire(key, inflight_ttl_ms)
        pipe.zadd(self._replicas, {replica_id: now_ms})
        pipe.zremrangebyscore(self._replicas, "-inf", now_ms - 10 * inflight_ttl_ms)
        for pool_id, obs in observations.items():
            n_ttft, n_tpot = len(obs.ttft_ms), len(obs.tpot_ms)
            args: list[Any] = [
                EWMA_ALPHA,
                n_ttft,
                sum(obs.ttft_ms) / n_ttft if n_ttft else 0,
                n_tpot,
                sum(obs.tpot_ms) / n_tpot if n_tpot else 0,
                obs.ok,
                obs.errors,
            ]
            await self._ewma(keys=[self._pool(pool_id, "stats")], args=args, client=pipe)
            for table, samples in (("ttft", obs.ttft_ms), ("tpot", obs.tpot_ms)):
                if samples:
                    pipe.lpush(self._pool(pool_id, table), *(f"{s:.3f}" for s in samples))
                    pipe.ltrim(self._pool(pool_id, table), 0, SAMPLES_KEPT - 1)
        for pool_id, update in (health or {}).items():
            fields: dict[Any, Any] = update.fields()
            pipe.hset(self._pool(pool_id, "health"), mapping=fields)
        if health:
            pipe.publish(self.events_channel, "health")
        try:
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"flush failed: {exc}") from exc

    async def release(self, replica_id: str) -> None:
        """Remove this replica's in-flight share at once (graceful shutdown). Idempotent."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(self._inflight_key(replica_id))
            pipe.zrem(self._replicas, replica_id)
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"release failed: {exc}") from exc

    # -- the snapshot read -----------------------------------------------------------------
    async def read(
        self,
        pool_ids: Iterable[str],
        now_ms: int,
        replica_ttl_ms: int,
        exclude_replica: str = "",
        *,
        with_samples: bool = True,
    ) -> dict[str, PoolRow]:
        """Read every table for ``pool_ids`` in one pipelined round-trip.

        In-flight counts are summed over replicas that sent a heartbeat within
        ``replica_ttl_ms``, leaving out ``exclude_replica``. Unreadable fields come
        back as 'not known' (NaN). ``with_samples=False`` skips the sample lists (and
        so the percentiles), which routing does not use: the gateway's 10-per-second
        refresh reads only what routing needs.
        """
        ids = list(pool_ids)
        pipe = self.redis.pipeline(transaction=False)
        await self._inflight(
            keys=[self._replicas],
            args=[now_ms - replica_ttl_ms, f"{self.prefix}:inflight:", exclude_replica],
            client=pipe,
        )
        for pid in ids:
            pipe.hgetall(self._pool(pid, "stats"))
            if with_samples:
                pipe.lrange(self._pool(pid, "ttft"), 0, -1)
                pipe.lrange(self._pool(pid, "tpot"), 0, -1)
            pipe.hgetall(self._pool(pid, "replicas"))
            pipe.hgetall(self._pool(pid, "health"))
            pipe.hgetall(self._price(pid))
        try:
            results = await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"snapshot read failed: {exc}") from exc
        flat = [_s(x) for x in results[0]]
        inflight = {flat[i]: float(flat[i + 1]) for i in range(0, len(flat), 2)}
        rows: dict[str, PoolRow] = {}
        for n, pid in enumerate(ids):
            stride = 6 if with_samples else 4
            fields = [_decode(x) for x in results[1 + stride * n : 1 + stride * (n + 1)]]
            if not with_samples:
                fields[1:1] = [[], []]
            stats, ttft, tpot, replicas, health, price = fields
            assert isinstance(stats, dict) and isinstance(replicas, dict)
            assert isinstance(health, dict) and isinstance(price, dict)
            assert isinstance(ttft, list) and isinstance(tpot, list)
            ttft_p50, ttft_p99 = _percentiles(ttft)
            tpot_p50, tpot_p99 = _percentiles(tpot)
            try:
                state = PoolState(health.get("state", "healthy"))
            except ValueError:
                state = PoolState.HEALTHY
            rows[pid] = PoolRow(
                ttft_ewma_ms=_f(stats, "ttft_ewma_ms"),
                tpot_ewma_ms=_f(stats, "tpot_ewma_ms"),
                ttft_p50_ms=ttft_p50,
                ttft_p99_ms=ttft_p99,
                tpot_p50_ms=tpot_p50,
                tpot_p99_ms=tpot_p99,
                samples=int(_f(stats, "samples", 0)),
                rtt_ms=_f(stats, "rtt_ms"),
                errors=int(_f(stats, "errors", 0)),
                inflight=max(inflight.get(pid, 0.0), 0.0),
                ready_replicas=_f(replicas, "ready"),
                target_replicas=_f(replicas, "target"),
                state=state,
                weight=min(max(_f(health, "weight", 1.0), 0.0), 1.0),
                health_until_s=_f(health, "until_s", 0.0),
                usd_per_gpu_hour=_f(price, "usd_per_gpu_hour"),
                price_source=price.get("source", ""),
                price_fetched_at_s=_f(price, "fetched_at_s", 0.0),
            )
        return rows

    async def read_own_inflight(self, replica_id: str) -> dict[str, int]:
        """This replica's last flushed in-flight share (used to re-sync after a restart)."""
        try:
            raw = await self.redis.hgetall(self._inflight_key(replica_id))
        except RedisError as exc:
            raise TableError(f"read failed: {exc}") from exc
        return {_s(k): int(float(_s(v))) for k, v in raw.items()}

    # -- fleet, health and price writers --------------------------------------------------
    async def record_rtt(self, rtt_ms: Mapping[str, float]) -> None:
        """Record measured gateway-to-pool round-trip times (ms), one pipeline, as an
        EWMA per pool. Additive like observations: each call is one more sample."""
        pipe = self.redis.pipeline(transaction=False)
        for pool_id, ms in rtt_ms.items():
            await self._rtt(keys=[self._pool(pool_id, "stats")], args=[EWMA_ALPHA, ms], client=pipe)
        try:
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"rtt write failed: {exc}") from exc

    async def set_replicas(self, pool_id: str, ready: int, target: int | None = None) -> None:
        """Record a pool's ready (and target) replica count. Idempotent."""
        mapping = {"ready": str(ready)}
        if target is not None:
            mapping["target"] = str(target)
        await self._write(self._pool(pool_id, "replicas"), mapping)

    async def set_health(
        self, pool_id: str, state: PoolState, reason: str, weight: float = 1.0, until_s: float = 0.0
    ) -> None:
        """Record a pool's health state for every gateway replica. Idempotent."""
        mapping = {
            "state": state.value,
            "reason": reason,
            "weight": f"{weight:.4f}",
            "until_s": f"{until_s:.3f}",
        }
        await self._write(self._pool(pool_id, "health"), mapping)

    async def set_price(self, pool_id: str, price: PriceEntry) -> None:
        """Record a pool's price in USD per GPU-hour. Idempotent."""
        mapping = {
            "usd_per_gpu_hour": repr(price.usd_per_gpu_hour),
            "source": price.source,
            "fetched_at_s": f"{price.fetched_at_s:.3f}",
        }
        await self._write(self._price(pool_id), mapping)

    async def _write(self, key: str, mapping: Mapping[str, str]) -> None:
        try:
            pipe = self.redis.pipeline(transaction=False)
            fields: dict[Any, Any] = dict(mapping)
            pipe.hset(key, mapping=fields)
            pipe.publish(self.events_channel, key)
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"write {key} failed: {exc}") from exc

    async def clear_pool(self, pool_id: str) -> None:
        """Forget every live value of a pool (tests, and pools removed from the policy)."""
        try:
            await self.redis.delete(
                *(self._pool(pool_id, t) for t in ("stats", "ttft", "tpot", "replicas", "health")),
                self._price(pool_id),
            )
        except RedisError as exc:
            raise TableError(f"clear failed: {exc}") from exc


async def _execute(pipe: Pipeline) -> list[Any]:
    # Reset in every case, so a failed pipeline gives its connection back to the pool.
    try:
        return await pipe.execute()
    finally:
        await pipe.reset()  # type: ignore[no-untyped-call]


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {_s(k): _s(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_s(v) for v in value]
    return value
