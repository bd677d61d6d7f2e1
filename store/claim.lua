-- Claim one idempotency key. KEYS: the key's hash, notification, attempts,
-- its order's state. ARGV: token, fingerprint, lock TTL (ms), original key,
-- the key's event in its order.
-- Returns {"won", <now ms>}; {"order", <the event's stored value>} when the
-- key has no record and its event ran in its order (nothing is written);
-- {"replayed", <what a replay needs, packed>} for an answered key's copy;
-- or {outcome, <the record's metadata in claimFields order, packed>} where
-- outcome is "in_flight" or "conflict", so a duplicate costs one round
-- trip. Packed: the fields as one MessagePack array (a missing one false),
-- one string, so the gateway reads one reply instead of one per field.
-- The HMGETs below name the fields in replayFields' and claimFields' order
-- (redis_record.go); TestClaimScriptFields holds them together.
local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
local nowms = now_ms()
local now = string.format('%d', nowms)
local ttl = tonumber(ARGV[3])
local st = redis.call('HGET', h, 'state')
if st == 'answered' then
  -- A replay, the commonest duplicate, reads only what it needs: 9 of the
  -- record's 18 fields, in replayFields' order (redis_record.go;
  -- TestClaimScriptFields), and this copy's time as a 10th. Reading and
  -- packing all 18 was 45% of an uncached replay's Redis instructions.
  -- A conflict (another fingerprint) reads the whole record below.
  local a = redis.call('HMGET', h, 'status', 'headers', 'body', 'body_cached',
    'fp', 'copies', 'first', 'expires', 'nr')
  -- Not a conflict: the test below, of the fingerprint read here.
  if not (ARGV[2] ~= '' and a[5] and a[5] ~= '' and a[5] ~= ARGV[2]) then
    a[6] = string.format('%d', (tonumber(a[6]) or 0) + 1)
    a[9] = string.format('%d', (tonumber(a[9]) or 0) + 1)
    redis.call('HSET', h, 'copies', a[6], 'nr', a[9], 'last', now)
    a[10] = now
    return {'replayed', cmsgpack.pack(a)}
  end
end
local r -- the record, for a key that has one
local stale = false -- a claim that ran out left its fields
if st then
  -- A copy in flight or in conflict, or a key free again: the record's
  -- metadata in one read, in claimFields' order (redis_record.go;
  -- TestClaimScriptFields), and its counters written back in one HSET.
  -- Not the answer, which such a copy never gets, nor the key, which the
  -- gateway has (each field named costs the script ~1.1k instructions,
  -- and a missing one a scan of the whole hash).
  r = redis.call('HMGET', h, 'state', 'fp', 'copies', 'conflicts', 'first',
    'last', 'expires', 'changed', 'nf', 'nr', 'ni', 'na', 'nn')
  if st == 'in_flight' and tonumber(r[7]) <= nowms then
    -- The claim ran out: the key is free, its journal (if any) stays.
    st = 'failed'
    if not r[12] and not r[13] then
      st, stale = false, true -- nothing to keep: Redis is about to expire it
    end
  end
end
if not st then
  local ran = redis.call('HGET', KEYS[4], ARGV[5])
  if ran then
    return {'order', ran}
  end
  -- A new record. Its first write is the HSET, which Redis refuses at
  -- maxmemory (noeviction): Redis judges memory at a script's first write
  -- only, so a DEL first would let every later write past the limit. What
  -- a claim that ran out left behind is cleared after it.
  -- Numbers go to Redis as strings: Redis formats a Lua number argument
  -- with printf's %.17g, and Lua's tostring with %.14g (~0.5 µs each; 3–5%
  -- of a first copy's Redis CPU in a profile).
  -- No conflicts field until a conflict: a missing one reads as 0 (in the
  -- scripts and in parseRecord, of this version and those before it), and
  -- a listpack finds a field by a scan of those before it, so every field
  -- written costs the claim and every later command on the hash (2.3% of
  -- a first copy's Redis instructions). last and changed could be left
  -- out the same way, for 1.6% more, but a gateway of an earlier version
  -- (a rolling upgrade) would read them as 1970: a failed key's platform
  -- retries estimated as spent.
  redis.call('HSET', h, 'key', ARGV[4], 'state', 'in_flight', 'token', ARGV[1],
    'fp', ARGV[2], 'copies', '1', 'first', now, 'last', now,
    'expires', string.format('%d', nowms + ttl), 'changed', now, 'nf', '1')
  if stale then
    local fresh = {key = true, state = true, token = true, fp = true, copies = true,
      first = true, last = true, expires = true, changed = true, nf = true}
    for _, f in ipairs(redis.call('HKEYS', h)) do
      if not fresh[f] then
        redis.call('HDEL', h, f)
      end
    end
  end
  redis.call('DEL', nk, ak)
  redis.call('PEXPIRE', h, ARGV[3])
  return {'won', now}
end
-- bump adds one to the record's field i (a counter) and returns it.
local function bump(i)
  r[i] = string.format('%d', (tonumber(r[i]) or 0) + 1)
  return r[i]
end
if st == 'failed' then
  -- Free again: the claim wins and the history stays.
  local f = {'state', 'in_flight', 'token', ARGV[1], 'last', now,
    'expires', string.format('%d', nowms + ttl), 'changed', now,
    'copies', bump(3), 'nf', bump(9)}
  if ARGV[2] ~= '' then
    f[#f + 1], f[#f + 2] = 'fp', ARGV[2]
  end
  redis.call('HSET', h, unpack(f))
  -- Live again (a redelivery): only this claim's own settle may mark the
  -- key dead (release.lua).
  redis.call('HDEL', h, 'dead')
  keep_for(h, nk, ak, ttl)
  return {'won', now}
end
local fp = r[2]
local outcome
if ARGV[2] ~= '' and fp and fp ~= '' and fp ~= ARGV[2] then
  redis.call('HSET', h, 'conflicts', bump(4))
  outcome = 'conflict'
else
  -- In flight (an answered key's copy was replayed above).
  r[6] = now
  redis.call('HSET', h, 'copies', bump(3), 'ni', bump(11), 'last', now)
  outcome = st
end
-- One MessagePack array (Redis's cmsgpack, in C): packing in Lua cost
-- more than the HMGET, a number formatted per field (an uncached replay's
-- Redis CPU 43 → 34 µs, BenchmarkStoreCPU/replay).
return {outcome, cmsgpack.pack(r)}
