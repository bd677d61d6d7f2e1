-- Keeps a missing item (catchup_redis.go). KEYS[1]: the scope's hash,
-- id → JSON; KEYS[2]: its sorted set, id by the item's update time (ms).
-- KEYS[3], on a single server only, the set of scopes that have one
-- (name_scope, scoped.lua). ARGV[1]: the id; ARGV[2]: the JSON; ARGV[3]:
-- the update time; ARGV[4]: the cap; ARGV[5]: the scope. The least
-- recently updated beyond the cap are dropped.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
  redis.call('HDEL', KEYS[1], unpack(old))
end
name_scope(2)
return 0
