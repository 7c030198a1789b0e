"""One sandboxed Lua 5.1 state (lupa) and the conversions between Lua values and durakv replies.

A LuaEngine is either the EVAL engine ("eval": KEYS/ARGV globals, the script cache's functions) or the
functions engine ("function": libraries registered by FUNCTION LOAD). The Lua side lives in prelude.py.
The engine never raises into Lua: every Python callback returns values the Lua wrappers turn into
errors, so error objects keep Valkey's shape ({err=...} tables with source/line added by the handler).

While a script runs, `self.run` is its ScriptRun (runner.py), which executes server.call commands and
answers the interrupt hook. The engine itself holds no server state.
"""

import hashlib
import json
import logging
import math
import os
import struct

try:
    from lupa import lua51 as _lupa
except ImportError:  # pragma: no cover - a lupa build without Lua 5.1: LuaJIT speaks the same dialect
    from lupa import luajit21 as _lupa

from .. import REDIS_COMPAT_VERSION, VALKEY_VERSION
from ..protocol.resp import ErrorReply, NullArray, Push, Raw, RespSet, encode, format_double
from .prelude import PRELUDE

log = logging.getLogger("durakv.script")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_REPLY_DEPTH = 400          # nesting of a script reply before "reached lua stack limit"
_LOG_LEVELS = (logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING)
_lua_type = _lupa.lua_type


def _version_num(text):
    parts = [int(p) for p in text.split(".")[:3]]
    while len(parts) < 3:
        parts.append(0)
    return (parts[0] << 16) | (parts[1] << 8) | parts[2]


def _deny_attributes(obj, name, is_setting):
    raise AttributeError("access to Python objects is not allowed from scripts")


def sha1hex(data: bytes) -> bytes:
    return hashlib.sha1(data).hexdigest().encode()


def number_arg(value) -> bytes:
    """A Lua number as a command argument (luaArgsToServerArgv): integers as digits, else fpconv_dtoa."""
    if type(value) is int:
        return b"%d" % value
    if value.is_integer() and -9.223372036854776e18 <= value < 9.223372036854776e18:
        return b"%d" % int(value)
    return format_double(value)


def error_text(text: str) -> str:
    """luaPushErrorBuff for a reply error: keeps 'CODE msg', prefixes ERR when there is no code."""
    sp = text.find(" ")
    if sp < 0:
        return "ERR " + text.strip("\r\n")
    return text[:sp] + " " + text[sp + 1:].strip("\r\n")


def _to_int64(value) -> int:
    """(long long)lua_Number: truncation toward zero; what x86 gives for NaN/inf/out of range."""
    if type(value) is int:
        return value if INT64_MIN <= value <= INT64_MAX else INT64_MIN
    if value != value or value in (math.inf, -math.inf):
        return INT64_MIN
    n = int(value)
    return n if INT64_MIN <= n <= INT64_MAX else INT64_MIN


# -- RESP bytes (Raw replies) -> reply values --------------------------------------------------------

def _parse_raw(data: bytes, pos=0):
    """(value, next_pos) for one RESP element of an already-encoded reply."""
    kind = data[pos:pos + 1]
    end = data.index(b"\r\n", pos)
    line = data[pos + 1:end]
    pos = end + 2
    if kind == b"+":
        return line.decode("utf-8", "replace"), pos
    if kind == b"-":
        return ErrorReply(line.decode("utf-8", "replace")), pos
    if kind == b":":
        return int(line), pos
    if kind in (b"$", b"="):
        n = int(line)
        if n < 0:
            return None, pos
        body = data[pos:pos + n]
        return (body[4:] if kind == b"=" else body), pos + n + 2
    if kind in (b"*", b"~", b">"):
        n = int(line)
        if n < 0:
            return NullArray, pos
        items = []
        for _ in range(n):
            v, pos = _parse_raw(data, pos)
            items.append(v)
        return (RespSet(items) if kind == b"~" else Push(items) if kind == b">" else items), pos
    if kind == b"%":
        out = {}
        for _ in range(int(line)):
            k, pos = _parse_raw(data, pos)
            v, pos = _parse_raw(data, pos)
            out[k if not isinstance(k, list) else tuple(k)] = v
        return out, pos
    if kind == b",":
        return float(line), pos
    if kind == b"#":
        return line == b"t", pos
    if kind == b"_":
        return None, pos
    if kind == b"(":
        return int(line), pos
    raise ValueError("unknown RESP type %r" % kind)


