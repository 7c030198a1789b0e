"""The Lua sandbox as Valkey 7+ builds it, for EVAL scripts and FUNCTION libraries: globals, the libraries
(string, table, math, os, coroutine, cjson, bit, struct, cmsgpack, server/redis) and the string metatable
are read-only; the builtins durakv replaces to keep them so answer with Valkey's exact texts; nothing a
script does changes what the next one sees; lua-memory-limit bounds a Lua VM and the server survives it.

SANDBOX is (script, reply) pairs exactly as Valkey 8.0.1 answered EVAL script 0 (errors as ('ERR', full
text)). Valkey 8.0.1 itself still let a script change the string metatable; the texts for that are Valkey
8.0.6's (luaSetTableProtectionForBasicTypes), where a Lua assignment carries its line and a raw write
from C (rawset, setmetatable) carries none."""

import hashlib
import threading
import time

import hiredis
import pytest

from conftest import scaled, wait_until
from helpers.lua import RawConn, as_vector_reply, mismatches


def sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()


@pytest.fixture
def conn(shared_server):
    c = RawConn(shared_server.port)
    yield c
    c.close()


def eval_error(conn, script):
    reply = conn.call("EVAL", script, "0")
    assert isinstance(reply, hiredis.ReplyError), (script, reply)
    return str(reply)


# -- the string metatable (issue 9 item 9) -----------------------------------------------------------------

def test_string_metatable_cannot_be_hijacked(conn):
    hijack = "getmetatable('').__index.upper=function() return 'hijacked' end"
    assert eval_error(conn, hijack) == (
        "ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.")
    assert conn.call("EVAL", "return string.upper('abc')", "0") == b"ABC"
    assert conn.call("EVAL", "return ('abc'):upper()", "0") == b"ABC"


def test_string_metatable_is_read_only(conn):
    for script in ("getmetatable('').__index = 5", "getmetatable('').__index = {upper = function() end}",
                   "getmetatable('').__len = function() return 1 end"):
        assert eval_error(conn, script) == (
            "ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.")
    for script in ("rawset(getmetatable(''), '__index', {})", "setmetatable(getmetatable(''), {})",
                   "table.insert(getmetatable(''), 1)"):
        assert eval_error(conn, script) == (
            "ERR Attempt to modify a readonly table script: on @user_script:1.")
    assert conn.call("EVAL", "return {getmetatable('').__index == string, getmetatable('') == getmetatable('x'), "
                     "rawequal(getmetatable('').__index, string)}", "0") == [1, 1, 1]
    assert conn.call("EVAL", "local s = 'a,b' return {s:find(','), s:rep(2), #s:upper()}", "0") == [2, b"a,ba,b", 3]


def test_sandbox_as_valkey(conn):
    assert mismatches(conn, SANDBOX) == []


def test_nothing_a_script_changes_reaches_the_next(conn):
    attempts = ["table.insert(cjson, 'kept')", "rawset(string, 'kept', 1)", "string.kept = 1", "kept = 1",
                "getmetatable(redis.call)", "setfenv(0, {kept = 1})", "setmetatable(_G, {__index = {kept = 1}})",
                "__redis__err__handler(string)"]
    for script in attempts:
        conn.call("EVAL", script, "0")
    assert conn.call("EVAL", "return {cjson[1] == nil, rawget(string, 'kept') == nil, string.kept == nil, "
                     "rawget(_G, 'kept') == nil, rawget(string, 'source') == nil}", "0") == [1, 1, 1, 1, 1]
    assert eval_error(conn, "return kept") == (
        "ERR user_script:1: Script attempted to access nonexistent global variable 'kept' script: "
        "on @user_script:1.")
    # setfenv(0, t) would replace the globals of every later script (Valkey allows it; durakv refuses)
    assert eval_error(conn, "setfenv(0, {})") == (
        "ERR Attempt to modify a readonly table script: on @user_script:1.")


def test_python_objects_stay_out_of_reach(conn):
    assert conn.call("EVAL", "return {type(getmetatable(redis.call)), type(getmetatable(redis.sha1hex)), "
                     "string.sub(tostring(redis.call), 1, 12), type(redis.log)}", "0") == \
        [b"nil", b"nil", b"function: 0x", b"function"]
    # lupa's metatable of Python objects would let a script break server.call for everyone after it
    assert isinstance(conn.call("EVAL", "redis.call.__call = nil", "0"), hiredis.ReplyError)
    assert conn.call("EVAL", "return redis.call('ping')", "0") == b"PONG"


