"""Lua scripts the live tables run inside Redis. They spell no key: every key arrives
in KEYS or as a prefix in ARGV from ``live.tables``."""

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

# Admission of one request, atomically, in one round trip: the API key (unknown, revoked,
# expired), then the tenant's limits: requests/minute and tokens/minute token buckets
# and the spend budget of the current period. Limits live in ``limits:{tenant}``.
# KEYS[1] = key record. ARGV: prefix, now_ms, estimated tokens, period ids (hour, day,
# month). Returns {code, tenant, retry_after_ms, key_id, expires_s}; codes: 0 admitted,
# 1 unknown key, 2 revoked, 3 expired, 4 over RPM, 5 over TPM, 6 budget exhausted.
ADMIT_LUA = """
local prefix, now, est = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local key = redis.call('HMGET', KEYS[1], 'tenant', 'revoked', 'expires_s', 'id')
local tenant, revoked, expires, key_id = key[1], key[2], tonumber(key[3] or '0'), key[4] or ''
if not tenant then return {1, '', 0, '', 0} end
if revoked == '1' then return {2, tenant, 0, key_id, expires} end
if expires > 0 and expires * 1000 <= now then return {3, tenant, 0, key_id, expires} end
local lim = redis.call(
  'HMGET', prefix .. ':limits:' .. tenant, 'rpm', 'tpm', 'budget_nusd', 'period')
local function bucket(name, limit, cost, need)
  local k = prefix .. ':bucket:' .. tenant .. ':' .. name
  local st = redis.call('HMGET', k, 'tokens', 'ts')
  local rate = limit / 60000.0
  local tokens = tonumber(st[1] or limit)
  local ts = tonumber(st[2] or now)
  tokens = math.min(limit, tokens + (now - ts) * rate)
  need = need or cost
  if tokens < need then
    return math.ceil((need - tokens) / rate), tokens, k
  end
  return 0, tokens - cost, k
end
local writes = {}
if lim[1] then
  local wait, left, k = bucket('rpm', tonumber(lim[1]), 1)
  if wait > 0 then return {4, tenant, wait, key_id, expires} end
  table.insert(writes, {k, left})
end
if lim[2] then
  local limit = tonumber(lim[2])
  -- A request larger than the whole limit may start when the bucket is full; the bucket
  -- then goes into debt by the full estimate, which the refill pays back.
  local wait, left, k = bucket('tpm', limit, est, math.min(est, limit))
  if wait > 0 then return {5, tenant, wait, key_id, expires} end
  table.insert(writes, {k, left})
end
if lim[3] then
  local period = ARGV[4]
  if lim[4] == 'day' then period = ARGV[5] elseif lim[4] == 'month' then period = ARGV[6] end
  local spent = tonumber(redis.call('GET', prefix .. ':spend:' .. tenant .. ':' .. period) or '0')
  if spent >= tonumber(lim[3]) then return {6, tenant, 0, key_id, expires} end
end
for _, w in ipairs(writes) do
  redis.call('HSET', w[1], 'tokens', w[2], 'ts', now)
  redis.call('PEXPIRE', w[1], 120000)
end
return {0, tenant, 0, key_id, expires}
"""

# Correct a TPM bucket by the difference between what admission charged (an estimate)
# and what the requests used. A bucket that has expired meanwhile is left alone: it is
# full again, and recreating it from the correction alone would empty it.
# KEYS[1] = bucket, KEYS[2] = limits; ARGV[1] = tokens to give back (negative: take).
TPM_CORRECT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0') + tonumber(ARGV[1])
local limit = tonumber(redis.call('HGET', KEYS[2], 'tpm') or '0')
if limit > 0 and t > limit then t = limit end
redis.call('HSET', KEYS[1], 'tokens', t)
return 1
"""
