-- Claim one idempotency key. KEYS: the key's hash, notification, attempts,
-- its order's state. ARGV: token, fingerprint, lock TTL (ms), original key,
-- the key's event in its order.
-- Returns {"won", <now ms>}; {"order", <the event's stored value>} when the
-- key has no record and its event ran in its order (nothing is written); or
-- {outcome, <record fields in recordFields order, packed>} where outcome is
-- "in_flight", "answered" or "conflict";
-- the answer fields are only filled for "answered" so a duplicate costs one
-- round trip. Packed: each field as <length>:<bytes> (a missing one empty),
-- one string, so the gateway reads one reply instead of one per field.
-- The HMGET below names the fields in recordFields' order (redis.go);
-- TestClaimScriptFields holds the two lists together.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
local nowms = now_ms()
local now = string.format('%d', nowms)
local ttl = tonumber(ARGV[3])
local st = redis.call('HGET', h, 'state')
local stale = false -- a claim that ran out left its fields
if st == 'in_flight' and tonumber(redis.call('HGET', h, 'expires')) <= nowms then
  -- The claim ran out: the key is free, its journal (if any) stays.
  st = 'failed'
  if not redis.call('HGET', h, 'na') and not redis.call('HGET', h, 'nn') then
    st, stale = false, true -- nothing to keep: Redis is about to expire it
  end
end
if not st then
  local ran = redis.call('HGET', KEYS[4], ARGV[5])
  if ran then
    return {'order', ran}
  end
  -- A new record. Its first write is the HSET, which Redis refuses at
  -- maxmemory (noeviction): Redis judges memory at a script's first write
  -- only, so a DEL first would let every later write past the limit. What
  -- a claim that ran out left behind is cleared after it.
  redis.call('HSET', h, 'key', ARGV[4], 'state', 'in_flight', 'token', ARGV[1],
    'fp', ARGV[2], 'copies', 1, 'conflicts', 0, 'first', now, 'last', now,
    'expires', string.format('%d', nowms + ttl), 'changed', now, 'nf', 1)
  if stale then
    local fresh = {key = true, state = true, token = true, fp = true, copies = true,
      conflicts = true, first = true, last = true, expires = true, changed = true, nf = true}
    for _, f in ipairs(redis.call('HKEYS', h)) do
      if not fresh[f] then
        redis.call('HDEL', h, f)
      end
    end
  end
  redis.call('DEL', nk, ak)
  redis.call('PEXPIRE', h, ttl)
  return {'won', now}
end
if st == 'failed' then
  -- Free again: the claim wins and the history stays.
  redis.call('HSET', h, 'state', 'in_flight', 'token', ARGV[1], 'last', now,
    'expires', string.format('%d', nowms + ttl), 'changed', now)
  if ARGV[2] ~= '' then
    redis.call('HSET', h, 'fp', ARGV[2])
  end
  redis.call('HINCRBY', h, 'copies', 1)
  redis.call('HINCRBY', h, 'nf', 1)
  keep_for(h, nk, ak, ttl)
  return {'won', now}
end
local fp = redis.call('HGET', h, 'fp')
local outcome
if ARGV[2] ~= '' and fp and fp ~= '' and fp ~= ARGV[2] then
  redis.call('HINCRBY', h, 'conflicts', 1)
  outcome = 'conflict'
else
  redis.call('HINCRBY', h, 'copies', 1)
  if st == 'answered' then
    redis.call('HINCRBY', h, 'nr', 1)
  else
    redis.call('HINCRBY', h, 'ni', 1)
  end
  redis.call('HSET', h, 'last', now)
  outcome = st
end
local r = redis.call('HMGET', h, 'key', 'state', 'status', 'headers', 'body',
  'body_cached', 'fp', 'copies', 'conflicts', 'first', 'last', 'expires',
  'changed', 'nf', 'nr', 'ni', 'na', 'nn')
if outcome ~= 'answered' then
  -- Metadata only: an in-flight or conflicting copy gets no answer.
  r[3], r[4], r[5], r[6] = false, false, false, false
end
for i = 1, #r do
  local v = r[i] or ''
  r[i] = #v .. ':' .. v
end
return {outcome, table.concat(r)}
