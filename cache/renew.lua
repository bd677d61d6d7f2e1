-- Renew a claim. KEYS[1]: the key's hash. ARGV: token, lock TTL (ms).
-- Returns false when the token does not hold the claim.
local h = KEYS[1]
local v = redis.call('HMGET', h, 'state', 'token')
if v[1] ~= 'in_flight' or v[2] ~= ARGV[1] then
  return false
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', h, 'expires', string.format('%d', now + ttl))
redis.call('PEXPIRE', h, ttl)
return 1
