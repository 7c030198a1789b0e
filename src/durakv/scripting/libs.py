"""The Lua libraries Valkey links into its scripting engine besides Lua's own: bit (LuaBitOp 1.0.2),
struct (Roberto Ierusalimschy's struct.c) and cmsgpack (lua-cmsgpack 0.4.0), with their exact results and
error texts on x86-64 (long and size_t are 8 bytes, little-endian, MAXALIGN 8).

Each library is split where it is easiest to be exact:

* the Lua side (LIBS_LUA, spliced into the prelude chunk) checks and converts arguments the way the C API
  does (luaL_checknumber, lua_tonumber, luaL_checklstring), raises errors at the caller's line as a C
  function would, walks and builds tables with the same raw accesses in the same order (so a cmsgpack map
  round-trips with the byte order Valkey gives), and counts Lua stack slots where the C code checks them
  (luaL_checkstack), since those checks are the only bound on what a script can unpack;
* Python does the byte and integer arithmetic that Lua 5.1's doubles cannot do exactly: IEEE bit patterns,
  64-bit integer casts (with what x86 does where C leaves a cast undefined), float/double packing.

A Python function here never raises into Lua: it returns (False, narg, message) and the Lua wrapper raises.
"""

import struct as _st

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
INT64_MIN = -(1 << 63)
_INDEFINITE = 1 << 63          # what cvttsd2si gives for NaN and out-of-range values
_TWO63 = 9223372036854775808.0

_PACK_D = _st.Struct("<d").pack
_UNPACK_Q = _st.Struct("<Q").unpack
_BIT_BIAS = 6755399441055744.0  # 2^52 + 2^51: LuaBitOp's barg()


# -- C casts of a lua_Number (x86-64, gcc) ------------------------------------------------------------------

def to_int64(n) -> int:
    """(long long)n: truncation toward zero; NaN and out-of-range give INT64_MIN."""
    if type(n) is int:
        return n if INT64_MIN <= n < (1 << 63) else INT64_MIN
    if n != n or n in (float("inf"), float("-inf")):
        return INT64_MIN
    v = int(n)
    return v if INT64_MIN <= v < (1 << 63) else INT64_MIN


def to_uint64(n) -> int:
    """(unsigned long)n as gcc emits it: below 2^63 (and NaN, an unordered compare) one cvttsd2si, else
    cvttsd2si(n - 2^63) with the top bit flipped; so 2^64 and above give 0, negatives wrap."""
    if type(n) is int:
        n = float(n) if not -(1 << 63) <= n < (1 << 63) else n
        if type(n) is int:
            return n & MASK64
    if n != n or n < _TWO63:
        return to_int64(n) & MASK64
    return (to_int64(n - _TWO63) & MASK64) ^ _INDEFINITE


# -- bit -------------------------------------------------------------------------------------------------------

def bit_arg(n) -> int:
    """barg() for a number the Lua side could not convert exactly itself (|n| >= 2^51, inf, NaN): the low
    32 bits of the IEEE pattern of n + 2^52 + 2^51."""
    return _UNPACK_Q(_PACK_D(float(n) + _BIT_BIAS))[0] & MASK32


def _signed32(b: int) -> int:
    return b - (1 << 32) if b & 0x80000000 else b


def bit_op(name, *vals):
    """bit.<name> on arguments already converted to uint32 (barg); the result as BRET returns it."""
    b = vals[0]
    if name == b"band" or name == b"bor" or name == b"bxor":
        # BIT_OP folds from the last argument down to the second
        for o in reversed(vals[1:]):
            if name == b"band":
                b &= o
            elif name == b"bor":
                b |= o
            else:
                b ^= o
        return _signed32(b)
    if name == b"tobit":
        return _signed32(b)
    if name == b"bnot":
        return _signed32(~b & MASK32)
    if name == b"bswap":
        return _signed32(int.from_bytes(b.to_bytes(4, "little"), "big"))
    if name == b"tohex":
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
        return "".join(reversed(out)).encode()
    n = vals[1] & 31
    if name == b"lshift":
        r = (b << n) & MASK32
    elif name == b"rshift":
        r = b >> n
    elif name == b"arshift":
        r = (_signed32(b) >> n) & MASK32
    elif name == b"rol":
        r = ((b << n) | (b >> ((32 - n) & 31))) & MASK32
    else:  # ror
        r = ((b << ((32 - n) & 31)) | (b >> n)) & MASK32
    return _signed32(r)


