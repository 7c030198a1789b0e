"""EVAL / EVALSHA / *_RO / SCRIPT / FUNCTION / FCALL on a real Lua 5.1 (lupa): conversions both ways in RESP2
and RESP3, errors as Valkey 8 words them, the sandbox, read-only scripts, effects replication (replay and
kill -9), long scripts (-BUSY, SCRIPT KILL / FUNCTION KILL, pipelining behind a busy script) and function
libraries that survive restarts."""

import socket
import threading

import hiredis
import pytest
import valkey

from conftest import scaled, wait_until
from helpers.replay import run_and_replay
from helpers.wire import wire

LIB = ("#!lua name=mylib\n"
       "redis.register_function('myincr', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n"
       "redis.register_function{function_name='myget', callback=function(keys, args) "
       "return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads a key'}\n")


class Raw:
    """A bare RESP connection: replies exactly as sent (errors as hiredis.ReplyError with their code)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
        self.reader = hiredis.Reader()

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def read(self):
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.reader.feed(data)

    def call(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(shared_server, r):
    c = Raw(shared_server.port)
    yield c
    c.close()


def _lzf_payload():
    """A FUNCTION DUMP payload whose library code is an LZF-compressed RDB string (literal runs and one
    back reference), as Valkey writes long strings."""
    from durakv.scripting.functions import crc64
    head = b"#!lua name=test\nserver.register_function('test', function() return 'hello' end) -- x"
    code = head + b"x" * 9
    comp = bytearray()
    for i in range(0, len(head), 32):
        chunk = head[i:i + 32]
        comp.append(len(chunk) - 1)
        comp += chunk
    comp += bytes((0xE0, 9 - 2 - 7, 0))   # copy 9 bytes from 1 byte back
    body = b"\xf5\xc3" + _rdb_len(len(comp)) + _rdb_len(len(code)) + bytes(comp) + b"\x0b\x00"
    return body + crc64(body).to_bytes(8, "little")


def _rdb_len(n):
    return bytes((n,)) if n < 64 else bytes((0x40 | (n >> 8), n & 0xFF))


def err(reply):
    assert isinstance(reply, hiredis.ReplyError), reply
    return str(reply)


# -- basics and Lua -> RESP conversions ------------------------------------------------------------------

def test_eval_replies(rr):
    assert rr.eval("return 'hello'", 0) == b"hello"
    assert rr.eval("return 100.5", 0) == 100
    assert rr.eval("return -3.9", 0) == -3
    assert rr.eval("return true", 0) == 1
    assert rr.eval("return false", 0) is None
    assert rr.eval("return nil", 0) is None
    assert rr.eval("return {ok='fine'}", 0) in (b"fine", "fine")
    assert rr.eval("return {1,2,3,'ciao',{1,2}}", 0) == [1, 2, 3, b"ciao", [1, 2]]
    assert rr.eval("return {1,2,nil,4}", 0) == [1, 2]
    assert rr.eval("return {}", 0) == []
    assert rr.eval("return _G", 0) == []
    assert rr.eval("local a = {}; setmetatable(a,{__index=function() foo() end}) return a", 0) == []
    assert rr.eval("return 'hello' --trailing comment", 0) == b"hello"


def test_keys_and_argv(r):
    assert r.eval("return {KEYS[1],KEYS[2],ARGV[1],ARGV[2]}", 2, "a", "b", "c", "d") == [b"a", b"b", b"c", b"d"]
    assert r.eval("return {#KEYS, #ARGV}", 0) == [0, 0]
    assert r.eval("return #ARGV", 1, "k", "x", "y", "z") == 3


def test_numkeys_errors(raw):
    assert err(raw.call("EVAL", "return 1", "2", "a")) == "ERR Number of keys can't be greater than number of args"
    assert err(raw.call("EVAL", "return 1", "-1")) == "ERR Number of keys can't be negative"
    assert err(raw.call("EVAL", "return 1", "x")) == "ERR value is not an integer or out of range"
    assert err(raw.call("EVAL", "return 1")) == "ERR wrong number of arguments for 'eval' command"


def test_error_reply_tables(raw):
    assert err(raw.call("EVAL", "return {err='ERR this is an error'}", "0")) == "ERR this is an error"
    assert err(raw.call("EVAL", "return redis.error_reply('MY_ERR_CODE custom msg')", "0")) == \
        "MY_ERR_CODE custom msg"
    assert err(raw.call("EVAL", "return redis.error_reply('plain message')", "0")) == "plain message"
    assert raw.call("EVAL", "return redis.status_reply('FINE')", "0") == b"FINE"
    assert err(raw.call("EVAL", "return redis.status_reply(1, 2)", "0")) == "ERR wrong number or type of arguments"


# -- RESP -> Lua conversions ---------------------------------------------------------------------------------

def test_server_replies_to_lua(r):
    r.set("x", "0")
    assert r.eval("local v = redis.pcall('incr', KEYS[1]) return {type(v), v}", 1, "x") == [b"number", 1]
    r.set("s", "myval")
    assert r.eval("local v = redis.pcall('get', KEYS[1]) return {type(v), v}", 1, "s") == [b"string", b"myval"]
    r.rpush("l", "a", "b", "c")
    assert r.eval("local v = redis.call('lrange', KEYS[1], 0, -1) return {type(v), v[1], v[3], #v}", 1, "l") == \
        [b"table", b"a", b"c", 3]
    assert r.eval("local v = redis.call('set', KEYS[1], 'z') return {type(v), v['ok']}", 1, "k") == [b"table", b"OK"]
    assert r.eval("local v = redis.pcall('incr', KEYS[1]) return {type(v), v['err']}", 1, "s") == \
        [b"table", b"ERR value is not an integer or out of range"]
    assert r.eval("local v = redis.call('get', 'nosuchkey') return {type(v), v == false}", 0) == [b"boolean", 1]
    r.zadd("z", {"m": 1.5})
    assert r.eval("return redis.call('zscore', KEYS[1], 'm')", 1, "z") == b"1.5"
    # numbers passed as arguments: integers as digits, others as shortest doubles
    assert r.eval("redis.call('set', 'n', 9007199254740991) return redis.call('get', 'n')", 0) == b"9007199254740991"
    assert r.eval("redis.call('set', 'n', 1.5) return redis.call('get', 'n')", 0) == b"1.5"
    assert r.eval("redis.call('set', 'n', '12039611435714932082') return redis.call('get', 'n')", 0) == \
        b"12039611435714932082"


def test_resp3_conversions(r, r3):
    r.hset("h", "field", "value")
    assert r3.eval("redis.setresp(3); return redis.call('hgetall', KEYS[1])", 1, "h") == {b"field": b"value"}
    assert r3.eval("redis.setresp(2); return redis.call('hgetall', KEYS[1])", 1, "h") == [b"field", b"value"]
    assert r.eval("redis.setresp(3); return redis.call('hgetall', KEYS[1])", 1, "h") == [b"field", b"value"]
    r.zadd("z", {"m": 1.5})
    assert r3.eval("redis.setresp(3); return redis.call('zscore', KEYS[1], 'm')", 1, "z") == 1.5
    assert r3.eval("redis.setresp(3); local v = redis.call('zscore', KEYS[1], 'm') return type(v)", 1, "z") == \
        b"table"
    assert r3.eval("redis.setresp(3); return type(redis.call('get', 'missing'))", 0) == b"nil"
    assert r3.eval("redis.setresp(3); return redis.call('exists', 'h') == 1", 0) is True
    r.sadd("st", "a")
    assert set(r3.eval("redis.setresp(3); return redis.call('smembers', KEYS[1])", 1, "st")) == {b"a"}
    # booleans: RESP2 scripts answer 1 / null, RESP3 scripts real booleans (RESP2 callers see 1 / 0)
    assert r3.eval("redis.setresp(3); return true", 0) is True
    assert r3.eval("redis.setresp(3); return false", 0) is False
    assert r.eval("redis.setresp(3); return false", 0) == 0
    assert r3.eval("return {double=3.5}", 0) == 3.5
    assert r.eval("return {double=3.5}", 0) == b"3.5"
    assert r3.eval("return {map={a=1}}", 0) == {b"a": 1}
    assert r.eval("return {map={a=1}}", 0) == [b"a", 1]
    assert set(r3.eval("return {set={a=true}}", 0)) == {b"a"}
    # the RESP3 type on the wire: valkey-py's Python parser reads a big number as an int, its libvalkey parser
    # (installed with durakv) as bytes, like a bulk string
    assert wire(r3, "EVAL", "return {big_number='123456789012345678901234567890'}", "0") == \
        b"(123456789012345678901234567890\r\n"
    assert r.eval("return {big_number='12345'}", 0) == b"12345"
    assert r.eval("return {verbatim_string={format='txt', string='hi'}}", 0) == b"hi"


def test_resp_errors(raw):
    assert err(raw.call("EVAL", "redis.setresp(4)", "0")).startswith("ERR RESP version must be 2 or 3.")


# -- errors ----------------------------------------------------------------------------------------------------

def test_call_errors_raise_and_pcall_returns(raw):
    text = err(raw.call("EVAL", "return redis.call('nosuchcommand')", "0"))
    assert text == "ERR Unknown command called from script script: on @user_script:1."
    assert err(raw.call("EVAL", "redis.call('get','a','b','c')", "0")).startswith(
        "ERR Wrong number of args calling command from script script: ")
    raw.call("SET", "foo", "bar")
    assert err(raw.call("EVAL", "redis.call('lpush',KEYS[1],'val')", "1", "foo")).startswith(
        "WRONGTYPE Operation against a key holding the wrong kind of value script: ")
    assert err(raw.call("EVAL", "return redis.call('multi')", "0")).startswith(
        "ERR This Valkey command is not allowed from script script: ")
    assert err(raw.call("EVAL", "return redis.call()", "0")).startswith(
        "ERR Please specify at least one argument for this call script: ")
    assert err(raw.call("EVAL", "return redis.call('get', {})", "0")).startswith(
        "ERR Command arguments must be strings or integers script: ")
    assert raw.call("EVAL", "return redis.pcall('nosuchcommand')['err']", "0") == \
        b"ERR Unknown command called from script"
    assert raw.call("EVAL", "local ok, e = pcall(function() redis.call('nosuch') end) return {tostring(ok), e}",
                    "0") == [b"false", b"ERR Unknown command called from script"]


def test_calls_with_thousands_of_arguments(raw):
    # Valkey's "Script check unpack with massive arguments": 7999 arguments reach the command (lupa alone
    # refuses a Python callable more than ~7997: durakv's server.call packs large calls)
    body = "local a = {} for i=1,7999 do a[i] = 1 end return redis.%s('lpush', KEYS[1], unpack(a))"
    assert raw.call("EVAL", body % "call", "1", "l1") == 7999
    assert raw.call("EVAL", body % "pcall", "1", "l2") == 7999
    assert raw.call("LLEN", "l1") == 7999
    raw.call("SET", "s", "x")
    text = err(raw.call("EVAL", body % "call", "1", "s"))
    assert text.startswith("WRONGTYPE Operation against a key holding the wrong kind of value script: ")
    assert text.endswith(" script: on @user_script:1.")


def test_tail_called_errors_keep_the_scripts_line(raw):
    # Literal texts of Valkey 9.1.2: a tail call of server.call (a C function there) keeps the caller's line
    sha = raw.call("SCRIPT", "LOAD", "local x = 1\nreturn redis.call('nosuch')").decode()
    assert err(raw.call("EVALSHA", sha, "0")) == \
        "ERR Unknown command called from script script: on @user_script:2."
    sha = raw.call("SCRIPT", "LOAD", "return rawset(redis, 'x', 1)").decode()
    assert err(raw.call("EVALSHA", sha, "0")) == \
        "ERR Attempt to modify a readonly table script: on @user_script:1."
    lib = ("#!lua name=taillib\n"
           "local function helper()\n"
           "  return redis.call('nosuch')\n"
           "end\n"
           "redis.register_function('t1', function(keys, args) return redis.call('nosuch') end)\n"
           "redis.register_function('t2', function(keys, args)\n"
           "  local x = 1\n"
           "  return helper()\n"
           "end)\n")
    assert raw.call("FUNCTION", "LOAD", lib) == b"taillib"
    assert err(raw.call("FCALL", "t1", "0")) == "ERR Unknown command called from script script: on @user_function:5."
    assert err(raw.call("FCALL", "t2", "0")) == "ERR Unknown command called from script script: on @user_function:3."
    # tail calls still return every value, varargs included
    assert raw.call("EVAL", "local function f(...) return ... end return {f(1, 2, 3)}", "0") == [1, 2, 3]


def test_runtime_error_formats(raw):
    sha = raw.call("SCRIPT", "LOAD", "error('boom')").decode()
    assert err(raw.call("EVALSHA", sha, "0")) == "ERR user_script:1: boom script: on @user_script:1."
    assert err(raw.call("EVAL", "\n\nerror({err='MYCODE custom'})", "0")).endswith(" script: on @user_script:3.")
    assert err(raw.call("EVAL", "return 1 +", "0")) == \
        "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'"


def test_script_error_midway_keeps_earlier_writes(r):
    r.set("x", "1")
    with pytest.raises(valkey.ResponseError, match="Unknown command called from script"):
        r.eval("redis.call('incr', KEYS[1]); redis.call('nonexisting')", 1, "x")
    assert r.get("x") == b"2"


def test_blocking_commands_do_not_block(r):
    assert r.eval("return redis.pcall('blpop', 'empty', 0)", 1, "empty") is None
    assert r.eval("return redis.pcall('brpoplpush', 'e1', 'e2', 0)", 2, "e1", "e2") is None


def test_select_inside_script_does_not_leak(r):
    r.set("k", "db0")
    assert r.eval("redis.call('select', 5); redis.call('set', 'k', 'db5'); return redis.call('get', 'k')", 0) == \
        b"db5"
    assert r.get("k") == b"db0"
    r.execute_command("SELECT", 5)
    assert r.get("k") == b"db5"
    r.execute_command("SELECT", 0)


# -- the sandbox -----------------------------------------------------------------------------------------------

def test_globals_protection(raw):
    assert "Script attempted to access nonexistent global variable 'a'" in err(raw.call("EVAL", "return a", "0"))
    assert err(raw.call("EVAL", "a = 10", "0")).startswith("ERR user_script:1: Attempt to modify a readonly table")
    for script in ("setmetatable(_G, {})", "local g = getmetatable(_G); g.__index = {}",
                   "redis = function() return 1 end", "_G = {}", "redis.call = function() return 1 end",
                   "cjson.encode = function() return 1 end", "bit.lshift = function() return 1 end",
                   "rawset(_G, 'x', 1)", "string.upper = nil"):
        assert "Attempt to modify a readonly table" in err(raw.call("EVAL", script, "0")), script
    for name in ("loadfile", "dofile", "print", "require", "io", "debug"):
        assert "Script attempted to access nonexistent global variable '%s'" % name in \
            err(raw.call("EVAL", "return %s('x')" % name, "0"))
    assert "attempt to call field 'execute' (a nil value)" in err(raw.call("EVAL", "os.execute()", "0"))
    assert raw.call("EVAL", "local n = 0 for k in pairs(os) do n = n + 1 end return n", "0") == 1
    assert "attempt to call a nil value" in err(raw.call(
        "EVAL", "return loadstring(string.dump(function() return 1 end))()", "0"))
    # code loaded at run time sees the same sandbox
    assert "nonexistent global variable 'io'" in err(raw.call("EVAL", "return loadstring('return io')()", "0"))
    assert raw.call("EVAL", "return getfenv(0) == _G", "0") == 1


def test_libraries(r):
    assert r.eval("return redis.sha1hex('Pizza & Mandolino')", 0) == b"74822d82031af7493c20eefa13bd07ec4fada82f"
    assert r.eval("return redis.sha1hex('')", 0) == b"da39a3ee5e6b4b0d3255bfef95601890afd80709"
    assert r.eval("return cjson.encode({1, 'x/y', {a=true}})", 0) == b'[1,"x\\/y",{"a":true}]'
    assert r.eval("return cjson.encode({})", 0) == b"{}"
    assert r.eval("return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')", 0) == \
        b"0 -5000 -1 0.0003 1023.2 0"
    assert r.eval("local d = cjson.decode('{\"keya\": \"a\", \"keyb\": [1, null]}') "
                  "return {d.keya, d.keyb[1], d.keyb[2] == cjson.null}", 0) == [b"a", 1, 1]
    with pytest.raises(valkey.ResponseError, match="Cannot serialise function: type not supported"):
        r.eval("local x = cjson.encode(function() end) return x", 0)
    with pytest.raises(valkey.ResponseError, match="Cannot serialise number: must not be NaN or Inf"):
        r.eval("local x = cjson.encode(0/0) return x", 0)
    assert r.eval("return bit.tohex(65535, -2147483648)", 0) == b"0000FFFF"
    assert r.eval("return {bit.band(1), bit.bxor(1,2), bit.bor(1,2,4,8,16,32,64,128), bit.tobit(2^32 + 5), "
                  "bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-16, 2), bit.bnot(0)}", 0) == \
        [1, 3, 255, 5, -2147483648, 15, -4, -1]
    one = r.eval("math.randomseed(ARGV[1]); return tostring(math.random())", 0, 10)
    assert one == r.eval("math.randomseed(ARGV[1]); return tostring(math.random())", 0, 10)
    assert one != r.eval("math.randomseed(ARGV[1]); return tostring(math.random())", 0, 20)
    assert r.eval("return redis.replicate_commands()", 0) == 1
    assert r.eval("redis.set_repl(redis.REPL_ALL); return 1", 0) == 1
    with pytest.raises(valkey.ResponseError, match="Invalid replication flags"):
        r.eval("redis.set_repl(12345)", 0)
    assert r.eval("return redis.REDIS_VERSION", 0) == b"7.2.4"
    assert r.eval("redis.log(redis.LOG_WARNING, 'from a script'); return redis.LOG_NOTICE", 0) == 2
    assert r.eval("return server.call('ping')", 0) in (b"PONG", "PONG")
    assert r.eval("return string.rep('x', 3) .. string.format('%d', 7)", 0) == b"xxx7"
    assert r.eval("local co = coroutine.wrap(function(a) coroutine.yield(a + 1) end) return co(1)", 0) == 2


# -- script cache --------------------------------------------------------------------------------------------

def test_evalsha_and_script_commands(r, raw):
    r.set("mykey", "myval")
    sha = r.script_load("return redis.call('get',KEYS[1])")
    assert sha == "fd758d1589d044dd850a6f05d52f2eefd27f033f"
    assert r.evalsha(sha, 1, "mykey") == b"myval"
    assert r.evalsha(sha.upper(), 1, "mykey") == b"myval"
    assert r.execute_command("EVALSHA_RO", sha, 1, "mykey") == b"myval"
    assert r.script_exists(sha, "a" * 40) == [True, False]
    assert raw.call("SCRIPT", "SHOW", sha) == b"return redis.call('get',KEYS[1])"
    assert err(raw.call("EVALSHA", "NotValidShaSUM", "0")) == "NOSCRIPT No matching script."
    assert err(raw.call("EVALSHA", "ffd632c7d33e571e9f24556ebed26c3479a87130", "0")) == "NOSCRIPT No matching script."
    assert r.script_flush() is True
    with pytest.raises(valkey.exceptions.NoScriptError):
        r.evalsha(sha, 1, "mykey")
    assert r.eval("return redis.call('get',KEYS[1])", 1, "mykey") == b"myval"
    assert r.evalsha(sha, 1, "mykey") == b"myval"      # EVAL caches the script too
    assert err(raw.call("SCRIPT", "FLUSH", "LATER")) == "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
    assert raw.call("SCRIPT", "FLUSH", "ASYNC") == b"OK"
    assert r.script_exists(sha) == [False]
    assert err(raw.call("SCRIPT", "KILL")) == "NOTBUSY No scripts in execution right now."
    assert raw.call("SCRIPT", "HELP")[0] == b"SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    for i in range(5):
        r.script_load("return %d" % i)
    assert r.info("memory")["number_of_cached_scripts"] == 5


# -- read-only scripts and flags -----------------------------------------------------------------------------------

def test_read_only_scripts(r, raw):
    r.set("foo", "bar")
    assert r.eval_ro("return redis.call('get', KEYS[1])", 1, "foo") == b"bar"
    assert err(raw.call("EVAL_RO", "redis.call('del', KEYS[1])", "1", "foo")).startswith(
        "ERR Write commands are not allowed from read-only scripts. script: ")
    assert err(raw.call("EVAL_RO", "redis.call('publish', 'ch', 'x')", "0")).startswith(
        "ERR Write commands are not allowed from read-only scripts.")
    assert r.get("foo") == b"bar"
    # shebang flags
    assert err(raw.call("EVAL", "#!lua flags=no-writes\nreturn redis.call('set', 'x', 1)", "0")).startswith(
        "ERR Write commands are not allowed from read-only scripts.")
    assert raw.call("EVAL", "#!lua flags=no-writes\nreturn redis.call('get', 'foo')", "0") == b"bar"
    assert err(raw.call("EVAL_RO", "#!lua\nreturn 1", "0")) == \
        "ERR Can not execute a script with write flag using *_ro command."
    assert raw.call("EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0") == 1
    assert err(raw.call("EVAL", "#!python\nreturn 1", "0")) == "ERR Could not find scripting engine 'python'"
    assert err(raw.call("EVAL", "#!lua flags=bad\nreturn 1", "0")) == "ERR Unexpected flag in script shebang: bad"
    assert err(raw.call("EVAL", "#!lua other=1\nreturn 1", "0")) == "ERR Unknown lua shebang option: other=1"
    assert err(raw.call("EVAL", "#!lua", "0")) == "ERR Invalid script shebang"
    # the shebang line keeps its line number
    assert err(raw.call("EVAL", "#!lua\nerror('x')", "0")).startswith("ERR user_script:2: x")


def test_oom_checked_once_at_start(r, raw):
    r.set("k", "v")
    r.config_set("maxmemory", 1)
    try:
        assert "command not allowed when used memory" in err(raw.call("EVAL", "redis.call('set', 'x', 1)", "0"))
        assert raw.call("EVAL", "return redis.call('get', 'k')", "0") == b"v"
        assert err(raw.call("EVAL", "#!lua\nreturn 1", "0")) == \
            "OOM command not allowed when used memory > 'maxmemory'."
        assert raw.call("EVAL", "#!lua flags=allow-oom\nredis.call('set', 'x', 1) return 1", "0") == 1
    finally:
        r.config_set("maxmemory", 0)


# -- transactions, WATCH ------------------------------------------------------------------------------------------

def test_eval_in_multi_and_watch(r):
    r.set("counter", "1")
    p = r.pipeline(transaction=True)
    p.eval("return redis.call('incr', KEYS[1])", 1, "counter")
    p.get("counter")
    assert p.execute() == [2, b"2"]
    w = r.pipeline(transaction=True)
    w.watch("counter")
    r.eval("redis.call('incr', KEYS[1])", 1, "counter")
    w.multi()
    w.set("counter", "100")
    with pytest.raises(valkey.WatchError):
        w.execute()
    assert r.get("counter") == b"3"


def test_script_writes_wake_blocked_clients(shared_server, r):
    blocked = shared_server.client()
    t, box = _run_in_thread(lambda: blocked.brpop("bl", 10))
    wait_until(lambda: r.info("clients")["blocked_clients"] == 1, what="client blocked")
    r.eval("redis.call('lpush', KEYS[1], '1'); redis.call('lpush', KEYS[1], '2')", 1, "bl")
    t.join(10)
    assert box["reply"] == (b"bl", b"1")   # served after the whole script, like Valkey
    assert r.lrange("bl", 0, -1) == [b"2"]
    blocked.close()


def test_api_looks_like_valkeys(r):
    assert r.eval("return {type(redis.call), type(server.pcall), type(redis.sha1hex), type(cjson.null)}", 0) == \
        [b"function", b"function", b"function", b"userdata"]
    assert r.eval("return {redis.VALKEY_VERSION ~= nil, redis.REDIS_VERSION_NUM, redis.REPL_ALL}", 0) == \
        [1, 0x070204, 3]


# -- FUNCTION / FCALL -----------------------------------------------------------------------------------------------

def test_function_load_and_fcall(r, raw):
    r.function_flush()
    assert r.function_load(LIB) == b"mylib"
    assert r.fcall("myincr", 1, "cnt", 5) == 5
    assert r.fcall("MYINCR", 1, "cnt", 5) == 10
    assert r.fcall_ro("myget", 1, "cnt") == b"10"
    assert err(raw.call("FCALL_RO", "myincr", "1", "cnt", "1")) == \
        "ERR Can not execute a script with write flag using *_ro command."
    assert err(raw.call("FCALL", "nosuch", "0")) == "ERR Function not found"
    assert err(raw.call("FCALL", "myget", "x")) == "ERR Bad number of keys provided"
    assert err(raw.call("FCALL", "myget", "5", "a")) == "ERR Number of keys can't be greater than number of args"
    assert err(raw.call("FCALL", "myget", "-1")) == "ERR Number of keys can't be negative"
    assert err(raw.call("FUNCTION", "LOAD", LIB)) == "ERR Library 'mylib' already exists"
    assert raw.call("FUNCTION", "LOAD", "REPLACE", LIB) == b"mylib"
    assert err(raw.call("FUNCTION", "LOAD", "BAD", LIB)) == "ERR Unknown option given: BAD"
    assert len(r.function_list()) == 1
    assert raw.call("FUNCTION", "LIST") == [[
        b"library_name", b"mylib", b"engine", b"LUA", b"functions", [
            [b"name", b"myincr", b"description", None, b"flags", []],
            [b"name", b"myget", b"description", b"reads a key", b"flags", [b"no-writes"]]]]]
    assert raw.call("FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "MY*")[0][-1] == LIB.encode()
    assert raw.call("FUNCTION", "LIST", "LIBRARYNAME", "other*") == []
    assert err(raw.call("FUNCTION", "LIST", "LIBRARYNAME")) == "ERR library name argument was not given"
    assert err(raw.call("FUNCTION", "LIST", "bad_argument")) == "ERR Unknown argument bad_argument"
    assert raw.call("FUNCTION", "STATS") == [b"running_script", None, b"engines",
                                              [b"LUA", [b"libraries_count", 1, b"functions_count", 2]]]
    assert r.info("memory")["number_of_functions"] == 2
    assert err(raw.call("FUNCTION", "DELETE", "nolib")) == "ERR Library not found"
    assert raw.call("FUNCTION", "DELETE", "mylib") == b"OK"
    assert err(raw.call("FCALL", "myincr", "1", "cnt", "1")) == "ERR Function not found"
    assert err(raw.call("FUNCTION", "KILL")) == "NOTBUSY No scripts in execution right now."


def test_function_load_errors(raw):
    raw.call("FUNCTION", "FLUSH")
    cases = {
        "return 1": "ERR Missing library metadata",
        "#!lua": "ERR Invalid library metadata",
        "#!lua\nreturn 1": "ERR Library name was not given",
        "#!lua name=a name=b\nreturn 1": "ERR Invalid metadata value, name argument was given multiple times",
        "#!lua name=a foo=bar\nreturn 1": "ERR Invalid metadata value given: foo=bar",
        "#!bad_engine name=a\nreturn 1": "ERR Engine 'bad_engine' not found",
        "#! name=a\nreturn 1": "ERR Engine '' not found",
        "#!lua name=a-b\nreturn 1": "ERR Library names can only contain letters, numbers, or underscores(_) and "
                                    "must be at least one character long",
        "#!lua name=a\nreturn 1": "ERR No functions registered",
    }
    for code, expected in cases.items():
        assert err(raw.call("FUNCTION", "LOAD", code)) == expected, code
    assert err(raw.call("FUNCTION", "LOAD", "#!lua name=a\nredis.register_function('f', function() return 1")) \
        .startswith("ERR Error compiling function: user_function:2:")
    prefix = "ERR Error registering functions: "
    loads = {
        "redis.register_function()": "ERR wrong number of arguments to server.register_function",
        "redis.register_function('f')": "ERR calling server.register_function with a single argument is only "
                                        "applicable to Lua table (representing named arguments).",
        "redis.register_function('f', 1)": "ERR second argument to server.register_function must be a function",
        "redis.register_function({}, function() end)":
            "ERR first argument to server.register_function must be a string",
        "redis.register_function{function_name='f'}": "ERR server.register_function must get a callback argument",
        "redis.register_function{callback=function() end}":
            "ERR server.register_function must get a function name argument",
        "redis.register_function{function_name='f', callback=function() end, flags={'bad'}}":
            "ERR unknown flag given",
        "redis.register_function{function_name='f', callback=function() end, foo=1}":
            "ERR unknown argument given to server.register_function",
        "redis.register_function('f', function() end, 3)": "ERR wrong number of arguments to "
                                                           "server.register_function",
    }
    for body, expected in loads.items():
        assert err(raw.call("FUNCTION", "LOAD", "#!lua name=a\n" + body)) == prefix + expected, body
    # Valkey 9 checks function names after the code ran: FUNCTION LOAD's own errors, not the Lua call's
    names = {
        "redis.register_function('a-b', function() end)":
            "ERR Function names can only contain letters, numbers, or underscores(_) and must be at least one "
            "character long",
        "redis.register_function('f', function() end) redis.register_function('f', function() end)":
            "ERR Function already exists in the library",
    }
    for body, expected in names.items():
        assert err(raw.call("FUNCTION", "LOAD", "#!lua name=a\n" + body)) == expected, body
    # the load run sees only the library API
    for body, name in (("return math.random()", "math"), ("return redis.call('ping')", "call"),
                       ("return redis.setresp(3)", "setresp"), ("mt = getmetatable(_G)", "getmetatable")):
        assert "Script attempted to access nonexistent global variable '%s'" % name in \
            err(raw.call("FUNCTION", "LOAD", "#!lua name=a\n" + body)), body
    assert "Attempt to modify a readonly table" in err(raw.call("FUNCTION", "LOAD", "#!lua name=a\na = 1"))
    assert "FUNCTION LOAD timeout" in err(raw.call("FUNCTION", "LOAD", "#!lua name=a\nlocal a = 1 while 1 do a = a + 1 end"))
    assert raw.call("FUNCTION", "LOAD", '#!lua name="quoted"\nredis.register_function("q", function() return 1 end)') \
        == b"quoted"
    raw.call("FUNCTION", "FLUSH")


def test_function_runtime_rules(raw):
    raw.call("FUNCTION", "FLUSH")
    lib = ("#!lua name=rt\n"
           "local api = redis\n"
           "redis.register_function('sneaky', function() api.register_function('g', function() end) end)\n"
           "redis.register_function('reg', function() redis.register_function('g', function() end) end)\n"
           "redis.register_function('keys', function(keys, args) return {keys[1], args[1], #keys} end)\n"
           "redis.register_function('g2', function() return KEYS end)\n"
           "redis.register_function('trick', function() local mt = getmetatable(_G) mt.__index.redis = 1 end)\n")
    assert raw.call("FUNCTION", "LOAD", lib) == b"rt"
    assert "can only be called on FUNCTION LOAD command" in err(raw.call("FCALL", "sneaky", "0"))
    assert "attempt to call field 'register_function' (a nil value)" in err(raw.call("FCALL", "reg", "0"))
    assert raw.call("FCALL", "keys", "1", "k", "a") == [b"k", b"a", 1]
    assert "Script attempted to access nonexistent global variable 'KEYS'" in err(raw.call("FCALL", "g2", "0"))
    assert "Attempt to modify a readonly table" in err(raw.call("FCALL", "trick", "0"))
    assert raw.call("FUNCTION", "LOAD", "REPLACE",
                    "#!lua name=rt\nredis.register_function('e', function() return redis.call('nosuch') end)") == b"rt"
    assert err(raw.call("FCALL", "e", "0")) == \
        "ERR Unknown command called from script script: on @user_function:2."
    raw.call("FUNCTION", "FLUSH")


def test_function_dump_restore(r, raw):
    raw.call("FUNCTION", "FLUSH")
    r.function_load(LIB)
    payload = raw.call("FUNCTION", "DUMP")
    assert payload[0] == 245 and payload[-10:-8] == b"\x0b\x00"
    assert err(raw.call("FUNCTION", "RESTORE", payload)) == "ERR Library mylib already exists"
    assert err(raw.call("FUNCTION", "RESTORE", payload, "BAD")) == \
        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
    assert err(raw.call("FUNCTION", "RESTORE", payload[:-1] + b"\x00")) == \
        "ERR DUMP payload version or checksum are wrong"
    assert err(raw.call("FUNCTION", "RESTORE", payload, "FLUSH", "X")) == \
        "ERR unknown subcommand or wrong number of arguments for 'restore'. Try FUNCTION HELP."
    assert raw.call("FUNCTION", "RESTORE", payload, "REPLACE") == b"OK"
    assert raw.call("FUNCTION", "FLUSH") == b"OK"
    assert raw.call("FUNCTION", "LIST") == []
    assert raw.call("FUNCTION", "RESTORE", payload) == b"OK"
    assert r.fcall("myincr", 1, "c", 2) == 2
    other = "#!lua name=other\nredis.register_function('myget', function() return 1 end)"
    raw.call("FUNCTION", "FLUSH")
    raw.call("FUNCTION", "LOAD", other)
    assert err(raw.call("FUNCTION", "RESTORE", payload)) == "ERR Function myget already exists"
    assert raw.call("FUNCTION", "RESTORE", payload, "FLUSH") == b"OK"
    assert [lib[1] for lib in raw.call("FUNCTION", "LIST")] == [b"mylib"]
    # Valkey writes library code as an LZF-compressed RDB string when that is shorter: restore reads it
    assert raw.call("FUNCTION", "RESTORE", _lzf_payload(), "FLUSH") == b"OK"
    assert r.fcall("test", 0) == b"hello"
    assert raw.call("FUNCTION", "FLUSH", "SYNC") == b"OK"
    assert err(raw.call("FUNCTION", "FLUSH", "BAD")) == "ERR FUNCTION FLUSH only supports SYNC|ASYNC option"
    assert raw.call("FUNCTION", "HELP")[0] == b"FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"


# -- effects: deterministic replay ---------------------------------------------------------------------------------

def test_script_effects_replay_deterministically():
    replies, effects = run_and_replay([
        ["SADD", "s", "a", "b", "c", "d"],
        ["EVAL", "redis.call('set', KEYS[1], ARGV[1]); redis.call('incr', KEYS[1]); return redis.call('get', KEYS[1])",
         "1", "k", "41"],
        ["EVAL", "return redis.call('spop', KEYS[1])", "1", "s"],
        ["EVAL", "return redis.call('srandmember', KEYS[1])", "1", "s"],
        ["EVAL", "redis.call('expire', KEYS[1], 100); return redis.call('ttl', KEYS[1])", "1", "k"],
        ["EVAL", "redis.call('incr', 'n'); redis.call('nosuch')", "0"],
        ["EVAL", "redis.call('select', 3); redis.call('set', 'x', math.random(1000))", "0"],
        ["EVAL_RO", "return redis.call('get', 'k')", "0"],
        ["FUNCTION", "LOAD", LIB],
        ["FCALL", "myincr", "1", "cnt", "5"],
        ["FUNCTION", "LOAD", "#!lua name=two\nredis.register_function('two', function(k) return redis.call('lpush', k[1], 'x') end)"],
        ["FCALL", "two", "1", "lst"],
        ["FUNCTION", "DELETE", "two"],
        ["FUNCTION", "DUMP"],
        ["FUNCTION", "FLUSH"],
        ["FUNCTION", "FLUSH"],
    ])
    assert replies[1] == b"42"
    assert replies[4] == 100
    assert type(replies[5]).__name__ == "ErrorReply"
    assert replies[9] == 5
    names = [argv[0] for _db, argv in effects]
    assert b"SREM" in names and b"PEXPIREAT" in names
    assert (0, (b"FUNCTION", b"FLUSH")) in effects
    assert sum(1 for _db, argv in effects if argv[:2] == (b"FUNCTION", b"FLUSH")) == 1   # the 2nd changed nothing
    assert any(db == 3 for db, _argv in effects)
    assert not any(argv[0] in (b"EVAL", b"EVAL_RO", b"FCALL") for _db, argv in effects)
    # FUNCTION RESTORE propagates itself, and restores the same libraries on replay
    payload = replies[13]
    run_and_replay([["FUNCTION", "RESTORE", payload], ["FCALL", "myincr", "1", "z", "3"]])


# -- durability: kill -9 and restart ------------------------------------------------------------------------------

def test_script_writes_and_functions_survive_kill9(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        c.function_load(LIB)
        for i in range(50):
            c.eval("redis.call('incr', KEYS[1]); redis.call('rpush', KEYS[2], ARGV[1]); "
                   "redis.call('sadd', KEYS[3], 'a', 'b', 'c'); redis.call('spop', KEYS[3])", 3, "n", "l", "s", i)
            c.fcall("myincr", 1, "f", 2)
        expected = {"n": c.get("n"), "l": c.lrange("l", 0, -1), "s": set(c.smembers("s")), "f": c.get("f")}
        # a script's writes are one journal entry
        before = c.info("durability")["journal_commit_index"]
        c.eval("redis.call('incr', 'a'); redis.call('incr', 'b'); redis.call('incr', 'c')", 0)
        assert c.info("durability")["journal_commit_index"] == before + 1
        c.delete("a", "b", "c")
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert {"n": c.get("n"), "l": c.lrange("l", 0, -1), "s": set(c.smembers("s")), "f": c.get("f")} == expected
        assert expected["n"] == b"50" and expected["f"] == b"100"
        assert c.fcall("myincr", 1, "f", 1) == 101
        assert c.fcall_ro("myget", 1, "f") == b"101"


def test_functions_survive_restart_through_a_snapshot(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        c.function_load(LIB)
        c.function_load("#!lua name=lib2\nredis.register_function('hello', function() return 'hi' end)")
        c.function_delete("lib2")
        c.function_load("#!lua name=lib3\nredis.register_function('bye', function() return 'bye' end)")
        c.set("k", "v")
        assert c.save()
        c.fcall("myincr", 1, "after", 7)
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert sorted(lib[b"library_name"] if isinstance(lib, dict) else lib[1] for lib in c.function_list()) == \
            [b"lib3", b"mylib"]
        assert c.fcall("bye", 0) == b"bye"
        assert c.get("after") == b"7"
        assert c.get("k") == b"v"


# -- long scripts: BUSY, SCRIPT KILL, FUNCTION KILL -------------------------------------------------------------------

@pytest.fixture
def slow_server(server_factory, tmp_path):
    return server_factory("--busy-reply-threshold", "100", data_dir=tmp_path / "slow")


def _busy(client):
    try:
        client.ping()
    except valkey.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def _run_in_thread(fn):
    box = {}

    def target():
        try:
            box["reply"] = fn()
        except Exception as exc:  # noqa: BLE001
            box["error"] = str(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def test_busy_script_and_script_kill(slow_server):
    c = slow_server.client()
    c.set("k", "v")
    long = slow_server.client()
    t, box = _run_in_thread(lambda: long.eval("while true do end", 0))
    wait_until(lambda: _busy(c), what="BUSY reply")
    with pytest.raises(valkey.ResponseError) as exc:
        c.get("k")
    assert str(exc.value) == "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    with pytest.raises(valkey.ResponseError, match="BUSY Valkey is busy running a script. You can only call "
                                                   "SCRIPT KILL"):
        c.execute_command("FUNCTION", "KILL")
    with pytest.raises(valkey.ResponseError, match="BUSY"):
        c.execute_command("FUNCTION", "STATS")
    assert c.script_kill() is True
    t.join(10)
    assert "Script killed by user with SCRIPT KILL." in box["error"]
    assert c.ping() is True
    assert c.get("k") == b"v"
    # a pcall loop cannot swallow the kill
    t, box = _run_in_thread(lambda: long.eval(
        "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end", 0))
    wait_until(lambda: _busy(c), what="BUSY reply")
    assert c.script_kill() is True
    t.join(10)
    assert "killed by user" in box["error"]
    assert c.ping() is True


def test_busy_script_pipelined_commands_wait(slow_server):
    # the probe's own socket timeout is short so that a probe the busy loop answers late is retried within the
    # (scaled) deadline instead of holding the test up; every wait below scales with DURAKV_TEST_TIME_SCALE
    c = slow_server.client(socket_timeout=scaled(2))
    p = Raw(slow_server.port)
    p.sock.sendall(b"*3\r\n$4\r\neval\r\n$33\r\nwhile 1 do redis.call('ping') end\r\n$1\r\n0\r\n"
                   b"*1\r\n$4\r\nping\r\n")
    wait_until(lambda: _busy(c), 30, what="BUSY reply")
    assert c.script_kill() is True
    assert "Script killed by user with SCRIPT KILL." in err(p.read())
    assert p.read() == b"PONG"
    p.close()


def test_script_that_finishes_after_threshold(slow_server):
    c = slow_server.client()
    # slow but finite, with writes: the reply comes at the end, other clients get BUSY meanwhile
    assert c.eval("for i=1,20000 do redis.call('incr', KEYS[1]) end return redis.call('get', KEYS[1])",
                  1, "cnt") == b"20000"
    assert c.get("cnt") == b"20000"
    assert c.ping() is True


def test_unkillable_after_write_then_shutdown_nosave(slow_server):
    c = slow_server.client()
    long = slow_server.client()
    t, box = _run_in_thread(lambda: long.eval("redis.call('set', KEYS[1], 'y'); while true do end", 1, "x"))
    wait_until(lambda: _busy(c), what="BUSY reply")
    with pytest.raises(valkey.ResponseError) as exc:
        c.script_kill()
    assert str(exc.value).startswith("UNKILLABLE Sorry the script already executed write commands")
    assert _busy(c)
    with pytest.raises(valkey.ResponseError, match="BUSY"):
        c.execute_command("SHUTDOWN")
    try:
        c.execute_command("SHUTDOWN", "NOSAVE")
    except valkey.ConnectionError:
        pass
    slow_server.proc.wait(timeout=20)
    t.join(10)
    assert "error" in box


def test_busy_function_stats_and_function_kill(slow_server):
    c = slow_server.client()
    c.function_load("#!lua name=slow\nredis.register_function('spin', function() while true do end end)")
    long = slow_server.client()
    t, box = _run_in_thread(lambda: long.fcall("spin", 0))
    wait_until(lambda: _busy(c), what="BUSY reply")
    with pytest.raises(valkey.ResponseError, match="You can only call FUNCTION KILL or SHUTDOWN NOSAVE"):
        c.get("x")
    stats = c.execute_command("FUNCTION", "STATS")
    running = stats[1] if isinstance(stats, list) else stats[b"running_script"]
    assert running[0:3] == [b"name", b"spin", b"command"] and [a.lower() for a in running[3]] == \
        [b"fcall", b"spin", b"0"]
    with pytest.raises(valkey.ResponseError, match="You can only call FUNCTION KILL"):
        c.script_kill()
    assert c.execute_command("FUNCTION", "KILL") in (b"OK", "OK", True)
    t.join(10)
    assert "Script killed by user with FUNCTION KILL." in box["error"]
    assert c.ping() is True


def test_time_inside_a_script_is_the_time_it_started(r):
    # Valkey's "TIME command using cached time": server.call('TIME') answers the same time all through a script
    r.execute_command("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1")
    try:
        first, second = r.eval("local a = {redis.call('TIME')} redis.call('DEBUG', 'SLEEP', 0.01) "
                               "local b = {redis.call('TIME')} return {a, b}", 0)
    finally:
        r.execute_command("DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0")
    assert first == second
    after = r.time()
    assert (after[0], after[1]) > (int(first[0][0]), int(first[0][1]))
    with pytest.raises(valkey.ResponseError, match="This Valkey command is not allowed from script"):
        r.eval("redis.call('DEBUG', 'SLEEP', 0)", 0)


def test_script_errors_are_counted_once(r):
    # Valkey's "Consistent eval error reporting" and "LUA redis.error_reply API": an error of a command a
    # script calls is counted where it arises (rejected_calls / failed_calls of that command), the script's
    # reply of it is not counted again, and an error the script makes itself counts once
    def stats():
        cs = r.info("commandstats")
        pick = {k[8:]: (v["calls"], v["rejected_calls"], v["failed_calls"]) for k, v in cs.items()
                if k in ("cmdstat_set", "cmdstat_eval", "cmdstat_select")}
        return dict(r.info("errorstats")), r.info("stats")["total_error_replies"], pick
    try:
        r.config_resetstat()
        r.config_set("maxmemory", 1)
        with pytest.raises(valkey.ResponseError, match="command not allowed when used memory"):
            r.eval("return redis.call('set','x','y')", 1, "x")
        assert stats() == ({"errorstat_OOM": {"count": 1}}, 1, {"set": (0, 1, 0), "eval": (1, 0, 1)})
        r.config_resetstat()
        assert r.eval("return redis.pcall('set','x','y')['err']", 1, "x").startswith(b"OOM ")
        assert stats() == ({"errorstat_OOM": {"count": 1}}, 1, {"set": (0, 1, 0), "eval": (1, 0, 0)})
        r.config_resetstat()
        with pytest.raises(valkey.ResponseError):
            r.eval("return redis.pcall('set','x','y')", 1, "x")
        assert stats() == ({"errorstat_OOM": {"count": 1}}, 1, {"set": (0, 1, 0), "eval": (1, 0, 1)})
        r.config_set("maxmemory", 0)
        r.config_resetstat()
        with pytest.raises(valkey.ResponseError, match="DB index is out of range"):
            r.eval("return redis.call('select',99)", 0)
        assert stats() == ({"errorstat_ERR": {"count": 1}}, 1, {"select": (1, 0, 1), "eval": (1, 0, 1)})
        r.config_resetstat()
        with pytest.raises(valkey.ResponseError, match="MY_ERR_CODE custom msg"):
            r.eval("return redis.error_reply('MY_ERR_CODE custom msg')", 0)
        assert stats() == ({"errorstat_MY_ERR_CODE": {"count": 1}}, 1, {"eval": (1, 0, 1)})
    finally:
        r.config_set("maxmemory", 0)


def test_sort_by_constant_is_ordered_inside_scripts(r):
    # Valkey's "SORT BY <constant> output gets ordered for scripting" (a set's order must not leak into a
    # script); outside scripts the order is the set's own
    members = ["a", "aa", "aaa", "azz"] + list("bcdefghilmnopqrstuvz")
    r.sadd("myset", *members)
    assert r.eval("return redis.call('sort',KEYS[1],'by','_')", 1, "myset") == sorted(m.encode() for m in members)
    r.sadd("s2", "a", "b", "c")
    r.set("foo:a", "x")
    assert r.eval("return redis.call('sort',KEYS[1],'by','_','get','#','get','_:*')", 1, "s2") == [
        b"a", None, b"b", None, b"c", None]
