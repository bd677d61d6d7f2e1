-- Release a claim. KEYS[1]: the key's hash. ARGV: token, wake channel.
-- Returns false when the token does not hold the claim.
local v = redis.call('HMGET', KEYS[1], 'state', 'token')
if v[1] ~= 'in_flight' or v[2] ~= ARGV[1] then
  return false
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'r')
return 1
