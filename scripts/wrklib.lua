-- Shared by the wrk scripts (ablate.lua, load.lua, scale.lua, nginxgate/wrk.lua), which
-- load it with dofile from the path their load script puts in WRK_LIB.
local lib = {}

-- stripe_event reads the ~1 KiB Stripe event at path (keying/testdata/
-- stripe_event.json) and cuts it around its top-level "id": a request's body
-- is head .. '"evt_…"' .. tail, a fresh id on every request keyed by it.
function lib.stripe_event(path)
  local f = assert(io.open(path, "rb"))
  local body = f:read("*a"):gsub("%s+$", "")
  f:close()
  local id = '"evt_a1b2c3d4e5f60100000042"'
  local at = assert(body:find(id, 1, true), "no sample id in the body")
  return body:sub(1, at - 1), body:sub(at + #id)
end

-- numbered_threads sets wrk's setup so that each thread has its number in
-- the global tid (keys are counted, not drawn: wrk's LuaJIT seeds
-- math.random alike in every run).
function lib.numbered_threads()
  local threads = 0
  function setup(thread)
    thread:set("tid", threads)
    threads = threads + 1
  end
end

return lib