# -- rand48 (Valkey's serverLrand48, so math.random is the same sequence everywhere) ----------------

class Rand48:
    __slots__ = ("x",)

    def __init__(self, seed=None):
        self.x = 0x1234ABCD330E if seed is None else ((seed & 0xFFFFFFFF) << 16) | 0x330E

    def seed(self, value: int):
        self.x = ((value & 0xFFFFFFFF) << 16) | 0x330E

    def next(self) -> int:
        self.x = (0x5DEECE66D * self.x + 0xB) & 0xFFFFFFFFFFFF
        return self.x >> 17


# -- LuaBitOp ----------------------------------------------------------------------------------------

_BIT_BIAS = 6755399441055744.0  # 2^52 + 2^51
_PACK_D = struct.Struct("<d")
_UNPACK_Q = struct.Struct("<Q")


def _lua_str2number(s: bytes):
    t = s.strip(b" \t\n\r\f\v")
    if not t:
        return None
    try:
        if t[:2].lower() in (b"0x",) or t[:3].lower() in (b"-0x", b"+0x"):
            return float(int(t, 16))
        if t.lower().lstrip(b"+-") in (b"nan", b"inf", b"infinity"):
            return float(t)
        return float(t)
    except ValueError:
        return None


def _lua_typename(v) -> str:
    if v is None:
        return "nil"
    t = type(v)
    if t is bytes:
        return "string"
    if t is bool:
        return "boolean"
    if t is int or t is float:
        return "number"
    return (_lua_type(v) or "userdata")


def _bit_arg(v):
    if type(v) is int or type(v) is float:
        n = float(v)
    elif type(v) is bytes:
        n = _lua_str2number(v)
        if n is None:
            return None
    else:
        return None
    return _UNPACK_Q.unpack(_PACK_D.pack(n + _BIT_BIAS))[0] & 0xFFFFFFFF


def _signed32(b: int) -> int:
    return b - (1 << 32) if b & 0x80000000 else b


_BIT_ARITY = {"tobit": (1, 1), "bnot": (1, 1), "bswap": (1, 1), "band": (1, None), "bor": (1, None),
              "bxor": (1, None), "lshift": (2, 2), "rshift": (2, 2), "arshift": (2, 2), "rol": (2, 2),
              "ror": (2, 2), "tohex": (1, 2)}


def bit_op(name, argc, *args):
    """(result, None) or (None, error message) for bit.<name>(...)."""
    name = name.decode() if type(name) is bytes else name
    lo, hi = _BIT_ARITY[name]
    n = max(lo, argc if hi is None else min(argc, hi))
    vals = []
    for i in range(n):
        if i >= argc:
            return None, b"bad argument #%d to '%s' (number expected, got no value)" % (i + 1, name.encode())
        b = _bit_arg(args[i])
        if b is None:
            return None, b"bad argument #%d to '%s' (number expected, got %s)" % (
                i + 1, name.encode(), _lua_typename(args[i]).encode())
        vals.append(b)
    b = vals[0]
    if name == "tobit":
        return _signed32(b), None
    if name == "bnot":
        return _signed32(~b & 0xFFFFFFFF), None
    if name in ("band", "bor", "bxor"):
        for o in vals[1:]:
            if name == "band":
                b &= o
            elif name == "bor":
                b |= o
            else:
                b ^= o
        return _signed32(b), None
    if name == "bswap":
        return _signed32(int.from_bytes(b.to_bytes(4, "little"), "big")), None
    if name == "tohex":
        n = _signed32(vals[1]) if len(vals) > 1 else 8
        digits = "0123456789abcdef"
        if n == -(1 << 31):
            n += 1
        if n < 0:
            n = -n
            digits = "0123456789ABCDEF"
        if n > 8:
            n = 8
        out = []
        for _ in range(n):
            out.append(digits[b & 15])
            b >>= 4
        return "".join(reversed(out)).encode(), None
    n = vals[1] & 31
    if name == "lshift":
        r = (b << n) & 0xFFFFFFFF
    elif name == "rshift":
        r = b >> n
    elif name == "arshift":
        r = (_signed32(b) >> n) & 0xFFFFFFFF
    elif name == "rol":
        r = ((b << n) | (b >> (32 - n))) & 0xFFFFFFFF
    else:
        r = ((b >> n) | (b << (32 - n))) & 0xFFFFFFFF
    return _signed32(r), None


