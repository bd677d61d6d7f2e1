-- Shared by the scripts that settle a claim (prepended to them, after
-- clock.lua).

-- trim_attempts keeps the last 32 of the attempts in ak. Attempts are
-- one string of records, each behind a 2-byte big-endian length (a list
-- costs three times the memory for the usual one or two attempts).
local function trim_attempts(ak)
  local s = redis.call('GET', ak)
  local offs, i = {}, 1
  while i <= #s do
    table.insert(offs, i)
    i = i + 2 + s:byte(i) * 256 + s:byte(i + 1)
  end
  if #offs > 32 then
    redis.call('SET', ak, s:sub(offs[#offs - 31]))
  end
end

-- settle turns the claim token holds (at now) into fields (a flat
-- field/value list for HSET), journals notif and att as journal does and
-- gives the record and its journal ttl ms (the string the caller was
-- given: Redis formats a Lua number argument with printf's %.17g); false when token
-- does not hold the claim. Its second result: whether a copy has ever
-- found the record in flight (ni), hence may wait on its wake channel. The
-- journal's counters go in the one HSET and its keys are written with
-- their lifetime (SET … PX): a first completion runs 5 commands where
-- HSET, then journal and HDEL, ran 11.
local function settle(h, nk, ak, token, now, fields, notif, att, ttl)
  local v = redis.call('HMGET', h, 'state', 'token', 'expires', 'na', 'nn', 'ni')
  if v[1] ~= 'in_flight' or v[2] ~= token or tonumber(v[3]) <= now then
    return false
  end
  local na = tonumber(v[4]) or 0
  if notif ~= '' and not v[5] then
    -- nn: the record keeps a notification, so it outlives its claim.
    fields[#fields + 1], fields[#fields + 2] = 'nn', '1'
  end
  if att ~= '' then
    na = na + 1
    fields[#fields + 1], fields[#fields + 2] = 'na', string.format('%d', na)
  end
  -- The token is emptied in the same HSET (an HDEL was one more command;
  -- only a live claim's token is ever compared, see held).
  fields[#fields + 1], fields[#fields + 2] = 'token', ''
  redis.call('HSET', h, unpack(fields))
  redis.call('PEXPIRE', h, ttl)
  if notif ~= '' then
    -- The first notification only; a later one keeps it alive.
    if not redis.call('SET', nk, notif, 'NX', 'PX', ttl) then
      redis.call('PEXPIRE', nk, ttl)
    end
  elseif v[5] then
    redis.call('PEXPIRE', nk, ttl)
  end
  if na == 1 and att ~= '' then
    redis.call('SET', ak, att, 'PX', ttl)
  elseif na > 0 then
    if att ~= '' then
      redis.call('APPEND', ak, att)
      if na > 32 then
        trim_attempts(ak)
      end
    end
    redis.call('PEXPIRE', ak, ttl)
  end
  return true, v[6] ~= false
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
