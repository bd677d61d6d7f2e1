-- Complete a claim. KEYS: the key's record; on a single server the
-- index's three (see index); its order's state when the completion
-- writes one. ARGV: token, the claim's record as its SET wrote it ("" when
-- unknown: redis_claim.go, setClaimToken), the answered record (all 22
-- values as this script would write them from that claim: Go packs it,
-- newAnsweredRecord), ttl (ms); then, with an order state, the key's
-- event in its order, the order's ttl (ms) and the event's value; then,
-- with KEYS[6] (a single server), the order's reconciliation indexes
-- (redis_order.go): KEYS[6] the day list, KEYS[7…] the ref keys, ARGV[8]
-- the day list's entry, ARGV[9] the event for the refs; then the index's
-- (see index); the search entries, if any, end KEYS (see search). The
-- order's three are not sent without one (each argument costs the script
-- ~1.1k instructions), so the index's start at ARGV[5], [8] or [10].
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
  index(10)
elseif order then
  index(8)
else
  index(5)
end
local ttl = ARGV[4]
-- A claim its SET made that nothing has touched since (every script that
-- reads a record in flight writes its lock's end, unmarking the token,
-- record.lua) is held while its key is here: its lock is the key's life.
-- Such a record, byte for byte, is the one the gateway packed the answer
-- from, so the answer goes in as packed: no unpacking and repacking of
-- 22 values, no clock (a journaled first copy's Redis instructions
-- 173k -> 91k). Any other record is settled value by value.
local s = redis.call('GET', h)
local r
if s and s == ARGV[2] then
  redis.call('SET', h, ARGV[3], 'PX', ttl)
else
  local now = now_ms()
  if s then
    r = {cmsgpack.unpack(s)}
    if r[STATE] == 'in_flight' then
      lock_end(h, r, now)
    end
  end
  if not held(r, ARGV[1], now) then
    return false
  end
  local a = {cmsgpack.unpack(ARGV[3])}
  r[STATE], r[STATUS], r[HEADERS], r[BODY], r[CACHED] = a[STATE], a[STATUS], a[HEADERS], a[BODY], a[CACHED]
  r[EXPIRES], r[CHANGED], r[TOKEN] = string.format('%d', now + tonumber(ttl)), a[CHANGED], false
  journal(r, a[NOTIF] or '', a[ATTS] or '')
  save(h, r, ttl)
end
if order then
  local ottl = tonumber(ARGV[6])
  remember(order, ARGV[5], ARGV[7], ottl)
  if oix then
    redis.call('RPUSH', KEYS[6], ARGV[8])
    redis.call('PEXPIRE', KEYS[6], ARGV[6])
    for i = 7, #KEYS - nsr do
      redis.call('APPEND', KEYS[i], ARGV[9])
      redis.call('PEXPIRE', KEYS[i], ARGV[6])
    end
  end
end
if order then
  search(h, prefix, nsr, ARGV[6])
else
  search(h, prefix, nsr, ttl)
end
-- Only a copy whose claim found the key in flight waits for this (the
-- claim counted it in ni before the copy subscribed, in one script): a
-- first copy nobody duplicated publishes nothing (PUBLISH and its call
-- from Lua were ~2–3 µs of Redis CPU on every first copy); a record
-- answered as packed had no such copy (it would have touched it).
if r and r[NI] then
  redis.call('PUBLISH', h .. ':wake', 'c')
end
return 1
