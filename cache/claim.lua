-- Claim one idempotency key. KEYS[1]: the key's hash.
-- ARGV: token, fingerprint, lock TTL (ms), original key.
-- Returns {"won"}, or {outcome, <record fields in recordFields order>} where
-- outcome is "in_flight", "answered" or "conflict"; the answer fields are
-- only filled for "answered" so a duplicate costs one round trip.
local h = KEYS[1]
local t = redis.call('TIME')
local now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
local st = redis.call('HGET', h, 'state')
if not st then
  local ttl = tonumber(ARGV[3])
  redis.call('HSET', h, 'key', ARGV[4], 'state', 'in_flight', 'token', ARGV[1],
    'fp', ARGV[2], 'copies', 1, 'conflicts', 0, 'first', now, 'last', now,
    'expires', string.format('%d', tonumber(now) + ttl))
  redis.call('PEXPIRE', h, ttl)
  return {'won'}
end
local fp = redis.call('HGET', h, 'fp')
local outcome
if ARGV[2] ~= '' and fp and fp ~= '' and fp ~= ARGV[2] then
  redis.call('HINCRBY', h, 'conflicts', 1)
  outcome = 'conflict'
else
  redis.call('HINCRBY', h, 'copies', 1)
  redis.call('HSET', h, 'last', now)
  outcome = st
end
local r = redis.call('HMGET', h, 'key', 'state', 'status', 'headers', 'body',
  'body_cached', 'fp', 'copies', 'conflicts', 'first', 'last', 'expires')
if outcome ~= 'answered' then
  -- Metadata only: an in-flight or conflicting copy gets no answer.
  r[3], r[4], r[5], r[6] = false, false, false, false
end
table.insert(r, 1, outcome)
return r
