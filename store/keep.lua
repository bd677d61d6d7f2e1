-- Prepended to the scripts that extend a record's life (after record.lua).

-- save_for writes r as h's record, live at least ttl ms from now.
local function save_for(h, r, ttl)
  if redis.call('PTTL', h) < ttl then
    save(h, r, string.format('%d', ttl))
  else
    save(h, r)
  end
end