def test_script_chunk_cannot_pass_for_the_sandbox(shared_server):
    """The sandbox recognises its own frames by chunk name (the kill hook never fires inside them): a script
    naming its chunk like that must still be killable."""
    c = RawConn(shared_server.port)
    c.call("CONFIG", "SET", "busy-reply-threshold", "100")
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "reply", c.call("EVAL", "loadstring('while true do end', '=durakv')()", "0")))
    t.start()
    k = RawConn(shared_server.port)
    try:
        wait_until(lambda: str(k.call("PING")).startswith("BUSY"), 10, what="the script to be busy")
        assert k.call("SCRIPT", "KILL") == b"OK"
        t.join(10)
        assert not t.is_alive()
        assert str(box["reply"]).startswith("ERR Script killed by user with SCRIPT KILL")
    finally:
        k.call("CONFIG", "SET", "busy-reply-threshold", "5000")
        k.close()
        c.close()


# -- FUNCTION libraries ---------------------------------------------------------------------------------------

def test_function_libraries_are_read_only(conn):
    conn.call("FUNCTION", "FLUSH")
    loads = {
        "#!lua name=t1\nlocal s = string.rep('x', 3)\nredis.register_function('f1', function() return s end)":
            "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global "
            "variable 'string'",
        "#!lua name=t2\nredis.register_function('f2', function() end)\ngetmetatable('').__index.upper = 1":
            "ERR Error registering functions: ERR user_function:3: Script attempted to access nonexistent global "
            "variable 'getmetatable'",
        "#!lua name=t8\nx = 1\nredis.register_function('f8', function() end)":
            "ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table",
    }
    for code, expected in loads.items():
        assert str(conn.call("FUNCTION", "LOAD", code)) == expected, code
    lib = ("#!lua name=ro\n"
           "redis.register_function('f4', function() return type(cmsgpack) .. type(struct) .. type(bit) .. "
           "type(cjson) .. type(os) end)\n"
           "redis.register_function('f5', function() local mt = getmetatable('') mt.__index = {} end)\n"
           "redis.register_function('f6', function() string.upper = nil end)\n"
           "redis.register_function('f7', function() rawset(_G, 'x', 1) end)\n"
           "redis.register_function('f9', function() return ('abc'):upper() end)\n")
    assert conn.call("FUNCTION", "LOAD", lib) == b"ro"
    assert conn.call("FCALL", "f4", "0") == b"tabletabletabletabletable"
    assert str(conn.call("FCALL", "f5", "0")) == \
        "ERR user_function:3: Attempt to modify a readonly table script: on @user_function:3."
    assert str(conn.call("FCALL", "f6", "0")) == \
        "ERR user_function:4: Attempt to modify a readonly table script: on @user_function:4."
    assert str(conn.call("FCALL", "f7", "0")) == \
        "ERR Attempt to modify a readonly table script: on @user_function:5."
    assert conn.call("FCALL", "f9", "0") == b"ABC"
    conn.call("FUNCTION", "FLUSH")


# -- lua-memory-limit -------------------------------------------------------------------------------------------

def _peak_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
def small_lua(server_factory):
    srv = server_factory("--lua-memory-limit", "4mb")
    c = RawConn(srv.port, timeout_s=300)
    yield srv, c
    c.close()


def test_memory_limit_answers_lua_out_of_memory(small_lua):
    srv, c = small_lua
    script = "return #string.rep('x', 1e10)"
    assert str(c.call("EVAL", script, "0")) == "ERR Error running script %s, not enough memory" % sha(script)
    assert _peak_rss_kb(srv.proc.pid) < 512 * 1024     # unbounded, this script took RSS past 4 GB
    assert c.call("EVAL", "return 'the next script runs'", "0") == b"the next script runs"
    assert c.call("EVAL", "local ok, e = pcall(string.rep, 'x', 1e10) return {tostring(ok), e}", "0") == \
        [b"false", b"not enough memory"]
    script = "local t = {} for i = 1, 1e8 do t[i] = i end return #t"
    assert str(c.call("EVAL", script, "0")) == "ERR Error running script %s, not enough memory" % sha(script)
    assert c.call("CONFIG", "GET", "lua-memory-limit") == [b"lua-memory-limit", b"4194304"]
    assert c.call("PING") == b"PONG"


def test_memory_limit_binds_functions_too(small_lua):
    _, c = small_lua
    assert str(c.call("FUNCTION", "LOAD", "#!lua name=big\nlocal t = {} for i = 1, 1e8 do t[i] = i end\n"
                      "redis.register_function('f', function() return 1 end)")) == \
        "ERR Error registering functions: ERR not enough memory"
    assert c.call("FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('grow', function(keys, args) "
                  "local t = {} for i = 1, tonumber(args[1]) do t[i] = string.rep('x', 100) .. i end return #t "
                  "end)") == b"lib"
    assert str(c.call("FCALL", "grow", "0", "10000000")) == "ERR Error running script grow, not enough memory"
    assert c.call("FCALL", "grow", "0", "10") == 10


