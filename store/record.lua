-- Prepended to the scripts that read or write a key's record (after
-- clock.lua).
-- A record is one string: its fields in recordFields' order (redis.go),
-- then the claim's token, the journal's notification and its attempts,
-- each a string or false when missing, as 22 MessagePack values one
-- after another (Redis's cmsgpack, in C, packs them as arguments and
-- unpacks them into a table constructor; a MessagePack array, packed
-- from a table, cost ~4k more Redis instructions a first copy and a
-- replay: cmsgpack walks the table first). One value, so its memory is
-- its bytes whatever Redis's encoding thresholds (a hash with one field
-- past hash-max-listpack-value, 64 bytes, such as a backend's headers,
-- took the hashtable encoding: 1,160 bytes for a tiny key), and one
-- Redis key per idempotency key where there were three (the hash, the
-- notification, the attempts), each ~100-170 bytes beside its value
-- (docs/performance.md, "A key's memory"). A record of the earlier
-- layout (a hash) makes GET fail with WRONGTYPE, which the store reports
-- as such (errOldLayout).
local KEY, STATE, STATUS, HEADERS, BODY, CACHED, FP, COPIES, CONFLICTS,
  FIRST, LAST, EXPIRES, CHANGED, NF, NR, NI, NA, NN, DEAD, TOKEN, NOTIF, ATTS =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22

-- lock_end makes the claim end of r, a record of h in flight, a time on
-- the server's clock. A claim the gateway made itself with SET NX (no
-- script: redis_claim.go) carries its token marked "~" and the gateway's
-- estimate of its end: its lock is the key's own life (PX), so it ends at
-- now plus the key's PTTL, whatever the gateway's clock said. The first
-- script to touch the record writes it so, the token unmarked.
-- It returns whether it did: the record is such a claim, untouched since.
local function lock_end(h, r, now)
  -- The field numbers as its own locals, the clock read here: a name
  -- from outside a helper is an upvalue Lua makes anew on every call
  -- (~400 Redis instructions each; see journal.lua).
  local EXPIRES, TOKEN = 12, 20
  local t = r[TOKEN]
  if t and string.byte(t, 1) == 126 then
    if not now then
      local c = redis.call('TIME')
      now = c[1] * 1000 + math.floor(c[2] / 1000)
    end
    r[TOKEN] = string.sub(t, 2)
    r[EXPIRES] = string.format('%d', now + redis.call('PTTL', h))
    return true
  end
  return false
end

-- inc adds one to the counter r[i] and returns it.
local function inc(r, i)
  r[i] = string.format('%d', (tonumber(r[i]) or 0) + 1)
  return r[i]
end

-- save writes r as h's record, with ttl ms to live (a string: Redis
-- formats a Lua number argument with printf's %.17g), or with the
-- lifetime h has when ttl is nil, and returns the value written.
local function save(h, r, ttl)
  local v = cmsgpack.pack(unpack(r))
  if ttl then
    redis.call('SET', h, v, 'PX', ttl)
  else
    redis.call('SET', h, v, 'KEEPTTL')
  end
  return v
end
