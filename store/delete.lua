-- Delete a key whatever its state, and its event in its order. KEYS: the
-- key's hash, notification, attempts, order state. ARGV: wake channel, the
-- key's event in its order. Returns false when there was nothing: a
-- claim that ran out with no journal counts as nothing, as the claim script
-- and Lookup see it (a renewal with a shorter lock TTL leaves the hash
-- alive past the claim's end).
local h = KEYS[1]
local v = redis.call('HMGET', h, 'state', 'expires', 'na', 'nn')
local nowms = now_ms()
local gone = v[1] == 'in_flight' and tonumber(v[2]) <= nowms and not v[3] and not v[4]
local had = redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1
if (redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) == 0 or gone) and not had then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return false
end
-- The wake-up goes out first: a user who may not publish on the channel
-- stops the purge before it drops anything.
redis.call('PUBLISH', ARGV[1], 'd')
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
