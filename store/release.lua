-- Release a claim: the key is free, the record stays failed for ttl.
-- KEYS: the key's hash, notification, attempts.
-- ARGV: token, wake channel, ttl (ms; 0 forgets the key), changed (ms),
-- notification, attempt, dead ("1": the attempt ended the key's
-- deliveries, the record is marked dead; "" clears the mark), then the
-- index's (see index); the search entries, if any, end KEYS (see search).
-- Returns false when the token does not hold the claim.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(8)
local nsr, prefix = searched(h)
local now = now_ms()
local ttl = tonumber(ARGV[3])
local fields = {'state', 'failed', 'expires', string.format('%d', now + ttl), 'changed', ARGV[4]}
if ARGV[7] == '1' then
  fields[#fields + 1], fields[#fields + 2] = 'dead', '1'
end
if ttl <= 0 then
  if not held(h, ARGV[1], now) then
    return false
  end
  -- Nothing to keep: forget the key.
  redis.call('DEL', h, nk, ak)
elseif not settle(h, nk, ak, ARGV[1], now, fields, ARGV[5], ARGV[6], ARGV[3]) then
  return false
else
  if ARGV[7] ~= '1' then
    -- A claim clears the mark (claim.lua); one by a gateway from before
    -- the mark did not.
    redis.call('HDEL', h, 'dead')
  end
  search(h, prefix, nsr, ARGV[3])
end
redis.call('PUBLISH', ARGV[2], 'r')
return 1
