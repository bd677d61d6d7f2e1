-- Prepended to the scripts that check a claim before they act (after
-- clock.lua).

-- held: does token own the live claim of hash h at now?
local function held(h, token, now)
  local v = redis.call('HMGET', h, 'state', 'token', 'expires')
  return v[1] == 'in_flight' and v[2] == token and tonumber(v[3]) > now
end
