"""Refilling the access tables after Redis lost them (a restart or failover to an empty
server), from the system of record.

Schema (under ``{prefix}``, besides ``live.access_table``'s):

    store:filled      string  unix s of the last refill: its absence means Redis lost
                              what the store holds (no TTL, so volatile-* eviction
                              policies never remove it)

The whole refill is ONE Redis transaction (WATCH the sentinel, MULTI ... EXEC), so it
happens completely or not at all, and once only when several gateway replicas notice the
loss together: whoever commits first sets the sentinel, and the others' EXEC aborts.

Spend is added to what the gateways counted since the loss when the usage stream's
consumer group is gone too (Redis lost everything); when the group survived (only some
keys were lost) a spend counter is only set where it is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError, ResponseError, WatchError

from base.errors import TableError
from live.access_table import SPEND_TTL_S, AccessTables, KeyRecord
from live.redis_client import AnyPipeline
from live.usage_stream import DEFAULT_GROUP
from router.policy import TenantSpec


@dataclass(frozen=True)
class Refill:
    """What the store says Redis must hold.

    ``keys``: (SHA-256 hex, record) of every key; ``tenants``: the admin-API tenants,
    ``deleted_tenants`` the ones deleted through it; ``spend``: (tenant, period id) ->
    nano-USD the store has recorded in the current budget periods."""

    keys: Sequence[tuple[str, KeyRecord]] = ()
    tenants: Mapping[str, TenantSpec] = field(default_factory=dict)
    deleted_tenants: Sequence[str] = ()
    spend: Mapping[tuple[str, str], int] = field(default_factory=dict)


class AccessRefill:
    """The sentinel and the refill transaction of one prefix's access tables."""

    def __init__(self, tables: AccessTables, group: str = DEFAULT_GROUP) -> None:
        self.tables = tables
        self.group = group
        self.sentinel = tables.key("store", "filled")

    async def filled(self) -> bool:
        """Whether Redis still holds the last refill (else it lost its data). Raises
        TableError."""
        try:
            return bool(await self.tables.redis.exists(self.sentinel))
        except RedisError as exc:
            raise TableError(f"reading the refill sentinel failed: {exc}") from exc

    async def _group_exists(self, pipe: AnyPipeline) -> bool:
        try:
            groups = await pipe.xinfo_groups(self.tables.key("usage"))
        except ResponseError:  # no stream at all
            return False
        return any(
            (g.get("name") if isinstance(g.get("name"), str) else g["name"].decode()) == self.group
            for g in groups
        )

    def _queue(self, pipe: AnyPipeline, refill: Refill, now_s: float, *, lost_all: bool) -> None:
        k = self.tables.key
        for digest, record in refill.keys:
            key = k("key", digest)
            pipe.hset(key, mapping={
                "id": record.id, "tenant": record.tenant, "name": record.name,
                "created_s": f"{record.created_s:.3f}", "expires_s": f"{record.expires_s:.3f}",
            })  # fmt: skip
            # A revocation only ever spreads: a key Redis has as revoked stays revoked,
            # whatever an older read of the store said.
            if record.revoked:
                pipe.hset(key, "revoked", "1")
            else:
                pipe.hsetnx(key, "revoked", "0")
            pipe.set(k("keyid", record.id), digest)
            pipe.sadd(k("tenantkeys", record.tenant), record.id)
        for name, spec in refill.tenants.items():
            pipe.set(k("tenant", name), spec.model_dump_json())
        for name in refill.deleted_tenants:
            pipe.delete(k("tenant", name))
        self.tables.queue_limits(pipe, refill.tenants)
        for (tenant, period), nusd in sorted(refill.spend.items()):
            skey = k("spend", tenant, period)
            if lost_all:
                # Added, not set: since the loss the gateways' flushes have counted the
                # requests served (into an empty Redis); the store has what came before.
                pipe.incrby(skey, nusd)
                pipe.expire(skey, SPEND_TTL_S)
            else:
                # The usage group survived, so Redis did not lose everything: a counter
                # that is there already includes what the store has (and more).
                pipe.set(skey, nusd, nx=True, ex=SPEND_TTL_S)
        # The usage group comes back only now: the consumer cannot have written anything
        # served after the loss into the store before the spend above was read from it.
        pipe.xgroup_create(k("usage"), self.group, id="0", mkstream=True)
        pipe.set(self.sentinel, f"{now_s:.3f}")

    async def refill(self, refill: Refill, now_s: float) -> bool:
        """Write ``refill`` into Redis and set the sentinel, atomically, unless the
        sentinel is there (another replica refilled first). True if this call refilled.
        Raises TableError (then nothing was written)."""
        try:
            async with self.tables.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(self.sentinel)
                if await pipe.exists(self.sentinel):
                    return False
                lost_all = not await self._group_exists(pipe)
                pipe.multi()  # type: ignore[no-untyped-call]  # untyped in redis-py
                self._queue(pipe, refill, now_s, lost_all=lost_all)
                results = await pipe.execute(raise_on_error=False)
        except WatchError:
            return False
        except RedisError as exc:
            raise TableError(f"refilling the access tables failed: {exc}") from exc
        for result in results:
            # BUSYGROUP: the stream and its group survived (only the sentinel was lost).
            if isinstance(result, ResponseError) and "BUSYGROUP" not in str(result):
                raise TableError(f"refilling the access tables failed: {result}")
        return True
