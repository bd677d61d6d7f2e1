-- Leave a claim to run out at its lock (an ambiguous outcome), journaling
-- the attempt; the record is kept for ttl. KEYS: the key's hash,
-- notification, attempts. ARGV: token, ttl (ms), changed (ms),
-- notification, attempt, then the index's (see index). Returns false when the token does not hold the claim.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(6)
local now = now_ms()
if not held(h, ARGV[1], now) then
  return false
end
redis.call('HSET', h, 'changed', ARGV[3])
keep_for(h, nk, ak, tonumber(ARGV[2]))
journal(h, nk, ak, ARGV[4], ARGV[5])
return 1