def test_memory_limit_at_the_edge_of_every_callback(small_lua):
    """What a Python callback hands a script (a reply, an error, a library result) must never meet the
    limit inside lupa's glue, where it would abort or deadlock the process: each of these scripts ends with
    Lua's out-of-memory error and the server answers the next command."""
    _, c = small_lua
    c.call("SET", "big", "v" * 20_000_000)
    c.call("SET", "mid", "m" * 100_000)
    loops = [
        "t[i] = redis.call('get', 'mid') .. i",
        "local ok, v = pcall(redis.call, 'nosuch') t[i] = string.rep('z', 1000) .. i",
        "local ok, v = pcall(redis.call, 'get', {}) t[i] = {v}",
        "local ok = pcall(function() return redis.call.x end) t[i] = {ok}",
        "t[i] = redis.sha1hex(i)",
        "t[i] = redis.pcall('nosuch')",
        "t[i] = redis.call('hgetall', 'nohash')",
        "t[i] = cjson.decode('[1,2,3,\"abc\"]')",
        "t[i] = {struct.unpack('bbbb', 'abcd')} t[-i] = struct.pack('>d', i)",
        "local ok, e = pcall(struct.pack, 'b', {}) t[i] = {e}",
        "t[i] = cmsgpack.unpack(cmsgpack.pack({i, 0.5, 'x'}))",
        "local ok, e = pcall(redis.log, redis.LOG_DEBUG, {}, {}) t[i] = {e}",
        "t[i] = {coroutine.resume(coroutine.create(function() error({err = 'x'}) end))}",
    ]
    for body in loops:
        script = "local t = {} for i = 1, 1e8 do %s end return 'unbounded'" % body
        assert str(c.call("EVAL", script, "0")) == \
            "ERR Error running script %s, not enough memory" % sha(script), body
        assert c.call("PING") == b"PONG"
    script = "return #redis.call('get', 'big')"
    assert str(c.call("EVAL", script, "0")) == "ERR Error running script %s, not enough memory" % sha(script)
    assert c.call("EVAL", "local ok, e = pcall(redis.call, 'get', 'big') return {tostring(ok), e}", "0") == \
        [b"false", b"not enough memory"]
    assert c.call("EVAL", "return #redis.call('get', 'mid')", "0") == 100_000


def test_small_memory_limits_never_hang_a_callback_push(server_factory):
    """A callback's result pushed near a small limit: the new string can make Lua double its string table,
    which the room made for the result alone did not hold, and the failure longjmped out of lupa's glue and
    left the server deadlocked. On the main before the fix, `struct.pack` at 1 MB hung every run and
    `sha1hex` at 4 MB most runs. Each small limit here ends in Lua's out-of-memory error, and the server
    answers the next command."""
    srv = server_factory()
    c = RawConn(srv.port, timeout_s=scaled(60))
    try:
        bodies = ["t[i] = struct.pack('>d', i)", "t[i] = redis.sha1hex(i)", "t[i] = redis.call('echo', i)",
                  "t[i] = bit.tohex(i)"]
        for limit_kb in (1024, 1280, 1536, 4096):
            assert c.call("CONFIG", "SET", "lua-memory-limit", str(limit_kb * 1024)) == b"OK"
            for body in bodies:
                script = "local t = {} for i = 1, 1e8 do %s end return 'unbounded'" % body
                assert str(c.call("EVAL", script, "0")) == \
                    "ERR Error running script %s, not enough memory" % sha(script), (limit_kb, body)
                assert c.call("PING") == b"PONG"
    finally:
        c.close()


def test_memory_limit_config(small_lua):
    _, c = small_lua
    assert str(c.call("CONFIG", "SET", "lua-memory-limit", "-1")) == \
        "ERR CONFIG SET failed (possibly related to argument 'lua-memory-limit') - argument must be a memory value"
    assert c.call("CONFIG", "SET", "lua-memory-limit", "0") == b"OK"
    assert c.call("EVAL", "return #string.rep('x', 40e6)", "0") == 40_000_000
    assert c.call("CONFIG", "SET", "lua-memory-limit", "16mb") == b"OK"
    script = "return #string.rep('x', 40e6)"
    assert str(c.call("EVAL", script, "0")) == "ERR Error running script %s, not enough memory" % sha(script)


def test_collector_settings_do_not_outlive_a_script(small_lua):
    """collectgarbage('stop') (or a huge pause) would otherwise leave every later script to run out of
    memory on its garbage."""
    _, c = small_lua
    churn = "for i = 1, 3000 do local s = string.rep('x', 100000) .. i end return 'collected'"
    for stop in ("collectgarbage('stop')", "collectgarbage('setpause', 100000)"):
        assert c.call("EVAL", stop, "0") is None
        assert c.call("EVAL", churn, "0") == b"collected"
    assert c.call("EVAL", "return collectgarbage('setpause', 200)", "0") == 200