class LuaEngine:
    """A sandboxed Lua state plus the Python side of server.*, bit, cjson.decode and math.random."""

    def __init__(self, kind: str, register_fn=None):
        self.kind = kind
        self.run = None            # the ScriptRun being executed (runner.py)
        self.register_fn = register_fn
        self.rand = Rand48(int.from_bytes(os.urandom(4), "little"))
        rt = _lupa.LuaRuntime(encoding=None, register_eval=False, register_builtins=False,
                              unpack_returned_tuples=True, attribute_filter=_deny_attributes)
        self.rt = rt
        self.table_from = rt.table_from
        rt.execute(b"python = nil")
        py = rt.table_from({
            b"call": self._py_call, b"pcall": self._py_pcall, b"unwrap": self._py_unwrap, b"acl": self._py_acl, b"sha1": sha1hex, b"log": self._py_log,
            b"setresp": self._py_setresp, b"setrepl": self._py_setrepl, b"interrupt": self._py_interrupt,
            b"rand": self._py_rand, b"srand": self._py_srand, b"bit": bit_op, b"jdecode": self._py_jdecode,
            b"register": self._py_register,
        })
        versions = rt.table_from({
            b"REDIS_VERSION": REDIS_COMPAT_VERSION.encode(), b"REDIS_VERSION_NUM": _version_num(REDIS_COMPAT_VERSION),
            b"VALKEY_VERSION": VALKEY_VERSION.encode(), b"VALKEY_VERSION_NUM": _version_num(VALKEY_VERSION),
            b"SERVER_NAME": b"valkey",
        })
        api = rt.execute(PRELUDE.encode(), py, kind.encode(), versions)
        self._compile = api[b"compile"]
        self._run_eval = api[b"run_eval"]
        self._run_function = api[b"run_function"]
        self._load_library = api[b"load_library"]
        self._classify = api[b"classify"]
        self._error_info = api[b"error_info"]
        self._memory = api[b"memory"]
        self.json_null = api[b"null"]
        self._ok_key = b"ok"

    # -- compiling and running ---------------------------------------------------------------------
    def compile(self, body: bytes, chunkname: bytes):
        """(function, None) or (None, error message bytes)."""
        fn, err = self._compile(body, chunkname)
        if fn is None:
            return None, (err if type(err) is bytes else str(err).encode())
        return fn, None

    def call(self, run, fn, keys, args):
        """Runs a script (eval) or a registered function with run as context; returns the reply."""
        self.run = run
        try:
            tkeys = self.table_from(keys)
            targs = self.table_from(args)
            if self.kind == "eval":
                ok, res = self._run_eval(fn, tkeys, targs, run.hook)
            else:
                ok, res = self._run_function(fn, tkeys, targs, run.hook)
            if ok:
                return self.to_reply(res, run.resp == 3, run.caller_resp3, 0)
            return self._script_error(res, run.funcname)
        except _lupa.LuaMemoryError:
            return ErrorReply("ERR Error running script %s, not enough memory" % run.funcname.decode())
        except Exception as exc:  # noqa: BLE001 - a failure of the glue must not take the server down
            log.exception("script %s failed in the Lua glue", run.funcname)
            return ErrorReply("ERR Error running script %s, %.100s" % (run.funcname.decode(), exc))
        finally:
            self.run = None

    def load_library(self, run, fn):
        """Runs a library's top-level code with the load API; (True, None) or (False, message)."""
        self.run = run
        try:
            ok, err = self._load_library(fn, run.hook)
        finally:
            self.run = None
        if ok:
            return True, None
        kind, msg = self._error_info(err)[:2]
        if kind == b"table":
            text = msg if msg else b"ERR unknown error"
        else:
            text = b"ERR " + msg
        return False, text

    def memory(self) -> int:
        return int(self._memory())

    # -- Lua values -> replies ---------------------------------------------------------------------
    def _script_error(self, res, funcname: bytes):
        kind, msg, source, line = self._error_info(res)
        if kind == b"table":
            text = msg if msg else b"ERR unknown error"
            if source and line:
                text = b"%s script: %s, on %s:%s." % (text, funcname, source, line)
            return ErrorReply(text.decode("utf-8", "replace"))
        return ErrorReply("ERR Error running script %s, %.100s" % (
            funcname.decode("utf-8", "replace"), msg.decode("utf-8", "replace")))

    def to_reply(self, v, script_resp3: bool, caller_resp3: bool, depth: int):
        """luaReplyToServerReply for one value."""
        t = type(v)
        if t is bytes:
            return v
        if t is int or t is float:
            return _to_int64(v)
        if t is bool:
            if script_resp3:
                return v
            return 1 if v else None
        if v is None or _lua_type(v) != "table":
            return None
        if depth >= MAX_REPLY_DEPTH:
            return ErrorReply("ERR reached lua stack limit")
        kind, a, b = self._classify(v)
        depth += 1
        if kind == b"array":
            conv = self.to_reply
            return [conv(a[i], script_resp3, caller_resp3, depth) for i in range(1, b + 1)]
        if kind == b"err":
            return ErrorReply(a.decode("utf-8", "replace"))
        if kind == b"ok":
            return Raw(b"+%s\r\n" % a.replace(b"\r", b" ").replace(b"\n", b" "))
        if kind == b"double":
            return float(a)
        if kind == b"map" or kind == b"set":
            conv = self.to_reply
            items = [conv(a[i], script_resp3, caller_resp3, depth) for i in range(1, b + 1)]
            if kind == b"set":
                return RespSet(items)
            if caller_resp3:
                head = b"%%%d\r\n" % (b // 2)
            else:
                head = b"*%d\r\n" % b
            return Raw(head + b"".join(encode(x, caller_resp3) for x in items))
        if kind == b"big":
            s = a.replace(b"\r", b" ").replace(b"\n", b" ")
            return Raw(b"(%s\r\n" % s) if caller_resp3 else s
        if kind == b"verbatim":
            if not caller_resp3:
                return a
            fmt = (b[:3] + b"   ")[:3]
            return Raw(b"=%d\r\n%s:%s\r\n" % (len(a) + 4, fmt, a))
        return None

    # -- replies -> Lua values (server.call results) -------------------------------------------------
    def err_table(self, text: str):
        return self.table_from({b"err": error_text(text).encode("utf-8", "surrogateescape")})

    def to_lua(self, v, resp3: bool):
        t = type(v)
        if t is bytes:
            return v
        if t is int:
            return v
        if t is list or t is tuple or t is Push:
            conv = self.to_lua
            return self.table_from([conv(x, resp3) for x in v])
        if v is None or v is NullArray:
            return None if resp3 else False
        if t is Raw:
            if not v:
                return None if resp3 else False
            value, _ = _parse_raw(v)
            return self.to_lua(value, resp3)
        if t is str:
            return self.table_from({b"ok": v.encode()})
        if t is ErrorReply:
            return self.err_table(v.text)
        if t is float:
            if resp3:
                return self.table_from({b"double": v})
            return format_double(v)
        if t is bool:
            if resp3:
                return v
            return 1 if v else 0
        if t is dict:
            conv = self.to_lua
            if resp3:
                inner = self.table_from({})
                for k, val in v.items():
                    inner[conv(k, resp3)] = conv(val, resp3)
                return self.table_from({b"map": inner})
            flat = []
            for k, val in v.items():
                flat.append(conv(k, resp3))
                flat.append(conv(val, resp3))
            return self.table_from(flat)
        if t is RespSet:
            conv = self.to_lua
            if resp3:
                inner = self.table_from({})
                for x in v:
                    inner[conv(x, resp3)] = True
                return self.table_from({b"set": inner})
            return self.table_from([conv(x, resp3) for x in v])
        if isinstance(v, (bytearray, memoryview)):
            return bytes(v)
        if isinstance(v, int):
            return int(v)
        return self.err_table("ERR reply of type %s cannot be passed to a script" % t.__name__)

    # -- callbacks from Lua (never raise) ------------------------------------------------------------
    def _argv(self, args):
        """luaArgsToServerArgv: (argv, None) or (None, error table)."""
        if not args:
            return None, self.err_table("ERR Please specify at least one argument for this call")
        argv = []
        for a in args:
            t = type(a)
            if t is bytes:
                argv.append(a)
            elif t is int or t is float:
                argv.append(number_arg(a))
            else:
                return None, self.err_table("ERR Command arguments must be strings or integers")
        return argv, None

    def _py_call(self, *args):
        """server.call: a command error is raised (as the {err=...} table, see _py_unwrap)."""
        failed, value = self._command(args)
        if failed:
            raise ScriptRaise(value)
        return value

    def _py_pcall(self, *args):
        """server.pcall: a command error is returned as the {err=...} table."""
        return self._command(args)[1]

    @staticmethod
    def _py_unwrap(exc):
        """The Lua value of an error raised by a Python callback (else None: keep the error as it is)."""
        if isinstance(exc, ScriptRaise):
            return exc.value
        if isinstance(exc, BaseException):
            return ("ERR %s" % exc).encode()
        return None

    def _command(self, args):
        run = self.run
        if run is None:
            return True, self.err_table("ERR server.call() can only be used while a script runs")
        argv, err = self._argv(args)
        if err is not None:
            return True, err
        try:
            reply = run.execute(argv)
            value = self.to_lua(reply, run.resp == 3)
        except Exception as exc:  # noqa: BLE001
            log.exception("server.call(%r) failed", argv[:3])
            return True, self.err_table("ERR internal error in '%s': %s" % (
                argv[0].decode("utf-8", "replace"), exc))
        return type(reply) is ErrorReply, value

    def _py_acl(self, *args):
        run = self.run
        argv, err = self._argv(args)
        if err is not None:
            raise ScriptRaise(err)
        if run is None or run.lookup(argv) is None:
            raise ScriptRaise(self.err_table("ERR Invalid command passed to server.acl_check_cmd()"))
        return run.acl_allowed(argv)

    def _py_log(self, level, message):
        log.log(_LOG_LEVELS[int(level)], "%s", message.decode("utf-8", "replace"))

    def _py_setresp(self, resp):
        if resp != 2 and resp != 3:
            return b"ERR RESP version must be 2 or 3."
        if self.run is not None:
            self.run.set_resp(int(resp))
        return None

    def _py_setrepl(self, flags):
        flags = int(flags) if flags == flags else -1
        if flags & ~3 or flags < 0:
            return b"ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
        return None

    def _py_interrupt(self):
        run = self.run
        return run.interrupt() if run is not None else None

    def _py_rand(self):
        return (self.rand.next() % 0x7FFFFFFF) / 0x7FFFFFFF

    def _py_srand(self, seed):
        self.rand.seed(int(seed))

    def _py_jdecode(self, data, max_depth):
        try:
            value = json.loads(data.decode("utf-8", "surrogateescape"), parse_int=float)
        except json.JSONDecodeError as exc:
            return False, b"Expected value but found invalid token at character %d" % (exc.pos + 1)
        except (ValueError, RecursionError) as exc:
            return False, str(exc).encode()
        try:
            return True, self._json_to_lua(value, 0, int(max_depth))
        except _TooDeep as exc:
            return False, b"Found too many nested data structures (%d) at character 1" % exc.args[0]

    def _json_to_lua(self, v, depth, max_depth):
        t = type(v)
        if t is str:
            try:
                return v.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                return v.encode("utf-8", "surrogatepass")
        if t is float or t is bool:
            return v
        if v is None:
            return self.json_null
        depth += 1
        if depth > max_depth:
            raise _TooDeep(depth)
        conv = self._json_to_lua
        if t is list:
            return self.table_from([conv(x, depth, max_depth) for x in v])
        out = {}
        for k, val in v.items():
            out[conv(k, depth, max_depth)] = conv(val, depth, max_depth)
        return self.table_from(out)

    def _py_register(self, argc, *args):
        if self.register_fn is None or self.run is None or not getattr(self.run, "loading", False):
            return b"ERR server.register_function can only be called on FUNCTION LOAD command"
        try:
            return self.register_fn(self.run, argc, args)
        except Exception as exc:  # noqa: BLE001
            log.exception("server.register_function failed")
            return ("ERR %s" % exc).encode()


class _TooDeep(Exception):
    pass


class ScriptRaise(Exception):
    """Raised by a Python callback to raise `value` (a Lua value) as the Lua error."""

    def __init__(self, value):
        super().__init__("script error")
        self.value = value


def is_lua_function(v) -> bool:
    return _lua_type(v) == "function"


def is_lua_table(v) -> bool:
    return _lua_type(v) == "table"
