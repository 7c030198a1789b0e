"""The Lua side of the sandbox: one chunk run once per Lua state (see lua.py).

It captures every builtin it needs in locals (the chunk's own globals are wiped at its end), builds the
table scripts see as their globals and the read-only proxies that stand in for Valkey's read-only tables,
and returns the small API the Python side drives (compile, run, classify a reply, ...).

Valkey patches Lua itself to make tables read-only (luaSetTableProtectionRecursively over everything
reachable from the globals, and since 8.0.6 the metatables of the basic types); stock Lua 5.1 cannot, so
each protected table is an empty proxy whose __index is the real table and whose __newindex raises "Attempt
to modify a readonly table". Every builtin that could reach a real table or write through a proxy is
replaced by a proxy-aware version (rawget, rawset, next, pairs, ipairs, getmetatable, setmetatable,
getfenv, setfenv, table.insert, ...); the string metatable's __index is the read-only string library and
getmetatable('') hands out a proxy of it; the metatable lupa gives Python objects (server.call) is never
handed out at all, as a C function has none.

Errors of the builtins replaced here are raised as the C originals raise them: argument errors name the
function as the caller spelled it and carry the caller's line (c_fail), and an error raised from inside a C
function in Valkey (lua_rawset on a read-only table, "table index is nil") carries no position at all.
A wrapper that is tail-called (`return rawset(...)`) still knows its caller's line: scripts are compiled
without tail calls (bytecode.py), as a call of Valkey's C functions never replaces the caller's frame.
"""

from .libs import LIBS_LUA

