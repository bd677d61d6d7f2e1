-- Prepended after record.lua to the scripts that read a record with load
-- (claim.lua and complete.lua read it themselves, from a GET they already
-- made: a helper never called still costs its closure on every run).

-- load reads the record of h, or nil; now (the server's clock, ms), when
-- the caller has read it, spares lock_end a TIME. Its second result: the
-- record is a claim made by a SET that no script has touched (lock_end).
local function load(h, now)
  local s = redis.call('GET', h)
  if not s then
    return nil
  end
  local r = {cmsgpack.unpack(s)}
  if r[2] == 'in_flight' then -- STATE
    return r, lock_end(h, r, now)
  end
  return r, false
end