# -- cmsgpack: the number encodings Lua cannot compute exactly ----------------------------------------------

def mp_double(n) -> bytes:
    """mp_encode_double: a float (0xca) when (double)(float)n == n, else a double (0xcb)."""
    d = float(n)
    try:
        packed = _st.pack(">f", d)
        if _st.unpack(">f", packed)[0] == d:
            return b"\xca" + packed
    except OverflowError:
        pass   # (float)d is inf while d is finite: never equal
    return b"\xcb" + _st.pack(">d", d)


def mp_float_value(data: bytes) -> float:
    """An 0xca float (4 bytes) or 0xcb double (8 bytes) payload, big-endian."""
    return _st.unpack(">f" if len(data) == 4 else ">d", data)[0]


# -- struct ----------------------------------------------------------------------------------------------------

_MAXINTSIZE = 32
_MAXALIGN = 8
_INT_MAX = 2147483647
_BIG, _LITTLE = 0, 1
_SIZES = {0x42: 1, 0x62: 1, 0x48: 2, 0x68: 2, 0x4C: 8, 0x6C: 8, 0x54: 8, 0x66: 4, 0x64: 8, 0x78: 1}
_INTS = frozenset(b"bBhHlLTiI")
_DIGITS = frozenset(b"0123456789")
_ALNUM = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
MAXCSTACK = 8000          # LUAI_MAXCSTACK: the stack slots a C function may use


class _Fail(Exception):
    """A luaL_error (narg None) or luaL_argerror (narg set) of the C library."""

    def __init__(self, message: bytes, narg=None):
        super().__init__(message)
        self.message = message
        self.narg = narg


def _typename(v) -> bytes:
    if v is None:
        return b"nil"
    t = type(v)
    if t is bytes:
        return b"string"
    if t is bool:
        return b"boolean"
    if t is int or t is float:
        return b"number"
    return b"userdata"


