-- Delete a key whatever its state, and its event in its order. KEYS: the
-- key's record, then where an earlier layout kept its notification and
-- attempts (deleted too: a record of that layout, a hash, is purged like
-- any), order state. ARGV: wake channel, the key's event in its order.
-- Returns false when there was nothing: a claim that ran out with no
-- journal counts as nothing, as the claim script and Lookup see it (a
-- renewal with a shorter lock TTL leaves the record alive past the
-- claim's end).
local h = KEYS[1]
local s = redis.pcall('GET', h) -- an earlier layout's hash: an error reply
local gone = false
if type(s) == 'string' then
  local r, now = {cmsgpack.unpack(s)}, now_ms()
  if r[STATE] == 'in_flight' then
    lock_end(h, r, now)
  end
  gone = r[STATE] == 'in_flight' and tonumber(r[EXPIRES]) <= now and not r[NA] and not r[NN]
end
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
