-- The nginx gate of scripts/nginxgate.sh: what an ops team would write by hand
-- instead of idemgate, with lua-nginx-module and one Redis. A key is claimed
-- with SET NX and an owner token; the claimant forwards the request and, on a
-- 2xx, stores the answer with the body's digest; later copies get the answer
-- back (422 if their body differs), a copy while the first is in flight a 409.
-- No journal, no renewal of the claim, no order state, no log line: the least
-- a gate does, so that idemgate's cost is read against a floor, not a straw man.
--
-- Redis is spoken over ngx.socket.tcp (RESP by hand) because Debian's nginx has
-- no lua-resty-redis; the pool keeps one connection per request in flight.
local cjson = require("cjson.safe")

local M = {}

local LOCK_MS = 30000        -- how long a claim holds if its owner dies
local ANSWER_MS = 86400000   -- how long an answer is replayed
local PREFIX = "peer:"

local function read_reply(sock)
  local line, err = sock:receive("*l")
  if not line then return nil, err end
  local kind, rest = line:sub(1, 1), line:sub(2)
  if kind == "+" then return rest end
  if kind == "-" then return nil, rest end
  if kind == ":" then return tonumber(rest) end
  if kind == "$" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
    local data, derr = sock:receive(n + 2)
    if not data then return nil, derr end
    return data:sub(1, n)
  end
  if kind == "*" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
    local out = {}
    for i = 1, n do
      local v, verr = read_reply(sock)
      if v == nil then return nil, verr end
      out[i] = v
    end
    return out
  end
  return nil, "bad reply: " .. line
end

local function command(sock, ...)
  local args = { ... }
  local buf = { "*", #args, "\r\n" }
  for i = 1, #args do
    local a = tostring(args[i])
    buf[#buf + 1] = "$"
    buf[#buf + 1] = #a
    buf[#buf + 1] = "\r\n"
    buf[#buf + 1] = a
    buf[#buf + 1] = "\r\n"
  end
  local ok, err = sock:send(buf)
  if not ok then return nil, err end
  return read_reply(sock)
end

-- Only the owner may store or drop its claim: a claim that expired and was
-- taken by another copy must not be overwritten by the slow first one.
local COMPLETE = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
  .. "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0"
local RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
  .. "return redis.call('DEL', KEYS[1]) end return 0"

-- EVALSHA spares Redis the script's digest on every call; EVAL loads it the
-- first time (and after a SCRIPT FLUSH).
local function hex(bin)
  return (bin:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
local SHA = { [COMPLETE] = hex(ngx.sha1_bin(COMPLETE)), [RELEASE] = hex(ngx.sha1_bin(RELEASE)) }

local function script(sock, body, ...)
  local res, err = command(sock, "EVALSHA", SHA[body], ...)
  if res == nil and err and err:find("NOSCRIPT", 1, true) then
    return command(sock, "EVAL", body, ...)
  end
  return res, err
end

local function finish(status, body)
  ngx.status = status
  ngx.print(body)
  return ngx.exit(status)
end

-- serve(mode, port): mode "header" keys on Idempotency-Key, "json" on the
-- body's top-level "id".
function M.serve(mode, port)
  ngx.req.read_body()
  local body = ngx.req.get_body_data() or ""
  local key
  if mode == "json" then
    local doc = cjson.decode(body)
    if type(doc) == "table" and type(doc.id) == "string" and doc.id ~= "" then key = doc.id end
  else
    key = ngx.var.http_idempotency_key
  end
  if not key or key == "" then return finish(400, "no idempotency key\n") end
  key = PREFIX .. mode .. ":" .. key
  local fp = ngx.md5(body)

  local sock = ngx.socket.tcp()
  sock:settimeouts(1000, 1000, 1000)
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return finish(502, "redis: " .. tostring(err) .. "\n") end

  -- One round trip claims or reads: SET NX GET (Redis >= 7.0) answers the old
  -- value when the key was held, nil when this copy won it.
  local token = "L" .. ngx.var.request_id
  local held, rerr = command(sock, "SET", key, token, "NX", "GET", "PX", LOCK_MS)
  if held == nil then return finish(502, "redis: " .. tostring(rerr) .. "\n") end

  if held ~= ngx.null then
    sock:setkeepalive(10000, 256)
    -- An answer is "A" .. fingerprint (32 hex) .. status (3 digits) .. body.
    if held:sub(1, 1) ~= "A" then return finish(409, "in flight\n") end
    if held:sub(2, 33) ~= fp then return finish(422, "same key, other body\n") end
    ngx.header["Idempotent-Replayed"] = "true"
    return finish(tonumber(held:sub(34, 36)), held:sub(37))
  end

  local res = ngx.location.capture("/_backend", { method = ngx.HTTP_POST, body = body })
  if res.status >= 200 and res.status < 300 then
    script(sock, COMPLETE, 1, key, token,
      "A" .. fp .. string.format("%03d", res.status) .. (res.body or ""), ANSWER_MS)
  else
    script(sock, RELEASE, 1, key, token)
  end
  sock:setkeepalive(10000, 256)
  return finish(res.status, res.body or "")
end

return M