class StructLib:
    """struct.pack / struct.unpack / struct.size on arguments as Lua passed them.

    tonumber and tostring are Lua's own (lua_tonumber / lua_tolstring), called back for the rare string
    argument where a number is expected or the reverse, so conversions are exactly Lua's."""

    def __init__(self, table_from, tonumber, tostring, typename):
        self.table_from = table_from
        self.tonumber = tonumber
        self.tostring = tostring
        self.typename = typename
        self._packing = False

    def __call__(self, op, argc, negz, *args):
        neg = frozenset(negz.values()) if negz is not None else ()
        self._packing = op == b"pack"
        try:
            if op == b"pack":
                return True, self._pack(argc, neg, args)
            if op == b"unpack":
                out = self._unpack(argc, neg, args)
                return True, self.table_from(out), len(out)
            return True, self._size(argc, neg, args)
        except _Fail as f:
            return False, f.narg, f.message

    # -- argument checks (luaL_check*) -------------------------------------------------------------
    def _tname(self, argc, args, i):
        if i == argc + 1 and i > 1 and self._packing:
            return b"nil"        # b_pack pushes a nil right after its arguments, and reads it as one
        if i > argc:
            return b"no value"
        v = args[i - 1]
        t = _typename(v)
        return t if t != b"userdata" else self.typename(v)

    def _number(self, argc, neg, args, i):
        """luaL_checknumber(L, i)."""
        v = args[i - 1] if i <= argc else None
        if i in neg:
            return -0.0
        t = type(v)
        if t is int or t is float:
            return v
        if t is bytes:
            n = self.tonumber(v)
            if n is not None:
                return n
        raise _Fail(b"number expected, got " + self._tname(argc, args, i), i)

    def _string(self, argc, neg, args, i):
        """luaL_checklstring(L, i)."""
        v = args[i - 1] if i <= argc else None
        t = type(v)
        if t is bytes:
            return v
        if t is int or t is float:
            return b"-0" if i in neg else self.tostring(v)
        raise _Fail(b"string expected, got " + self._tname(argc, args, i), i)

    def _format(self, argc, neg, args):
        fmt = self._string(argc, neg, args, 1)
        nul = fmt.find(b"\0")
        return fmt if nul < 0 else fmt[:nul]      # a C string

    # -- format parsing (getnum, optsize, gettoalign, controloptions) ------------------------------
    @staticmethod
    def _getnum(fmt, i, default):
        if i >= len(fmt) or fmt[i] not in _DIGITS:
            return default, i
        a = 0
        while i < len(fmt) and fmt[i] in _DIGITS:
            d = fmt[i] - 48
            if a > _INT_MAX // 10 or a * 10 > _INT_MAX - d:
                raise _Fail(b"integral size overflow")
            a = a * 10 + d
            i += 1
        return a, i

    def _optsize(self, opt, fmt, i):
        size = _SIZES.get(opt)
        if size is not None:
            return size, i
        if opt == 0x63:       # c
            return self._getnum(fmt, i, 1)
        if opt == 0x69 or opt == 0x49:   # i I
            sz, i = self._getnum(fmt, i, 4)
            if sz > _MAXINTSIZE:
                raise _Fail(b"integral size %d is larger than limit of %d" % (sz, _MAXINTSIZE))
            return sz, i
        return 0, i

    @staticmethod
    def _toalign(length, align, opt, size):
        if size == 0 or opt == 0x63:
            return 0
        if size > align:
            size = align
        return (size - (length & (size - 1))) & (size - 1)

    def _control(self, opt, fmt, i, h):
        if opt == 0x20:
            return i
        if opt == 0x3E:
            h[0] = _BIG
            return i
        if opt == 0x3C:
            h[0] = _LITTLE
            return i
        if opt == 0x21:
            a, i = self._getnum(fmt, i, _MAXALIGN)
            if not (a > 0 and a & (a - 1) == 0):
                raise _Fail(b"alignment %d is not a power of 2" % a)
            h[1] = a
            return i
        raise _Fail(b"invalid format option '%c'" % opt, 1)

    # -- struct.pack ----------------------------------------------------------------------------
    def _pack(self, argc, neg, args):
        fmt = self._format(argc, neg, args)
        h = [_LITTLE, 1]
        arg = 2
        total = 0
        out = []
        i = 0
        while i < len(fmt):
            opt = fmt[i]
            i += 1
            size, i = self._optsize(opt, fmt, i)
            pad = self._toalign(total, h[1], opt, size)
            total += pad
            if pad:
                out.append(b"\0" * pad)
            if opt in _INTS:
                n = self._number(argc, neg, args, arg)
                arg += 1
                value = (to_int64(n) & MASK64) if n < 0 else to_uint64(n)
                data = bytes((value >> (8 * k)) & 0xFF if k < 8 else 0 for k in range(size))
                out.append(data if h[0] == _LITTLE else data[::-1])
            elif opt == 0x78:   # x
                out.append(b"\0")
            elif opt == 0x66:   # f
                f = float(self._number(argc, neg, args, arg))
                arg += 1
                try:
                    data = _st.pack("<f", f)
                except OverflowError:   # (float)f overflows to an infinity
                    data = _st.pack("<f", f * float("inf"))
                out.append(data if h[0] == _LITTLE else data[::-1])
            elif opt == 0x64:   # d
                data = _st.pack("<d", float(self._number(argc, neg, args, arg)))
                arg += 1
                out.append(data if h[0] == _LITTLE else data[::-1])
            elif opt == 0x63 or opt == 0x73:   # c s
                s = self._string(argc, neg, args, arg)
                arg += 1
                if size == 0:
                    size = len(s)
                if len(s) < size:
                    raise _Fail(b"string too short", arg)   # struct.c reports the next argument's number
                out.append(s[:size])
                if opt == 0x73:
                    out.append(b"\0")
                    size += 1
            else:
                i = self._control(opt, fmt, i, h)
            total += size
        return b"".join(out)

    # -- struct.unpack --------------------------------------------------------------------------
    def _unpack(self, argc, neg, args):
        fmt = self._format(argc, neg, args)
        data = self._string(argc, neg, args, 2)
        ld = len(data)
        if argc >= 3 and args[2] is not None:
            pos = to_int64(self._number(argc, neg, args, 3)) & MASK64   # luaL_optinteger, as size_t
        else:
            pos = 1
        if pos == 0:
            raise _Fail(b"offset must be 1 or greater", 3)
        pos -= 1
        h = [_LITTLE, 1]
        res = []
        i = 0
        while i < len(fmt):
            opt = fmt[i]
            i += 1
            size, i = self._optsize(opt, fmt, i)
            pos = (pos + self._toalign(pos, h[1], opt, size)) & MASK64
            if not (size <= ld and pos <= ld - size):
                raise _Fail(b"data string too short", 2)
            if argc + len(res) + 2 > MAXCSTACK:
                raise _Fail(b"stack overflow (too many results)")
            if opt in _INTS:
                chunk = data[pos:pos + size]
                if h[0] == _LITTLE:
                    chunk = chunk[::-1]
                v = 0
                for byte in chunk:
                    v = ((v << 8) | byte) & MASK64
                if opt >= 0x61:    # lower case: signed
                    mask = (MASK64 << ((size * 8 - 1) & 63)) & MASK64
                    if v & mask:
                        v |= mask
                    if v & (1 << 63):
                        v -= 1 << 64
                res.append(float(v))
            elif opt == 0x78:
                pass
            elif opt == 0x66:
                res.append(_st.unpack("<f" if h[0] == _LITTLE else ">f", data[pos:pos + 4])[0])
            elif opt == 0x64:
                res.append(_st.unpack("<d" if h[0] == _LITTLE else ">d", data[pos:pos + 8])[0])
            elif opt == 0x63:
                if size == 0:
                    prev = res[-1] if res else None
                    if type(prev) is bytes:
                        prev = self.tonumber(prev)
                    if prev is None:
                        raise _Fail(b"format 'c0' needs a previous size")
                    size = to_uint64(prev)
                    res.pop()
                    if not (size <= ld and pos <= ld - size):
                        raise _Fail(b"data string too short", 2)
                res.append(data[pos:pos + size])
            elif opt == 0x73:
                e = data.find(b"\0", pos)
                if e < 0:
                    raise _Fail(b"unfinished string in data")
                size = e - pos + 1
                res.append(data[pos:e])
            else:
                i = self._control(opt, fmt, i, h)
            pos = (pos + size) & MASK64
        nxt = (pos + 1) & MASK64
        res.append(float(nxt - (1 << 64) if nxt & (1 << 63) else nxt))
        return res

    # -- struct.size ----------------------------------------------------------------------------
    def _size(self, argc, neg, args):
        fmt = self._format(argc, neg, args)
        h = [_LITTLE, 1]
        pos = 0
        i = 0
        while i < len(fmt):
            opt = fmt[i]
            i += 1
            size, i = self._optsize(opt, fmt, i)
            pos += self._toalign(pos, h[1], opt, size)
            if opt == 0x73:
                raise _Fail(b"option 's' has no fixed size", 1)
            if opt == 0x63 and size == 0:
                raise _Fail(b"option 'c0' has no fixed size", 1)
            if opt not in _ALNUM:
                i = self._control(opt, fmt, i, h)
            pos += size
        return pos


