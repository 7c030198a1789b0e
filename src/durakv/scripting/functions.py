"""Function libraries (FUNCTION LOAD ... FCALL): part of the data, kept per Keyspace.

`get_functions(keyspace)` is the registry a keyspace carries (attribute `functions`); the snapshot
writer asks it for `snapshot_commands()` (FUNCTION LOAD per library), and FUNCTION LOAD / DELETE / FLUSH
/ RESTORE propagate themselves, so the journal and snapshots rebuild the same libraries.

FUNCTION DUMP / RESTORE use Valkey's payload: per library the RDB opcode 245 and the library code as an
RDB string, then the RDB version (2 bytes, little-endian) and a CRC64 (Jones, little-endian), so payloads
move between durakv and Valkey (LZF-compressed and integer-encoded strings are read too).
"""

import time

from .. import messages
from ..config import split_args
from ..keyspace.rdbvalue import crc64, lzf_decompress
from .lua import LuaEngine, is_lua_function, is_lua_table
from .runner import FLAG_NAMES

LOAD_TIMEOUT_MS = 500
RDB_VERSION = 11
RDB_OPCODE_FUNCTION2 = 245
RDB_OPCODE_FUNCTION_PRE_GA = 246
NAME_ERROR = ("Library names can only contain letters, numbers, or underscores(_) and must be at least one "
              "character long")
FUNCTION_NAME_ERROR = ("Function names can only contain letters, numbers, or underscores(_) and must be at least "
                       "one character long")
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_FLAG_BY_NAME = {name: flag for flag, name in FLAG_NAMES}


class FunctionError(Exception):
    """A FUNCTION command failed; args[0] is the message (without the ERR prefix)."""


class FunctionInfo:
    __slots__ = ("name", "desc", "flags", "fn", "library")

    def __init__(self, name, desc, flags, fn, library):
        self.name = name
        self.desc = desc
        self.flags = flags
        self.fn = fn
        self.library = library


class Library:
    __slots__ = ("name", "code", "functions")

    def __init__(self, name, code):
        self.name = name
        self.code = code
        self.functions = {}        # name -> FunctionInfo, registration order


class LibCtx:
    """A set of libraries and the index of their functions (functionsLibCtx)."""

    __slots__ = ("libraries", "functions")

    def __init__(self):
        self.libraries = {}        # name -> Library (case-sensitive, load order)
        self.functions = {}        # lowercase name -> FunctionInfo (FCALL is case-insensitive)

    def link(self, lib):
        for fi in lib.functions.values():
            self.functions[fi.name.lower()] = fi
        self.libraries[lib.name] = lib

    def unlink(self, lib):
        for fi in lib.functions.values():
            self.functions.pop(fi.name.lower(), None)
        self.libraries.pop(lib.name, None)

    def function_count(self):
        return len(self.functions)


class _LoadRun:
    """The run context while a library's top-level code runs (only register_function and log)."""

    __slots__ = ("hook", "loading", "load_deadline", "library", "registered", "funcname", "resp", "caller_resp3")

    def __init__(self, library, timeout_ms):
        self.library = library
        self.registered = []       # FunctionInfo in registration order, names not yet checked
        self.loading = True
        self.hook = True
        self.load_deadline = time.monotonic() + timeout_ms / 1000.0 if timeout_ms else None
        self.funcname = b""
        self.resp = 2
        self.caller_resp3 = False

    def interrupt(self):
        if self.load_deadline is not None and time.monotonic() > self.load_deadline:
            return messages.FUNCTION_LOAD_TIMEOUT.encode()
        return None

    def set_resp(self, resp):
        pass

    def execute(self, argv):  # pragma: no cover - server.call is not reachable while loading
        raise RuntimeError("server.call while loading a library")

    def lookup(self, argv):
        return None


def verify_name(name: bytes) -> bool:
    return bool(name) and all(c in _NAME_CHARS for c in name)


def parse_metadata(code: bytes):
    """functionExtractLibMetaData: (engine, name, body) where body starts at the shebang's newline."""
    if not code.startswith(b"#!"):
        raise FunctionError("Missing library metadata")
    nl = code.find(b"\n")
    if nl < 0:
        raise FunctionError("Invalid library metadata")
    parts = split_args(code[:nl])
    if not parts:
        raise FunctionError("Invalid library metadata")
    engine = parts[0][2:]
    name = None
    for part in parts[1:]:
        if part[:5].lower() == b"name=":
            if name is not None:
                raise FunctionError("Invalid metadata value, name argument was given multiple times")
            name = part[5:]
            continue
        raise FunctionError("Invalid metadata value given: %s" % part.decode("utf-8", "replace"))
    if name is None:
        raise FunctionError("Library name was not given")
    return engine, name, code[nl:]


