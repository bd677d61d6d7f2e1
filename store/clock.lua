-- Prepended to every script that reads the clock.
-- now_ms: the Redis server's clock in milliseconds, so gateway instances
-- with skewed clocks agree.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

