"""Lua scripts the live tables run inside Redis. They spell no key: every key arrives
in KEYS or as a prefix in ARGV from ``router.tables``."""

from __future__ import annotations

# EWMA over a batch of n observations with mean x: the same result as n single updates
# with an equal value, so flush batching does not change the estimate's time constant.
# Each estimate also records when it was last fed (ARGV[8], unix ms), so a reader can
# ignore one that no traffic has refreshed for a while.
EWMA_LUA = """
local alpha = tonumber(ARGV[1])
local function upd(field, n, mean)
  if n <= 0 then return end
  redis.call('HSET', KEYS[1], field .. '_at_ms', ARGV[8])
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

RTT_LUA = """
local cur = redis.call('HGET', KEYS[1], 'rtt_ms')
local x = tonumber(ARGV[2])
if cur then x = tonumber(cur) + tonumber(ARGV[1]) * (x - tonumber(cur)) end
redis.call('HSET', KEYS[1], 'rtt_ms', x)
return 1
"""

# Sum every live replica's in-flight share, server-side, in the same round-trip as the
# rest of the snapshot read. Replicas whose heartbeat is older than ARGV[1] are skipped,
# and so is ARGV[3], the reading replica, which adds its own fresher local count.
INFLIGHT_LUA = """
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

# Compare-and-set of a health record: write the fields only if ``version`` is still
# ARGV[1], and announce the change. Returns 1 if written, 0 if someone else won.
HEALTH_CAS_LUA = """
local v = redis.call('HGET', KEYS[1], 'version')
if (v or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PUBLISH', KEYS[2], 'health')
return 1
"""