SANDBOX = [
    ('string.upper = nil',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(_G, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ('setmetatable(_G, {})',
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ('table.insert(string, 1)',
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ('table.insert(string, 1, 2)',
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ('table.insert(_G, 1)',
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("table.insert(string, 'x', 1)",
     ('ERR', "ERR user_script:1: bad argument #2 to 'insert' (number expected, got string) script: on @user_script:1.")),
    ('table.insert(string)',
     ('ERR', "ERR user_script:1: wrong number of arguments to 'insert' script: on @user_script:1.")),
    ('table.remove(string)',
     None),
    ('table.sort(string)',
     None),
    ('a = 10',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('return a',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable 'a' script: on @user_script:1.")),
    ("rawset(string, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(cjson, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(redis, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(bit, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(math, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(table, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(os, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(coroutine, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(cmsgpack, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ("rawset(struct, 'x', 1)",
     ('ERR', 'ERR Attempt to modify a readonly table script: on @user_script:1.')),
    ('server.call = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('redis.call = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('os.clock = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('math.pi = 3',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('coroutine.create = nil',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('cjson.null = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('struct.pack = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('cmsgpack.pack = 1',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('local g = getmetatable(_G); g.__index = {}',
     ('ERR', 'ERR user_script:1: Attempt to modify a readonly table script: on @user_script:1.')),
    ('local g = getmetatable(_G); return type(g)',
     b'table'),
    ('local g = getmetatable(_G); return type(g.__index)',
     b'function'),
    ('local g = getmetatable(_G); return type(g.__newindex)',
     b'nil'),
    ('return getmetatable(string)',
     None),
    ('return type(getmetatable(redis.call))',
     b'nil'),
    ('return type(getmetatable(cjson.null))',
     b'nil'),
    ("return getmetatable('').__index == string",
     1),
    ("return rawequal(getmetatable('').__index, string)",
     1),
    ("return type(getmetatable(''))",
     b'table'),
    ('return _G == getfenv(0)',
     1),
    ('return _G == getfenv(1)',
     1),
    ('return _G._G == _G',
     1),
    ('setfenv(redis.sha1hex, {})',
     ('ERR', "ERR user_script:1: 'setfenv' cannot change environment of given object script: on @user_script:1.")),
    ('setfenv(print, {})',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable 'print' script: on @user_script:1.")),
    ("return rawget(_G, 'redis') == redis",
     1),
    ("return rawget(string, 'upper') == string.upper",
     1),
    ('local n = 0 for k, v in pairs(_G) do n = n + 1 end return n',
     40),
    ('local t = {} for k, v in pairs(_G) do t[#t+1] = k end table.sort(t) return t',
     [b'ARGV', b'KEYS', b'_G', b'_VERSION', b'__redis__err__handler', b'assert', b'bit', b'cjson', b'cmsgpack', b'collectgarbage', b'coroutine', b'error', b'gcinfo', b'getfenv', b'getmetatable', b'ipairs', b'load', b'loadstring', b'math', b'newproxy', b'next', b'os', b'pairs', b'pcall', b'rawequal', b'rawget', b'rawset', b'redis', b'select', b'server', b'setfenv', b'setmetatable', b'string', b'struct', b'table', b'tonumber', b'tostring', b'type', b'unpack', b'xpcall']),
    ('local t = {} for k, v in pairs(string) do t[#t+1] = k end table.sort(t) return t',
     [b'byte', b'char', b'dump', b'find', b'format', b'gfind', b'gmatch', b'gsub', b'len', b'lower', b'match', b'rep', b'reverse', b'sub', b'upper']),
    ('local t = {} for k, v in pairs(math) do t[#t+1] = k end table.sort(t) return t',
     [b'abs', b'acos', b'asin', b'atan', b'atan2', b'ceil', b'cos', b'cosh', b'deg', b'exp', b'floor', b'fmod', b'frexp', b'huge', b'ldexp', b'log', b'log10', b'max', b'min', b'mod', b'modf', b'pi', b'pow', b'rad', b'random', b'randomseed', b'sin', b'sinh', b'sqrt', b'tan', b'tanh']),
    ('local t = {} for k, v in pairs(table) do t[#t+1] = k end table.sort(t) return t',
     [b'concat', b'foreach', b'foreachi', b'getn', b'insert', b'maxn', b'remove', b'setn', b'sort']),
    ('local t = {} for k, v in pairs(os) do t[#t+1] = k end table.sort(t) return t',
     [b'clock']),
    ('local t = {} for k, v in pairs(coroutine) do t[#t+1] = k end table.sort(t) return t',
     [b'create', b'resume', b'running', b'status', b'wrap', b'yield']),
    ('local t = {} for k, v in pairs(redis) do t[#t+1] = k end table.sort(t) return t',
     [b'LOG_DEBUG', b'LOG_NOTICE', b'LOG_VERBOSE', b'LOG_WARNING', b'REDIS_VERSION', b'REDIS_VERSION_NUM', b'REPL_ALL', b'REPL_AOF', b'REPL_NONE', b'REPL_REPLICA', b'REPL_SLAVE', b'SERVER_NAME', b'VALKEY_VERSION', b'VALKEY_VERSION_NUM', b'acl_check_cmd', b'breakpoint', b'call', b'debug', b'error_reply', b'log', b'pcall', b'replicate_commands', b'set_repl', b'setresp', b'sha1hex', b'status_reply']),
    ('local t = {} for k, v in pairs(server) do t[#t+1] = k end table.sort(t) return t',
     [b'LOG_DEBUG', b'LOG_NOTICE', b'LOG_VERBOSE', b'LOG_WARNING', b'REDIS_VERSION', b'REDIS_VERSION_NUM', b'REPL_ALL', b'REPL_AOF', b'REPL_NONE', b'REPL_REPLICA', b'REPL_SLAVE', b'SERVER_NAME', b'VALKEY_VERSION', b'VALKEY_VERSION_NUM', b'acl_check_cmd', b'breakpoint', b'call', b'debug', b'error_reply', b'log', b'pcall', b'replicate_commands', b'set_repl', b'setresp', b'sha1hex', b'status_reply']),
    ('local t = {} for k, v in pairs(cjson) do t[#t+1] = k end table.sort(t) return t',
     [b'_NAME', b'_VERSION', b'decode', b'decode_invalid_numbers', b'decode_max_depth', b'encode', b'encode_invalid_numbers', b'encode_keep_buffer', b'encode_max_depth', b'encode_number_precision', b'encode_sparse_array', b'new', b'null']),
    ('local t = {} for k, v in pairs(bit) do t[#t+1] = k end table.sort(t) return t',
     [b'arshift', b'band', b'bnot', b'bor', b'bswap', b'bxor', b'lshift', b'rol', b'ror', b'rshift', b'tobit', b'tohex']),
    ('local t = {} for k, v in pairs(struct) do t[#t+1] = k end table.sort(t) return t',
     [b'pack', b'size', b'unpack']),
    ('local t = {} for k, v in pairs(cmsgpack) do t[#t+1] = k end table.sort(t) return t',
     [b'_COPYRIGHT', b'_DESCRIPTION', b'_NAME', b'_VERSION', b'pack', b'unpack', b'unpack_limit', b'unpack_one']),
    ('return redis == server',
     1),
    ('return print',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable 'print' script: on @user_script:1.")),
    ('return loadstring',
     None),
    ('return type(loadstring)',
     b'function'),
    ("return loadstring('return 1')()",
     1),
    ('return type(load)',
     b'function'),
    ('return type(newproxy)',
     b'function'),
    ('return type(gcinfo)',
     b'function'),
    ('return type(collectgarbage)',
     b'function'),
    ('return _VERSION',
     b'Lua 5.1'),
    ('return redis.REDIS_VERSION',
     b'7.2.4'),
    ('return redis.REDIS_VERSION_NUM',
     459268),
    ('return server.VALKEY_VERSION',
     b'9.1.2'),
    ('return server.SERVER_NAME',
     b'valkey'),
    ('return redis.breakpoint()',
     None),
    ("return redis.debug('x')",
     None),
    ('return redis.sha1hex()',
     ('ERR', 'ERR wrong number of arguments script: on @user_script:1.')),
    ('return redis.sha1hex(1)',
     b'356a192b7913b04c54574d18c28d46e6395428ab'),
    ('return redis.sha1hex({})',
     b'da39a3ee5e6b4b0d3255bfef95601890afd80709'),
    ("return redis.error_reply('x')",
     ('ERR', 'ERR x')),
    ("return redis.error_reply('-x y')",
     ('ERR', 'x y')),
    ('return redis.error_reply()',
     ('ERR', 'ERR wrong number or type of arguments')),
    ('return redis.error_reply(1)',
     ('ERR', 'ERR wrong number or type of arguments')),
    ("return redis.status_reply('x')",
     b'x'),
    ('return redis.status_reply()',
     ('ERR', 'ERR wrong number or type of arguments')),
    ('return redis.setresp(4)',
     ('ERR', 'ERR RESP version must be 2 or 3. script: on @user_script:1.')),
    ('return redis.setresp()',
     ('ERR', 'ERR server.setresp() requires one argument. script: on @user_script:1.')),
    ('return redis.log()',
     ('ERR', 'ERR server.log() requires two arguments or more. script: on @user_script:1.')),
    ('return redis.log(1)',
     ('ERR', 'ERR server.log() requires two arguments or more. script: on @user_script:1.')),
    ("return redis.log('x', 'y')",
     ('ERR', 'ERR First argument must be a number (log level). script: on @user_script:1.')),
    ("return redis.log(5, 'y')",
     ('ERR', 'ERR Invalid log level. script: on @user_script:1.')),
    ("return redis.log(redis.LOG_WARNING, 'y', {}, 3)",
     None),
    ("return redis.acl_check_cmd('set', 'x', 'y')",
     1),
    ("return redis.acl_check_cmd('nosuch')",
     ('ERR', 'ERR Invalid command passed to server.acl_check_cmd() script: on @user_script:1.')),
    ('return redis.acl_check_cmd()',
     ('ERR', 'ERR Please specify at least one argument for this call script: on @user_script:1.')),
    ('return os.clock() >= 0',
     1),
    ('return os.time',
     None),
    ('return os.execute',
     None),
    ('return type(debug)',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable 'debug' script: on @user_script:1.")),
    ('return debug',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable 'debug' script: on @user_script:1.")),
    ('return __redis__err__handler ~= nil',
     1),
    ('return type(__server__err__handler)',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable '__server__err__handler' script: on @user_script:1.")),
    ('return unpack({1,2,3})',
     1),
    ('return #_G',
     0),
    ('return next(string) ~= nil',
     1),
    ("return select('#', next({}))",
     1),
    ('local co = coroutine.create(function() return 1 end) return {coroutine.resume(co)}',
     [1, 1]),
    ("return string.format('%5.2f', 3.14159)",
     b' 3.14'),
    ('return {pcall()}',
     [None, b'attempt to call a boolean value']),
    ('return {loadstring(string.dump(function() return 1 end))}',
     []),
    ("return {loadstring(string.dump(function() return 1 end), 'x')}",
     []),
    ("return {load(function() error('boom') end)}",
     []),
    ('local n = 0 return {load(function() n = n + 1 if n == 1 then return 42 end end)}',
     []),
    ("local n = 0 local f = load(function() n = n + 1 if n == 1 then return 'return 42' end end) return f()",
     42),
    ('return {load(function() return {} end)}',
     []),
    ("return {load(function() error({err='x'}) end)}",
     []),
    ('local r = getfenv(0) == _G return r',
     1),
    ('local r = getfenv(redis.call) == _G return r',
     1),
    ('local r = getfenv(string.upper) == _G return r',
     1),
    ('local r = getfenv(rawget) == _G return r',
     1),
    ('local r = getfenv(-1) return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'getfenv' (level must be non-negative) script: on @user_script:1.")),
    ('local r = getfenv(50) return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'getfenv' (invalid level) script: on @user_script:1.")),
    ("local r = getfenv('x') return r",
     ('ERR', "ERR user_script:1: bad argument #1 to 'getfenv' (number expected, got string) script: on @user_script:1.")),
    ("local r = getfenv('1') == _G return r",
     1),
    ('local function f() setfenv(1, {x = 5}) end f() return 1',
     1),
    ('setfenv(2, {})',
     ('ERR', "ERR user_script:1: bad argument #1 to 'setfenv' (invalid level) script: on @user_script:1.")),
    ('setfenv(1)',
     ('ERR', "ERR user_script:1: bad argument #2 to 'setfenv' (table expected, got no value) script: on @user_script:1.")),
    ("setfenv('a', {})",
     ('ERR', "ERR user_script:1: bad argument #1 to 'setfenv' (number expected, got string) script: on @user_script:1.")),
    ('setfenv(redis.call, {})',
     ('ERR', "ERR user_script:1: 'setfenv' cannot change environment of given object script: on @user_script:1.")),
    ('setfenv(string.upper, {})',
     ('ERR', "ERR user_script:1: 'setfenv' cannot change environment of given object script: on @user_script:1.")),
    ('local r = rawget() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'rawget' (table expected, got no value) script: on @user_script:1.")),
    ('local r = rawget(string) return r',
     ('ERR', "ERR user_script:1: bad argument #2 to 'rawget' (value expected) script: on @user_script:1.")),
    ('local r = rawget(1, 2) return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'rawget' (table expected, got number) script: on @user_script:1.")),
    ('local r = rawset({}, 1) return r',
     ('ERR', "ERR user_script:1: bad argument #3 to 'rawset' (value expected) script: on @user_script:1.")),
    ('local r = rawset({}, nil, 1) return r',
     ('ERR', 'ERR table index is nil script: on @user_script:1.')),
    ('local r = type() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'type' (value expected) script: on @user_script:1.")),
    ('local r = tostring() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'tostring' (value expected) script: on @user_script:1.")),
    ('table.insert()',
     ('ERR', "ERR user_script:1: bad argument #1 to 'insert' (table expected, got no value) script: on @user_script:1.")),
    ('table.insert({})',
     ('ERR', "ERR user_script:1: wrong number of arguments to 'insert' script: on @user_script:1.")),
    ('table.insert({}, 1, 2, 3)',
     ('ERR', "ERR user_script:1: wrong number of arguments to 'insert' script: on @user_script:1.")),
    ("table.insert({}, 'a', 2)",
     ('ERR', "ERR user_script:1: bad argument #2 to 'insert' (number expected, got string) script: on @user_script:1.")),
    ("table.insert(string, 'a', 2)",
     ('ERR', "ERR user_script:1: bad argument #2 to 'insert' (number expected, got string) script: on @user_script:1.")),
    ("local r = collectgarbage('x') return r",
     ('ERR', "ERR user_script:1: bad argument #1 to 'collectgarbage' (invalid option 'x') script: on @user_script:1.")),
    ('local r = collectgarbage({}) return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'collectgarbage' (string expected, got table) script: on @user_script:1.")),
    ("local r = collectgarbage('step', 'x') return r",
     ('ERR', "ERR user_script:1: bad argument #2 to 'collectgarbage' (number expected, got string) script: on @user_script:1.")),
    ("local r = type(collectgarbage('count')) return r",
     b'number'),
    ('coroutine.create(string.upper)',
     ('ERR', "ERR user_script:1: bad argument #1 to 'create' (Lua function expected) script: on @user_script:1.")),
    ('coroutine.create(redis.call)',
     ('ERR', "ERR user_script:1: bad argument #1 to 'create' (Lua function expected) script: on @user_script:1.")),
    ('coroutine.wrap(1)',
     ('ERR', "ERR user_script:1: bad argument #1 to 'wrap' (Lua function expected) script: on @user_script:1.")),
    ('coroutine.resume(1)',
     ('ERR', "ERR user_script:1: bad argument #1 to 'resume' (coroutine expected) script: on @user_script:1.")),
    ("return {coroutine.resume(coroutine.create(function() error('x') end))}",
     [None, b'user_script:1: x']),
    ("local t = {coroutine.resume(coroutine.create(function() error({err='x'}) end))} return {type(t[1]), type(t[2]), t[2].err}",
     [b'boolean', b'table', b'x']),
    ("local r = coroutine.wrap(function() error('x') end)() return r",
     ('ERR', 'ERR user_script:1: user_script:1: x script: on @user_script:1.')),
    ("local r = coroutine.wrap(function() error({err='y'}) end)() return r",
     ('ERR', 'y script: on @user_script:1.')),
    ('setmetatable({})',
     ('ERR', "ERR user_script:1: bad argument #2 to 'setmetatable' (nil or table expected) script: on @user_script:1.")),
    ('setmetatable({}, 1)',
     ('ERR', "ERR user_script:1: bad argument #2 to 'setmetatable' (nil or table expected) script: on @user_script:1.")),
    ('setmetatable(1, {})',
     ('ERR', "ERR user_script:1: bad argument #1 to 'setmetatable' (table expected, got number) script: on @user_script:1.")),
    ('local t = setmetatable({}, {__metatable = 1}) setmetatable(t, {})',
     ('ERR', 'ERR user_script:1: cannot change a protected metatable script: on @user_script:1.')),
    ('local r = getmetatable() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'getmetatable' (value expected) script: on @user_script:1.")),
    ("return {pcall(error, {err = 'x'})}",
     [None, b'x']),
    ('return {pcall(error, {err = 5})}',
     [None, 5]),
    ('return {pcall(error, {err = {}})}',
     [None, [], []]),
    ("return {pcall(error, setmetatable({}, {__index = function() return 'meta' end}))}",
     [None, b'meta']),
    ("return {xpcall(function() error('x') end)}",
     ('ERR', "ERR user_script:1: bad argument #2 to 'xpcall' (value expected) script: on @user_script:1.")),
    ("return {xpcall(function() error('x') end, function(e) return 'h:' .. e end)}",
     [None, b'h:user_script:1: x']),
    ("return {xpcall(function() error({err='t'}) end, function(e) return type(e) end)}",
     [None, b'table']),
    ('error(string)',
     ('ERR', 'ERR err_handler_def:10: Attempt to modify a readonly table script: on @err_handler_def:10.')),
    ("error(setmetatable({}, {__newindex = function() error('ni') end}))",
     ('ERR', 'ERR user_script:1: ni script: on @user_script:1.')),
    ('__redis__err__handler(string)',
     ('ERR', 'ERR err_handler_def:10: Attempt to modify a readonly table script: on @err_handler_def:10.')),
    ('_G[true]',
     ('ERR', "ERR Error compiling script (new function): user_script:1: '=' expected near '<eof>'")),
    ('local r = _G[1] return r',
     ('ERR', "ERR user_script:1: Script attempted to access nonexistent global variable '1' script: on @user_script:1.")),
    ('table.foreach(string, function(k) return 1 end)',
     None),
    ('local r = table.foreach(string, function(k) return k end) ~= nil return r',
     1),
    ('local r = bit.band() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'band' (number expected, got no value) script: on @user_script:1.")),
    ("local r = bit.bor(1, 'x', {}) return r",
     ('ERR', "ERR user_script:1: bad argument #3 to 'bor' (number expected, got table) script: on @user_script:1.")),
    ('local r = bit.tohex(1, nil) return r',
     ('ERR', "ERR user_script:1: bad argument #2 to 'tohex' (number expected, got nil) script: on @user_script:1.")),
    ("local r = bit.tohex('0x1p4') return r",
     b'00000010'),
    ("local r = bit.tobit('  12  ') return r",
     12),
    ('local b = bit.band local x = b() return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'b' (number expected, got no value) script: on @user_script:1.")),
    ('local r = pcall(bit.band) return r',
     None),
    ('return {pcall(bit.band)}',
     [None, b"bad argument #1 to '?' (number expected, got no value)"]),
    ("local r = redis.log(1.9, 'x') return r",
     None),
    ('local r = redis.setresp(2.5) return r',
     None),
    ("local r = redis.setresp('3') return r",
     None),
    ('local r = redis.set_repl(-1) return r',
     ('ERR', 'ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE. script: on @user_script:1.')),
    ('local r = redis.set_repl(3.9) return r',
     None),
    ('local r = redis.sha1hex(0.1) return r',
     b'180505679cfe0cca79bae51fdda0296b7cd9c493'),
    ('local r = redis.sha1hex(1e100) return r',
     b'94c172e578592378916c3a42edd038dc769544fc'),
    ('local r = tostring(0/0) return r',
     b'-nan'),
    ('local r = redis.sha1hex(0/0) return r',
     b'03eaab157a1d1ab44dd8518f1632efd37ae16b69'),
    ('local r = math.random(1, 0) return r',
     ('ERR', "ERR user_script:1: bad argument #2 to 'random' (interval is empty) script: on @user_script:1.")),
    ("local r = math.random local x = r('x') return x",
     ('ERR', "ERR user_script:1: bad argument #1 to 'r' (number expected, got string) script: on @user_script:1.")),
    ('local r = math.random(1, 2, 3) return r',
     ('ERR', 'ERR user_script:1: wrong number of arguments script: on @user_script:1.')),
    ('local r = cjson.encode() return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'encode' (expected 1 argument) script: on @user_script:1.")),
    ('local r = cjson.encode(function() end) return r',
     ('ERR', 'ERR user_script:1: Cannot serialise function: type not supported script: on @user_script:1.')),
    ('local r = cjson.encode_max_depth(0) return r',
     ('ERR', "ERR user_script:1: bad argument #1 to 'encode_max_depth' (expected integer between 1 and 2147483647) script: on @user_script:1.")),
    ('local c = cjson.new() c.encode_max_depth(1) return {pcall(c.encode, {{}}), cjson.encode({{}})}',
     [None, b'[{}]']),
    ('local c = cjson.new() local t = {} for k in pairs(c) do t[#t+1] = k end table.sort(t) return t',
     [b'_NAME', b'_VERSION', b'decode', b'decode_invalid_numbers', b'decode_max_depth', b'encode', b'encode_invalid_numbers', b'encode_keep_buffer', b'encode_max_depth', b'encode_number_precision', b'encode_sparse_array', b'new', b'null']),
    ('local c = cjson.new() c.x = 1 return c.x',
     1),
    ('local x = string.dump(rawget) return x',
     ('ERR', 'ERR user_script:1: unable to dump given function script: on @user_script:1.')),
    ('local x = string.dump(string.upper) return x',
     ('ERR', 'ERR user_script:1: unable to dump given function script: on @user_script:1.')),
    ('local x = string.dump(redis.call) return x',
     ('ERR', 'ERR user_script:1: unable to dump given function script: on @user_script:1.')),
    ('local x = string.dump() return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'dump' (function expected, got no value) script: on @user_script:1.")),
    ('return type(string.dump(function() return 1 end))',
     b'string'),
    ('local x = string.dump(1) return x',
     ('ERR', "ERR user_script:1: bad argument #1 to 'dump' (function expected, got number) script: on @user_script:1.")),
]
