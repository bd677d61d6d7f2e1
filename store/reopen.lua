-- Reopen an answered key (a forced redelivery): the answer goes, the key is
-- free (state failed: the next claim wins) and the history stays for at
-- least ttl; its event is forgotten in its order. KEYS: the key's record,
-- on a single server the index's three (see index), its order's state.
-- ARGV: ttl (ms), changed (ms), the key's event in its order, then the
-- index's (see index).
-- Returns false when the key has no answered record.
local h = KEYS[1]
index(4)
local r = load(h)
if not r or r[STATE] ~= 'answered' then
  return false
end
local keep = math.max(tonumber(ARGV[1]), redis.call('PTTL', h))
r[STATE], r[EXPIRES], r[CHANGED], r[CACHED] = 'failed', string.format('%d', now_ms() + keep), ARGV[2], '0'
r[STATUS], r[HEADERS], r[BODY], r[DEAD] = false, false, false, false
save(h, r, string.format('%d', keep))
redis.call('HDEL', KEYS[#KEYS], ARGV[3])
return 1
