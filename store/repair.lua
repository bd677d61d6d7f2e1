-- Repair an answered record's order event (RepairOrderEvent). KEYS: the
-- key's record, its order's state (one slot: the state carries the order's
-- hash tag). ARGV: the key's event in its order, the record's changed
-- (ms, as Lookup read it), the order's remaining ttl (ms), the event's
-- value (order_codec.go). The event is written only while the record is
-- that answer (not purged, reopened or expired since it was read) and
-- the order does not remember the event: a later write wins.
-- Returns 1 when it wrote the event, else 0.
local h, os = KEYS[1], KEYS[2]
local r = load(h)
if not r or r[STATE] ~= 'answered' or r[CHANGED] ~= ARGV[2] or not tonumber(r[EXPIRES]) or
  tonumber(r[EXPIRES]) <= now_ms() then
  return 0
end
if redis.call('HSETNX', os, ARGV[1], ARGV[4]) == 0 then
  return 0
end
local ttl = tonumber(ARGV[3])
if redis.call('PTTL', os) < ttl then
  redis.call('PEXPIRE', os, ARGV[3])
end
return 1
