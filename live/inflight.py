"""Requests in flight, summed over every gateway replica at O(pools) per read.

Schema (under ``{prefix}``, one hash tag, so each call is one script on one node):

    {inflight}:shares   hash   gateway replica id -> JSON {pool id: requests in flight}
    {inflight}:sum      hash   pool id -> the sum of the live replicas' shares
    {inflight}:beats    zset   gateway replica id -> last flush, unix ms

A replica writes its absolute counts; the script moves the sum by the difference from
its previous share, so a read is one HGETALL of the sum whatever the number of replicas
(reading every share on every refresh made Redis work grow with replicas²). A replica
whose last flush is older than the cutoff is dead: the next flush or read takes its
share out of the sum. If eviction or a partial loss leaves the group incomplete, the
group is dropped and rebuilt from the next flush of each replica, never left skewed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from live.keyspace import tagged
from live.redis_client import AnyPipeline, RedisClient, queue_script

# KEYS: shares, sum, beats. ARGV: mode ('flush' | 'read' | 'release'), replica id,
# now ms, cutoff ms (heartbeats older than it are dead), JSON counts (flush).
# flush/release return nothing; read returns the sum without ARGV[2]'s own share, flat.
INFLIGHT_LUA = """
local shares, sum, beats = KEYS[1], KEYS[2], KEYS[3]
local mode, me = ARGV[1], ARGV[2]
local n = redis.call('EXISTS', shares, sum, beats)
if n > 0 and n < 3 then redis.call('DEL', shares, sum, beats) end
local function apply(json, sign)
  if not json then return end
  for pool, v in pairs(cjson.decode(json)) do
    if v ~= 0 then redis.call('HINCRBY', sum, pool, sign * v) end
  end
end
local dead = redis.call('ZRANGEBYSCORE', beats, '-inf', '(' .. ARGV[4])
for _, r in ipairs(dead) do
  apply(redis.call('HGET', shares, r), -1)
  redis.call('HDEL', shares, r)
  redis.call('ZREM', beats, r)
end
if mode == 'flush' then
  apply(redis.call('HGET', shares, me), -1)
  apply(ARGV[5], 1)
  redis.call('HSET', shares, me, ARGV[5])
  redis.call('ZADD', beats, ARGV[3], me)
  return 0
elseif mode == 'release' then
  apply(redis.call('HGET', shares, me), -1)
  redis.call('HDEL', shares, me)
  redis.call('ZREM', beats, me)
  return 0
end
local totals = {}
local flat = redis.call('HGETALL', sum)
for i = 1, #flat, 2 do totals[flat[i]] = tonumber(flat[i + 1]) end
local own = redis.call('HGET', shares, me)
if own then
  for pool, v in pairs(cjson.decode(own)) do totals[pool] = (totals[pool] or 0) - v end
end
local out = {}
for pool, v in pairs(totals) do
  table.insert(out, pool)
  table.insert(out, tostring(v))
end
return out
"""


class InflightTable:
    """The in-flight shares of one prefix. Methods queue on a caller's pipeline (the
    flush and the snapshot read), so in-flight costs no round trip of its own."""

    def __init__(self, redis: RedisClient, prefix: str) -> None:
        self.keys = [tagged(prefix, "inflight", t) for t in ("shares", "sum", "beats")]
        self._script = redis.register_script(INFLIGHT_LUA)

    async def queue_flush(
        self, pipe: AnyPipeline, replica_id: str, counts: Mapping[str, int], now_ms: int,
        ttl_ms: int,
    ) -> None:  # fmt: skip
        """Queue: ``replica_id`` has ``counts`` requests in flight (absolute, so a
        repeated flush is harmless) and is alive at ``now_ms``; replicas silent for
        ``ttl_ms`` leave the sum."""
        payload = orjson.dumps({k: int(v) for k, v in counts.items()}).decode()
        args = ["flush", replica_id, now_ms, now_ms - ttl_ms, payload]
        await queue_script(pipe, self._script, self.keys, args)

    async def queue_read(
        self, pipe: AnyPipeline, exclude_replica: str, now_ms: int, ttl_ms: int
    ) -> None:
        """Queue the read of the sum over live replicas, without ``exclude_replica``'s
        share (the reader adds its fresher local count); ``parse`` decodes the reply."""
        args = ["read", exclude_replica, now_ms, now_ms - ttl_ms, ""]
        await queue_script(pipe, self._script, self.keys, args)

    async def queue_release(self, pipe: AnyPipeline, replica_id: str, now_ms: int) -> None:
        """Queue the removal of ``replica_id``'s share (graceful shutdown). Idempotent."""
        # The cutoff 0 reaps nobody else: a release must not judge other replicas.
        await queue_script(pipe, self._script, self.keys, ["release", replica_id, now_ms, 0, ""])

    async def own(self, replica_id: str, redis: RedisClient) -> dict[str, int]:
        """``replica_id``'s last flushed share. Raises RedisError."""
        raw = await redis.hget(self.keys[0], replica_id)
        if not raw:
            return {}
        return {str(k): int(v) for k, v in orjson.loads(raw).items()}

    @staticmethod
    def parse(reply: Any) -> dict[str, float]:
        """Requests in flight per pool id from a ``queue_read`` reply."""
        flat = [x.decode() if isinstance(x, bytes) else str(x) for x in reply or []]
        return {flat[i]: float(flat[i + 1]) for i in range(0, len(flat), 2)}
