"""Lua scripts the live tables run inside Redis. They spell no key: every key arrives
in KEYS or as a prefix in ARGV from ``live.tables``."""

from __future__ import annotations

# Compare-and-set of a health record: write the fields only if ``version`` is still
# ARGV[2], and announce the change on channel ARGV[1] (a channel is not a key: Redis
# Cluster routes a script by its keys and broadcasts a PUBLISH to every node).
# Returns 1 if written, 0 if someone else won.
HEALTH_CAS_LUA = """
local v = redis.call('HGET', KEYS[1], 'version')
if (v or '0') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PUBLISH', ARGV[1], 'health')
return 1
"""

# Write (ARGV[2] 'set': field, value, ...) or delete (ARGV[2] 'del': fields) fields of
# the hash KEYS[1] and announce it on channel ARGV[1], in one round trip on any kind of
# Redis (a pipeline of HSET and PUBLISH cannot be sent to one node of a cluster).
ANNOUNCE_LUA = """
if ARGV[2] == 'del' then
  redis.call('HDEL', KEYS[1], unpack(ARGV, 3))
else
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
redis.call('PUBLISH', ARGV[1], KEYS[1])
return 1
"""

# A replica ejected by one gateway, for every gateway: KEYS[1] = the pool's ejections
# hash; ARGV: events channel, replica base URL, "<until unix ms> <reason>", expiry (unix
# ms). The hash expires whole once its latest ejection is over: the expiry only moves
# later (a hash without a TTL gets one). Compared on the server's own clock, not with
# PEXPIREAT's GT option, which Redis 6.2 does not have. Announced in the script, so that
# it is one command on any kind of Redis.
EJECT_LUA = """
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], 1000); ttl = 1000 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now + ttl < tonumber(ARGV[4]) then redis.call('PEXPIREAT', KEYS[1], ARGV[4]) end
redis.call('PUBLISH', ARGV[1], KEYS[1])
return 1
"""

# Admission of one request, atomically, in one round trip: the API key (unknown, revoked,
# expired), then the tenant's limits: requests/minute and tokens/minute token buckets
# and the spend budget of the current period. Every key is declared (Redis Cluster routes
# by them, and all share the access tables' hash tag): KEYS[1] = key record, and the
# tenant the caller expects the key to belong to (ARGV[3]): KEYS[2] = its limits,
# KEYS[3], KEYS[4] = its rpm and tpm buckets, KEYS[5..7] = its spend in the current
# hour, day and month. ARGV: now_ms, estimated tokens, expected tenant.
# Returns {code, tenant, retry_after_ms, key_id, expires_s}; codes: 0 admitted,
# 1 unknown key, 2 revoked, 3 expired, 4 over RPM, 5 over TPM, 6 budget exhausted,
# 7 the key belongs to another tenant than expected (call again with its keys).
ADMIT_LUA = """
local now, est = tonumber(ARGV[1]), tonumber(ARGV[2])
local key = redis.call('HMGET', KEYS[1], 'tenant', 'revoked', 'expires_s', 'id')
local tenant, revoked, expires, key_id = key[1], key[2], tonumber(key[3] or '0'), key[4] or ''
if not tenant then return {1, '', 0, '', 0} end
if revoked == '1' then return {2, tenant, 0, key_id, expires} end
if expires > 0 and expires * 1000 <= now then return {3, tenant, 0, key_id, expires} end
if tenant ~= ARGV[3] then return {7, tenant, 0, key_id, expires} end
local lim = redis.call('HMGET', KEYS[2], 'rpm', 'tpm', 'budget_nusd', 'period')
local function bucket(k, limit, cost, need)
  local st = redis.call('HMGET', k, 'tokens', 'ts')
  local rate = limit / 60000.0
  local tokens = tonumber(st[1] or limit)
  local ts = tonumber(st[2] or now)
  tokens = math.min(limit, tokens + (now - ts) * rate)
  need = need or cost
  if tokens < need then
    return math.ceil((need - tokens) / rate), tokens
  end
  return 0, tokens - cost
end
local writes = {}
if lim[1] then
  local wait, left = bucket(KEYS[3], tonumber(lim[1]), 1)
  if wait > 0 then return {4, tenant, wait, key_id, expires} end
  table.insert(writes, {KEYS[3], left})
end
if lim[2] then
  local limit = tonumber(lim[2])
  -- A request larger than the whole limit may start when the bucket is full; the bucket
  -- then goes into debt by the full estimate, which the refill pays back.
  local wait, left = bucket(KEYS[4], limit, est, math.min(est, limit))
  if wait > 0 then return {5, tenant, wait, key_id, expires} end
  table.insert(writes, {KEYS[4], left})
end
if lim[3] then
  local spend = KEYS[5]
  if lim[4] == 'day' then spend = KEYS[6] elseif lim[4] == 'month' then spend = KEYS[7] end
  local spent = tonumber(redis.call('GET', spend) or '0')
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

# Store an API key record atomically: KEYS[1] = key record, KEYS[2] = keyid:{id},
# KEYS[3] = tenantkeys:{tenant}; ARGV[1] = digest, ARGV[2] = key id, then the record's
# field, value pairs.
STORE_KEY_LUA = """
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[2])
return 1
"""
