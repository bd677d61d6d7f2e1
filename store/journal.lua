-- Shared by the scripts that settle a claim (prepended to them, after
-- clock.lua).

-- trim_attempts returns the last 32 of attempts. Attempts are one string
-- of records, each behind a 2-byte big-endian length (a list costs three
-- times the memory for the usual one or two attempts).
local function trim_attempts(s)
  local offs, i = {}, 1
  while i <= #s do
    table.insert(offs, i)
    i = i + 2 + s:byte(i) * 256 + s:byte(i + 1)
  end
  if #offs > 32 then
    return s:sub(offs[#offs - 31])
  end
  return s
end

-- journal keeps notif in record r (the first one only) and appends att
-- to its attempts; past 32 attempts the oldest is cut.
local function journal(r, notif, att)
  if notif ~= '' and not r[NOTIF] then
    -- nn: the record keeps a notification, so it outlives its claim.
    r[NOTIF], r[NN] = notif, '1'
  end
  if att ~= '' then
    r[ATTS] = (r[ATTS] or '') .. att
    if tonumber(inc(r, NA)) > 32 then
      r[ATTS] = trim_attempts(r[ATTS])
    end
  end
end

-- settle turns the claim token holds (at now) into fields (a flat list of
-- the record's field numbers and their values, record.lua), journals
-- notif and att and gives the record ttl ms (the string the caller was
-- given: Redis formats a Lua number argument with printf's %.17g); false
-- when token does not hold the claim. Its second result: whether a copy
-- has ever found the record in flight (ni), hence may wait on its wake
-- channel. The record with its journal is one value (record.lua): one
-- GET and one SET, where the hash and its two journal keys took five
-- commands.
local function settle(h, token, now, fields, notif, att, ttl)
  local r = load(h, now)
  if not r or r[STATE] ~= 'in_flight' or r[TOKEN] ~= token or tonumber(r[EXPIRES]) <= now then
    return false
  end
  for i = 1, #fields, 2 do
    r[fields[i]] = fields[i + 1]
  end
  journal(r, notif, att)
  -- Only a live claim's token is ever compared (held).
  r[TOKEN] = false
  save(h, r, ttl)
  return true, r[NI] ~= false
end

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
-- did: List checks entries against their records. KEYS[1..4] are the
-- key's own (hash, notification, attempts, order state: the hash's name
-- again for a script that leaves the order alone); KEYS[5]: the state's
-- time bucket (redis_list.go), KEYS[6]: the in-flight shard, KEYS[7]: the
-- class registry (a completion's order indexes follow, complete.lua).
-- ARGV[i]: the entry, appended to the bucket ("" for none), ARGV[i + 1]:
-- the bucket's lifetime (ms), set when the entry creates it; then the
-- in-flight member to remove, the in-flight member to add and the class to
-- name, each "" or missing for none (the caller sends them up to the last
-- one set: each argument costs a script ~1.1k instructions, and they are
-- usually all empty). An APPEND costs the same whatever the store holds,
-- where a ZADD into a sorted set grew with it.
local function index(i)
  if #KEYS < 7 then
    return
  end
  local e, gone, kept, name = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if name and name ~= '' then
    redis.call('SADD', KEYS[7], name)
  end
  if e ~= '' and redis.call('APPEND', KEYS[5], e) == #e then
    redis.call('PEXPIRE', KEYS[5], ARGV[i + 1])
  end
  if gone and gone ~= '' then
    redis.call('ZREM', KEYS[6], gone)
  end
  if kept and kept ~= '' then
    redis.call('ZADD', KEYS[6], '0', kept)
  end
end

-- searched counts the search entries (search_redis.go) at the end of
-- KEYS, after the script's own (seven, and a completion's order
-- indexes): keys named <prefix>:sr:…, the prefix being the hash's. It
-- returns their number and the prefix.
local function searched(h)
  if #KEYS < 8 then
    return 0, nil
  end
  local prefix = h:match('^(.*):{')
  local mark = prefix .. ':sr:'
  local n = 0
  while #KEYS - n >= 8 and KEYS[#KEYS - n]:sub(1, #mark) == mark do
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
