-- Shared by the scripts that settle a claim (prepended to them).
-- now_ms: the server's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- held: does token own the live claim of hash h at now?
local function held(h, token, now)
  local v = redis.call('HMGET', h, 'state', 'token', 'expires')
  return v[1] == 'in_flight' and v[2] == token and tonumber(v[3]) > now
end

-- journal keeps the notification (the first one only) and appends the
-- attempt (the last 32 kept), then gives both keys the hash's lifetime.
local function journal(h, nk, ak, notif, att)
  if notif ~= '' then
    redis.call('SET', nk, notif, 'NX')
  end
  if att ~= '' then
    redis.call('RPUSH', ak, att)
    redis.call('LTRIM', ak, -32, -1)
    redis.call('HINCRBY', h, 'na', 1)
  end
  local pttl = redis.call('PTTL', h)
  if pttl > 0 then
    redis.call('PEXPIRE', nk, pttl)
    redis.call('PEXPIRE', ak, pttl)
  end
end

-- keep_for makes the record live at least ttl ms from now.
local function keep_for(h, nk, ak, ttl)
  if redis.call('PTTL', h) < ttl then
    redis.call('PEXPIRE', h, ttl)
    redis.call('PEXPIRE', nk, ttl)
    redis.call('PEXPIRE', ak, ttl)
  end
end
