-- wrk script for scripts/ablate.sh: a ~1 KiB Stripe event (keying/testdata/
-- stripe_event.json, path in ABLATE_BODY) with a fresh top-level "id" on every
-- request, so that on a route keyed by {idempotency.json.id} each request is a
-- first copy. ABLATE_RUN makes ids of two runs differ: wrk's LuaJIT seeds
-- math.random the same way in every run, so ids are counted, not drawn.

local lib = dofile(os.getenv("WRK_LIB"))
local head, tail = lib.stripe_event(os.getenv("ABLATE_BODY"))
local run = os.getenv("ABLATE_RUN") or tostring(os.time())
lib.numbered_threads()

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
