-- Prepended to the scripts that extend a record's life (after clock.lua).

-- keep_for makes the record live at least ttl ms from now.
local function keep_for(h, nk, ak, ttl)
  if redis.call('PTTL', h) < ttl then
    -- As a string: Redis formats a Lua number argument with %.17g.
    local ms = string.format('%d', ttl)
    redis.call('PEXPIRE', h, ms)
    redis.call('PEXPIRE', nk, ms)
    redis.call('PEXPIRE', ak, ms)
  end
end
