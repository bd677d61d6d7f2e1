-- Frees a lease its owner holds (catchup_redis.go). KEYS[1]: the lease;
-- ARGV[1]: the owner's token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0