class Functions:
    """The libraries of one keyspace and the Lua state their functions live in."""

    def __init__(self):
        self.ctx = LibCtx()
        self._engine = None

    @property
    def engine(self) -> LuaEngine:
        if self._engine is None:
            self._engine = LuaEngine("function", register_fn=_register)
        return self._engine

    def lookup(self, name: bytes):
        return self.ctx.functions.get(name.lower())

    # -- FUNCTION LOAD ---------------------------------------------------------------------------------
    def create(self, code: bytes, replace: bool, timeout_ms: int, ctx: LibCtx = None) -> bytes:
        """functionsCreateWithLibraryCtx: compiles and links a library; its name. Raises FunctionError."""
        ctx = ctx or self.ctx
        engine_name, name, body = parse_metadata(code)
        if not verify_name(name):
            raise FunctionError(NAME_ERROR)
        if engine_name.upper() != b"LUA":
            raise FunctionError("Engine '%s' not found" % engine_name.decode("utf-8", "replace"))
        old = ctx.libraries.get(name)
        if old is not None and not replace:
            raise FunctionError("Library '%s' already exists" % name.decode("utf-8", "replace"))
        if old is not None:
            ctx.unlink(old)
        try:
            lib = Library(name, code)
            engine = self.engine
            fn, err = engine.compile(body, b"@user_function")
            if fn is None:
                raise FunctionError("Error compiling function: %s" % err.decode("utf-8", "replace"))
            run = _LoadRun(lib, timeout_ms)
            ok, err = engine.load_library(run, fn)
            if not ok:
                raise FunctionError("Error registering functions: %s" % err.decode("utf-8", "replace"))
            # Valkey 9 checks the names once the library's code has run (the engine only collects them), in
            # registration order, and its error is FUNCTION LOAD's own, not a Lua error
            for fi in run.registered:
                if not verify_name(fi.name):
                    raise FunctionError(FUNCTION_NAME_ERROR)
                if fi.name in lib.functions:
                    raise FunctionError("Function already exists in the library")
                lib.functions[fi.name] = fi
            if not lib.functions:
                raise FunctionError("No functions registered")
            for fi in lib.functions.values():
                if fi.name.lower() in ctx.functions:
                    raise FunctionError("Function %s already exists" % fi.name.decode("utf-8", "replace"))
        except FunctionError:
            if old is not None:
                ctx.link(old)
            raise
        ctx.link(lib)
        return name

    def delete(self, name: bytes) -> bool:
        lib = self.ctx.libraries.get(name)
        if lib is None:
            return False
        self.ctx.unlink(lib)
        return True

    def flush(self):
        self.ctx = LibCtx()

    # -- DUMP / RESTORE ----------------------------------------------------------------------------------
    def dump(self) -> bytes:
        parts = []
        for lib in self.ctx.libraries.values():
            parts.append(bytes((RDB_OPCODE_FUNCTION2,)))
            parts.append(_rdb_len(len(lib.code)))
            parts.append(lib.code)
        parts.append(RDB_VERSION.to_bytes(2, "little"))
        payload = b"".join(parts)
        return payload + crc64(payload).to_bytes(8, "little")

    def restore(self, payload: bytes, policy: bytes):
        """functionRestoreCommand after the policy check. Raises FunctionError."""
        if not verify_dump_payload(payload):
            raise FunctionError("DUMP payload version or checksum are wrong")
        tmp = LibCtx()
        pos = 0
        end = len(payload) - 10
        while pos < end:
            kind = payload[pos]
            pos += 1
            if kind == RDB_OPCODE_FUNCTION_PRE_GA:
                raise FunctionError("Pre-GA function format not supported")
            if kind != RDB_OPCODE_FUNCTION2:
                raise FunctionError("given type is not a function")
            try:
                code, pos = _rdb_string(payload, pos, end)
            except (IndexError, ValueError):
                raise FunctionError("Failed loading library payload") from None
            self.create(code, False, 0, tmp)
        if policy == b"FLUSH":
            self.ctx = tmp
            return
        self._join(tmp, policy == b"REPLACE")

    def _join(self, src: LibCtx, replace: bool):
        dst = self.ctx
        replaced = []
        try:
            for lib in src.libraries.values():
                old = dst.libraries.get(lib.name)
                if old is not None:
                    if not replace:
                        raise FunctionError("Library %s already exists" % lib.name.decode("utf-8", "replace"))
                    dst.unlink(old)
                    replaced.append(old)
            for key, fi in src.functions.items():
                if key in dst.functions:
                    raise FunctionError("Function %s already exists" % fi.name.decode("utf-8", "replace"))
        except FunctionError:
            for old in replaced:
                dst.link(old)
            raise
        for lib in src.libraries.values():
            dst.link(lib)

    # -- persistence ---------------------------------------------------------------------------------------
    def snapshot_commands(self):
        """The commands that rebuild these libraries on an empty registry (snapshot/format.py)."""
        for lib in self.ctx.libraries.values():
            yield (b"FUNCTION", b"LOAD", lib.code)

    def __bool__(self):
        return bool(self.ctx.libraries)


