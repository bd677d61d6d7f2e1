-- The delivery queue's scripts, one scope's keys each (they share a hash
-- tag, hence a slot). KEYS, for every function:
--   1 due     ZSET key → due (ms)            waiting deliveries
--   2 items   HASH key → delivery blob       what to deliver (immutable)
--   3 meta    HASH key → "<token> <attempts> <started 0|1>"
--   4 leases  ZSET key → lease end (ms)      deliveries being delivered
--   5 owners  HASH key → lease token
--   6 starts  ZSET lease token → start (ms)  for the rate limit
--   7 paused  STRING
--   8 enq     ZSET key → enqueued (ms)       every queued delivery, oldest first
--   9 next    HASH key → "<enqueued ms> <blob>" enqueued again while leased:
--             what the lease's done queues (cleared when a lease starts or ends)
-- ARGV[1] names the function; the rest are its arguments.
local due, items, meta, leases, owners, starts, paused, enq, nxt =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local now = now_ms()
local fn = ARGV[1]

-- held: does lease hold key's delivery now?
local function held(key, lease)
  if redis.call('HGET', owners, key) ~= lease then
    return false
  end
  local e = redis.call('ZSCORE', leases, key)
  return e and tonumber(e) > now
end

-- get_meta and set_meta read and write key's "<token> <attempts> <started>".
local function get_meta(key)
  local m = redis.call('HGET', meta, key) or ''
  local token, attempts, started = string.match(m, '^(%S*) (%d+) ?(%d?)$')
  if started == nil or started == '' then
    started = '0'
  end
  return token or '', attempts or '0', started
end

local function set_meta(key, token, attempts, started)
  redis.call('HSET', meta, key, token .. ' ' .. attempts .. ' ' .. started)
end

-- forget removes every trace of key's delivery.
local function forget(key)
  redis.call('ZREM', leases, key)
  redis.call('HDEL', owners, key)
  redis.call('ZREM', due, key)
  redis.call('ZREM', enq, key)
  redis.call('HDEL', items, key)
  redis.call('HDEL', meta, key)
  redis.call('HDEL', nxt, key)
end

if fn == 'enqueue' then
  -- ARGV: key, blob, token, enqueued (ms)
  local key = ARGV[2]
  if redis.call('HEXISTS', items, key) == 1 then
    local _, attempts, started = get_meta(key)
    set_meta(key, ARGV[4], attempts, started)
    if redis.call('ZSCORE', leases, key) then
      -- Leased: kept for the lease's done, which would drop it otherwise.
      redis.call('HSET', nxt, key, ARGV[5] .. ' ' .. ARGV[3])
    end
    return 0
  end
  redis.call('HSET', items, key, ARGV[3])
  set_meta(key, ARGV[4], '0', '0')
  redis.call('ZADD', due, now, key)
  redis.call('ZADD', enq, ARGV[5], key)
  return 1
end

if fn == 'take' then
  -- ARGV: lease (ms), concurrency, rate, rate window (ms), lease token,
  -- idle wait (ms). Returns {wait ms} or {0, key, blob, meta}.
  local lease, conc, rate, window = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local idle = tonumber(ARGV[7])
  -- Leases that ran out: their taker is gone, the delivery is due now.
  -- A re-enqueue (next) only changed the token: the taker-over is told
  -- of the attempt started.
  for _, k in ipairs(redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)) do
    redis.call('ZREM', leases, k)
    redis.call('HDEL', owners, k)
    redis.call('HDEL', nxt, k)
    redis.call('ZADD', due, now, k)
  end
  if redis.call('EXISTS', paused) == 1 then
    return {idle}
  end
  if conc > 0 and redis.call('ZCARD', leases) >= conc then
    return {10}
  end
  if rate > 0 then
    redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - window)
    if redis.call('ZCARD', starts) >= rate then
      local oldest = redis.call('ZRANGE', starts, 0, 0, 'WITHSCORES')
      return {tonumber(oldest[2]) + window - now + 1}
    end
  end
  local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return {idle}
  end
  local key, at = first[1], tonumber(first[2])
  if at > now then
    return {math.min(at - now, idle)}
  end
  redis.call('ZREM', due, key)
  redis.call('ZADD', leases, now + lease, key)
  redis.call('HSET', owners, key, ARGV[6])
  redis.call('HDEL', nxt, key)
  if rate > 0 then
    redis.call('ZADD', starts, now, ARGV[6])
  end
  return {0, key, redis.call('HGET', items, key), redis.call('HGET', meta, key)}
end

if fn == 'start' then
  -- ARGV: key, lease token
  local key = ARGV[2]
  if not held(key, ARGV[3]) then
    return false
  end
  local token, attempts = get_meta(key)
  set_meta(key, token, attempts, '1')
  return 1
end

if fn == 'extend' then
  -- ARGV: key, lease token, lease (ms)
  if not held(ARGV[2], ARGV[3]) then
    return false
  end
  redis.call('ZADD', leases, now + tonumber(ARGV[4]), ARGV[2])
  return 1
end

-- end_lease: ends the lease on key if lease holds it.
local function end_lease(key, lease)
  if not held(key, lease) then
    return false
  end
  redis.call('ZREM', leases, key)
  redis.call('HDEL', owners, key)
  return true
end

-- take_next returns what was enqueued again while key was leased (nil if
-- nothing) and forgets it.
local function take_next(key)
  local n = redis.call('HGET', nxt, key)
  if not n then
    return nil
  end
  redis.call('HDEL', nxt, key)
  local sp = string.find(n, ' ', 1, true)
  return tonumber(string.sub(n, 1, sp - 1)), string.sub(n, sp + 1)
end

if fn == 'retry' then
  -- ARGV: key, lease token, due (ms), attempts
  local key = ARGV[2]
  if not end_lease(key, ARGV[3]) then
    return false
  end
  local at = ARGV[4]
  if take_next(key) then
    at = now -- enqueued again meanwhile: its new claim waits for no back-off
  end
  redis.call('ZADD', due, at, key)
  set_meta(key, (get_meta(key)), ARGV[5], '0')
  return 1
end

if fn == 'done' then
  -- ARGV: key, lease token
  local key = ARGV[2]
  if not end_lease(key, ARGV[3]) then
    return false
  end
  local enqueued, blob = take_next(key)
  if not enqueued then
    forget(key)
    return 1
  end
  -- Enqueued again while leased: a new delivery (its claim won the key
  -- after this one was settled), due now. The token is already its own.
  redis.call('HSET', items, key, blob)
  set_meta(key, (get_meta(key)), '0', '0')
  redis.call('ZADD', due, now, key)
  redis.call('ZADD', enq, enqueued, key)
  return 1
end

if fn == 'remove' then
  -- ARGV: key. Returns 1 when removed, 0 when not queued, -1 when a taker
  -- holds it now.
  local key = ARGV[2]
  if redis.call('HEXISTS', items, key) == 0 then
    return 0
  end
  local e = redis.call('ZSCORE', leases, key)
  if e and tonumber(e) > now then
    return -1
  end
  forget(key)
  return 1
end

if fn == 'pause' then
  redis.call('SET', paused, '1')
  return 1
end

if fn == 'resume' then
  redis.call('DEL', paused)
  return 1
end

return redis.error_reply('queue: unknown function ' .. tostring(fn))
