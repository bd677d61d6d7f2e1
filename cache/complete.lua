-- Complete a claim. KEYS: the key's hash, notification, attempts.
-- ARGV: token, status, headers, body, body_cached ("1"/"0"), ttl (ms), wake
-- channel, changed (ms), notification, attempt ("" for none), then the
-- index's (see index).
-- Returns false when the token does not hold the claim.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(11)
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
redis.call('PUBLISH', ARGV[7], 'c')
return 1
