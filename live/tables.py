"""The live tables in Redis: the only code in skyroute that spells a Redis key.

Schema (all keys under ``{prefix}``, default ``sr:v1``):

    {obs}:stream          stream observations: every gateway flush (in-flight counts,
                                 latency samples, outcomes) and probe RTTs, one entry each
                                 (``live.observations``; readers fold it)
    {obs}:checkpoint      string a reader's fold of the stream and the id it is current to
    pool:{<id>}:replicas  hash   ready, target, endpoints (JSON list of URLs)  (fleet/autoscaler)
    pool:{<id>}:health    hash   router.health.HealthRecord, compare-and-set on version
    pool:{<id>}:ejections hash   replica base URL -> "<until unix ms> <reason>": replicas a
                                 gateway ejected for failed requests (expires whole)
    price:{<id>}          hash   usd_per_gpu_hour, source, fetched_at_s, stale  (price feeds)
                                 [usd_per_hour, instance_type, purchase]
    events                pub/sub channel: a table changed, refresh the snapshot now

A pool's keys share the hash tag ``{<id>}`` (one Redis Cluster slot per pool); the
observations' keys share ``{obs}``. Each gateway replica writes its own absolute in-flight
counts, so a replica that dies takes its counts with it once its heartbeat is stale and
nothing can drift negative. Every writer of a pool's hashes announces the change on the
events channel, which is what lets a gateway read them only when told (``TableReader``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from redis.exceptions import RedisError

from base.errors import TableError
from live import observations as obs_codec
from live import table_scripts
from live.keyspace import tagged
from live.observations import ObservationFold, PoolObservations
from live.pool_rows import DRAINED, SlowRows, build_rows, decode_hash, entries, text
from live.redis_client import AnyPipeline, RedisClient, run_pipeline
from live.replica_health import ReplicaEjection
from router.health import HealthRecord
from router.snapshot import PoolRow

__all__ = ["LiveTables", "PoolObservations", "PriceEntry"]

# Entries the observations stream keeps (approximately): at 16 gateway replicas flushing
# 20 times a second, about a minute; readers normally start from a checkpoint seconds old.
OBS_STREAM_MAXLEN = 20_000


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


class LiveTables:
    """Typed reader and writer of the live tables over one Redis client (one server or
    a cluster, ``live.redis_client``).

    Every method either completes or raises TableError (from the redis exception);
    none retries by itself: the caller's background loop decides.
    """

    def __init__(self, redis: RedisClient, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._health_cas = redis.register_script(table_scripts.HEALTH_CAS_LUA)
        self._announce = redis.register_script(table_scripts.ANNOUNCE_LUA)
        self.obs_stream = tagged(prefix, "obs", "stream")
        self.obs_checkpoint = tagged(prefix, "obs", "checkpoint")

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
        observations: Mapping[str, PoolObservations],
        extra: Callable[[AnyPipeline], None] | None = None,
    ) -> str:
        """Write one gateway replica's in-flight counts and observations in ONE round-trip:
        one stream entry, whatever the number of pools. ``extra`` may queue more commands
        on the same pipeline (usage records). Returns the entry's stream id.

        ``inflight`` holds absolute counts (requests) and is the replica's heartbeat at
        ``now_ms``: readers drop a share older than their replica TTL, so a repeated
        flush is harmless. Observations are additive: flushing the same batch
        twice counts it twice. Raises TableError.
        """
        pipe = self.redis.pipeline(transaction=False)
        value = obs_codec.encode_flush(replica_id, now_ms, inflight, observations)
        self._queue_obs(pipe, value)
        if extra is not None:
            extra(pipe)
        results = await run_pipeline(pipe, "flush failed")
        return text(results[0])

    def _queue_obs(self, pipe: AnyPipeline, value: bytes) -> None:
        pipe.xadd(self.obs_stream, {"b": value}, maxlen=OBS_STREAM_MAXLEN, approximate=True)

    async def _add_obs(self, value: bytes, what: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        self._queue_obs(pipe, value)
        await run_pipeline(pipe, f"{what} failed")

    async def release(self, replica_id: str) -> None:
        """Remove this replica's in-flight share at once (graceful shutdown). Idempotent."""
        await self._add_obs(obs_codec.encode_release(replica_id, int(time.time() * 1000)),
                            "release")  # fmt: skip

    # -- the snapshot read -----------------------------------------------------------------
    def queue_slow(self, pipe: AnyPipeline, pool_ids: Sequence[str]) -> None:
        """Queue the read of the pools' announced hashes (replicas, health, price,
        ejections); ``parse_slow`` decodes the replies."""
        for pid in pool_ids:
            pipe.hgetall(self._pool(pid, "replicas"))
            pipe.hgetall(self._pool(pid, "health"))
            pipe.hgetall(self._price(pid))
            pipe.hgetall(self._pool(pid, "ejections"))

    @staticmethod
    def parse_slow(pool_ids: Sequence[str], replies: Sequence[Any]) -> SlowRows:
        """The replies of ``queue_slow`` per pool id."""
        out: SlowRows = {}
        for n, pid in enumerate(pool_ids):
            r, h, p, e = (decode_hash(x) for x in replies[4 * n : 4 * n + 4])
            out[pid] = (r, h, p, e)
        return out

    def queue_tail(self, pipe: AnyPipeline, after_id: str) -> None:
        """Queue the read of every observation entry after ``after_id``."""
        pipe.xrange(self.obs_stream, min=_after(after_id))

    async def _fold_from(self, checkpoint: bytes | str | None) -> ObservationFold:
        """``checkpoint`` (as read) folded forward with the entries after it."""
        fold = ObservationFold.from_checkpoint(checkpoint)
        try:
            tail = await self.redis.xrange(self.obs_stream, min=_after(fold.last_id))
        except RedisError as exc:
            raise TableError(f"observations read failed: {exc}") from exc
        fold.apply(entries(tail))
        return fold

    async def fold(self) -> ObservationFold:
        """The observations folded from the newest checkpoint and the entries after it
        (two round trips). Raises TableError."""
        try:
            checkpoint = await self.redis.get(self.obs_checkpoint)
        except RedisError as exc:
            raise TableError(f"observations read failed: {exc}") from exc
        return await self._fold_from(checkpoint)

    async def read(
        self,
        pool_ids: Iterable[str],
        now_ms: int,
        replica_ttl_ms: int,
        exclude_replica: str = "",
        *,
        with_samples: bool = True,
    ) -> dict[str, PoolRow]:
        """Read every table for ``pool_ids`` in two round trips: the checkpoint with the
        pools' hashes, then the observations after it (the gateway's refresh uses
        ``TableReader``, which keeps its fold and reads only what is new).

        In-flight counts are summed over replicas that sent a heartbeat within
        ``replica_ttl_ms``, leaving out ``exclude_replica``. Unreadable fields come
        back as 'not known' (NaN). ``with_samples=False`` skips the percentiles.
        Raises TableError.
        """
        ids = list(pool_ids)
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.obs_checkpoint)
        self.queue_slow(pipe, ids)
        replies = await run_pipeline(pipe, "snapshot read failed")
        slow = self.parse_slow(ids, replies[1:])
        fold = await self._fold_from(replies[0])
        return build_rows(ids, fold, slow, now_ms, replica_ttl_ms, exclude_replica,
                          with_samples=with_samples)  # fmt: skip

    async def read_own_inflight(self, replica_id: str) -> dict[str, int]:
        """This replica's last flushed in-flight share (used to re-sync after a restart)."""
        fold = await self.fold()
        share = fold.shares.get(replica_id)
        return dict(share[1]) if share else {}

    # -- fleet, health and price writers --------------------------------------------------
    async def record_rtt(self, rtt_ms: Mapping[str, float]) -> None:
        """Record measured gateway-to-pool round-trip times (ms), one pipeline, as an
        EWMA per pool. Additive like observations: each call is one more sample.
        One stream entry. Raises TableError."""
        if rtt_ms:
            await self._add_obs(obs_codec.encode_rtt(int(time.time() * 1000), rtt_ms),
                                "rtt write")  # fmt: skip

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
        field_name = DRAINED + address.rstrip("/")
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
        return HealthRecord.from_fields(decode_hash(raw))

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
        """Forget every live value of a pool (tests, and pools removed from the policy).
        Raises TableError."""
        try:
            await self.redis.delete(
                *(self._pool(pool_id, t) for t in ("replicas", "health", "ejections")),
                self._price(pool_id),
            )
        except RedisError as exc:
            raise TableError(f"clear failed: {exc}") from exc
        await self._add_obs(obs_codec.encode_clear(int(time.time() * 1000), [pool_id]), "clear")


def _after(entry_id: str) -> str:
    """The XRANGE start just past ``entry_id`` ("0-0": the stream's first entry)."""
    return "(" + entry_id if entry_id != "0-0" else "-"
