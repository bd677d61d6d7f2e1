-- Reopen an answered key (a forced redelivery): the answer goes, the key is
-- free (state failed: the next claim wins) and the history stays for at
-- least ttl; its event is forgotten in its order. KEYS: the key's hash,
-- notification, attempts, order state. ARGV: ttl (ms), changed (ms), the
-- key's event in its order, then the index's (see index). Returns false
-- when the key has no answered record.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(4)
if redis.call('HGET', h, 'state') ~= 'answered' then
  return false
end
local ttl = tonumber(ARGV[1])
local pttl = redis.call('PTTL', h)
local keep = math.max(ttl, pttl)
redis.call('HSET', h, 'state', 'failed', 'expires', string.format('%d', now_ms() + keep),
  'changed', ARGV[2], 'body_cached', '0')
redis.call('HDEL', h, 'status', 'headers', 'body', 'dead')
redis.call('HDEL', KEYS[4], ARGV[3])
keep_for(h, nk, ak, keep)
return 1
