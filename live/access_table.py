"""Tenants, API keys, admission limits and usage records in Redis.

Schema (under ``{prefix}:{access}``; like ``live.tables``, the only code spelling these
keys):

    key:{sha256}          hash    id, tenant, name, created_s, expires_s, revoked  (no secret)
    keyid:{id}            string  sha256 of that key (revoke and list by id)
    tenantkeys:{tenant}   set     key ids
    tenant:{name}         string  TenantSpec JSON set through the admin API (overrides the policy)
    limits:{tenant}       hash    rpm, tpm, budget_nusd, period (what admission enforces)
    bucket:{tenant}:{rpm|tpm}  hash  token bucket state
    spend:{tenant}:{period}    int   nano-USD spent in that period
    usage                 stream  one entry per gateway flush: its records (``live.usage_codec``)
    usage:{tenant}:{hour} hash    roll-ups: ``pool|model|region|provider|metric`` -> integer
                                  (``live.usage_rollups`` names the fields and periods)

Money is counted in integer nano-USD so that roll-ups reconcile exactly with the sum of
the per-request records.

Every key carries the one hash tag ``{access}``: admission reads a key record and its
tenant's limits, buckets and spend in one script, and the refill (``live.access_refill``)
writes them all in one transaction, so on a Redis Cluster they must share a slot. The
cost is that the access tables of one prefix live on one node; the live tables (per
pool) and the in-flight shares spread over the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.exceptions import RedisError

from base.errors import TableError
from live import table_scripts, usage_codec
from live.keyspace import tagged
from live.redis_client import AnyPipeline, RedisClient, run_pipeline
from live.usage_rollups import METRICS, hour_period_ids, period_ids, rollup_field, rollup_name
from router.policy import TenantSpec

NANO = 1_000_000_000
USAGE_STREAM_MAXLEN = 1_000_000
# A spend counter outlives the longest budget period (a month) by a margin.
SPEND_TTL_S = 40 * 86400
# How often one process re-sends the TTL of a usage counter it keeps adding to (s).
EXPIRY_REFRESH_S = 60.0
GROUPS = ("pool", "model", "region", "provider")


class AdmitCode:
    """Admission verdicts returned by the Lua script."""

    OK, UNKNOWN, REVOKED, EXPIRED, RPM, TPM, BUDGET, OTHER_TENANT = range(8)


@dataclass(frozen=True)
class Admission:
    """The verdict on one request. ``retry_after_s`` is set for RPM/TPM refusals."""

    code: int
    tenant: str
    key_id: str
    expires_s: float
    retry_after_s: float


@dataclass(frozen=True)
class KeyRecord:
    """An API key as stored: everything but the secret."""

    id: str
    tenant: str
    name: str
    created_s: float
    expires_s: float
    revoked: bool


class UsageRecord(NamedTuple):
    """One finished request. ``cost_nusd`` is USD × 1e9; ``est_tokens`` is what admission
    charged to the TPM bucket (corrected to the real count when recorded); ``uid`` is
    unique per record across processes and restarts (stamped by the gateway's usage
    journal; empty if none), and the ledger's idempotency id when set, so a record
    written to the stream twice (replayed after a crash) is stored once.

    A named tuple: one is built per request, and a frozen dataclass of 13 fields cost
    ~2.5 us more to build."""

    ts_s: float
    request_id: str
    tenant: str
    model: str
    pool: str
    provider: str
    region: str
    prompt_tokens: int
    completion_tokens: int
    cost_nusd: int
    status: str
    est_tokens: int = 0
    uid: str = ""


def limit_fields(spec: TenantSpec) -> dict[str, str]:
    """The ``limits:{tenant}`` hash of a tenant: what admission enforces."""
    fields: dict[str, str] = {"period": spec.budget_period}
    if spec.rpm is not None:
        fields["rpm"] = str(spec.rpm)
    if spec.tpm is not None:
        fields["tpm"] = str(spec.tpm)
    if spec.budget_usd is not None:
        fields["budget_nusd"] = str(round(spec.budget_usd * NANO))
    return fields


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class AccessTables:
    """Typed access to the tenant/key/usage tables. Methods raise TableError on Redis
    failure and never log or return a key's secret."""

    def __init__(self, redis: RedisClient, prefix: str = "sr:v1") -> None:
        self.redis = redis
        self.prefix = prefix
        self._admit = redis.register_script(table_scripts.ADMIT_LUA)
        self._store_key = redis.register_script(table_scripts.STORE_KEY_LUA)
        # Key digest -> its tenant, as admission last found it: the admission script
        # must be given the tenant's keys up front (see ADMIT_LUA). A key never changes
        # tenant; a wrong guess costs one more round trip, never a wrong verdict.
        self._tenant_of: dict[str, str] = {}
        # Counter key -> when this process last set its TTL (monotonic s).
        self._expired_at: dict[str, float] = {}

    def _k(self, *parts: str) -> str:
        return tagged(self.prefix, "access", *parts)

    def _expiry_due(self, key: str) -> bool:
        """Whether to (re)send a counter key's EXPIRE with this batch: at most once a
        minute per key and process. A TTL of weeks needs no refresh per batch, and a key
        that Redis lost and INCRBY recreated without one gets it back within a minute."""
        now = time.monotonic()
        last = self._expired_at.get(key)
        if last is not None and now - last < EXPIRY_REFRESH_S:
            return False
        if len(self._expired_at) > 4096:
            self._expired_at = {
                k: t for k, t in self._expired_at.items() if now - t < EXPIRY_REFRESH_S
            }
        self._expired_at[key] = now
        return True

    def key(self, *parts: str) -> str:
        """The full Redis key of a schema entry above, e.g. ``key("usage")``: for the
        other modules of ``live/`` (the usage stream's reader, the refill), which must
        not spell the prefix themselves."""
        return self._k(*parts)

    async def _run(self, pipe: AnyPipeline) -> list[Any]:
        return await run_pipeline(pipe, "access tables")

    # -- keys -----------------------------------------------------------------------------
    async def store_key(self, digest_hex: str, record: KeyRecord) -> None:
        """Store a key by its SHA-256. Idempotent for the same record."""
        keys = [
            self._k("key", digest_hex),
            self._k("keyid", record.id),
            self._k("tenantkeys", record.tenant),
        ]
        args = [
            "id", record.id, "tenant", record.tenant, "name", record.name,
            "created_s", f"{record.created_s:.3f}", "expires_s", f"{record.expires_s:.3f}",
            "revoked", "1" if record.revoked else "0",
        ]  # fmt: skip
        try:
            # One script (atomic on one server and on a cluster alike), never a
            # MULTI/EXEC: the cluster client's transactions leak connections across loops.
            await self._store_key(keys=keys, args=[digest_hex, record.id, *args])
        except RedisError as exc:
            raise TableError(f"store key failed: {exc}") from exc

    async def revoke_key(self, key_id: str) -> bool:
        """Revoke a key by id; True if it existed. Takes effect on the next admission."""
        try:
            digest = await self.redis.get(self._k("keyid", key_id))
            if digest is None:
                return False
            await self.redis.hset(self._k("key", _s(digest)), "revoked", "1")
        except RedisError as exc:
            raise TableError(f"revoke failed: {exc}") from exc
        return True

    async def list_keys(self, tenant: str) -> list[KeyRecord]:
        """Every key of a tenant, without secrets."""
        try:
            ids = sorted(_s(i) for i in await self.redis.smembers(self._k("tenantkeys", tenant)))
            digests = [await self.redis.get(self._k("keyid", i)) for i in ids]
            raws = [
                await self.redis.hgetall(self._k("key", _s(d))) for d in digests if d is not None
            ]
        except RedisError as exc:
            raise TableError(f"list keys failed: {exc}") from exc
        out = []
        for raw in raws:
            r = {_s(k): _s(v) for k, v in raw.items()}
            out.append(
                KeyRecord(r["id"], r["tenant"], r.get("name", ""), float(r.get("created_s", 0)),
                          float(r.get("expires_s", 0)), r.get("revoked") == "1")
            )  # fmt: skip
        return out

    # -- tenants and limits ---------------------------------------------------------------
    async def put_tenant(self, name: str, spec: TenantSpec) -> None:
        """Store a tenant set through the admin API (it overrides the policy's)."""
        try:
            await self.redis.set(self._k("tenant", name), spec.model_dump_json())
        except RedisError as exc:
            raise TableError(f"put tenant failed: {exc}") from exc

    async def delete_tenant(self, name: str) -> bool:
        """Forget an admin-API tenant (the policy's, if any, applies again)."""
        try:
            return bool(await self.redis.delete(self._k("tenant", name)))
        except RedisError as exc:
            raise TableError(f"delete tenant failed: {exc}") from exc

    async def tenant_overrides(self) -> dict[str, TenantSpec]:
        """Every tenant set through the admin API."""
        try:
            keys = [k async for k in self.redis.scan_iter(match=self._k("tenant", "*"), count=500)]
            values = [await self.redis.get(k) for k in keys]
        except RedisError as exc:
            raise TableError(f"read tenants failed: {exc}") from exc
        cut = len(self._k("tenant", ""))
        return {
            _s(k)[cut:]: TenantSpec.model_validate_json(_s(v))
            for k, v in zip(keys, values, strict=True)
            if v
        }

    async def write_limits(self, tenants: Mapping[str, TenantSpec]) -> None:
        """Publish the limits admission enforces for every tenant. Idempotent."""
        pipe = self.redis.pipeline(transaction=False)
        self.queue_limits(pipe, tenants)
        await self._run(pipe)

    def queue_limits(self, pipe: AnyPipeline, tenants: Mapping[str, TenantSpec]) -> None:
        """Queue ``write_limits``'s commands on ``pipe`` (the refill's transaction)."""
        for name, spec in tenants.items():
            key = self._k("limits", name)
            pipe.delete(key)
            fields: dict[Any, Any] = limit_fields(spec)
            pipe.hset(key, mapping=fields)

    # -- the request path ------------------------------------------------------------------
    async def admit(self, digest_hex: str, now_s: float, est_tokens: int) -> Admission:
        """Check a key and its tenant's limits, charging them on success: ONE round trip
        (two the first time this process sees the key: it learns the key's tenant)."""
        guess = self._tenant_of.get(digest_hex, "")
        verdict = await self._admit_as(digest_hex, guess, now_s, est_tokens)
        if verdict.code == AdmitCode.OTHER_TENANT:
            if len(self._tenant_of) > 100_000:
                self._tenant_of.clear()
            self._tenant_of[digest_hex] = verdict.tenant
            verdict = await self._admit_as(digest_hex, verdict.tenant, now_s, est_tokens)
            if verdict.code == AdmitCode.OTHER_TENANT:  # re-created meanwhile: not admitted
                raise TableError("admission failed: the key changed tenant while admitted")
        return verdict

    async def _admit_as(
        self, digest_hex: str, tenant: str, now_s: float, est_tokens: int
    ) -> Admission:
        keys = [
            self._k("key", digest_hex),
            self._k("limits", tenant),
            self._k("bucket", tenant, "rpm"),
            self._k("bucket", tenant, "tpm"),
            *(self._k("spend", tenant, p) for p in period_ids(now_s)),
        ]
        args: list[Any] = [int(now_s * 1000), est_tokens, tenant]
        try:
            code, tenant, wait_ms, key_id, expires = await self._admit(keys=keys, args=args)
        except RedisError as exc:
            raise TableError(f"admission failed: {exc}") from exc
        return Admission(
            int(code), _s(tenant), _s(key_id), float(_s(expires)), int(wait_ms) / 1000.0
        )

    def add_usage(self, pipe: AnyPipeline, records: Iterable[UsageRecord]) -> None:
        """Queue usage records, roll-ups, spend and TPM corrections on ``pipe`` (the
        flush pipeline). Additive: the caller must not queue a record twice.

        One stream entry for all the records (``live.usage_codec``); the roll-ups, spend and TPM
        corrections are summed in process first, so a flush of a thousand requests of one
        tenant costs a few dozen counter updates, not tens of thousands.
        """
        # Sum per (tenant, hour, pool, model, region, provider) first: a flush holds
        # many requests of few such groups, and each group expands to 20 roll-up fields.
        groups: dict[tuple[str, int, str, str, str, str], list[int]] = {}
        tpm: dict[str, int] = {}
        records = list(records)
        if not records:
            return
        pipe.xadd(
            self._k("usage"), usage_codec.encode(records),  # type: ignore[arg-type]
            maxlen=USAGE_STREAM_MAXLEN, approximate=True,
        )  # fmt: skip
        for r in records:
            gkey = (r.tenant, int(r.ts_s // 3600), r.pool, r.model, r.region, r.provider)
            sums = groups.get(gkey)
            if sums is None:
                sums = groups[gkey] = [0, 0, 0, 0]
            sums[0] += 1
            sums[1] += r.prompt_tokens
            sums[2] += r.completion_tokens
            sums[3] += r.cost_nusd
            if r.est_tokens:
                # TPM was charged on an estimate at admission; give back (or take) the difference.
                tpm[r.tenant] = (
                    tpm.get(r.tenant, 0) + r.est_tokens - (r.prompt_tokens + r.completion_tokens)
                )
        rollups: dict[tuple[str, str], int] = {}
        spend: dict[str, int] = {}
        for (tenant, hour_n, pool, model, region, provider), sums in groups.items():
            periods = hour_period_ids(hour_n)
            hour = self._k("usage", tenant, periods[0])
            # One field per metric of the whole group, not one per way of grouping it:
            # the reader sums by pool, model, region or provider (4 fields, not 20).
            for metric, amount in zip(METRICS, sums, strict=True):
                key = (hour, rollup_field(pool, model, region, provider, metric))
                rollups[key] = rollups.get(key, 0) + amount
            for period in periods:
                skey = self._k("spend", tenant, period)
                spend[skey] = spend.get(skey, 0) + sums[3]
        for (hour, field_name), amount in rollups.items():
            pipe.hincrby(hour, field_name, amount)
        for hour in {h for h, _ in rollups}:
            if self._expiry_due(hour):
                pipe.expire(hour, 90 * 86400)
        for skey, amount in spend.items():
            pipe.incrby(skey, amount)
            if self._expiry_due(skey):
                pipe.expire(skey, SPEND_TTL_S)
        for tenant, delta in tpm.items():
            if delta:
                # EVAL, not EVALSHA: this runs once per tenant per flush, inside a
                # synchronous pipeline build, and must not depend on the script cache.
                bucket, limits = self._k("bucket", tenant, "tpm"), self._k("limits", tenant)
                pipe.eval(table_scripts.TPM_CORRECT_LUA, 2, bucket, limits, delta)

    async def usage(
        self, tenant: str, from_s: float, to_s: float, group_by: str
    ) -> dict[str, dict[str, int]]:
        """Roll-ups of ``tenant`` summed over the hours in [from_s, to_s), by ``group_by``
        (pool, model, region, provider or total): value -> {requests, prompt_tokens,
        completion_tokens, cost_nusd}."""
        hours: list[str] = []
        t = from_s - from_s % 3600
        while t < to_s and len(hours) < 24 * 400:
            hours.append(self._k("usage", tenant, period_ids(t)[0]))
            t += 3600
        pipe = self.redis.pipeline(transaction=False)
        for h in hours:
            pipe.hgetall(h)
        out: dict[str, dict[str, int]] = {}
        for raw in await self._run(pipe):
            for field_name, value in raw.items():
                name = rollup_name(_s(field_name), group_by)
                if name is not None:
                    metric = name[1]
                    slot = out.setdefault(name[0], {})
                    slot[metric] = slot.get(metric, 0) + int(_s(value))
        return out

    async def usage_records(self, count: int = 100_000) -> list[dict[str, str]]:
        """Per-request usage records of the newest ``count`` stream entries (one entry
        per gateway flush), oldest first."""
        try:
            entries = await self.redis.xrevrange(self._k("usage"), count=count)
        except RedisError as exc:
            raise TableError(f"read usage failed: {exc}") from exc
        out: list[dict[str, str]] = []
        for _, fields in reversed(entries or []):
            try:
                out.extend(usage_codec.decode({_s(k): _s(v) for k, v in (fields or {}).items()}))
            except ValueError:
                continue  # the consumer logs and drops such an entry
        return out


def now_s() -> float:
    """Wall-clock seconds (the only clock this module reads, for the CLI)."""
    return time.time()
