-- Release a claim: the key is free, the record stays failed for ttl.
-- KEYS: the key's record, then on a single server the index's three (see
-- index; not without a ttl).
-- ARGV: token, wake channel, ttl (ms; 0 forgets the key), changed (ms),
-- notification, attempt, dead ("1": the attempt ended the key's
-- deliveries, the record is marked dead; "" clears the mark: a claim
-- clears it too, claim.lua), then the index's (see index); the search
-- entries, if any, end KEYS (see search).
-- Returns false when the token does not hold the claim.
local h = KEYS[1]
index(8)
local nsr, prefix = searched(h)
local now = now_ms()
local ttl = tonumber(ARGV[3])
if ttl <= 0 then
  if not held(load(h, now), ARGV[1], now) then
    return false
  end
  -- Nothing to keep: forget the key.
  redis.call('DEL', h)
else
  -- Settled as journal.lua tells.
  local r = load(h, now)
  if not held(r, ARGV[1], now) then
    return false
  end
  r[STATE], r[EXPIRES], r[CHANGED] = 'failed', string.format('%d', now + ttl), ARGV[4]
  r[DEAD], r[TOKEN] = ARGV[7] == '1' and '1', false
  journal(r, ARGV[5], ARGV[6])
  save(h, r, ARGV[3])
  search(h, prefix, nsr, ARGV[3])
end
redis.call('PUBLISH', ARGV[2], 'r')
return 1
