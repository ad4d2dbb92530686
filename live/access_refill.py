"""Refilling the access tables after Redis lost them (a restart or failover to an empty
server), from the system of record.

Schema (under ``{prefix}``, besides ``live.access_table``'s):

    store:filled      string  unix s of the last refill: its absence means Redis lost
                              what the store holds (no TTL, so volatile-* eviction
                              policies never remove it)

The whole refill is ONE Lua script (every key it writes declared, all under the access
tables' hash tag, so it runs on one node of a Redis Cluster too), so it happens completely
or not at all, and once only when several gateway replicas notice the loss together:
whoever runs first sets the sentinel, and the others' scripts find it and write nothing.

Spend is added to what the gateways counted since the loss when the usage stream's
consumer group is gone too (Redis lost everything); when the group survived (only some
keys were lost) a spend counter is only set where it is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from base.errors import TableError
from live.access_table import SPEND_TTL_S, AccessTables, KeyRecord, limit_fields
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


# KEYS[1] = sentinel, KEYS[2] = usage stream, KEYS[3..] = the keys the ops write.
# ARGV[1] = consumer group, ARGV[2] = sentinel value, then ops: when ('*' always, 'lost'
# if the usage group is gone too, 'kept' if it survived), command, key index, argument
# count, arguments. Returns 0 (sentinel present: nothing written) or 1.
_REFILL_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local lost = true
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[2])
if not groups.err then
  for _, g in ipairs(groups) do
    for i = 1, #g, 2 do
      if g[i] == 'name' and g[i + 1] == ARGV[1] then lost = false end
    end
  end
end
local i = 3
while i <= #ARGV do
  local when, n = ARGV[i], tonumber(ARGV[i + 3])
  if when == '*' or (when == 'lost') == lost then
    if n > 0 then
      redis.call(ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])], unpack(ARGV, i + 4, i + 3 + n))
    else
      redis.call(ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])])
    end
  end
  i = i + 4 + n
end
-- The usage group comes back only now (BUSYGROUP: it survived).
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


# KEYS[1] = sentinel, KEYS[2..] = spend counters; ARGV = the store's nano-USD for each,
# then the counters' TTL (s). Raises each counter to at least the store's figure, only
# while the sentinel says Redis holds the last refill (before it, the refill adds the
# store's spend itself). Returns how many counters were raised.
_RAISE_SPEND_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local raised = 0
for i = 2, #KEYS do
  local want = tonumber(ARGV[i - 1])
  if tonumber(redis.call('GET', KEYS[i]) or '0') < want then
    redis.call('SET', KEYS[i], ARGV[i - 1], 'EX', ARGV[#ARGV])
    raised = raised + 1
  end
end
return raised
"""


class _Ops:
    """The refill script's keys and ops, built in process."""

    def __init__(self, sentinel: str, stream: str) -> None:
        self.keys = [sentinel, stream]
        self._index: dict[str, int] = {}
        self.args: list[str] = []

    def add(self, when: str, command: str, key: str, *args: object) -> None:
        index = self._index.get(key)
        if index is None:
            self.keys.append(key)
            index = self._index[key] = len(self.keys)
        self.args += [when, command, str(index), str(len(args)), *(str(a) for a in args)]


