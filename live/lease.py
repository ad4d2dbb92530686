"""A leader lease in Redis with a fencing token, for sidecars of which only one may act.

Schema (under ``{prefix}:{control}``, default prefix ``sr:v1``):

    lease:{name}         string  "{holder}|{token}", PX = the lease's TTL
    lease:{name}:fence   string  INCR counter: every new acquisition gets a larger token

The hash tag ``{control}`` is shared with every fenced write's data (the price table,
the autoscaler's state), so a fenced write is one script on one Redis Cluster node.

Acquiring is ``SET NX PX`` followed by ``INCR`` of the fence counter, in one Lua call;
renewing and releasing check that the lease still holds our exact "holder|token"
value, so a holder whose lease expired and went to someone else cannot extend or
delete the new holder's lease. Writers that must not act on a lost lease pass the
:class:`Fence` to a fenced write (``live.price_table``), which checks it atomically.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.exceptions import RedisError

from base.errors import TableError
from live.keyspace import tagged
from live.redis_client import RedisClient

# The hash tag of the lease keys and of the data fenced writes protect.
CONTROL = "control"

_ACQUIRE_LUA = """
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(string.sub(cur, string.len(ARGV[1]) + 2))
  end
  return false
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
return token
"""

_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class Fence:
    """Proof of leadership to check inside a write: the lease key must still hold ``value``."""

    key: str
    value: str
    token: int


class Lease:
    """One named lease, as seen by one ``holder`` (a stable id per sidecar process).

    ``ttl_ms`` bounds how long a crashed holder blocks the others; renew well within
    it (a third of it is usual). Every method raises TableError when Redis fails.
    """

    def __init__(
        self, redis: RedisClient, name: str, holder: str, ttl_ms: int, prefix: str = "sr:v1"
    ):
        if "|" in holder:
            raise ValueError("a lease holder id may not contain '|'")
        self.name = name
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.key = tagged(prefix, CONTROL, "lease", name)
        self._fence_key = tagged(prefix, CONTROL, "lease", name, "fence")
        self._acquire = redis.register_script(_ACQUIRE_LUA)
        self._renew = redis.register_script(_RENEW_LUA)
        self._release = redis.register_script(_RELEASE_LUA)
        self.token: int | None = None

    @property
    def fence(self) -> Fence | None:
        """The fence of the lease we hold, or None if we hold none."""
        if self.token is None:
            return None
        return Fence(self.key, f"{self.holder}|{self.token}", self.token)

    async def acquire(self) -> int | None:
        """Take the lease if it is free (or already ours): the fencing token, else None.

        A new acquisition always gets a token larger than any before it.
        """
        try:
            token = await self._acquire(
                keys=[self.key, self._fence_key], args=[self.holder, self.ttl_ms]
            )
        except RedisError as exc:
            raise TableError(f"lease {self.name}: acquire failed: {exc}") from exc
        self.token = int(token) if token is not None else None
        return self.token

    async def renew(self) -> bool:
        """Extend the lease by ``ttl_ms`` if we still hold it. False (and forget our
        token) if it expired or someone else holds it now."""
        fence = self.fence
        if fence is None:
            return False
        try:
            ok = await self._renew(keys=[self.key], args=[fence.value, self.ttl_ms])
        except RedisError as exc:
            raise TableError(f"lease {self.name}: renew failed: {exc}") from exc
        if not ok:
            self.token = None
        return bool(ok)

    async def release(self) -> bool:
        """Give the lease up if we hold it, so another holder need not wait for the TTL.
        Idempotent; True if a lease of ours was deleted."""
        fence = self.fence
        self.token = None
        if fence is None:
            return False
        try:
            return bool(await self._release(keys=[self.key], args=[fence.value]))
        except RedisError as exc:
            raise TableError(f"lease {self.name}: release failed: {exc}") from exc
