-- Renew a claim. KEYS: the key's hash, notification, attempts.
-- ARGV: token, lock TTL (ms). Returns false when the token does not hold
-- the claim.
local h = KEYS[1]
local now = now_ms()
if not held(h, ARGV[1], now) then
  return false
end
local ttl = tonumber(ARGV[2])
redis.call('HSET', h, 'expires', string.format('%d', now + ttl))
-- Never shorten the life of a record that keeps a journal.
keep_for(h, KEYS[2], KEYS[3], ttl)
return 1
