-- Complete a claim. KEYS: the key's record; on a single server the
-- index's three (see index); its order's state when the completion
-- writes one. ARGV: token, status, headers, body, body_cached ("1"/"0"),
-- ttl (ms), changed (ms), notification, attempt ("" for none); then, with
-- an order state, the key's event in its order, the order's ttl (ms) and
-- the event's value; then, with KEYS[6] (a single server), the order's
-- reconciliation indexes (redis_order.go): KEYS[6] the day list, KEYS[7…]
-- the ref keys, ARGV[13] the day list's entry,
-- ARGV[14] the event for the refs; then the index's (see index); the
-- search entries, if any, end KEYS (see search). The order's three are not
-- sent without one (each argument costs the script ~1.1k instructions), so
-- the index's start at ARGV[10], [13] or [15].
-- The wake channel is the hash's name and ":wake" (Redis.channel): one
-- argument fewer.
-- Returns false when the token does not hold the claim.
local h = KEYS[1]
-- The search entries (journal.lua's search) end KEYS, after all the rest.
local nsr, prefix = searched(h)
-- The order state: KEYS[2] on Cluster (no index keys: one key without
-- it), KEYS[5] on a single server (four without it).
local own = #KEYS - nsr
local order = own == 2 and KEYS[2] or own >= 5 and KEYS[5]
local oix = own >= 6
if oix then
  index(15)
elseif order then
  index(13)
else
  index(10)
end
local ttl = tonumber(ARGV[6])
local now = now_ms()
-- Settled as journal.lua tells.
local r = load(h, now)
if not held(r, ARGV[1], now) then
  return false
end
r[STATE], r[STATUS], r[HEADERS], r[BODY], r[CACHED] = 'answered', ARGV[2], ARGV[3], ARGV[4], ARGV[5]
r[EXPIRES], r[CHANGED], r[TOKEN] = string.format('%d', now + ttl), ARGV[7], false
journal(r, ARGV[8], ARGV[9])
save(h, r, ARGV[6])
if order then
  local ottl = tonumber(ARGV[11])
  remember(order, ARGV[10], ARGV[12], ottl)
  if oix then
    redis.call('RPUSH', KEYS[6], ARGV[13])
    redis.call('PEXPIRE', KEYS[6], ARGV[11])
    for i = 7, #KEYS - nsr do
      redis.call('APPEND', KEYS[i], ARGV[14])
      redis.call('PEXPIRE', KEYS[i], ARGV[11])
    end
  end
end
if order then
  search(h, prefix, nsr, ARGV[11])
else
  search(h, prefix, nsr, ARGV[6])
end
-- Only a copy whose claim found the key in flight waits for this (the
-- claim counted it in ni before the copy subscribed, in one script): a
-- first copy nobody duplicated publishes nothing (PUBLISH and its call
-- from Lua were ~2–3 µs of Redis CPU on every first copy).
if r[NI] then
  redis.call('PUBLISH', h .. ':wake', 'c')
end
return 1
