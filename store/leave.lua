-- Leave a claim to run out at its lock (an ambiguous outcome), journaling
-- the attempt; the record is kept for ttl. KEYS: the key's hash,
-- notification, attempts. ARGV: token, ttl (ms), changed (ms),
-- notification, attempt, dead ("1" marks the record dead, "" clears the
-- mark: see release.lua), then the index's (see index). Returns false
-- when the token does not hold the claim.

-- journal keeps the notification (the first one only) and appends the
-- attempt, then gives both keys the hash's lifetime (pttl when the caller
-- has just set it, else read); past 32 attempts the oldest is cut.
local function journal(h, nk, ak, notif, att, pttl)
  if notif ~= '' then
    redis.call('SET', nk, notif, 'NX')
    -- nn: the record keeps a notification, so it outlives its claim.
    redis.call('HSET', h, 'nn', '1')
  end
  if att ~= '' then
    redis.call('APPEND', ak, att)
    if redis.call('HINCRBY', h, 'na', 1) > 32 then
      trim_attempts(ak)
    end
  end
  pttl = pttl or redis.call('PTTL', h)
  if pttl > 0 then
    local ms = string.format('%d', pttl)
    redis.call('PEXPIRE', nk, ms)
    redis.call('PEXPIRE', ak, ms)
  end
end

local h, nk, ak = KEYS[1], KEYS[2], KEYS[3]
index(7)
local now = now_ms()
if not held(h, ARGV[1], now) then
  return false
end
if ARGV[6] == '1' then
  redis.call('HSET', h, 'changed', ARGV[3], 'dead', '1')
else
  redis.call('HSET', h, 'changed', ARGV[3])
  redis.call('HDEL', h, 'dead')
end
keep_for(h, nk, ak, tonumber(ARGV[2]))
journal(h, nk, ak, ARGV[4], ARGV[5])
local nsr, prefix = searched(h)
search(h, prefix, nsr, ARGV[2])
return 1
