"""The Lua side of the sandbox: one chunk run once per Lua state (see lua.py).

It captures every builtin it needs in locals (the chunk's own globals are wiped at its end), builds the
table scripts see as their globals and the read-only proxies that stand in for Valkey's read-only tables,
and returns the small API the Python side drives (compile, run, classify a reply, ...).

Valkey patches Lua itself to make tables read-only; stock Lua 5.1 cannot, so each protected table is an
empty proxy whose __index is the real table and whose __newindex raises "Attempt to modify a readonly
table", with rawset/rawget/next/pairs/ipairs/getmetatable/setmetatable/getfenv/setfenv made proxy-aware.
"""

PRELUDE = r"""
local py, KIND, V = ...
local type, error, tostring, tonumber, select, unpack = type, error, tostring, tonumber, select, unpack
local rawget, rawset, rawequal, next, pairs, ipairs = rawget, rawset, rawequal, next, pairs, ipairs
local setmetatable, getmetatable, setfenv, getfenv = setmetatable, getmetatable, setfenv, getfenv
local real_pcall, xpcall, loadstring, load, newproxy = pcall, xpcall, loadstring, load, newproxy
local assert, collectgarbage, gcinfo, _VERSION = assert, collectgarbage, gcinfo, _VERSION
local string, table, math, coroutine = string, table, math, coroutine
local str_byte, str_sub, str_format, str_gsub, str_rep = string.byte, string.sub, string.format, string.gsub, string.rep
local tconcat = table.concat
local floor, ceil, huge = math.floor, math.ceil, math.huge
local dbg_getinfo, dbg_sethook = debug.getinfo, debug.sethook
local os_clock = os.clock
local G0 = getfenv(1)
local INTERNAL = dbg_getinfo(1, "S").source
local READONLY = "Attempt to modify a readonly table"
local JSON_NULL = newproxy(false)
local IS_EVAL = KIND == "eval"

local py_sha1, py_log, py_setresp, py_setrepl = py.sha1, py.log, py.setresp, py.setrepl
local py_interrupt, py_rand, py_srand, py_bit, py_jdecode = py.interrupt, py.rand, py.srand, py.bit, py.jdecode
local py_register = py.register

-- errors raised by Python callbacks reach Lua as the Python exception; this gives back the Lua value
local py_unwrap = py.unwrap
local function unwrap(e)
  if type(e) == "userdata" and e ~= JSON_NULL then
    local v = py_unwrap(e)
    if v ~= nil then return v end
  end
  return e
end

-- read-only proxies -------------------------------------------------------------------------------
local real_of = setmetatable({}, {__mode = "k"})     -- proxy -> the table it stands for
local public_mt = setmetatable({}, {__mode = "k"})   -- proxy -> what getmetatable() shows for it

local function ro_newindex() error(READONLY, 2) end

local function readonly(t, index)
  local proxy = {}
  real_of[proxy] = t
  setmetatable(proxy, {__index = index or t, __newindex = ro_newindex})
  return proxy
end

local function nonexistent_msg(k)
  return "Script attempted to access nonexistent global variable '" .. tostring(k) .. "'"
end

-- a read-only table whose missing fields raise like a missing global (the library-load API)
local function strict(t)
  return readonly(t, function(_, k)
    local v = t[k]
    if v == nil then error(nonexistent_msg(k), 2) end
    return v
  end)
end

local function s_rawget(t, k) return rawget(real_of[t] or t, k) end
local function s_rawset(t, k, v)
  if real_of[t] then error(READONLY, 2) end
  return rawset(t, k, v)
end
local function s_next(t, k)
  local r = real_of[t]
  if r then return next(r, k) end
  return next(t, k)
end
local function s_pairs(t)
  if real_of[t] then return s_next, t, nil end
  return pairs(t)
end
local function s_ipairs(t)
  local r = real_of[t]
  if r then return ipairs(r) end
  return ipairs(t)
end
local function s_getmetatable(x)
  if real_of[x] then return public_mt[x] end
  return getmetatable(x)
end
local function s_setmetatable(t, mt)
  if real_of[t] then error(READONLY, 2) end
  return setmetatable(t, mt)
end
local ENV  -- what scripts see as _G (set below)
local function s_getfenv(f)
  local e
  if f == nil then e = getfenv(2)
  elseif type(f) == "number" and f > 0 then e = getfenv(f + 1)
  else e = getfenv(f) end
  if e == G0 then return ENV end
  return e
end
local function s_setfenv(f, t)
  if f == 0 or (type(f) == "function" and getfenv(f) == G0) then error(READONLY, 2) end
  if type(f) == "number" and f > 0 then f = f + 1 end
  return setfenv(f, t)
end

local function no_binary(s, chunkname)
  local name = chunkname or s
  if str_sub(name, 1, 1) == "@" or str_sub(name, 1, 1) == "=" then name = str_sub(name, 2)
  else name = '[string "' .. str_gsub(str_sub(name, 1, 40), "\n.*", "") .. '"]' end
  return nil, name .. ":1: unexpected symbol near '<\\27>'"
end
local function s_loadstring(s, chunkname)
  if type(s) == "string" and str_byte(s, 1) == 27 then return no_binary(s, chunkname) end
  local f, err = loadstring(s, chunkname)
  if f then setfenv(f, ENV) end
  return f, err
end
local function s_load(f, chunkname)
  if type(f) ~= "function" then return load(f, chunkname) end
  local parts, n = {}, 0
  while true do
    local piece = f()
    if piece == nil or piece == "" then break end
    if type(piece) ~= "string" then return nil, "reader function must return a string" end
    n = n + 1
    parts[n] = piece
  end
  return s_loadstring(tconcat(parts), chunkname or "=(load)")
end

-- the interrupt hook (SCRIPT KILL / FUNCTION KILL, FUNCTION LOAD timeout) --------------------------
local HOOK_COUNT = 100000
local hook_mask, hook_count, hook_on = "", HOOK_COUNT, false
local function interrupt_hook()
  -- only ever raise inside script code: never in this chunk's own functions (the run loop included)
  local where = dbg_getinfo(2, "S")
  if where and where.source == INTERNAL then return end
  local msg = py_interrupt()
  if msg then
    -- from now on every line raises, so a pcall in the script cannot swallow the kill for long
    hook_mask, hook_count = "l", 0
    dbg_sethook(interrupt_hook, "l")
    error({err = msg})
  end
end
local function set_hook()
  hook_mask, hook_count, hook_on = "", HOOK_COUNT, true
  dbg_sethook(interrupt_hook, "", HOOK_COUNT)
end
local function clear_hook()
  hook_on = false
  dbg_sethook()
end

local co_create, co_resume = coroutine.create, coroutine.resume
local function s_co_create(f)
  local co = co_create(f)
  if hook_on then dbg_sethook(co, interrupt_hook, hook_mask, hook_count) end
  return co
end
local function wrap_result(ok, ...)
  if ok then return ... end
  local e = unwrap((...))
  if type(e) == "string" then error(e, 2) end
  error(e, 0)
end
local function s_co_wrap(f)
  local co = s_co_create(f)
  return function(...) return wrap_result(co_resume(co, ...)) end
end

-- errors -------------------------------------------------------------------------------------------
local function err_handler(err)
  err = unwrap(err)
  local level = 2
  local i = dbg_getinfo(level, "nSl")
  while i and (i.what == "C" or i.source == INTERNAL) do
    level = level + 1
    i = dbg_getinfo(level, "nSl")
  end
  if type(err) ~= "table" then err = {err = "ERR " .. tostring(err)} end
  if i then
    rawset(err, "source", i.source)
    rawset(err, "line", i.currentline)
  end
  return err
end

-- valkey's pcall hands back the message of an error table ({err=...}) instead of the table
local function pcall_result(ok, ...)
  if ok then return true, ... end
  local e = unwrap((...))
  if type(e) == "table" then
    local s = rawget(e, "err")
    if type(s) == "string" or type(s) == "number" then return false, s end
  end
  return false, e
end
local function s_pcall(f, ...) return pcall_result(real_pcall(f, ...)) end

-- server.* ------------------------------------------------------------------------------------------
local server_call, server_pcall = py.call, py.pcall
local function sha1hex(...)
  if select("#", ...) ~= 1 then error({err = "ERR wrong number of arguments"}) end
  local s = ...
  if type(s) == "number" then s = tostring(s) end
  if type(s) ~= "string" then s = "" end
  return py_sha1(s)
end
local function push_error(s)
  -- luaPushErrorBuff: "-CODE msg" keeps its code, anything else gets ERR
  local code, msg = "ERR", s
  if str_sub(s, 1, 1) == "-" then
    local sp = string.find(s, " ", 1, true)
    if sp then code, msg = str_sub(s, 2, sp - 1), str_sub(s, sp + 1) else msg = str_sub(s, 2) end
  end
  msg = str_gsub(str_gsub(msg, "^[\r\n]+", ""), "[\r\n]+$", "")
  return {err = code .. " " .. msg}
end
local function error_reply(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then return {err = "ERR wrong number or type of arguments"} end
  if str_sub(s, 1, 1) ~= "-" then s = "-" .. s end
  return push_error(s)
end
local function status_reply(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then return {err = "ERR wrong number or type of arguments"} end
  return {ok = s}
end
local function log(...)
  local n = select("#", ...)
  if n < 2 then error({err = "ERR server.log() requires two arguments or more."}) end
  local level = ...
  if type(level) ~= "number" and tonumber(level) == nil then
    error({err = "ERR First argument must be a number (log level)."})
  end
  level = tonumber(level)
  if level < 0 or level > 3 then error({err = "ERR Invalid log level."}) end
  local parts, k = {}, 0
  for j = 2, n do
    local v = select(j, ...)
    if type(v) == "string" or type(v) == "number" then
      k = k + 1
      parts[k] = tostring(v)
    end
  end
  py_log(level, tconcat(parts, " "))
end
local function setresp(...)
  if select("#", ...) ~= 1 then error({err = "ERR server.setresp() requires one argument."}) end
  local msg = py_setresp(tonumber((...)) or 0)
  if msg then error({err = msg}) end
end
local function set_repl(...)
  if select("#", ...) ~= 1 then error({err = "ERR server.set_repl() requires one argument."}) end
  local msg = py_setrepl(tonumber((...)) or 0)
  if msg then error({err = msg}) end
end
local acl_check_cmd = py.acl

local function add_versions(t)
  t.REDIS_VERSION_NUM = V.REDIS_VERSION_NUM
  t.REDIS_VERSION = V.REDIS_VERSION
  t.VALKEY_VERSION_NUM = V.VALKEY_VERSION_NUM
  t.VALKEY_VERSION = V.VALKEY_VERSION
  t.SERVER_NAME = V.SERVER_NAME
end
local function add_log(t)
  t.log = log
  t.LOG_DEBUG, t.LOG_VERBOSE, t.LOG_NOTICE, t.LOG_WARNING = 0, 1, 2, 3
end

-- server.call / pcall / acl_check_cmd are Python callables (userdata to Lua); scripts see them as functions
local native = {[server_call] = true, [server_pcall] = true, [acl_check_cmd] = true}
local real_type = type
local function s_type(v)
  if native[v] then return "function" end
  return real_type(v)
end

local server = {call = server_call, pcall = server_pcall, setresp = setresp, sha1hex = sha1hex,
                error_reply = error_reply, status_reply = status_reply, set_repl = set_repl,
                REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
                acl_check_cmd = acl_check_cmd}
add_log(server)
add_versions(server)
if IS_EVAL then
  server.breakpoint = function() return false end
  server.debug = function() end
  server.replicate_commands = function() return true end
end

-- math.random / math.randomseed: Valkey's rand48, the same sequence on every platform -------------
local function checkint(fname, i, n, ...)
  local v = select(i, ...)
  local x = tonumber(v)
  if x == nil then
    local got = (i > n) and "no value" or type(v)
    error("bad argument #" .. i .. " to '" .. fname .. "' (number expected, got " .. got .. ")", 3)
  end
  if x >= 0 then return floor(x) end
  return ceil(x)
end
local function m_random(...)
  local n = select("#", ...)
  local r = py_rand()
  if n == 0 then return r end
  if n == 1 then
    local u = checkint("random", 1, n, ...)
    if u < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * u) + 1
  end
  if n == 2 then
    local l = checkint("random", 1, n, ...)
    local u = checkint("random", 2, n, ...)
    if l > u then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (u - l + 1)) + l
  end
  error("wrong number of arguments", 2)
end
local function m_randomseed(...)
  py_srand(checkint("randomseed", 1, select("#", ...), ...))
end

-- bit (LuaBitOp, computed in Python) -----------------------------------------------------------------
local function bitop(name)
  return function(...)
    local r, err = py_bit(name, select("#", ...), ...)
    if err then error(err, 2) end
    return r
  end
end
local bit = {}
for _, name in ipairs({"tobit", "bnot", "band", "bor", "bxor", "lshift", "rshift", "arshift", "rol", "ror",
                       "bswap", "tohex"}) do
  bit[name] = bitop(name)
end

-- cjson (encode here, decode in Python) -----------------------------------------------------------
local jcfg = {encode_max_depth = 1000, decode_max_depth = 1000, invalid = 0, precision = 14,
              sparse_convert = false, sparse_ratio = 2, sparse_safe = 10, keep_buffer = true}
local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['/'] = '\\/', ['\b'] = '\\b', ['\f'] = '\\f',
                 ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['\127'] = '\\u007f'}
for i = 0, 31 do
  local c = string.char(i)
  if not escapes[c] then escapes[c] = str_format("\\u%04x", i) end
end
local function jfail(msg) error(msg, 0) end
local function jnumber(n, what)
  if n ~= n or n == huge or n == -huge then
    if jcfg.invalid == 0 then jfail("Cannot serialise " .. what .. ": must not be NaN or Inf") end
    if jcfg.invalid == 2 then return "null" end
    if n ~= n then return "NaN" end
    if n > 0 then return "Infinity" end
    return "-Infinity"
  end
  return str_format("%." .. jcfg.precision .. "g", n)
end
local function jstring(s)
  return '"' .. (str_gsub(s, '[%c"\\/]', escapes)) .. '"'
end
local jvalue
local function jarray_length(t)
  local max, items = 0, 0
  for k in next, t do
    if type(k) == "number" and k >= 1 and floor(k) == k then
      if k > max then max = k end
      items = items + 1
    else
      return -1
    end
  end
  if jcfg.sparse_ratio > 0 and max > items * jcfg.sparse_ratio and max > jcfg.sparse_safe then
    if not jcfg.sparse_convert then jfail("Cannot serialise table: excessively sparse array") end
    return -1
  end
  return max
end
function jvalue(v, depth, buf, n)
  local t = type(v)
  if t == "string" then n = n + 1; buf[n] = jstring(v)
  elseif t == "number" then n = n + 1; buf[n] = jnumber(v, "number")
  elseif t == "boolean" then n = n + 1; buf[n] = v and "true" or "false"
  elseif t == "nil" or v == JSON_NULL then n = n + 1; buf[n] = "null"
  elseif t == "table" then
    depth = depth + 1
    if depth > jcfg.encode_max_depth then jfail("Cannot serialise, excessive nesting (" .. depth .. ")") end
    local len = jarray_length(v)
    if len > 0 then
      n = n + 1; buf[n] = "["
      for i = 1, len do
        if i > 1 then n = n + 1; buf[n] = "," end
        n = jvalue(rawget(v, i), depth, buf, n)
      end
      n = n + 1; buf[n] = "]"
    else
      n = n + 1; buf[n] = "{"
      local first = true
      for k, val in next, v do
        local kt = type(k)
        if not first then n = n + 1; buf[n] = "," end
        first = false
        if kt == "string" then n = n + 1; buf[n] = jstring(k)
        elseif kt == "number" then n = n + 1; buf[n] = '"' .. jnumber(k, "table") .. '"'
        else jfail("Cannot serialise table: table key must be a number or string") end
        n = n + 1; buf[n] = ":"
        n = jvalue(val, depth, buf, n)
      end
      n = n + 1; buf[n] = "}"
    end
  else
    jfail("Cannot serialise " .. t .. ": type not supported")
  end
  return n
end
local function jencode_all(v)
  local buf = {}
  jvalue(v, 0, buf, 0)
  return tconcat(buf)
end
local function json_encode(...)
  if select("#", ...) ~= 1 then error("bad argument #1 to 'encode' (expected 1 argument)", 2) end
  local ok, res = real_pcall(jencode_all, (...))
  if not ok then error(res, 2) end
  return res
end
local function json_decode(...)
  if select("#", ...) ~= 1 then error("bad argument #1 to 'decode' (expected 1 argument)", 2) end
  local s = ...
  if type(s) == "number" then s = tostring(s) end
  if type(s) ~= "string" then
    error("bad argument #1 to 'decode' (string expected, got " .. type(s) .. ")", 2)
  end
  local ok, res = py_jdecode(s, jcfg.decode_max_depth)
  if not ok then error(res, 2) end
  return res
end
local function jsetting(name, lo, hi)
  return function(v)
    if v ~= nil then
      v = tonumber(v)
      if v == nil or v < lo or v > hi then
        error("bad argument #1 to '" .. name .. "' (expected integer between " .. lo .. " and " .. hi .. ")", 2)
      end
      jcfg[name] = floor(v)
    end
    return jcfg[name]
  end
end
local cjson = {
  encode = json_encode, decode = json_decode, null = JSON_NULL, _NAME = "cjson", _VERSION = "2.1.0",
  encode_max_depth = jsetting("encode_max_depth", 1, 2147483647),
  decode_max_depth = jsetting("decode_max_depth", 1, 2147483647),
  encode_number_precision = function(v)
    if v ~= nil then
      v = tonumber(v)
      if v == nil or v < 1 or v > 14 then
        error("bad argument #1 to 'encode_number_precision' (expected integer between 1 and 14)", 2)
      end
      jcfg.precision = floor(v)
    end
    return jcfg.precision
  end,
  encode_keep_buffer = function(v) if v ~= nil then jcfg.keep_buffer = v and true or false end return jcfg.keep_buffer end,
  encode_invalid_numbers = function(v)
    if v ~= nil then
      if v == "null" then jcfg.invalid = 2 elseif v then jcfg.invalid = 1 else jcfg.invalid = 0 end
    end
    if jcfg.invalid == 2 then return "null" end
    return jcfg.invalid == 1
  end,
  decode_invalid_numbers = function(v) return true end,
  encode_sparse_array = function(convert, ratio, safe)
    if convert ~= nil then jcfg.sparse_convert = convert and true or false end
    if ratio ~= nil then jcfg.sparse_ratio = tonumber(ratio) or jcfg.sparse_ratio end
    if safe ~= nil then jcfg.sparse_safe = tonumber(safe) or jcfg.sparse_safe end
    return jcfg.sparse_convert, jcfg.sparse_ratio, jcfg.sparse_safe
  end,
}

-- the globals scripts see ---------------------------------------------------------------------------
local function copy(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end
local m = copy(math)
m.random, m.randomseed = m_random, m_randomseed
local co = copy(coroutine)
co.create, co.wrap = s_co_create, s_co_wrap
local function resume_result(ok, ...)
  if ok then return true, ... end
  return false, unwrap((...))
end
co.resume = function(c, ...) return resume_result(co_resume(c, ...)) end
local function s_xpcall(f, h)
  return xpcall(f, function(e) return h(unwrap(e)) end)
end

local R = {
  string = readonly(string), table = readonly(table), math = readonly(m), coroutine = readonly(co),
  os = readonly({clock = os_clock}), bit = readonly(bit), cjson = readonly(cjson),
  xpcall = s_xpcall, tostring = tostring, getfenv = s_getfenv, setmetatable = s_setmetatable, next = s_next,
  assert = assert, tonumber = tonumber, rawequal = rawequal, collectgarbage = collectgarbage,
  getmetatable = s_getmetatable, rawset = s_rawset, pcall = s_pcall, type = s_type, select = select,
  unpack = unpack, gcinfo = gcinfo, pairs = s_pairs, rawget = s_rawget, loadstring = s_loadstring,
  ipairs = s_ipairs, _VERSION = _VERSION, setfenv = s_setfenv, load = s_load, error = error,
  newproxy = newproxy,
}
local SERVER = readonly(server)
R.server, R.redis = SERVER, SERVER
if IS_EVAL then R.__redis__err__handler = err_handler end

ENV = {}
local CURRENT = R   -- functions: the library-load API while FUNCTION LOAD runs the library code
local env_mt = {
  __index = function(_, k)
    local v = CURRENT[k]
    if v == nil then error(nonexistent_msg(k), 2) end
    return v
  end,
  __newindex = ro_newindex,
}
setmetatable(ENV, env_mt)
real_of[ENV] = R
R._G = ENV
if IS_EVAL then
  public_mt[ENV] = readonly({__index = env_mt.__index})
else
  public_mt[ENV] = readonly({__index = readonly(R)})
end

local LIBAPI
if not IS_EVAL then
  local load_api = {register_function = function(...)
    local err = py_register(select("#", ...), ...)
    if err then error({err = err}) end
  end}
  add_log(load_api)
  add_versions(load_api)
  local api = strict(load_api)
  LIBAPI = {server = api, redis = api}
end

-- the API the Python side drives ---------------------------------------------------------------------
local function compile(body, chunkname)
  if str_byte(body, 1) == 27 then return no_binary(body, chunkname) end
  local f, err = loadstring(body, chunkname)
  if not f then return nil, err end
  setfenv(f, ENV)
  return f, false
end

local function run_eval(f, keys, argv, hook)
  R.KEYS, R.ARGV = keys, argv
  if hook then set_hook() end
  local ok, res = xpcall(f, err_handler)
  if hook then clear_hook() end
  return ok, res
end

local function run_function(f, keys, args, hook)
  if hook then set_hook() end
  local ok, res = xpcall(function() return f(keys, args) end, err_handler)
  if hook then clear_hook() end
  return ok, res
end

local function load_library(f, hook)
  CURRENT = LIBAPI
  if hook then set_hook() end
  local ok, err = real_pcall(f)
  if hook then clear_hook() end
  CURRENT = R
  return ok, unwrap(err)
end

-- one level of a Lua reply, the way luaReplyToServerReply looks at it (raw access only)
local function classify(t)
  local e = rawget(t, "err")
  if type(e) == "string" then return "err", e, 0 end
  local s = rawget(t, "ok")
  if type(s) == "string" then return "ok", s, 0 end
  local d = rawget(t, "double")
  if type(d) == "number" then return "double", d, 0 end
  local b = rawget(t, "big_number")
  if type(b) == "string" then return "big", b, 0 end
  local vs = rawget(t, "verbatim_string")
  if type(vs) == "table" then
    local fmt, str = rawget(vs, "format"), rawget(vs, "string")
    if type(fmt) == "string" and type(str) == "string" then return "verbatim", str, fmt end
  end
  local mp = rawget(t, "map")
  if type(mp) == "table" then
    local out, n = {}, 0
    for k, v in next, mp do
      out[n + 1], out[n + 2] = k, v
      n = n + 2
    end
    return "map", out, n
  end
  local st = rawget(t, "set")
  if type(st) == "table" then
    local out, n = {}, 0
    for k in next, st do
      n = n + 1
      out[n] = k
    end
    return "set", out, n
  end
  local out, j = {}, 1
  while true do
    local v = rawget(t, j)
    if v == nil then break end
    out[j] = v
    j = j + 1
  end
  return "array", out, j - 1
end

-- what luaExtractErrorInformation reads from an error object
local function error_info(e)
  if type(e) == "string" or type(e) == "number" then return "string", tostring(e), false, false end
  if type(e) ~= "table" then return "other", tostring(e), false, false end
  local msg, source, line = rawget(e, "err"), rawget(e, "source"), rawget(e, "line")
  if type(msg) == "number" then msg = tostring(msg) end
  if type(msg) ~= "string" then msg = nil end
  if type(source) ~= "string" and type(source) ~= "number" then source = nil end
  if type(line) ~= "string" and type(line) ~= "number" then line = nil end
  return "table", msg or false, source and tostring(source) or false, line and tostring(line) or false
end

local function memory() return collectgarbage("count") * 1024 end

-- lock the sandbox: the globals this chunk started with (the thread's globals, which only C code and lupa
-- read) are emptied but for debug.traceback, which lupa uses as its error handler
local traceback = debug.traceback
for k in next, G0 do rawset(G0, k, nil) end
G0.debug = {traceback = traceback}

return {compile = compile, run_eval = run_eval, run_function = run_function, load_library = load_library,
        classify = classify, error_info = error_info, memory = memory, null = JSON_NULL}
"""
