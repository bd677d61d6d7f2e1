-- wrk script for scripts/load.sh. Every request is the same form-encoded
-- payment notification; the X-Order header carries the idempotency key, so
-- the gateway never parses a different body between cases (but in json mode,
-- the contract's ~1 KiB JSON notification).
--
--   LOAD_MODE=unique  a fresh key per request: <run>-t<thread>-<counter>
--   LOAD_MODE=fixed   one key for every request (the replay path)
--   LOAD_MODE=json    the ~1 KiB Stripe event at LOAD_BODY instead, a fresh
--                     top-level "id" per request (a route keyed on it)
--   LOAD_RUN          a per-run nonce, so keys of two runs never collide
--
-- done() prints one machine-readable LOAD_RESULT line for load.sh.

local mode = os.getenv("LOAD_MODE") or "unique"
local run = os.getenv("LOAD_RUN") or tostring(os.time())
local lib = dofile(os.getenv("WRK_LIB"))
lib.numbered_threads()

local head, tail
if mode == "json" then
  head, tail = lib.stripe_event(os.getenv("LOAD_BODY"))
end

function init(args)
  prefix = run .. "-t" .. tostring(tid) .. "-"
  n = 0
  wrk.method = "POST"
  if mode == "json" then
    wrk.headers["Content-Type"] = "application/json"
    return
  end
  wrk.body = "out_trade_no=load&trade_status=TRADE_SUCCESS&total_amount=9.90"
  wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
  if mode == "fixed" then
    wrk.headers["X-Order"] = run .. "-fixed"
    fixed = wrk.format()
  end
end

function request()
  if fixed then
    return fixed
  end
  n = n + 1
  if head then
    return wrk.format(nil, nil, nil, head .. '"evt_' .. prefix .. n .. '"' .. tail)
  end
  wrk.headers["X-Order"] = prefix .. n
  return wrk.format()
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "LOAD_RESULT requests=%.0f duration_us=%.0f p50_us=%.0f p99_us=%.0f non2xx=%.0f errors=%.0f\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
