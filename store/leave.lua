-- Leave a claim to run out at its lock (an ambiguous outcome), journaling
-- the attempt; the record is kept for ttl. KEYS: the key's record, then
-- on a single server the index's three (see index). ARGV: token, ttl
-- (ms), changed (ms), notification, attempt, dead ("1" marks the record
-- dead, "" clears the mark: see release.lua), then the index's (see
-- index). Returns false when the token does not hold the claim.
local h = KEYS[1]
index(7)
local now = now_ms()
local r = load(h, now)
if not held(r, ARGV[1], now) then
  return false
end
r[CHANGED], r[DEAD] = ARGV[3], ARGV[6] == '1' and '1'
journal(r, ARGV[4], ARGV[5])
save_for(h, r, tonumber(ARGV[2]))
local nsr, prefix = searched(h)
search(h, prefix, nsr, ARGV[2])
return 1