# -- the Lua side ------------------------------------------------------------------------------------------

# A function body run once inside the prelude chunk (so its frames count as the sandbox's own): it gets
# the helpers below and returns the three library tables.
LIBS_LUA = r"""
local c_fail, s_type, py_bit, py_bitarg, py_struct, py_mpdouble, py_mpfloat = ...
local type, select, tonumber, tostring, next, error, unpack = type, select, tonumber, tostring, next, error, unpack
local floor, huge = math.floor, math.huge
local char, byte, sub = string.char, string.byte, string.sub
local tconcat = table.concat
local MAXCSTACK = 8000
local TWO32, TWO31 = 4294967296, 2147483648

-- bit ----------------------------------------------------------------------------------------------
local function tname(present, v)
  if not present then return "no value" end
  return s_type(v)
end
-- barg(): lua_tonumber, then the low 32 bits of n + 2^52 + 2^51 (exact in doubles below 2^51)
local function barg(fn, i, n, v)
  local x = tonumber(v)
  if x == nil then c_fail(fn, i, "number expected, got " .. tname(i <= n, v)) end
  if x > -2251799813685248 and x < 2251799813685248 then return (x + 6755399441055744) % TWO32 end
  return py_bitarg(x)
end
local bit = {}
local function unary(name)
  local fn
  fn = function(...)
    local b = barg(fn, 1, select("#", ...), (...))
    local r = py_bit(name, b)
    return r
  end
  bit[name] = fn
end
unary("tobit"); unary("bnot"); unary("bswap")
local function fold(name)
  local fn
  fn = function(...)
    local n = select("#", ...)
    local vals = {barg(fn, 1, n, (...))}
    for i = n, 2, -1 do vals[i] = barg(fn, i, n, (select(i, ...))) end
    local r = py_bit(name, unpack(vals, 1, n > 0 and n or 1))
    return r
  end
  bit[name] = fn
end
fold("band"); fold("bor"); fold("bxor")
local function shift(name)
  local fn
  fn = function(...)
    local n = select("#", ...)
    local a, s = ...
    local b = barg(fn, 1, n, a)
    local r = py_bit(name, b, barg(fn, 2, n, s))
    return r
  end
  bit[name] = fn
end
shift("lshift"); shift("rshift"); shift("arshift"); shift("rol"); shift("ror")
do
  local fn
  fn = function(...)
    local n = select("#", ...)
    local a, d = ...
    local b = barg(fn, 1, n, a)
    local r
    if n < 2 then r = py_bit("tohex", b) else r = py_bit("tohex", b, barg(fn, 2, n, d)) end
    return r
  end
  bit.tohex = fn
end

-- the values of out[1..cnt], after `first` when given (more than unpack() alone may return at once)
local function results(out, cnt, first)
  if first ~= nil then
    if cnt <= 7996 then return first, unpack(out, 1, cnt) end
    return first, out[1], out[2], unpack(out, 3, cnt)
  end
  if cnt <= 7997 then return unpack(out, 1, cnt) end
  return out[1], out[2], unpack(out, 3, cnt)
end

-- struct -------------------------------------------------------------------------------------------
local struct = {}
local function struct_op(name)
  local fn
  fn = function(...)
    local n = select("#", ...)
    local negz
    for i = 1, n do
      local v = select(i, ...)
      -- -0.0 reaches Python as the integer 0; say where it was
      if v == 0 and 1 / v < 0 then
        negz = negz or {}
        negz[#negz + 1] = i
      end
    end
    local ok, a, b = py_struct(name, n, negz, ...)
    if not ok then c_fail(fn, a, b) end
    if name == "unpack" then return results(a, b) end
    return a
  end
  struct[name] = fn
end
struct_op("pack"); struct_op("unpack"); struct_op("size")

-- cmsgpack -----------------------------------------------------------------------------------------
local MAX_NESTING = 16
local mp_pack, mp_unpack, mp_unpack_one, mp_unpack_limit
local CUR          -- the library function running (errors are raised at its caller)

local function overflow(what) c_fail(CUR, nil, "stack overflow (" .. what .. ")") end
local function checkstack(used, n, what) if used + n > MAXCSTACK then overflow(what) end end

local function be(n, len)   -- n (0 <= n < 2^32) as len big-endian bytes
  if len == 1 then return char(n) end
  if len == 2 then return char(floor(n / 256), n % 256) end
  return char(floor(n / 16777216), floor(n / 65536) % 256, floor(n / 256) % 256, n % 256)
end

local function enc_int(n, buf, k)   -- mp_encode_int of an integral double in [-2^63, 2^63)
  if n >= 0 then
    if n <= 127 then buf[k] = char(n)
    elseif n <= 255 then buf[k] = "\204" .. char(n)
    elseif n <= 65535 then buf[k] = "\205" .. be(n, 2)
    elseif n <= 4294967295 then buf[k] = "\206" .. be(n, 4)
    else
      local hi = floor(n / TWO32)
      buf[k] = "\207" .. be(hi, 4) .. be(n - hi * TWO32, 4)
    end
  else
    if n >= -32 then buf[k] = char(n + 256)
    elseif n >= -128 then buf[k] = "\208" .. char(n + 256)
    elseif n >= -32768 then buf[k] = "\209" .. be(n + 65536, 2)
    elseif n >= -2147483648 then buf[k] = "\210" .. be(n + TWO32, 4)
    else
      local hi = floor(n / TWO32)
      buf[k] = "\211" .. be(hi + TWO32, 4) .. be(n - hi * TWO32, 4)
    end
  end
  return k + 1
end

local function enc_string(s, buf, k)
  local len = #s
  if len < 32 then buf[k] = char(160 + len)
  elseif len <= 255 then buf[k] = "\217" .. char(len)
  elseif len <= 65535 then buf[k] = "\218" .. be(len, 2)
  else buf[k] = "\219" .. be(len % TWO32, 4) end
  buf[k + 1] = s
  return k + 2
end

local function enc_header(n, small, small_max, mid, big, buf, k)
  if n <= small_max then buf[k] = char(small + n)
  elseif n <= 65535 then buf[k] = mid .. be(n, 2)
  else buf[k] = big .. be(n % TWO32, 4) end
  return k + 1
end

-- table_is_an_array: keys exactly 1..N (positive, (int)k == k), N = the number of keys
local function is_array(t)
  local count, max = 0, 0
  for key in next, t do
    if type(key) ~= "number" or key <= 0 or key > 2147483647 or floor(key) ~= key then return false end
    if key > max then max = key end
    count = count + 1
  end
  return max == count
end

-- mp_encode_lua_type; `top` is the C stack slots in use with the value pushed
local enc
enc = function(v, level, top, buf, k)
  local t = type(v)
  if t == "table" and level == MAX_NESTING then t = "nil" end
  if t == "string" then return enc_string(v, buf, k) end
  if t == "boolean" then buf[k] = v and "\195" or "\194" return k + 1 end
  if t == "number" then
    if v ~= huge and v ~= -huge and v == floor(v) and v >= -9223372036854775808 and v < 9223372036854775808 then
      return enc_int(v, buf, k)
    end
    buf[k] = py_mpdouble(v)
    return k + 1
  end
  if t == "table" then
    checkstack(top, 2, "in function table_is_an_array")
    if is_array(v) then
      checkstack(top, 1, "in function mp_encode_lua_table_as_array")
      local len = #v
      k = enc_header(len, 144, 15, "\220", "\221", buf, k)
      for j = 1, len do k = enc(v[j], level + 1, top + 1, buf, k) end
      return k
    end
    checkstack(top, 3, "in function mp_encode_lua_table_as_map")
    local len = 0
    for _ in next, v do len = len + 1 end
    k = enc_header(len, 128, 15, "\222", "\223", buf, k)
    for key, val in next, v do
      k = enc(key, level + 1, top + 3, buf, k)
      k = enc(val, level + 1, top + 2, buf, k)
    end
    return k
  end
  buf[k] = "\192"
  return k + 1
end

mp_pack = function(...)
  local nargs = select("#", ...)
  CUR = mp_pack
  if nargs == 0 then c_fail(mp_pack, 0, "MessagePack pack needs input.") end
  if nargs + nargs > MAXCSTACK then c_fail(mp_pack, 0, "Too many arguments for MessagePack pack.") end
  local buf, k = {}, 1
  for i = 1, nargs do
    checkstack(nargs + i - 1, 1, "in function mp_check")
    k = enc((select(i, ...)), 0, nargs + i, buf, k)
  end
  local s = tconcat(buf)
  return s
end

-- decoding: one cursor (S, P .. N) and an error flag, as mp_cur
local S, P, N, ERR
local dec
local function need(len) if N - P + 1 < len then ERR = 1 return false end return true end
local function u16(at) local a, b = byte(S, at, at + 1) return a * 256 + b end
local function u32(at) local a, b, c, d = byte(S, at, at + 3) return ((a * 256 + b) * 256 + c) * 256 + d end
local function str_at(from, len) return sub(S, from, from + len - 1) end

local function dec_array(len, used)
  local t = {}
  checkstack(used + 1, 1, "in function mp_decode_to_lua_array")
  local index = 1
  while len > 0 do
    len = len - 1
    local v = dec(used + 2)
    if ERR then return t end
    t[index] = v
    index = index + 1
  end
  return t
end

local function dec_map(len, used)
  local t = {}
  while len > 0 do
    len = len - 1
    local key = dec(used + 1)
    if ERR then return t end
    local v = dec(used + 2)
    if ERR then return t end
    -- lua_settable from C: no position in the message
    if key == nil then error("table index is nil", 0) end
    if key ~= key then error("table index is NaN", 0) end
    t[key] = v
  end
  return t
end

-- mp_decode_to_lua_type; `used` is the C stack slots in use before the value is pushed
dec = function(used)
  if not need(1) then return nil end
  checkstack(used, 1, "too many return values at once; use unpack_one or unpack_limit instead.")
  local c = byte(S, P)
  if c < 128 then P = P + 1 return c end
  if c >= 224 then P = P + 1 return c - 256 end
  if c < 144 then P = P + 1 return dec_map(c - 128, used) end
  if c < 160 then P = P + 1 return dec_array(c - 144, used) end
  if c < 192 then
    local len = c - 160
    if not need(1 + len) then return nil end
    local s = str_at(P + 1, len)
    P = P + 1 + len
    return s
  end
  if c == 192 then P = P + 1 return nil end
  if c == 194 then P = P + 1 return false end
  if c == 195 then P = P + 1 return true end
  if c == 202 or c == 203 then
    local len = c == 202 and 4 or 8
    if not need(1 + len) then return nil end
    local v = py_mpfloat(str_at(P + 1, len))
    P = P + 1 + len
    return v
  end
  if c == 204 or c == 208 then
    if not need(2) then return nil end
    local v = byte(S, P + 1)
    P = P + 2
    if c == 208 and v >= 128 then v = v - 256 end
    return v
  end
  if c == 205 or c == 209 then
    if not need(3) then return nil end
    local v = u16(P + 1)
    P = P + 3
    if c == 209 and v >= 32768 then v = v - 65536 end
    return v
  end
  if c == 206 or c == 210 then
    if not need(5) then return nil end
    local v = u32(P + 1)
    P = P + 5
    if c == 210 and v >= TWO31 then v = v - TWO32 end
    return v
  end
  if c == 207 or c == 211 then
    -- both become the int64 of the 8 bytes (lua_pushinteger of the uint64 on a 64-bit build)
    if not need(9) then return nil end
    local hi, lo = u32(P + 1), u32(P + 5)
    P = P + 9
    if hi >= TWO31 then hi = hi - TWO32 end
    return hi * TWO32 + lo
  end
  if c == 217 or c == 218 then
    local hl = c == 217 and 1 or 2
    if not need(1 + hl) then return nil end
    local len = hl == 1 and byte(S, P + 1) or u16(P + 1)
    if not need(1 + hl + len) then return nil end
    local s = str_at(P + 1 + hl, len)
    P = P + 1 + hl + len
    return s
  end
  if c == 219 then
    if not need(5) then return nil end
    local len = u32(P + 1)
    P = P + 5
    if not need(len) then return nil end
    local s = str_at(P, len)
    P = P + len
    return s
  end
  if c == 220 or c == 221 or c == 222 or c == 223 then
    local hl = (c == 220 or c == 222) and 2 or 4
    if not need(1 + hl) then return nil end
    local len = hl == 2 and u16(P + 1) or u32(P + 1)
    P = P + 1 + hl
    if c <= 221 then return dec_array(len, used) end
    return dec_map(len, used)
  end
  ERR = 2
  return nil
end

local function to_int(x) return ((x + TWO31) % TWO32) - TWO31 end   -- (int) of a lua_Integer

-- mp_unpack_full; fn is the library function called, used0 the C stack slots its arguments take
local function unpack_full(fn, s, limit, offset, used0)
  local len = #s
  if offset < 0 or limit < 0 then
    c_fail(fn, nil, "Invalid request to unpack with offset of " .. to_int(offset) .. " and limit of " ..
           to_int(len) .. ".")
  elseif offset > len then
    c_fail(fn, nil, "Start offset " .. to_int(offset) .. " greater than input length " .. to_int(len) .. ".")
  end
  local decode_all = limit == 0 and offset == 0
  if decode_all then limit = 2147483647 end
  S, P, N, ERR = s, offset + 1, len, nil
  local out, cnt = {}, 0
  while N - P + 1 > 0 and cnt < limit do
    local v = dec(used0 + cnt)
    if ERR == 1 then S = nil c_fail(fn, nil, "Missing bytes in input.") end
    if ERR == 2 then S = nil c_fail(fn, nil, "Bad data format in input.") end
    cnt = cnt + 1
    out[cnt] = v
  end
  local left = N - P + 1
  S = nil
  if not decode_all then
    checkstack(used0 + cnt, 1, "in function mp_unpack_full")
    return out, cnt, left == 0 and -1 or len - left
  end
  return out, cnt, nil
end

local function checkinteger(fn, i, n, v, optional)
  if optional and v == nil then return 0 end
  local x = tonumber(v)
  if x == nil then c_fail(fn, i, "number expected, got " .. tname(i <= n, v)) end
  if x ~= x or x >= 9223372036854775808 or x < -9223372036854775808 then return -9223372036854775808 end
  if x >= 0 then return floor(x) end
  return -floor(-x)
end
local function checkdata(fn, n, s)
  local t = type(s)
  if t == "string" then return s end
  if t == "number" then return tostring(s) end
  c_fail(fn, 1, "string expected, got " .. tname(n >= 1, s))
end

mp_unpack = function(...)
  local n = select("#", ...)
  CUR = mp_unpack
  local s = checkdata(mp_unpack, n, (...))
  local out, cnt = unpack_full(mp_unpack, s, 0, 0, n)
  return results(out, cnt)
end

mp_unpack_one = function(...)
  local n = select("#", ...)
  CUR = mp_unpack_one
  local s, off = ...
  off = checkinteger(mp_unpack_one, 2, n, off, true)
  s = checkdata(mp_unpack_one, n, s)
  local out, cnt, offset = unpack_full(mp_unpack_one, s, 1, off, 1)
  return results(out, cnt, offset)
end

mp_unpack_limit = function(...)
  local n = select("#", ...)
  CUR = mp_unpack_limit
  local s, lim, off = ...
  lim = checkinteger(mp_unpack_limit, 2, n, lim, false)
  off = checkinteger(mp_unpack_limit, 3, n, off, true)
  s = checkdata(mp_unpack_limit, n, s)
  local out, cnt, offset = unpack_full(mp_unpack_limit, s, lim, off, 1)
  return results(out, cnt, offset)
end

local cmsgpack = {pack = mp_pack, unpack = mp_unpack, unpack_one = mp_unpack_one, unpack_limit = mp_unpack_limit,
                  _NAME = "cmsgpack", _VERSION = "lua-cmsgpack 0.4.0", _COPYRIGHT = "Copyright (C) 2012, Redis Ltd.",
                  _DESCRIPTION = "MessagePack C implementation for Lua"}

return bit, struct, cmsgpack
"""
