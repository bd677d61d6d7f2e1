-- Complete a claim. KEYS[1]: the key's hash.
-- ARGV: token, status, headers, body, body_cached ("1"/"0"), ttl (ms), wake channel.
-- Returns false when the token does not hold the claim.
local h = KEYS[1]
local v = redis.call('HMGET', h, 'state', 'token')
if v[1] ~= 'in_flight' or v[2] ~= ARGV[1] then
  return false
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[6])
redis.call('HSET', h, 'state', 'answered', 'status', ARGV[2], 'headers', ARGV[3],
  'body', ARGV[4], 'body_cached', ARGV[5], 'expires', string.format('%d', now + ttl))
redis.call('HDEL', h, 'token')
redis.call('PEXPIRE', h, ttl)
redis.call('PUBLISH', ARGV[7], 'c')
return 1
