-- File a settled key under one search entry, beside the settling script
-- (Cluster: the entry lives on another node; see search_redis.go).
-- KEYS[1]: the entry. ARGV[1]: the key's hash name without the prefix,
-- "\n"-terminated; ARGV[2]: how long to keep the entry at least (ms).
-- The same as journal.lua's search, for one entry.
local k, entry = KEYS[1], ARGV[1]
local v = redis.call('GET', k)
if not v or (#v < 16384 and not ('\n' .. v):find('\n' .. entry, 1, true)) then
  redis.call('APPEND', k, entry)
end
if redis.call('PTTL', k) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', k, ARGV[2])
end
return 1
