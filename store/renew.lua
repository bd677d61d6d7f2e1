-- Renew a claim. KEYS: the key's record. ARGV: token, lock TTL (ms).
-- Returns false when the token does not hold the claim.
local h = KEYS[1]
local now = now_ms()
local r = load(h, now)
if not held(r, ARGV[1], now) then
  return false
end
local ttl = tonumber(ARGV[2])
r[EXPIRES] = string.format('%d', now + ttl)
-- Never shorten the life of a record that keeps a journal.
save_for(h, r, ttl)
return 1
