-- Complete a claim. KEYS: the key's hash, notification, attempts, its
-- order's state. ARGV: token, status, headers, body, body_cached ("1"/"0"),
-- ttl (ms), wake channel, changed (ms), notification, attempt ("" for
-- none), the key's event in its order, the order's ttl (ms; "" remembers
-- nothing), the event's value, then the index's (see index).
-- Returns false when the token does not hold the claim.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(14)
local now = now_ms()
if not held(h, ARGV[1], now) then
  return false
end
local ttl = tonumber(ARGV[6])
redis.call('HSET', h, 'state', 'answered', 'status', ARGV[2], 'headers', ARGV[3],
  'body', ARGV[4], 'body_cached', ARGV[5], 'expires', string.format('%d', now + ttl),
  'changed', ARGV[8])
redis.call('HDEL', h, 'token')
redis.call('PEXPIRE', h, ttl)
journal(h, nk, ak, ARGV[9], ARGV[10], ttl)
if ARGV[12] ~= '' then
  remember(KEYS[4], ARGV[11], ARGV[13], tonumber(ARGV[12]))
end
redis.call('PUBLISH', ARGV[7], 'c')
return 1
