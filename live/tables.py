"""The live tables in Redis: the only code in skyroute that spells a Redis key.

Schema (all keys under ``{prefix}``, default ``sr:v1``):

    pool:{<id>}:stats     hash   ttft_ewma_ms, tpot_ewma_ms, rtt_ms, samples, errors  (EWMA, Lua)
    pool:{<id>}:ttft      list   recent TTFT samples, ms (newest first, capped)
    pool:{<id>}:tpot      list   recent TPOT samples, ms
    pool:{<id>}:replicas  hash   ready, target, endpoints (JSON list of URLs)  (fleet/autoscaler)
    pool:{<id>}:health    hash   router.health.HealthRecord, compare-and-set on version
    pool:{<id>}:ejections hash   replica base URL -> "<until unix ms> <reason>": replicas a
                                 gateway ejected for failed requests (expires whole)
    price:{<id>}          hash   usd_per_gpu_hour, source, fetched_at_s, stale  (price feeds)
                                 [usd_per_hour, instance_type, purchase]
    {inflight}:…          requests in flight per gateway replica and summed (live.inflight)
    events                pub/sub channel: a table changed, refresh the snapshot now

A pool's keys share the hash tag ``{<id>}`` (one Redis Cluster slot per pool). Each
gateway replica writes its own absolute in-flight counts, so a replica that dies takes
its counts with it once its heartbeat is stale and nothing can drift negative.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson
from redis.exceptions import RedisError

from base.errors import TableError
from live import table_scripts
from live.inflight import InflightTable
from live.redis_client import AnyPipeline, RedisClient, queue_script
from live.replica_health import ReplicaEjection, parse_ejections
from router.health import HealthRecord
from router.snapshot import EWMA_ALPHA, PoolRow

SAMPLES_KEPT = 256


@dataclass
class PoolObservations:
    """Observations of one pool gathered in-process between two flushes (ms)."""

    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0


@dataclass(frozen=True)
class PriceEntry:
    """A pool's price as the feeds last saw it.

    ``stale``: older than the policy's bound; routing still uses it, but shows it.
    ``usd_per_hour``, ``instance_type`` and ``purchase`` describe the priced instance
    (optional, for display).
    """

    usd_per_gpu_hour: float
    source: str
    fetched_at_s: float
    stale: bool = False
    usd_per_hour: float | None = None
    instance_type: str = ""
    purchase: str = ""


def _f(raw: Mapping[str, str], key: str, default: float = float("nan")) -> float:
    value = raw.get(key)
    if value is None:
        return default
    try:
        out = float(value)
    except ValueError:
        return default
    return out if math.isfinite(out) else default


# Field prefix in pool:{id}:replicas: one ``drain:<base URL>`` field per drained replica,
# so draining and uncordoning are single HSET/HDEL calls, atomic without a script.
_DRAINED = "drain:"


def _endpoints(raw: str | None) -> tuple[str, ...]:
    """Published replica URLs; a malformed value counts as none published."""
    if not raw:
        return ()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v.startswith(("http://", "https://")))


def _percentiles(samples: list[str]) -> tuple[float, float]:
    if not samples:
        return float("nan"), float("nan")
    values = np.asarray([float(s) for s in samples])
    p50, p99 = np.percentile(values, [50, 99])
    return float(p50), float(p99)


class LiveTables:
    """Typed reader and writer of the live tables over one Redis client (one server or
    a cluster, ``live.redis_client``).

    Every method either completes or raises TableError (from the redis exception);
    none retries by itself: the caller's background loop decides.
    """

    def __init__(self, redis: RedisClient, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._ewma = redis.register_script(table_scripts.EWMA_LUA)
        self._rtt = redis.register_script(table_scripts.RTT_LUA)
        self._health_cas = redis.register_script(table_scripts.HEALTH_CAS_LUA)
        self._announce = redis.register_script(table_scripts.ANNOUNCE_LUA)
        self.inflight = InflightTable(redis, prefix)

    # -- key spelling -------------------------------------------------------------------
    def _pool(self, pool_id: str, table: str) -> str:
        return f"{self.prefix}:pool:{{{pool_id}}}:{table}"

    def _price(self, pool_id: str) -> str:
        return f"{self.prefix}:price:{{{pool_id}}}"

    @property
    def events_channel(self) -> str:
        """The pub/sub channel that announces table changes."""
        return f"{self.prefix}:events"

    # -- the gateway's batched write -----------------------------------------------------
    async def flush(
        self,
        replica_id: str,
        *,
        now_ms: int,
        inflight: Mapping[str, int],
        inflight_ttl_ms: int,
        observations: Mapping[str, PoolObservations],
        extra: Callable[[AnyPipeline], None] | None = None,
    ) -> None:
        """Write one gateway replica's in-flight counts and observations in ONE round-trip.
        ``extra`` may queue more commands on the same pipeline (usage records).

        ``inflight`` holds absolute counts (requests), so repeating a flush is harmless.
        Observations are additive: flushing the same batch twice counts it twice.
        """
        pipe = self.redis.pipeline(transaction=False)
        await self.inflight.queue_flush(pipe, replica_id, inflight, now_ms, inflight_ttl_ms)
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
                now_ms,
            ]
            await queue_script(pipe, self._ewma, [self._pool(pool_id, "stats")], args)
            for table, samples in (("ttft", obs.ttft_ms), ("tpot", obs.tpot_ms)):
                if samples:
                    pipe.lpush(self._pool(pool_id, table), *(f"{s:.3f}" for s in samples))
                    pipe.ltrim(self._pool(pool_id, table), 0, SAMPLES_KEPT - 1)
        if extra is not None:
            extra(pipe)
        try:
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"flush failed: {exc}") from exc

    async def release(self, replica_id: str) -> None:
        """Remove this replica's in-flight share at once (graceful shutdown). Idempotent."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            await self.inflight.queue_release(pipe, replica_id, int(time.time() * 1000))
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
        await self.inflight.queue_read(pipe, exclude_replica, now_ms, replica_ttl_ms)
        for pid in ids:
            pipe.hgetall(self._pool(pid, "stats"))
            if with_samples:
                pipe.lrange(self._pool(pid, "ttft"), 0, -1)
                pipe.lrange(self._pool(pid, "tpot"), 0, -1)
            pipe.hgetall(self._pool(pid, "replicas"))
            pipe.hgetall(self._pool(pid, "health"))
            pipe.hgetall(self._price(pid))
            pipe.hgetall(self._pool(pid, "ejections"))
        try:
            results = await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"snapshot read failed: {exc}") from exc
        inflight = InflightTable.parse(results[0])
        rows: dict[str, PoolRow] = {}
        for n, pid in enumerate(ids):
            stride = 7 if with_samples else 5
            fields = [_decode(x) for x in results[1 + stride * n : 1 + stride * (n + 1)]]
            if not with_samples:
                fields[1:1] = [[], []]
            stats, ttft, tpot, replicas, health, price, ejections = fields
            assert isinstance(stats, dict) and isinstance(replicas, dict)
            assert isinstance(health, dict) and isinstance(price, dict)
            assert isinstance(ttft, list) and isinstance(tpot, list)
            ttft_p50, ttft_p99 = _percentiles(ttft)
            tpot_p50, tpot_p99 = _percentiles(tpot)
            rows[pid] = PoolRow(
                ttft_ewma_ms=_f(stats, "ttft_ewma_ms"),
                tpot_ewma_ms=_f(stats, "tpot_ewma_ms"),
                ttft_at_s=_f(stats, "ttft_ewma_ms_at_ms", 0.0) / 1000.0,
                tpot_at_s=_f(stats, "tpot_ewma_ms_at_ms", 0.0) / 1000.0,
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
                endpoints=_endpoints(replicas.get("endpoints")),
                drained=frozenset(k[len(_DRAINED) :] for k in replicas if k.startswith(_DRAINED)),
                ejected=parse_ejections(ejections),
                health=HealthRecord.from_fields(health),
                usd_per_gpu_hour=_f(price, "usd_per_gpu_hour"),
                price_source=price.get("source", ""),
                price_fetched_at_s=_f(price, "fetched_at_s", 0.0),
                price_stale=price.get("stale") == "1",
            )
        return rows

    async def read_own_inflight(self, replica_id: str) -> dict[str, int]:
        """This replica's last flushed in-flight share (used to re-sync after a restart)."""
        try:
            return await self.inflight.own(replica_id, self.redis)
        except RedisError as exc:
            raise TableError(f"read failed: {exc}") from exc

    # -- fleet, health and price writers --------------------------------------------------
    async def record_rtt(self, rtt_ms: Mapping[str, float]) -> None:
        """Record measured gateway-to-pool round-trip times (ms), one pipeline, as an
        EWMA per pool. Additive like observations: each call is one more sample."""
        pipe = self.redis.pipeline(transaction=False)
        for pool_id, ms in rtt_ms.items():
            await queue_script(pipe, self._rtt, [self._pool(pool_id, "stats")], [EWMA_ALPHA, ms])
        try:
            await _execute(pipe)
        except RedisError as exc:
            raise TableError(f"rtt write failed: {exc}") from exc

    async def set_replicas(
        self,
        pool_id: str,
        ready: int,
        target: int | None = None,
        endpoints: Sequence[str] | None = None,
    ) -> None:
        """Record a pool's ready (and target) replica count and, when its node group
        knows them, the base URLs of its running replicas (gateways then send the pool's
        requests there instead of the policy's static endpoints). Idempotent."""
        mapping = {"ready": str(ready)}
        if target is not None:
            mapping["target"] = str(target)
        if endpoints is not None:
            mapping["endpoints"] = orjson.dumps(sorted(endpoints)).decode()
        await self._write(self._pool(pool_id, "replicas"), mapping)

    async def set_replica_drained(self, pool_id: str, address: str, drained: bool) -> None:
        """Drain (no new requests) or uncordon one replica of a pool, by its base URL, on
        every gateway from its next snapshot. Idempotent. Raises TableError."""
        key = self._pool(pool_id, "replicas")
        field_name = _DRAINED + address.rstrip("/")
        args = ["set", field_name, str(int(time.time()))] if drained else ["del", field_name]
        try:
            # Announced in the same script: gateways refresh at once.
            await self._announce(keys=[key], args=[self.events_channel, *args])
        except RedisError as exc:
            raise TableError(f"replica drain write failed: {exc}") from exc

    def add_replica_ejections(
        self, pipe: AnyPipeline, ejections: Sequence[ReplicaEjection]
    ) -> None:
        """Queue on ``pipe`` (the gateway's flush) the replicas this gateway ejected, so
        every gateway leaves them out until ``until_s``. The last writer of a replica wins;
        each hash expires whole once its latest ejection is over, so nothing accumulates.
        One EVAL of the script text per ejection (rare), announced inside it: it needs no
        script cache and no PUBLISH of its own in a cluster pipeline."""
        for e in ejections:
            pipe.eval(
                table_scripts.EJECT_LUA, 1, self._pool(e.pool_id, "ejections"),
                self.events_channel, e.address, e.field_value(), int(e.until_s * 1000) + 1000,
            )  # fmt: skip

    async def read_health(self, pool_id: str) -> HealthRecord:
        """A pool's shared health record (the default HEALTHY record if none)."""
        try:
            raw = await self.redis.hgetall(self._pool(pool_id, "health"))
        except RedisError as exc:
            raise TableError(f"health read failed: {exc}") from exc
        return HealthRecord.from_fields({_s(k): _s(v) for k, v in raw.items()})

    async def update_health(
        self, pool_id: str, change: Callable[[HealthRecord], HealthRecord | None], attempts: int = 8
    ) -> tuple[HealthRecord, HealthRecord] | None:
        """Apply ``change`` to a pool's health record atomically (compare-and-set on its
        version) and announce it. Returns (before, after), or None if ``change`` found
        nothing to do. Retries when another replica wrote first; raises TableError if it
        keeps losing or Redis fails.
        """
        key = self._pool(pool_id, "health")
        for _ in range(attempts):
            current = await self.read_health(pool_id)
            new = change(current)
            if new is None:
                return None
            new = replace(new, version=current.version + 1)
            flat: list[str] = [self.events_channel, str(current.version)]
            for field_name, value in new.to_fields().items():
                flat += [field_name, value]
            try:
                won = await self._health_cas(keys=[key], args=flat)
            except RedisError as exc:
                raise TableError(f"health write failed: {exc}") from exc
            if won:
                return current, new
        raise TableError(f"health record of {pool_id} kept changing under us")

    async def set_price(self, pool_id: str, price: PriceEntry) -> None:
        """Record a pool's price in USD per GPU-hour. Idempotent."""
        mapping = {
            "usd_per_gpu_hour": repr(price.usd_per_gpu_hour),
            "source": price.source,
            "fetched_at_s": f"{price.fetched_at_s:.3f}",
            "stale": "1" if price.stale else "0",
            "instance_type": price.instance_type,
            "purchase": price.purchase,
        }
        if price.usd_per_hour is not None:
            mapping["usd_per_hour"] = repr(price.usd_per_hour)
        await self._write(self._price(pool_id), mapping)

    async def _write(self, key: str, mapping: Mapping[str, str]) -> None:
        args: list[str] = [self.events_channel, "set"]
        for name, value in mapping.items():
            args += [name, value]
        try:
            await self._announce(keys=[key], args=args)
        except RedisError as exc:
            raise TableError(f"write {key} failed: {exc}") from exc

    async def clear_pool(self, pool_id: str) -> None:
        """Forget every live value of a pool (tests, and pools removed from the policy)."""
        try:
            await self.redis.delete(
                *(
                    self._pool(pool_id, t)
                    for t in ("stats", "ttft", "tpot", "replicas", "health", "ejections")
                ),
                self._price(pool_id),
            )
        except RedisError as exc:
            raise TableError(f"clear failed: {exc}") from exc


async def _execute(pipe: AnyPipeline) -> list[Any]:
    # Reset in every case, so a failed pipeline gives its connection back to the pool.
    try:
        result: list[Any] = await pipe.execute()
        return result
    finally:
        await pipe.reset()  # type: ignore[no-untyped-call]


async def run_pipeline(pipe: AnyPipeline, what: str) -> list[Any]:
    """Execute ``pipe`` and give its connection back whatever happens; a Redis failure
    becomes TableError("{what}: ...")."""
    try:
        return await _execute(pipe)
    except RedisError as exc:
        raise TableError(f"{what}: {exc}") from exc


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {_s(k): _s(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_s(v) for v in value]
    return value
