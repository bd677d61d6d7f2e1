-- Claim one idempotency key. KEYS: the key's record, its order's state.
-- ARGV: token, fingerprint, lock TTL (ms), original key,
-- the key's event in its order, the gateway's clock (ms).
-- Returns {"won", <now ms>}; {"order", <the event's stored value>} when the
-- key has no record and its event ran in its order (nothing is written);
-- {"replayed", <the record>} for an answered key's copy; or {outcome,
-- <the record>} where outcome is "in_flight" or "conflict" (the state as
-- the script judged it), so a duplicate costs one round trip. The record
-- is its value as this copy left it (record.lua), one string.
local h = KEYS[1]
local v = redis.call('GET', h)
local r
if v then
  -- A replay, the commonest duplicate, reads and writes the record's
  -- first 15 values alone (through nr): the copy counted, the record as
  -- written its reply (the gateway reads replayFields of it; packing those
  -- apart cost more than sending the rest), the journal after them kept
  -- as it is, and no clock: when it was last seen is the gateway's time
  -- (ARGV[6]), as a SET claim's times are, and an answer's end is its
  -- key's. The full unpack and pack and TIME were ~18k of its ~100k Redis
  -- instructions, more with a journal.
  local off, k, st, status, hd, body, cached, fp, copies, conflicts, first, last, expires, changed, nf, nr =
    cmsgpack.unpack_limit(v, 15)
  if st == 'answered' and not (ARGV[2] ~= '' and fp and fp ~= '' and fp ~= ARGV[2]) then
    v = cmsgpack.pack(k, st, status, hd, body, cached, fp, string.format('%d', (tonumber(copies) or 0) + 1),
      conflicts, first, ARGV[6], expires, changed, nf, string.format('%d', (tonumber(nr) or 0) + 1)) ..
      string.sub(v, off + 1)
    redis.call('SET', h, v, 'KEEPTTL')
    return {'replayed', v}
  end
  r = {k, st, status, hd, body, cached, fp, copies, conflicts, first, last, expires, changed, nf, nr,
    select(2, cmsgpack.unpack_limit(v, 7, off))}
end
local nowms = now_ms()
local now = string.format('%d', nowms)
local ttl = tonumber(ARGV[3])
local st = r and r[STATE]
-- A claim made by a SET that no script has touched (record.lua).
local set = st == 'in_flight' and lock_end(h, r, nowms)
if set then
  -- A claim made by a SET, untouched (Redis.claimBySet): its maker asked
  -- the order in the same round trip and, when the event ran, lets the
  -- claim go. Copies that meet it meanwhile are answered as its maker
  -- will be, not held as in flight.
  local ran = redis.call('HGET', KEYS[2], ARGV[5])
  if ran then
    return {'order', ran}
  end
end
if st == 'in_flight' and tonumber(r[EXPIRES]) <= nowms then
  -- The claim ran out: the key is free, its journal (if any) stays.
  st = 'failed'
  if not r[NA] and not r[NN] then
    st = false -- nothing to keep: Redis is about to expire it
  end
end
if not st then
  local ran = redis.call('HGET', KEYS[2], ARGV[5])
  if ran then
    return {'order', ran}
  end
  -- A new record, in one SET (which also replaces what a claim that ran
  -- out left). It is the script's first write, which Redis refuses at
  -- maxmemory (noeviction): Redis judges memory at a script's first
  -- write only.
  -- Numbers go to Redis as strings: Redis formats a Lua number argument
  -- with printf's %.17g, and Lua's tostring with %.14g (~0.5 µs each; 3–5%
  -- of a first copy's Redis CPU in a profile).
  -- No conflicts until a conflict (false: it reads as 0).
  redis.call('SET', h, cmsgpack.pack(ARGV[4], 'in_flight', false, false, false, false,
    ARGV[2], '1', false, now, now, string.format('%d', nowms + ttl), now, '1',
    false, false, false, false, false, ARGV[1], false, false), 'PX', ARGV[3])
  return {'won', now}
end
if st == 'failed' then
  -- Free again: the claim wins and the history stays.
  r[STATE], r[TOKEN], r[LAST], r[CHANGED] = 'in_flight', ARGV[1], now, now
  r[EXPIRES] = string.format('%d', nowms + ttl)
  inc(r, COPIES)
  inc(r, NF)
  if ARGV[2] ~= '' then
    r[FP] = ARGV[2]
  end
  -- Live again (a redelivery): only this claim's own settle may mark the
  -- key dead (release.lua).
  r[DEAD] = false
  save_for(h, r, ttl)
  return {'won', now}
end
local fp = r[FP]
local outcome
if ARGV[2] ~= '' and fp and fp ~= '' and fp ~= ARGV[2] then
  inc(r, CONFLICTS)
  outcome = 'conflict'
else
  -- In flight (an answered key's copy was replayed above, unless it
  -- conflicts).
  r[LAST] = now
  inc(r, COPIES)
  inc(r, NI)
  outcome = st
end
-- The record as written: the gateway reads claimFields of it (not the
-- answer, which such a copy never gets).
return {outcome, save(h, r)}
