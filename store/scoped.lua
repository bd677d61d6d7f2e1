-- Prepended to a capped list's write (capped.go, Redis.writeScoped).
-- name_scope(n): names the scope (the script's last argument) in the set
-- of the scopes that have a list, passed as the key after the list's n
-- keys on a single server; on Cluster the set lives in another slot, the
-- caller adds the scope beside the script, and no such key is passed.
local function name_scope(n)
  if #KEYS > n then
    redis.call('SADD', KEYS[n + 1], ARGV[#ARGV])
  end
end
