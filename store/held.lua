-- Prepended to the scripts that check a claim before they act (after
-- record.lua).

-- held: does token own the live claim of record r at now? (The field
-- numbers as its own locals: see journal.lua.)
local function held(r, token, now)
  local STATE, EXPIRES, TOKEN = 2, 12, 20
  return r ~= nil and r[STATE] == 'in_flight' and r[TOKEN] == token and tonumber(r[EXPIRES]) > now
end