def get_functions(keyspace) -> Functions:
    funcs = getattr(keyspace, "functions", None)
    if funcs is None:
        funcs = keyspace.functions = Functions()
    return funcs


# -- server.register_function ------------------------------------------------------------------------------

def _err(text):
    return ("ERR " + text).encode()


def _lua_str(v):
    """lua_isstring + lua_tostring: strings and numbers, else None."""
    t = type(v)
    if t is bytes:
        return v
    if t is int:
        return b"%d" % v
    if t is float:
        return (b"%.14g" % v)
    return None


def _register(run, argc, args):
    """luaRegisterFunction: None, or the error message (raised as {err=...} by the Lua wrapper)."""
    lib = run.library
    if argc < 1 or argc > 2:
        return _err("wrong number of arguments to server.register_function")
    desc = None
    flags = 0
    if argc == 1:
        table = args[0]
        if not is_lua_table(table):
            return _err("calling server.register_function with a single argument is only applicable to Lua "
                        "table (representing named arguments).")
        name = callback = None
        for key, value in table.items():
            k = _lua_str(key)
            if k is None:
                return _err("named argument key given to server.register_function is not a string")
            k = k.lower()
            if k == b"function_name":
                name = _lua_str(value)
                if name is None:
                    return _err("function_name argument given to server.register_function must be a string")
            elif k == b"description":
                desc = _lua_str(value)
                if desc is None:
                    return _err("description argument given to server.register_function must be a string")
            elif k == b"callback":
                if not is_lua_function(value):
                    return _err("callback argument given to server.register_function must be a function")
                callback = value
            elif k == b"flags":
                if not is_lua_table(value):
                    return _err("flags argument to server.register_function must be a table representing "
                                "function flags")
                j = 1
                while True:
                    f = value[j]
                    if f is None:
                        break
                    fs = _lua_str(f)
                    bit = _FLAG_BY_NAME.get(fs.lower()) if fs is not None else None
                    if bit is None:
                        return _err("unknown flag given")
                    flags |= bit
                    j += 1
            else:
                return _err("unknown argument given to server.register_function")
        if name is None:
            return _err("server.register_function must get a function name argument")
        if callback is None:
            return _err("server.register_function must get a callback argument")
    else:
        name = _lua_str(args[0])
        if name is None:
            return _err("first argument to server.register_function must be a string")
        callback = args[1]
        if not is_lua_function(callback):
            return _err("second argument to server.register_function must be a function")
    run.registered.append(FunctionInfo(name, desc, flags, callback, lib))
    return None


# -- RDB strings and CRC64 ------------------------------------------------------------------------------------

def _rdb_len(n: int) -> bytes:
    if n < 64:
        return bytes((n,))
    if n < 16384:
        return bytes((0x40 | (n >> 8), n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def _rdb_read_len(data: bytes, pos: int):
    """(length, is_encoded, pos)."""
    b = data[pos]
    kind = b >> 6
    if kind == 0:
        return b & 0x3F, False, pos + 1
    if kind == 1:
        return ((b & 0x3F) << 8) | data[pos + 1], False, pos + 2
    if kind == 3:
        return b & 0x3F, True, pos + 1
    if b == 0x80:
        return int.from_bytes(data[pos + 1:pos + 5], "big"), False, pos + 5
    if b == 0x81:
        return int.from_bytes(data[pos + 1:pos + 9], "big"), False, pos + 9
    raise ValueError("bad length encoding")


def _rdb_string(data: bytes, pos: int, end: int):
    n, encoded, pos = _rdb_read_len(data, pos)
    if not encoded:
        if pos + n > end:
            raise ValueError("string past the end")
        return data[pos:pos + n], pos + n
    if n in (0, 1, 2):
        size = 1 << n
        value = int.from_bytes(data[pos:pos + size], "little", signed=True)
        return b"%d" % value, pos + size
    if n == 3:
        clen, _, pos = _rdb_read_len(data, pos)
        ulen, _, pos = _rdb_read_len(data, pos)
        if pos + clen > end:
            raise ValueError("string past the end")
        return lzf_decompress(data[pos:pos + clen], ulen), pos + clen
    raise ValueError("unknown string encoding")


def verify_dump_payload(payload: bytes) -> bool:
    if len(payload) < 10:
        return False
    version = payload[-10] | (payload[-9] << 8)
    if version > RDB_VERSION:
        return False
    return crc64(payload[:-8]) == int.from_bytes(payload[-8:], "little")
