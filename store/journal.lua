-- Shared by the scripts that settle a claim (prepended to them, after
-- clock.lua).
-- A helper names the record's field numbers (record.lua) as locals of its
-- own: a script's local that a helper names is an upvalue, which Lua
-- makes anew, with the helper, on every call of the script (~400 Redis
-- instructions each; journal and a settle helper named thirteen). The
-- numbers are the stored format's, which never changes.

-- journal keeps notif in record r (the first one only) and appends att
-- to its attempts; past 32 attempts the oldest is cut. Attempts are one
-- string of records, each behind a 2-byte big-endian length (a list costs
-- three times the memory for the usual one or two attempts).
local function journal(r, notif, att)
  local NA, NN, NOTIF, ATTS = 17, 18, 21, 22
  if notif ~= '' and not r[NOTIF] then
    -- nn: the record keeps a notification, so it outlives its claim.
    r[NOTIF], r[NN] = notif, '1'
  end
  if att ~= '' then
    r[ATTS] = (r[ATTS] or '') .. att
    -- inc's, without reading back the number it formats.
    local na = (tonumber(r[NA]) or 0) + 1
    r[NA] = string.format('%d', na)
    if na > 32 then
      -- The last 32 (in the helper itself: a helper it called would be
      -- one more closure and upvalue a call).
      local s, offs, i = r[ATTS], {}, 1
      while i <= #s do
        table.insert(offs, i)
        i = i + 2 + s:byte(i) * 256 + s:byte(i + 1)
      end
      if #offs > 32 then
        r[ATTS] = s:sub(offs[#offs - 31])
      end
    end
  end
end

-- A script settles a claim itself, not through a helper (whose calls of
-- load, journal and save would be three upvalues a call): it loads the
-- record (with its clock: load(h, now), load.lua), checks that its
-- token holds the claim (held), sets the fields
-- it settles, journals, clears the token (only a live claim's token is
-- ever compared) and saves the record with its ttl (the string the
-- script was given: Redis formats a Lua number argument with printf's
-- %.17g). The record with its journal is one value (record.lua): one GET
-- and one SET, where the hash and its two journal keys took five
-- commands.

-- remember records in order state os (a hash: event → its value, see
-- order_codec.go) that event ran, keeping os at least ttl ms.
local function remember(os, event, value, ttl)
  redis.call('HSET', os, event, value)
  if redis.call('PTTL', os) < ttl then
    redis.call('PEXPIRE', os, string.format('%d', ttl))
  end
end

-- index writes a settled key's list index entry in the settling script
-- itself, when the caller passes the index keys (a single server, where a
-- script may touch keys of any slot; on Cluster they go in a pipeline
-- beside it). It runs whatever the script then answers, as the pipeline
-- did: List checks entries against their records. KEYS[1] is the key's
-- record; KEYS[2]: the state's time bucket (redis_list.go), KEYS[3]: the
-- in-flight shard, KEYS[4]: the class registry (then the order state of a
-- script that writes one, and a completion's order indexes,
-- complete.lua; on Cluster the order state is KEYS[2]).
-- ARGV[i]: the entry, appended to the bucket ("" for none), ARGV[i + 1]:
-- the bucket's lifetime (ms), set when the entry creates it; then the
-- in-flight member to remove, the in-flight member to add and the class to
-- name, each "" or missing for none (the caller sends them up to the last
-- one set: each argument costs a script ~1.1k instructions, and they are
-- usually all empty). An APPEND costs the same whatever the store holds,
-- where a ZADD into a sorted set grew with it.
local function index(i)
  if #KEYS < 4 then
    return
  end
  local e, gone, kept, name = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if name and name ~= '' then
    redis.call('SADD', KEYS[4], name)
  end
  if e ~= '' and redis.call('APPEND', KEYS[2], e) == #e then
    redis.call('PEXPIRE', KEYS[2], ARGV[i + 1])
  end
  if gone and gone ~= '' then
    redis.call('ZREM', KEYS[3], gone)
  end
  if kept and kept ~= '' then
    redis.call('ZADD', KEYS[3], '0', kept)
  end
end

-- searched counts the search entries (search_redis.go) at the end of
-- KEYS, after the script's own (four, and a completion's order state
-- and indexes): keys named <prefix>:sr:…, the prefix being the hash's. It
-- returns their number and the prefix.
local function searched(h)
  if #KEYS < 5 then
    return 0, nil
  end
  local prefix = h:match('^(.*):{')
  local mark = prefix .. ':sr:'
  local n = 0
  while #KEYS - n >= 5 and KEYS[#KEYS - n]:sub(1, #mark) == mark do
    n = n + 1
  end
  return n, prefix
end

-- search files the settled key under the last n KEYS, its search
-- entries: each a string of "\n"-terminated hash names without the
-- prefix (once each, and no longer than 16 KiB), kept at least ttl ms.
local function search(h, prefix, n, ttl)
  if n == 0 then
    return
  end
  local entry = h:sub(#prefix + 2) .. '\n'
  for i = #KEYS - n + 1, #KEYS do
    local k = KEYS[i]
    local v = redis.call('GET', k)
    if not v or (#v < 16384 and not ('\n' .. v):find('\n' .. entry, 1, true)) then
      redis.call('APPEND', k, entry)
    end
    if redis.call('PTTL', k) < tonumber(ttl) then
      redis.call('PEXPIRE', k, ttl)
    end
  end
end
