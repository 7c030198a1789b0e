"""Lua 5.1 bytecode (string.dump's format, lundump.c) rewritten so that no call is a tail call.

Why: Lua 5.1 reuses the caller's frame for `return f(...)` when f is a Lua function, and the caller's line is
gone from then on. Valkey's server.call is a C function, which a tail call never replaces, so its errors always
name the script's line ("... script: ..., on @user_script:1."). durakv's server.call must be a Lua function (a
call with thousands of arguments cannot reach Python directly, see prelude.py), so scripts are compiled with
every OP_TAILCALL turned into OP_CALL: the code generator always follows OP_TAILCALL A B 0 with OP_RETURN A 0,
which returns exactly what the call left on the stack, so the results are the same; only the frame stays.
The one difference a script can see: unbounded tail recursion now ends with Lua's "stack overflow" (at 20000
frames, LUAI_MAXCALLS) instead of running until the script is killed.
"""

import struct

OP_CALL = 28
OP_TAILCALL = 29

_HEADER = b"\x1bLua\x51\x00"


class BytecodeError(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0
        if data[:6] != _HEADER or len(data) < 12:
            raise BytecodeError("not a Lua 5.1 chunk")
        self.little = data[6] == 1
        self.int_size, self.size_t, self.instr_size, self.num_size = data[7], data[8], data[9], data[10]
        if self.instr_size != 4:
            raise BytecodeError("unsupported instruction size %d" % self.instr_size)
        self.order = "<" if self.little else ">"
        self.pos = 12

    def take(self, n):
        if self.pos + n > len(self.data):
            raise BytecodeError("truncated chunk")
        start = self.pos
        self.pos += n
        return start

    def uint(self, size):
        start = self.take(size)
        return int.from_bytes(self.data[start:start + size], "little" if self.little else "big")

    def int(self):
        return self.uint(self.int_size)

    def string(self):
        n = self.uint(self.size_t)
        if n:
            self.take(n)


def _function(r: _Reader, patches: list):
    r.string()                              # source
    r.int()                                 # linedefined
    r.int()                                 # lastlinedefined
    r.take(4)                               # nups, numparams, is_vararg, maxstacksize
    ncode = r.int()
    start = r.take(4 * ncode)
    fmt = r.order + "I"
    for i in range(ncode):
        off = start + 4 * i
        (ins,) = struct.unpack_from(fmt, r.data, off)
        if ins & 0x3F == OP_TAILCALL:
            patches.append((off, (ins & ~0x3F) | OP_CALL))
    for _ in range(r.int()):                # constants
        kind = r.data[r.take(1)]
        if kind == 1:                       # boolean
            r.take(1)
        elif kind == 3:                     # number
            r.take(r.num_size)
        elif kind == 4:                     # string
            r.string()
        elif kind != 0:                     # nil
            raise BytecodeError("unknown constant type %d" % kind)
    for _ in range(r.int()):                # nested functions
        _function(r, patches)
    r.take(r.int_size * r.int())            # line info
    for _ in range(r.int()):                # local variables: name, startpc, endpc
        r.string()
        r.int()
        r.int()
    for _ in range(r.int()):                # upvalue names
        r.string()


def without_tail_calls(chunk: bytes) -> bytes:
    """The chunk (string.dump output, nested functions included) with every OP_TAILCALL made an OP_CALL."""
    r = _Reader(bytes(chunk))
    patches = []
    _function(r, patches)
    if r.pos != len(r.data):
        raise BytecodeError("trailing bytes after the chunk")
    if not patches:
        return r.data
    out = bytearray(r.data)
    fmt = r.order + "I"
    for off, ins in patches:
        struct.pack_into(fmt, out, off, ins)
    return bytes(out)
