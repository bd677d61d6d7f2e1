-- wrk script for scripts/nginxgate.sh. PEER_CASE picks the request:
--   header   a small form body, a fresh Idempotency-Key per request
--   hreplay  the same, one key for the whole row (one first copy, then replays)
--   json     a ~1 KiB Stripe event (PEER_BODY), a fresh top-level "id" each time
--   jreplay  the same event with one id for the whole row
-- PEER_RUN makes keys of two rows differ: wrk's LuaJIT seeds math.random alike
-- in every run, so keys are counted, not drawn.
local case = os.getenv("PEER_CASE")
local run = os.getenv("PEER_RUN")
local lib = dofile(os.getenv("WRK_LIB"))
lib.numbered_threads()

local head, tail
if case == "json" or case == "jreplay" then
  head, tail = lib.stripe_event(os.getenv("PEER_BODY"))
end

local n = 0
local form = { ["Content-Type"] = "application/x-www-form-urlencoded" }
local json = { ["Content-Type"] = "application/json" }

function request()
  n = n + 1
  if case == "header" then
    form["Idempotency-Key"] = run .. "-" .. tid .. "-" .. n
    return wrk.format("POST", "/", form, "order=" .. n .. "&amount=9.90&status=paid")
  elseif case == "hreplay" then
    form["Idempotency-Key"] = run
    return wrk.format("POST", "/", form, "order=1&amount=9.90&status=paid")
  elseif case == "json" then
    return wrk.format("POST", "/", json, head .. '"evt_' .. run .. "_" .. tid .. "_" .. n .. '"' .. tail)
  end
  return wrk.format("POST", "/", json, head .. '"evt_' .. run .. '"' .. tail)
end

function done(summary)
  local e = summary.errors
  io.write(string.format("PEER_RESULT requests=%.0f non2xx=%.0f errors=%.0f\n",
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout))
end
