-- wrk script for scripts/scale.sh. SCALE_CASE picks the request:
--   json     a ~1 KiB Stripe event (SCALE_BODY), a fresh top-level "id" each
--            time: every request a first copy on a route keyed on the id
--   jreplay  the same event with one id for the whole run (replays)
--   header   a small form notification, a fresh Idempotency-Key each time
-- SCALE_RUN makes keys of two runs differ: wrk's LuaJIT seeds math.random
-- alike in every run, so keys are counted, not drawn. SCALE_QUOTA (optional)
-- stops each thread after that many answers: the fill sends a known number
-- of first copies, not a duration's worth (a few more are cut off in flight
-- when a thread stops; the 2xx count is the figure). A stopped thread adds a
-- line to the file SCALE_DONE; the last of SCALE_THREADS to stop sends wrk
-- SIGINT, which ends its run there (wrk's main thread would otherwise sleep
-- out the whole -d duration).
local case = os.getenv("SCALE_CASE") or "json"
local run = os.getenv("SCALE_RUN") or tostring(os.time())
local quota = tonumber(os.getenv("SCALE_QUOTA") or "0")
local lib = dofile(os.getenv("WRK_LIB"))
lib.numbered_threads()

local head, tail
if case == "json" or case == "jreplay" then
  head, tail = lib.stripe_event(os.getenv("SCALE_BODY"))
end

local n, answers = 0, 0
local form = { ["Content-Type"] = "application/x-www-form-urlencoded" }
local json = { ["Content-Type"] = "application/json" }

function request()
  n = n + 1
  if case == "header" then
    form["Idempotency-Key"] = run .. "-" .. tid .. "-" .. n
    return wrk.format("POST", nil, form, "out_trade_no=" .. run .. "-" .. tid .. "-" .. n ..
      "&trade_status=TRADE_SUCCESS&total_amount=9.90")
  elseif case == "json" then
    return wrk.format("POST", nil, json, head .. '"evt_' .. run .. "_" .. tid .. "_" .. n .. '"' .. tail)
  end
  return wrk.format("POST", nil, json, head .. '"evt_' .. run .. '"' .. tail)
end

if quota > 0 then
  function response(status, headers, body)
    answers = answers + 1
    if answers == quota then
      wrk.thread:stop()
      local f = os.getenv("SCALE_DONE")
      -- The shell's parent is wrk itself; system() ignores SIGINT in wrk
      -- until the shell exits, hence the signal from a child left behind.
      os.execute(string.format("echo >>'%s'; [ $(wc -l <'%s') -ge %d ] && (sleep 0.1; kill -INT $PPID) >/dev/null 2>&1 &", f, f,
        tonumber(os.getenv("SCALE_THREADS"))))
    end
  end
end

function done(summary)
  local e = summary.errors
  io.write(string.format("SCALE_RESULT requests=%.0f duration_us=%.0f non2xx=%.0f errors=%.0f\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout))
end
