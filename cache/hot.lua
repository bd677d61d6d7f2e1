-- The hot answers' scripts (redis_hot.go); one of them is called at the end.

-- count: copies replayed from memory, counted in their record. KEYS[1]:
-- the key's hash. ARGV: the record's first-seen time (ms), the copies. A
-- record with another first-seen time is another record (the key was
-- purged and seen anew): the copies were not its own.
local function count()
  local h = KEYS[1]
  if redis.call('HGET', h, 'first') ~= ARGV[1] then
    return 0
  end
  redis.call('HINCRBY', h, 'copies', ARGV[2])
  redis.call('HINCRBY', h, 'nr', ARGV[2])
  redis.call('HSET', h, 'last', string.format('%d', now_ms()))
  return 1
end

-- beat: an instance's heartbeat in the registry, and its lease's ping on
-- the channel. KEYS[1]: the registry. ARGV: the instance's id, how long an
-- entry counts (ms; older ones go), the channel, the ping. The ping goes
-- out from the registry's server, as every block does (fence), so each
-- instance gets both in the order they were published, even through a
-- replica or another Cluster node.
local function beat()
  local now = now_ms()
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60 * tonumber(ARGV[2]))
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  return 1
end

-- fence: publish a block, then name the instances whose heartbeat is newer
-- than ARGV[3] ms. KEYS[1]: the registry. ARGV: the channel, the block.
local function fence()
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return redis.call('ZRANGEBYSCORE', KEYS[1], now_ms() - tonumber(ARGV[3]), '+inf')
end
