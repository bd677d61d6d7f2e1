-- Keeps a refused notification (refused_redis.go). KEYS[1]: the scope's
-- list, newest first; KEYS[2], on a single server only, the set of scopes
-- that have one (name_scope, scoped.lua). ARGV[1]: the refusal's JSON,
-- without its time; ARGV[2]: the cap; ARGV[3]: the scope.
-- LPUSH first: at maxmemory it is refused before anything is written.
local now = string.format('%d', now_ms())
redis.call('LPUSH', KEYS[1], now .. ' ' .. ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
name_scope(1)
return now