class AccessRefill:
    """The sentinel and the refill script of one prefix's access tables."""

    def __init__(self, tables: AccessTables, group: str = DEFAULT_GROUP) -> None:
        self.tables = tables
        self.group = group
        self.sentinel = tables.key("store", "filled")
        self._script = tables.redis.register_script(_REFILL_LUA)
        self._raise = tables.redis.register_script(_RAISE_SPEND_LUA)

    async def filled(self) -> bool:
        """Whether Redis still holds the last refill (else it lost its data). Raises
        TableError."""
        try:
            return bool(await self.tables.redis.exists(self.sentinel))
        except RedisError as exc:
            raise TableError(f"reading the refill sentinel failed: {exc}") from exc

    async def last_refill(self) -> str | None:
        """The last refill's mark (unix s when it ran), None if Redis lost it: a change
        means another process refilled Redis since. Raises TableError."""
        try:
            value = await self.tables.redis.get(self.sentinel)
        except RedisError as exc:
            raise TableError(f"reading the refill sentinel failed: {exc}") from exc
        return None if value is None else value.decode() if isinstance(value, bytes) else str(value)

    def _ops(self, refill: Refill) -> _Ops:
        k = self.tables.key
        ops = _Ops(self.sentinel, k("usage"))
        for digest, record in refill.keys:
            key = k("key", digest)
            ops.add("*", "HSET", key, "id", record.id, "tenant", record.tenant,
                    "name", record.name, "created_s", f"{record.created_s:.3f}",
                    "expires_s", f"{record.expires_s:.3f}")  # fmt: skip
            # A revocation only ever spreads: a key Redis has as revoked stays revoked,
            # whatever an older read of the store said.
            if record.revoked:
                ops.add("*", "HSET", key, "revoked", "1")
            else:
                ops.add("*", "HSETNX", key, "revoked", "0")
            ops.add("*", "SET", k("keyid", record.id), digest)
            ops.add("*", "SADD", k("tenantkeys", record.tenant), record.id)
        for name, spec in refill.tenants.items():
            ops.add("*", "SET", k("tenant", name), spec.model_dump_json())
        for name in refill.deleted_tenants:
            ops.add("*", "DEL", k("tenant", name))
        for name, spec in refill.tenants.items():
            ops.add("*", "DEL", k("limits", name))
            fields = [x for item in limit_fields(spec).items() for x in item]
            ops.add("*", "HSET", k("limits", name), *fields)
        for (tenant, period), nusd in sorted(refill.spend.items()):
            skey = k("spend", tenant, period)
            # Lost with the usage group (Redis lost everything): added, not set, since
            # the gateways' flushes have counted the requests served since the loss
            # into the empty Redis, and the store has what came before.
            ops.add("lost", "INCRBY", skey, nusd)
            ops.add("lost", "EXPIRE", skey, SPEND_TTL_S)
            # The usage group survived, so Redis did not lose everything: a counter
            # that is there already includes what the store has (and more).
            ops.add("kept", "SET", skey, nusd, "NX", "EX", SPEND_TTL_S)
        return ops

    async def refill(self, refill: Refill, now_s: float) -> bool:
        """Write ``refill`` into Redis and set the sentinel, atomically, unless the
        sentinel is there (another replica refilled first). True if this call refilled.
        Raises TableError (then nothing was written)."""
        ops = self._ops(refill)
        try:
            done = await self._script(keys=ops.keys, args=[self.group, f"{now_s:.3f}", *ops.args])
        except RedisError as exc:
            raise TableError(f"refilling the access tables failed: {exc}") from exc
        return bool(done)

    async def raise_spend(self, spend: Mapping[tuple[str, str], int]) -> int:
        """Raise every spend counter of ``spend`` ((tenant, period id) -> nano-USD, what
        the store has recorded) to at least that figure; how many were raised.

        Redis counts spend before the store does (the gateways' flushes come first), so
        a counter below the store's figure was lost: evicted (maxmemory), or deleted,
        and then re-created by a flush from zero. Raising it, never adding, cannot count
        anything twice; what it misses is what the store has not consumed yet (the usage
        consumer's lag). A no-op until the refill after a total loss. Raises TableError.
        """
        if not spend:
            return 0
        items = sorted(spend.items())
        keys = [self.sentinel, *(self.tables.key("spend", t, p) for (t, p), _ in items)]
        args = [*(str(nusd) for _, nusd in items), str(SPEND_TTL_S)]
        try:
            return int(await self._raise(keys=keys, args=args))
        except RedisError as exc:
            raise TableError(f"raising lost spend counters failed: {exc}") from exc