PRELUDE = r"""
local py, KIND, V = ...
local type, error, tostring, tonumber, select, unpack = type, error, tostring, tonumber, select, unpack
local rawget, rawset, rawequal, next, pairs, ipairs = rawget, rawset, rawequal, next, pairs, ipairs
local setmetatable, getmetatable, setfenv, getfenv = setmetatable, getmetatable, setfenv, getfenv
local real_pcall, xpcall, loadstring, load, newproxy = pcall, xpcall, loadstring, load, newproxy
local assert, collectgarbage, gcinfo, _VERSION = assert, collectgarbage, gcinfo, _VERSION
local string, table, math, coroutine = string, table, math, coroutine
local str_byte, str_sub, str_format, str_gsub, str_rep = string.byte, string.sub, string.format, string.gsub, string.rep
local tconcat, tinsert, tforeach = table.concat, table.insert, table.foreach
local floor, ceil, huge = math.floor, math.ceil, math.huge
local dbg_getinfo, dbg_sethook, dbg_getmetatable = debug.getinfo, debug.sethook, debug.getmetatable
local os_clock = os.clock
local G0 = getfenv(1)
local INTERNAL = dbg_getinfo(1, "S").source
local READONLY = "Attempt to modify a readonly table"
local JSON_NULL = newproxy(false)
local IS_EVAL = KIND == "eval"
local STRING_MT = getmetatable("")
local PYMT = getmetatable(py.call)   -- lupa's metatable of Python objects: a C function in Valkey has none
local real_type = type

-- lua-memory-limit (lua.py _Budget): tighten after a caught error, leave before returning to Python
local py_tighten, py_leave = py.tighten, py.leave
-- A callback near the limit lifts it for lupa's push of its result (_Budget.room sets LIFTED[1]); every
-- callback is called through settle, which puts the limit back before any script code runs again.
local LIFTED = py.lifted
local function settle(...)
  if LIFTED[1] then py_tighten() end
  return ...
end
local function settled(f)
  return function(...) return settle(f(...)) end
end
for name, f in next, py do
  if f ~= py_tighten and f ~= py_leave and f ~= LIFTED then py[name] = settled(f) end
end

local py_interrupt, py_rand, py_srand, py_jdecode = py.interrupt, py.rand, py.srand, py.jdecode
local py_register = py.register

-- errors raised by Python callbacks reach Lua as the Python exception; this gives back the Lua value
local py_unwrap = py.unwrap
local OOM = "not enough memory"
local function unwrap(e)
  -- second result: the Python side ran out of Lua memory (the script fails as on a Lua allocation failure)
  if real_type(e) == "userdata" and e ~= JSON_NULL then
    local v, boxed, oom = py_unwrap(e)
    if oom then return OOM, true end
    if boxed then return v[1], false end
    if v ~= nil then return v, false end
  end
  return e, false
end

-- the Python callables scripts see as functions, and what tostring() shows for them
local native, native_name, keep = {}, {}, {}
local function add_native(f)
  local stand_in = function() end
  keep[#keep + 1] = stand_in
  native[f], native_name[f] = true, tostring(stand_in)
end
for _, name in ipairs({"call", "pcall", "acl", "sha1hex", "log", "setresp", "set_repl"}) do add_native(py[name]) end
local function s_type_of(v)
  if native[v] then return "function" end
  return real_type(v)
end

-- luaL_error / luaL_argerror as a C library function raises them: at the line of fn's caller, naming fn
-- the way the caller spelled it ("bad argument #1 to 'insert' (table expected, got nil)")
local function c_fail(fn, narg, msg)
  local level = 2
  local info = dbg_getinfo(level, "f")
  while info and info.func ~= fn do
    level = level + 1
    info = dbg_getinfo(level, "f")
  end
  local where = ""
  if info then
    local caller = dbg_getinfo(level + 1, "Sl")
    if caller and caller.currentline > 0 then where = caller.short_src .. ":" .. caller.currentline .. ": " end
  end
  if narg then
    local ar = info and dbg_getinfo(level, "n")
    local name = ar and ar.name
    if ar and ar.namewhat == "method" then
      narg = narg - 1
      if narg == 0 then error(where .. "calling '" .. name .. "' on bad self (" .. msg .. ")", 0) end
    end
    msg = "bad argument #" .. narg .. " to '" .. (name or "?") .. "' (" .. msg .. ")"
  end
  error(where .. msg, 0)
end
local function got(n, i, v)
  if i > n then return "no value" end
  return s_type_of(v)
end
local function check_table(fn, n, i, v)     -- luaL_checktype(L, i, LUA_TTABLE)
  if real_type(v) ~= "table" then c_fail(fn, i, "table expected, got " .. got(n, i, v)) end
end
local function check_function(fn, n, i, v)  -- luaL_checktype(L, i, LUA_TFUNCTION)
  if s_type_of(v) ~= "function" then c_fail(fn, i, "function expected, got " .. got(n, i, v)) end
end
local function check_any(fn, n, i)          -- luaL_checkany
  if i > n then c_fail(fn, i, "value expected") end
end
local function trunc(x)                     -- (int) / (lua_Integer) of a lua_Number
  if x >= 0 then return floor(x) end
  return ceil(x)
end
local function check_int(fn, n, i, v)       -- luaL_checkint
  local x = tonumber(v)
  if x == nil then c_fail(fn, i, "number expected, got " .. got(n, i, v)) end
  return trunc(x)
end
local function opt_string(fn, n, i, v, default)   -- luaL_optstring
  if v == nil then return default end
  local t = real_type(v)
  if t == "number" then return tostring(v) end
  if t ~= "string" then c_fail(fn, i, "string expected, got " .. got(n, i, v)) end
  return v
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

local function nonexistent(k)
  local kt = real_type(k)
  if kt ~= "string" and kt ~= "number" then
    error("Second argument to luaProtectedTableError must be a string or number", 3)
  end
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 3)
end

-- a read-only table whose missing fields raise like a missing global (the library-load API)
local function strict(t)
  return readonly(t, function(_, k)
    local v = t[k]
    if v == nil then nonexistent(k) end
    return v
  end)
end

local s_tostring
s_tostring = function(...)
  local v = ...
  if native[v] then return native_name[v] end
  if select("#", ...) == 0 then check_any(s_tostring, 0, 1) end
  return tostring(v)
end
local s_type
s_type = function(...)
  local v = ...
  if native[v] then return "function" end
  if v == nil and select("#", ...) == 0 then check_any(s_type, 0, 1) end
  return real_type(v)
end
local s_rawget
s_rawget = function(...)
  local t, k = ...
  if real_type(t) ~= "table" or select("#", ...) < 2 then
    local n = select("#", ...)
    check_table(s_rawget, n, 1, t)
    check_any(s_rawget, n, 2)
  end
  return rawget(real_of[t] or t, k)
end
local s_rawset
s_rawset = function(...)
  local t, k, v = ...
  if real_type(t) ~= "table" or select("#", ...) < 3 then
    local n = select("#", ...)
    check_table(s_rawset, n, 1, t)
    check_any(s_rawset, n, 2)
    check_any(s_rawset, n, 3)
  end
  if real_of[t] then error(READONLY, 0) end   -- raised inside lua_rawset: no position
  return rawset(t, k, v)
end
local s_next
s_next = function(...)
  local t, k = ...
  if real_type(t) ~= "table" then check_table(s_next, select("#", ...), 1, t) end
  return next(real_of[t] or t, k)
end
local s_pairs
s_pairs = function(...)
  local t = ...
  if real_type(t) ~= "table" then check_table(s_pairs, select("#", ...), 1, t) end
  if real_of[t] then return s_next, t, nil end
  return next, t, nil
end
local function ipairs_proxy(t, i)
  i = i + 1
  local v = rawget(real_of[t], i)
  if v ~= nil then return i, v end
end
local s_ipairs
s_ipairs = function(...)
  local t = ...
  if real_type(t) ~= "table" then check_table(s_ipairs, select("#", ...), 1, t) end
  if real_of[t] then return ipairs_proxy, t, 0 end
  return ipairs(t)
end
local STRING_MT_PUBLIC    -- what getmetatable('') shows (set once the string proxy exists)
local s_getmetatable
s_getmetatable = function(...)
  local x = ...
  if real_of[x] then return public_mt[x] end
  local t = real_type(x)
  if t == "string" then return STRING_MT_PUBLIC end
  if x == nil and select("#", ...) == 0 then check_any(s_getmetatable, 0, 1) end
  local mt = getmetatable(x)
  if mt == PYMT then return nil end
  return mt
end
local s_setmetatable
s_setmetatable = function(...)
  local t, mt = ...
  local n = select("#", ...)
  check_table(s_setmetatable, n, 1, t)
  local mtt = real_type(mt)
  if n < 2 or (mtt ~= "nil" and mtt ~= "table") then c_fail(s_setmetatable, 2, "nil or table expected") end
  local cur = dbg_getmetatable(t)
  if cur ~= nil and rawget(cur, "__metatable") ~= nil then
    c_fail(s_setmetatable, nil, "cannot change a protected metatable")
  end
  if real_of[t] then error(READONLY, 0) end   -- raised inside lua_setmetatable: no position
  setmetatable(t, mt)
  return t
end
local s_insert
s_insert = function(...)
  local t = ...
  local n = select("#", ...)
  check_table(s_insert, n, 1, t)
  if n == 3 then
    check_int(s_insert, n, 2, (select(2, ...)))
  elseif n ~= 2 then
    c_fail(s_insert, nil, "wrong number of arguments to 'insert'")
  end
  if real_of[t] then error(READONLY, 0) end   -- raised inside lua_rawseti: no position
  tinsert(t, select(2, ...))
end
local s_foreach
s_foreach = function(...)
  local t, f = ...
  local n = select("#", ...)
  check_table(s_foreach, n, 1, t)
  check_function(s_foreach, n, 2, f)
  local r = tforeach(real_of[t] or t, f)
  return r
end

-- the functions that run scripts: a script sees no stack levels beyond its own (Valkey calls it from C)
local HARNESS = {}
local ENV  -- what scripts see as _G (set below)
local function fenv_target(fn, n, f, opt)
  -- getfunc() of lbaselib.c: the function whose environment getfenv/setfenv mean
  if real_type(f) == "function" then return f end
  if native[f] then return false end
  local level = 1
  if f ~= nil or not opt then level = check_int(fn, n, 1, f) end
  if level < 0 then c_fail(fn, 1, "level must be non-negative") end
  if level == 0 then return 0 end
  for k = 3, level + 2 do   -- 1 = fenv_target, 2 = fn, 3 = fn's caller (level 1)
    local info = dbg_getinfo(k, "fS")
    if info == nil or HARNESS[info.func] then c_fail(fn, 1, "invalid level") end
    if info.what == "C" then
      local below = dbg_getinfo(k + 1, "f")
      if below == nil or HARNESS[below.func] then c_fail(fn, 1, "invalid level") end
    end
  end
  local info = dbg_getinfo(level + 2, "f")
  if info.func == nil then
    c_fail(fn, nil, "no function environment for tail call at level " .. level)
  end
  return info.func
end
local s_getfenv
s_getfenv = function(...)
  local f = ...
  local target = fenv_target(s_getfenv, select("#", ...), f, true)
  local e
  if target == 0 then e = getfenv(0) elseif target == false then e = G0 else e = getfenv(target) end
  if e == G0 then return ENV end
  return e
end
local s_setfenv
s_setfenv = function(...)
  local f, t = ...
  local n = select("#", ...)
  check_table(s_setfenv, n, 2, t)
  local target = fenv_target(s_setfenv, n, f, false)
  -- the thread's globals are the sandbox: Valkey lets a script replace them (breaking every later script)
  if target == 0 then error(READONLY, 0) end
  if target == false or getfenv(target) == G0 then
    c_fail(s_setfenv, nil, "'setfenv' cannot change environment of given object")
  end
  setfenv(target, t)
  return target
end

local function no_binary(s, chunkname)
  local name = chunkname or s
  if str_sub(name, 1, 1) == "@" or str_sub(name, 1, 1) == "=" then name = str_sub(name, 2)
  else name = '[string "' .. str_gsub(str_sub(name, 1, 40), "\n.*", "") .. '"]' end
  return nil, name .. ":1: unexpected symbol near '<\\27>'"
end
-- the script's own code without tail calls (see bytecode.py): the frame of a `return f(...)` keeps its line
local py_notail, dump = py.notail, string.dump
local function without_tail_calls(f, chunkname)
  local code = py_notail(dump(f))
  if code == nil then return f end
  return (loadstring(code, chunkname)) or f
end
local function compile_in_sandbox(s, chunkname)
  -- the sandbox's own frames are recognised by their source: a script cannot take its name
  if chunkname == INTERNAL then chunkname = "=" .. chunkname end
  if str_byte(s, 1) == 27 then return no_binary(s, chunkname) end
  local f, err = loadstring(s, chunkname)
  if f then
    f = without_tail_calls(f, chunkname)
    setfenv(f, ENV)
  end
  return f, err
end
local s_loadstring
s_loadstring = function(...)
  local s, chunkname = ...
  local n = select("#", ...)
  local st = real_type(s)
  if st == "number" then s = tostring(s)
  elseif st ~= "string" then c_fail(s_loadstring, 1, "string expected, got " .. got(n, 1, s)) end
  chunkname = opt_string(s_loadstring, n, 2, chunkname, s)
  return compile_in_sandbox(s, chunkname)
end
local function read_pieces(f)
  local parts, n = {}, 0
  while true do
    local piece = f()
    local t = real_type(piece)
    if piece == nil or piece == "" then break end
    if t == "number" then piece = tostring(piece)
    elseif t ~= "string" then return nil, "reader function must return a string" end
    n = n + 1
    parts[n] = piece
  end
  return tconcat(parts)
end
local s_load
s_load = function(...)
  local f, chunkname = ...
  local n = select("#", ...)
  chunkname = opt_string(s_load, n, 2, chunkname, "=(load)")
  check_function(s_load, n, 1, f)
  -- lua_load runs the reader protected: its errors become load's (nil, message)
  local ok, code, err = real_pcall(read_pieces, f)
  if not ok then
    py_tighten()
    return nil, (unwrap(code))
  end
  if code == nil then
    local caller = dbg_getinfo(2, "Sl")
    local where = (caller and caller.currentline > 0) and (caller.short_src .. ":" .. caller.currentline .. ": ") or ""
    return nil, where .. err
  end
  return compile_in_sandbox(code, chunkname)
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
-- a killed script that calls the server: from now on every line raises (as interrupt_hook does once it
-- sees the kill), so a loop of calls inside pcall cannot wait for the next instruction count to be stopped
local function arm_kill()
  if not hook_on then return end
  hook_mask, hook_count = "l", 0
  dbg_sethook(interrupt_hook, "l")
end

local co_create, co_resume = coroutine.create, coroutine.resume
local function is_lua_function(f)
  if real_type(f) ~= "function" then return false end
  local info = dbg_getinfo(f, "S")
  return info.what ~= "C" and info.source ~= INTERNAL   -- the sandbox's functions stand for C ones
end
local s_co_create
s_co_create = function(...)
  local f = ...
  if not is_lua_function(f) then c_fail(s_co_create, 1, "Lua function expected") end
  local co = co_create(f)
  if hook_on then dbg_sethook(co, interrupt_hook, hook_mask, hook_count) end
  return co
end
local function pack_results(...) return {n = select("#", ...), ...} end
local s_co_wrap
s_co_wrap = function(...)
  local f = ...
  if not is_lua_function(f) then c_fail(s_co_wrap, 1, "Lua function expected") end
  local co = co_create(f)
  if hook_on then dbg_sethook(co, interrupt_hook, hook_mask, hook_count) end
  local wrapped
  wrapped = function(...)
    local r = pack_results(co_resume(co, ...))
    if not r[1] then
      -- auxwrap: a string error gets the caller's position prepended
      local e = unwrap(r[2])
      local t = real_type(e)
      if t == "string" or t == "number" then c_fail(wrapped, nil, tostring(e)) end
      error(e, 0)
    end
    return unpack(r, 2, r.n)
  end
  return wrapped
end
local function resume_result(ok, ...)
  if ok then return true, ... end
  py_tighten()
  return false, (unwrap((...)))
end
local s_co_resume
s_co_resume = function(...)
  local co = ...
  if real_type(co) ~= "thread" then c_fail(s_co_resume, 1, "coroutine expected") end
  return resume_result(co_resume(...))
end

-- collectgarbage: what a script changes (stop, pause, step multiplier) is undone after it
local GC_OPTIONS = {stop = true, restart = true, collect = true, count = true, step = true, setpause = true,
                    setstepmul = true}
local gc_touched = false
local s_collectgarbage
s_collectgarbage = function(...)
  local opt, arg = ...
  local n = select("#", ...)
  opt = opt_string(s_collectgarbage, n, 1, opt, "collect")
  if not GC_OPTIONS[opt] then c_fail(s_collectgarbage, 1, "invalid option '" .. opt .. "'") end
  if arg ~= nil then check_int(s_collectgarbage, n, 2, arg) end
  if opt == "stop" or opt == "setpause" or opt == "setstepmul" then gc_touched = true end
  return collectgarbage(opt, arg)
end
local function gc_reset()
  if gc_touched then
    gc_touched = false
    collectgarbage("restart")
    collectgarbage("setpause", 200)
    collectgarbage("setstepmul", 200)
  end
end

-- errors -------------------------------------------------------------------------------------------
-- Valkey's error handler, compiled under its chunk name with its line layout: when it fails itself (the
-- error object is a read-only table) the message is Valkey's, "err_handler_def:10: Attempt to modify ...".
-- Frames of the sandbox's own functions are skipped like the C frame Valkey's handler skips (and so is the
-- mark a tail call into one of them leaves, which has no line to show); an
-- out-of-memory error stays a plain string, as a LUA_ERRMEM never reaches Valkey's handler.
local err_handler = loadstring([[local unwrap, dbg_getinfo, INTERNAL, tostring, type = ...
return function(err)
  local oom err, oom = unwrap(err) if oom then return err end
  local level = 2
  local i = dbg_getinfo(level, 'nSl')
  while i and (i.what == 'C' or i.what == 'tail' or i.source == INTERNAL) do
    level = level + 1 i = dbg_getinfo(level, 'nSl') end
  if type(err) ~= 'table' then
    err = {err='ERR ' .. tostring(err)} end if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end return err
end]], "@err_handler_def")(unwrap, dbg_getinfo, INTERNAL, s_tostring, real_type)

-- valkey's pcall (luaRedisPcall) hands back the message of an error table ({err=...}) instead of the
-- table; when err is not a string it returns the table and the err field both
local function pcall_result(ok, ...)
  if ok then return true, ... end
  py_tighten()
  local e = unwrap((...))
  if real_type(e) == "table" then
    local s = e.err
    local st = real_type(s)
    if st == "string" or st == "number" then return false, s end
    return false, e, s
  end
  return false, e
end
local function s_pcall(...)
  if select("#", ...) == 0 then return false, "attempt to call a boolean value" end
  return pcall_result(real_pcall(...))
end
local function xpcall_result(ok, ...)
  if not ok then py_tighten() end
  return ok, ...
end
local s_xpcall
s_xpcall = function(...)
  local f, h = ...
  check_any(s_xpcall, select("#", ...), 2)
  return xpcall_result(xpcall(f, function(e) return h((unwrap(e))) end))
end

-- server.* ------------------------------------------------------------------------------------------
-- pcall, acl_check_cmd, sha1hex, log, setresp and set_repl are Python callables (C functions to Lua, as in
-- Valkey). call and pcall go through a Lua function first: lupa cannot take more than about 7997 arguments into
-- a Python callable (its Lua C stack ends at 8000 slots), and `server.call('lpush', k, unpack(t))` may pass
-- 7999, so a call that large reaches Python packed in one table. A script's `return server.call(...)` keeps its
-- line for the errors all the same: scripts are compiled without tail calls (bytecode.py).
local py_call, py_pcall, py_call_packed, py_pcall_packed = py.call, py.pcall, py.call_packed, py.pcall_packed
local PACK_FROM = 7000
local function server_call(...)
  local n = select("#", ...)
  if n < PACK_FROM then return py_call(...) end
  return py_call_packed(n, {...})
end
local function server_pcall(...)
  local n = select("#", ...)
  if n < PACK_FROM then return py_pcall(...) end
  return py_pcall_packed(n, {...})
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
  if select("#", ...) ~= 1 or real_type(s) ~= "string" then return {err = "ERR wrong number or type of arguments"} end
  if str_sub(s, 1, 1) ~= "-" then s = "-" .. s end
  return push_error(s)
end
local function status_reply(...)
  local s = ...
  if select("#", ...) ~= 1 or real_type(s) ~= "string" then return {err = "ERR wrong number or type of arguments"} end
  return {ok = s}
end
local function add_versions(t)
  t.REDIS_VERSION_NUM = V.REDIS_VERSION_NUM
  t.REDIS_VERSION = V.REDIS_VERSION
  t.VALKEY_VERSION_NUM = V.VALKEY_VERSION_NUM
  t.VALKEY_VERSION = V.VALKEY_VERSION
  t.SERVER_NAME = V.SERVER_NAME
end
local function add_log(t)
  t.log = py.log
  t.LOG_DEBUG, t.LOG_VERBOSE, t.LOG_NOTICE, t.LOG_WARNING = 0, 1, 2, 3
end

local server = {call = server_call, pcall = server_pcall, setresp = py.setresp, sha1hex = py.sha1hex,
                error_reply = error_reply, status_reply = status_reply, set_repl = py.set_repl,
                REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
                acl_check_cmd = py.acl}
add_log(server)
add_versions(server)
if IS_EVAL then
  -- outside the script debugger (which durakv does not have) these are no-ops, as in Valkey
  server.breakpoint = function() return false end
  server.debug = function() end
  server.replicate_commands = function() return true end
end

-- math.random / math.randomseed: Valkey's rand48, the same sequence on every platform -------------
local m_random
m_random = function(...)
  local n = select("#", ...)
  local r = py_rand()
  if n == 0 then return r end
  if n == 1 then
    local u = check_int(m_random, n, 1, (...))
    if u < 1 then c_fail(m_random, 1, "interval is empty") end
    return floor(r * u) + 1
  end
  if n == 2 then
    local l, u = ...
    l = check_int(m_random, n, 1, l)
    u = check_int(m_random, n, 2, u)
    if l > u then c_fail(m_random, 2, "interval is empty") end
    return floor(r * (u - l + 1)) + l
  end
  c_fail(m_random, nil, "wrong number of arguments")
end
local m_randomseed
m_randomseed = function(...)
  py_srand(check_int(m_randomseed, select("#", ...), 1, (...)))
end

-- bit, struct, cmsgpack (libs.py) ------------------------------------------------------------------------
local bit, struct, cmsgpack = (function(...)
--@LIBS@--
end)(c_fail, s_type_of, py.bit, py.bitarg, py.struct, py.mpdouble, py.mpfloat)

-- cjson (encode here, decode in Python): cjson.new() makes another instance with its own settings ---------
local escapes = {['"'] = '\\"', ['\\'] = '\\\\', ['/'] = '\\/', ['\b'] = '\\b', ['\f'] = '\\f',
                 ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t', ['\127'] = '\\u007f'}
for i = 0, 31 do
  local c = string.char(i)
  if not escapes[c] then escapes[c] = str_format("\\u%04x", i) end
end
local function jstring(s)
  return '"' .. (str_gsub(s, '[%c"\\/]', escapes)) .. '"'
end
local make_cjson
make_cjson = function()
  local jcfg = {encode_max_depth = 1000, decode_max_depth = 1000, invalid = 0, precision = 14,
                sparse_convert = false, sparse_ratio = 2, sparse_safe = 10, keep_buffer = true}
  local json_encode
  local function jfail(msg) c_fail(json_encode, nil, msg) end
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
  local function jarray_length(t)
    local max, items = 0, 0
    for k in next, t do
      if real_type(k) == "number" and k >= 1 and floor(k) == k then
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
  local jvalue
  jvalue = function(v, depth, buf, n)
    local t = real_type(v)
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
          local kt = real_type(k)
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
      jfail("Cannot serialise " .. s_type_of(v) .. ": type not supported")
    end
    return n
  end
  json_encode = function(...)
    if select("#", ...) ~= 1 then c_fail(json_encode, 1, "expected 1 argument") end
    local buf = {}
    jvalue((...), 0, buf, 0)
    local s = tconcat(buf)
    return s
  end
  local json_decode
  json_decode = function(...)
    if select("#", ...) ~= 1 then c_fail(json_decode, 1, "expected 1 argument") end
    local s = ...
    if real_type(s) == "number" then s = tostring(s) end
    if real_type(s) ~= "string" then
      c_fail(json_decode, 1, "string expected, got " .. s_type_of(s))
    end
    local ok, res = py_jdecode(s, jcfg.decode_max_depth)
    if not ok then c_fail(json_decode, nil, res) end
    return res
  end
  local function jsetting(name, lo, hi)
    local fn
    fn = function(v)
      if v ~= nil then
        v = tonumber(v)
        if v == nil or v < lo or v > hi then
          c_fail(fn, 1, "expected integer between " .. lo .. " and " .. hi)
        end
        jcfg[name] = floor(v)
      end
      return jcfg[name]
    end
    return fn
  end
  local encode_number_precision
  encode_number_precision = function(v)
    if v ~= nil then
      v = tonumber(v)
      if v == nil or v < 1 or v > 14 then
        c_fail(encode_number_precision, 1, "expected integer between 1 and 14")
      end
      jcfg.precision = floor(v)
    end
    return jcfg.precision
  end
  return {
    encode = json_encode, decode = json_decode, null = JSON_NULL, _NAME = "cjson", _VERSION = "2.1.0",
    encode_max_depth = jsetting("encode_max_depth", 1, 2147483647),
    decode_max_depth = jsetting("decode_max_depth", 1, 2147483647),
    encode_number_precision = encode_number_precision,
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
    new = make_cjson,
  }
end
local cjson = make_cjson()

-- the globals scripts see ---------------------------------------------------------------------------
local function copy(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end
local m = copy(math)
m.random, m.randomseed = m_random, m_randomseed
local co = copy(coroutine)
co.create, co.wrap, co.resume = s_co_create, s_co_wrap, s_co_resume
local tbl = copy(table)
tbl.insert, tbl.foreach = s_insert, s_foreach
local str = copy(string)
local str_dump = string.dump
local s_dump
s_dump = function(...)
  local f = ...
  check_function(s_dump, select("#", ...), 1, f)
  -- the sandbox's functions stand for C ones, which lua_dump refuses
  if not is_lua_function(f) then c_fail(s_dump, nil, "unable to dump given function") end
  return str_dump(f)
end
str.dump = s_dump

local R = {
  string = readonly(str), table = readonly(tbl), math = readonly(m), coroutine = readonly(co),
  os = readonly({clock = os_clock}), bit = readonly(bit), cjson = readonly(cjson), struct = readonly(struct),
  cmsgpack = readonly(cmsgpack),
  xpcall = s_xpcall, tostring = s_tostring, getfenv = s_getfenv, setmetatable = s_setmetatable, next = s_next,
  assert = assert, tonumber = tonumber, rawequal = rawequal, collectgarbage = s_collectgarbage,
  getmetatable = s_getmetatable, rawset = s_rawset, pcall = s_pcall, type = s_type, select = select,
  unpack = unpack, gcinfo = gcinfo, pairs = s_pairs, rawget = s_rawget, loadstring = s_loadstring,
  ipairs = s_ipairs, _VERSION = _VERSION, setfenv = s_setfenv, load = s_load, error = error,
  newproxy = newproxy,
}
-- strings index the read-only string library, and getmetatable('') is a read-only view of their metatable
STRING_MT.__index = R.string
STRING_MT_PUBLIC = readonly(STRING_MT)
local SERVER = readonly(server)
R.server, R.redis = SERVER, SERVER
if IS_EVAL then R.__redis__err__handler = err_handler end

ENV = {}
local CURRENT = R   -- functions: the library-load API while FUNCTION LOAD runs the library code
local env_mt = {
  __index = function(_, k)
    local v = CURRENT[k]
    if v == nil then nonexistent(k) end
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
  f = without_tail_calls(f, chunkname)
  setfenv(f, ENV)
  return f, false
end

local run_eval, run_function, load_library
run_eval = function(f, keys, argv, hook)
  R.KEYS, R.ARGV = keys, argv
  if hook then set_hook() end
  local ok, res = xpcall(f, err_handler)
  py_leave()
  if hook then clear_hook() end
  gc_reset()
  return ok, res
end

local CALL_F, CALL_KEYS, CALL_ARGS
local function call_function()
  local r = CALL_F(CALL_KEYS, CALL_ARGS)
  return r
end
run_function = function(f, keys, args, hook)
  CALL_F, CALL_KEYS, CALL_ARGS = f, keys, args
  if hook then set_hook() end
  local ok, res = xpcall(call_function, err_handler)
  py_leave()
  if hook then clear_hook() end
  CALL_F, CALL_KEYS, CALL_ARGS = nil, nil, nil
  gc_reset()
  return ok, res
end

load_library = function(f, hook)
  CURRENT = LIBAPI
  if hook then set_hook() end
  local ok, err = real_pcall(f)
  py_leave()
  if hook then clear_hook() end
  CURRENT = R
  gc_reset()
  return ok, (unwrap(err))
end
HARNESS[run_eval], HARNESS[run_function], HARNESS[call_function], HARNESS[load_library] = true, true, true, true
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
local function full_gc() collectgarbage("collect") end

-- lock the sandbox: the globals this chunk started with (the thread's globals, which only C code and lupa
-- read) are emptied but for debug.traceback, which lupa uses as its error handler
local traceback = debug.traceback
for k in next, G0 do rawset(G0, k, nil) end
G0.debug = {traceback = traceback}

return {compile = compile, run_eval = run_eval, run_function = run_function, load_library = load_library,
        classify = classify, error_info = error_info, memory = memory, full_gc = full_gc, null = JSON_NULL,
        tostring = tostring, tonumber = tonumber, type = s_type_of, arm_kill = arm_kill}
"""

PRELUDE = PRELUDE.replace("--@LIBS@--", LIBS_LUA)
