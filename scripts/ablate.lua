-- wrk script for scripts/ablate.sh: a ~1 KiB Stripe event (keying/testdata/
-- stripe_event.json, path in ABLATE_BODY) with a fresh top-level "id" on every
-- request, so that on a route keyed by {idempotency.json.id} each request is a
-- first copy. ABLATE_RUN makes ids of two runs differ: wrk's LuaJIT seeds
-- math.random the same way in every run, so ids are counted, not drawn.

local f = assert(io.open(os.getenv("ABLATE_BODY"), "rb"))
local body = f:read("*a"):gsub("%s+$", "")
f:close()
local id = '"evt_a1b2c3d4e5f60100000042"'
local at = assert(body:find(id, 1, true), "no sample id in the body")
local head, tail = body:sub(1, at - 1), body:sub(at + #id)
local run = os.getenv("ABLATE_RUN") or tostring(os.time())
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local n = 0
local headers = { ["Content-Type"] = "application/json" }

function request()
  n = n + 1
  return wrk.format("POST", "/", headers,
    head .. '"evt_' .. run .. "_" .. tid .. "_" .. n .. '"' .. tail)
end

function done(summary)
  local e = summary.errors
  io.write(string.format("ABLATE_RESULT requests=%.0f non2xx=%.0f errors=%.0f\n",
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout))
end
