-- Takes or renews a lease (catchup_redis.go). KEYS[1]: the lease; ARGV[1]:
-- the owner's token; ARGV[2]: the ttl in ms. Returns 1 when the owner
-- holds it now, 0 when another does.
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
