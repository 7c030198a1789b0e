"""Bitmap commands on string values: SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO, and
LCS (a string command that lives here with the other bit-level string algorithms).

Bits are numbered from the most significant bit of the first byte, as in Valkey (bitops.c).
Strings are immutable bytes in the keyspace, so SETBIT and BITFIELD writes rebuild the value: O(n)
in the string length per call (one copy via memoryview slices for SETBIT; BITFIELD edits one
bytearray copy for all its operations). Bulk work (BITCOUNT, BITPOS, BITOP) runs at C speed through
int.from_bytes / int.bit_count / bytes.lstrip; LCS uses a bit-parallel row computation (Hyyrö) and
walks back along exactly the path Valkey's dynamic-programming table takes.

Effects: SETBIT, BITOP, BITFIELD are deterministic and propagate themselves, and only when the
value changed (SETBIT that leaves the bit as it was, BITFIELD whose writes change nothing or all
fail with OVERFLOW FAIL, propagate nothing). BITFIELD also propagates when it only created or
grew the string (Valkey does so silently, which would diverge a replica). A BITOP whose result
is empty deletes the destination and propagates DEL.
"""

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import encoding
from ..keyspace.events import GENERIC, STRING
from .args import ArgCursor
from .base import parse_int, syntax_error
from .registry import command
from .strings import PROTO_MAX_BULK_LEN

_MASK64 = (1 << 64) - 1


def _s64(x):
    """x reduced to a signed 64-bit integer (C's two's complement wrap)."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _bit_offset(arg, bits=0):
    """getBitOffsetFromArgument: a bit offset, or '#n' (n * bits) for BITFIELD."""
    usehash = bits > 0 and arg[:1] == b"#"
    offset = parse_int(arg[1:] if usehash else arg, messages.BIT_OFFSET)
    if usehash:
        offset *= bits
    if offset < 0 or (offset >> 3) >= PROTO_MAX_BULK_LEN:
        raise CommandError(messages.BIT_OFFSET)
    return offset


def _read_string(ctx, key):
    """lookupKeyRead + checkType(OBJ_STRING)."""
    value = ctx.lookup_read(key)
    if value is not None and type(value) is not bytes:
        raise WrongType()
    return value


# -- SETBIT / GETBIT ----------------------------------------------------------------------------

@command("setbit")
def setbit(ctx, args):
    key = args[1]
    offset = _bit_offset(args[2])
    on = parse_int(args[3], messages.BIT_VALUE)
    if on & ~1:
        raise CommandError(messages.BIT_VALUE)
    value = ctx.lookup_string(key)
    byte = offset >> 3
    shift = 7 - (offset & 7)
    if value is None:
        ctx.store(key, bytes(byte) + bytes((on << shift,)))
        encoding.string_modified_in_place(ctx.db, key)
        ctx.propagate_args(args)
        ctx.notify(STRING, b"setbit", key)
        return 0
    # lookupStringForBitCommand makes the string raw before looking at the bit, changed or not.
    encoding.string_modified_in_place(ctx.db, key)
    n = len(value)
    if byte < n:
        old = value[byte]
        bitval = (old >> shift) & 1
        if bitval == on:
            return bitval
        view = memoryview(value)
        new = b"".join((view[:byte], bytes((old ^ (1 << shift),)), view[byte + 1:]))
    else:
        bitval = 0
        new = b"".join((value, bytes(byte - n), bytes((on << shift,))))
    ctx.store(key, new, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, key)
    ctx.propagate_args(args)
    ctx.notify(STRING, b"setbit", key)
    return bitval


@command("getbit")
def getbit(ctx, args):
    offset = _bit_offset(args[2])
    value = ctx.lookup_string(args[1])
    if value is None:
        return 0
    byte = offset >> 3
    if byte >= len(value):
        return 0
    return (value[byte] >> (7 - (offset & 7))) & 1


# -- BITCOUNT / BITPOS --------------------------------------------------------------------------

def _unit_is_bit(arg):
    unit = arg.lower()
    if unit == b"bit":
        return True
    if unit == b"byte":
        return False
    raise syntax_error()


def _clamp_range(start, end, strlen, isbit):
    """BITCOUNT's and BITPOS's start/end over a string of strlen bytes, in bytes or (isbit) bits: negative ones
    count from the end, both are clamped into the string. Returns byte indexes and, for BIT, the masks of the
    bits of the first and last byte outside the range (0 when none): (start, end, first_mask, last_mask)."""
    totlen = strlen << 3 if isbit else strlen
    if start < 0:
        start += totlen
    if end < 0:
        end += totlen
    if start < 0:
        start = 0
    if end < 0:
        end = 0
    if end >= totlen:
        end = totlen - 1
    first_mask = last_mask = 0
    if isbit and start <= end:
        first_mask = ~((1 << (8 - (start & 7))) - 1) & 0xFF
        last_mask = (1 << (7 - (end & 7))) - 1
        start >>= 3
        end >>= 3
    return start, end, first_mask, last_mask


@command("bitcount")
def bitcount(ctx, args):
    argc = len(args)
    if argc > 5:
        raise syntax_error()
    if argc == 2:
        value = _read_string(ctx, args[1])
        if value is None:
            return 0
        return int.from_bytes(value, "big").bit_count()
    start = parse_int(args[2])
    isbit = _unit_is_bit(args[4]) if argc == 5 else False
    end = parse_int(args[3]) if argc >= 4 else None
    value = _read_string(ctx, args[1])
    strlen = 0 if value is None else len(value)
    totlen = strlen
    if end is None:
        end = totlen - 1
    if start < 0 and end < 0 and start > end:
        return 0
    start, end, first_mask, last_mask = _clamp_range(start, end, totlen, isbit)
    if value is None or start > end:
        return 0
    count = int.from_bytes(value[start:end + 1], "big").bit_count()
    if first_mask:
        count -= (value[start] & first_mask).bit_count()
    if last_mask:
        count -= (value[end] & last_mask).bit_count()
    return count


def _bitpos(data, bit):
    """serverBitpos: the first `bit` in data; -1 if no 1 is found, len*8 if no 0 is found."""
    if bit:
        rest = data.lstrip(b"\x00")
        if not rest:
            return -1
        return (len(data) - len(rest)) * 8 + 8 - rest[0].bit_length()
    rest = data.lstrip(b"\xff")
    if not rest:
        return len(data) * 8
    return (len(data) - len(rest)) * 8 + 8 - (rest[0] ^ 0xFF).bit_length()


@command("bitpos")
def bitpos(ctx, args):
    argc = len(args)
    bit = parse_int(args[2])
    if bit != 0 and bit != 1:
        raise CommandError(messages.BITPOS_BIT)
    if argc > 6:
        raise syntax_error()
    end_given = False
    first_mask = last_mask = 0
    if argc >= 4:
        start = parse_int(args[3])
        isbit = _unit_is_bit(args[5]) if argc == 6 else False
        if argc >= 5:
            end = parse_int(args[4])
            end_given = True
        value = _read_string(ctx, args[1])
        totlen = 0 if value is None else len(value)
        if argc < 5:
            end = totlen - 1
        start, end, first_mask, last_mask = _clamp_range(start, end, totlen, isbit)
    else:
        value = _read_string(ctx, args[1])
        start = 0
        end = (0 if value is None else len(value)) - 1
    if value is None:
        return -1 if bit else 0
    if start > end:
        return -1
    nbytes = end - start + 1
    pos = None
    if first_mask:
        tmp = value[start] & ~first_mask if bit else value[start] | first_mask
        if last_mask and nbytes == 1:
            tmp = tmp & ~last_mask if bit else tmp | last_mask
        pos = _bitpos(bytes((tmp & 0xFF,)), bit)
        if nbytes == 1 or (pos != -1 and pos != 8):
            return _bitpos_result(pos, start, nbytes, bit, end_given)
        start += 1
        nbytes -= 1
    curbytes = nbytes - (1 if last_mask else 0)
    if curbytes > 0:
        pos = _bitpos(value[start:start + curbytes], bit)
        if nbytes == curbytes or (pos != -1 and pos != curbytes << 3):
            return _bitpos_result(pos, start, nbytes, bit, end_given)
        start += curbytes
        nbytes -= curbytes
    tmp = value[end] & ~last_mask if bit else value[end] | last_mask
    pos = _bitpos(bytes((tmp & 0xFF,)), bit)
    return _bitpos_result(pos, start, nbytes, bit, end_given)


def _bitpos_result(pos, start, nbytes, bit, end_given):
    # Looking for a 0 in an explicit range: the right of the range is not zero padded.
    if end_given and bit == 0 and pos == nbytes << 3:
        return -1
    if pos != -1:
        pos += start << 3
    return pos


# -- BITOP --------------------------------------------------------------------------------------

_BITOPS = (b"and", b"or", b"xor", b"not")


@command("bitop")
def bitop(ctx, args):
    op = args[1].lower()
    if op not in _BITOPS:
        raise syntax_error()
    if op == b"not" and len(args) != 4:
        raise CommandError(messages.BITOP_NOT_ONE_KEY)
    dest = args[2]
    values = []
    for key in args[3:]:
        values.append(_read_string(ctx, key) or b"")
    maxlen = max(map(len, values))
    if not maxlen:
        if ctx.delete(dest):
            ctx.propagate(b"DEL", dest)
            ctx.notify(GENERIC, b"del", dest)
        return 0

    def as_int(v):
        return int.from_bytes(v, "big") << (8 * (maxlen - len(v)))

    acc = as_int(values[0])
    if op == b"not":
        acc ^= (1 << (8 * maxlen)) - 1
    elif op == b"and":
        for v in values[1:]:
            if not acc:
                break
            acc &= as_int(v)
    elif op == b"or":
        for v in values[1:]:
            acc |= as_int(v)
    else:
        for v in values[1:]:
            acc ^= as_int(v)
    ctx.store(dest, acc.to_bytes(maxlen, "big"))
    encoding.string_modified_in_place(ctx.db, dest)
    ctx.propagate_args(args)
    ctx.notify(STRING, b"set", dest)
    return maxlen


# -- BITFIELD -----------------------------------------------------------------------------------

_GET, _SET, _INCRBY = 0, 1, 2
_WRAP, _SAT, _FAIL = 0, 1, 2
_OPCODES = {b"get": (_GET, 2), b"set": (_SET, 3), b"incrby": (_INCRBY, 3)}
_OVERFLOWS = {b"wrap": _WRAP, b"sat": _SAT, b"fail": _FAIL}


def _bitfield_type(arg):
    """getBitfieldTypeFromArgument: (signed, bits) for i1..i64 / u1..u63."""
    sign = arg[:1]
    if sign != b"i" and sign != b"u":
        raise CommandError(messages.BITFIELD_TYPE)
    try:
        bits = parse_int(arg[1:])
    except CommandError:
        raise CommandError(messages.BITFIELD_TYPE) from None
    signed = sign == b"i"
    if bits < 1 or bits > (64 if signed else 63):
        raise CommandError(messages.BITFIELD_TYPE)
    return signed, bits


def _get_bits(data, offset, bits):
    """The unsigned `bits`-wide field at bit `offset` (zero past the end of data)."""
    byte = offset >> 3
    window = int.from_bytes(data[byte:byte + 9].ljust(9, b"\x00"), "big")
    return (window >> (72 - (offset & 7) - bits)) & ((1 << bits) - 1)


def _set_bits(buf, offset, bits, value):
    byte = offset >> 3
    last = (offset + bits - 1) >> 3
    nbytes = last - byte + 1
    shift = nbytes * 8 - (offset & 7) - bits
    mask = ((1 << bits) - 1) << shift
    window = int.from_bytes(buf[byte:last + 1], "big")
    window = (window & ~mask) | ((value << shift) & mask)
    buf[byte:last + 1] = window.to_bytes(nbytes, "big")


def _unsigned_overflow(value, incr, bits, owtype):
    """checkUnsignedBitfieldOverflow: (overflow -1/0/1, limit) for value (uint64) + incr (int64)."""
    top = (1 << bits) - 1
    if value > top or (incr > 0 and incr > _s64(top - value)):
        if owtype == _WRAP:
            return 1, (value + incr) & top
        return 1, top if owtype == _SAT else None
    if incr < 0 and incr < _s64(-value):
        if owtype == _WRAP:
            return -1, (value + incr) & top
        return -1, 0 if owtype == _SAT else None
    return 0, None


def _signed_overflow(value, incr, bits, owtype):
    """checkSignedBitfieldOverflow, including its int64 wrap-around in the increment limits."""
    top = (1 << (bits - 1)) - 1
    bottom = -top - 1
    maxincr = _s64(top - value)
    minincr = _s64(bottom - value)
    if value > top or (bits != 64 and incr > maxincr) or (value >= 0 and incr > 0 and incr > maxincr):
        overflow, limit = 1, top
    elif value < bottom or (bits != 64 and incr < minincr) or (value < 0 and incr < 0 and incr < minincr):
        overflow, limit = -1, bottom
    else:
        return 0, None
    if owtype == _WRAP:
        c = (value + incr) & ((1 << bits) - 1)
        if c >> (bits - 1):
            c -= 1 << bits
        return overflow, c
    return overflow, limit if owtype == _SAT else None


def _bitfield(ctx, args, readonly_command):
    ops = []
    owtype = _WRAP
    readonly = True
    highest = 0
    c = ArgCursor(args, 2)
    while c:
        sub = c.next_lower()
        remaining = c.left()
        spec = _OPCODES.get(sub)
        if spec is None or remaining < spec[1]:
            if sub == b"overflow" and remaining >= 1:
                owtype = _OVERFLOWS.get(c.next_lower())
                if owtype is None:
                    raise CommandError(messages.BITFIELD_OVERFLOW)
                continue
            raise syntax_error()
        opcode = spec[0]
        signed, bits = _bitfield_type(c.next())
        offset = _bit_offset(c.next(), bits)
        i64 = 0
        if opcode != _GET:
            readonly = False
            if offset + bits - 1 > highest:
                highest = offset + bits - 1
            i64 = c.int()
        ops.append((opcode, signed, bits, offset, i64, owtype))

    key = args[1]
    if readonly:
        value = _read_string(ctx, key) or b""
        out = []
        for _opcode, signed, bits, offset, _i64, _ow in ops:
            v = _get_bits(value, offset, bits)
            if signed and v >> (bits - 1):
                v -= 1 << bits
            out.append(v)
        return out
    if readonly_command:
        raise CommandError(messages.BITFIELD_RO_GET_ONLY)

    # lookupStringForBitCommand: create or zero-pad the string up to the highest written bit.
    value = ctx.lookup_string(key)
    need = (highest >> 3) + 1
    if value is None:
        buf = bytearray(need)
        grown = True
    else:
        buf = bytearray(value)
        grown = len(buf) < need
        if grown:
            buf.extend(bytes(need - len(buf)))
    changes = 0
    out = []
    for opcode, signed, bits, offset, i64, ow in ops:
        if opcode == _GET:
            v = _get_bits(buf, offset, bits)
            if signed and v >> (bits - 1):
                v -= 1 << bits
            out.append(v)
            continue
        old = _get_bits(buf, offset, bits)
        if signed:
            if old >> (bits - 1):
                old -= 1 << bits
            if opcode == _INCRBY:
                overflow, wrapped = _signed_overflow(old, i64, bits, ow)
                new = wrapped if overflow else old + i64
                ret = new
            else:
                overflow, wrapped = _signed_overflow(i64, 0, bits, ow)
                new = wrapped if overflow else i64
                ret = old
        else:
            if opcode == _INCRBY:
                overflow, wrapped = _unsigned_overflow(old, i64, bits, ow)
                new = wrapped if overflow else old + i64
                ret = new
            else:
                overflow, wrapped = _unsigned_overflow(i64 & _MASK64, 0, bits, ow)
                new = wrapped if overflow else i64 & _MASK64
                ret = old
        if overflow and ow == _FAIL:
            out.append(None)
            continue
        out.append(ret)
        _set_bits(buf, offset, bits, new & ((1 << bits) - 1))
        if grown or old != new:
            changes += 1
    if changes or grown:
        ctx.store(key, bytes(buf), keep_ttl=True)
    if key in ctx.db.data:  # a writing BITFIELD made the string raw (lookupStringForBitCommand)
        encoding.string_modified_in_place(ctx.db, key)
    if changes or grown:
        ctx.propagate_args(args)
    if changes:
        ctx.notify(STRING, b"setbit", key)
    return out


@command("bitfield")
def bitfield(ctx, args):
    return _bitfield(ctx, args, False)


@command("bitfield_ro")
def bitfield_ro(ctx, args):
    return _bitfield(ctx, args, True)


# -- LCS ----------------------------------------------------------------------------------------

_ASCII_ZEROS = b"0" * 256


def _lcs_rows(a, b, keep_rows):
    """Bit-parallel LCS (Hyyrö): row i is a bit vector V_i over b with bit j clear iff
    LCS(a[:i], b[:j+1]) > LCS(a[:i], b[:j]); so LCS(i, j) = j - popcount(V_i & (2^j - 1)).
    Returns (length, rows or None)."""
    blen = len(b)
    full = (1 << blen) - 1
    reversed_b = b[::-1]
    masks = {}
    for ch in set(b):
        table = _ASCII_ZEROS[:ch] + b"1" + _ASCII_ZEROS[ch + 1:]
        masks[ch] = int(reversed_b.translate(table), 2)
    v = full
    rows = [v] if keep_rows else None
    get = masks.get
    for ch in a:
        m = get(ch)
        if m is not None:
            u = v & m
            v = ((v + u) | (v - u)) & full
        if keep_rows:
            rows.append(v)
    return blen - v.bit_count(), rows


@command("lcs")
def lcs(ctx, args):
    a = ctx.lookup(args[1])
    b = ctx.lookup(args[2])
    if (a is not None and type(a) is not bytes) or (b is not None and type(b) is not bytes):
        raise CommandError(messages.LCS_NOT_STRINGS)
    a = a or b""
    b = b or b""
    getlen = getidx = withmatchlen = False
    minmatchlen = 0
    c = ArgCursor(args, 3)
    while c:
        opt = c.next_lower()
        if opt == b"idx":
            getidx = True
        elif opt == b"len":
            getlen = True
        elif opt == b"withmatchlen":
            withmatchlen = True
        elif opt == b"minmatchlen" and c.left():
            minmatchlen = max(c.int(), 0)
        else:
            raise syntax_error()
    if getlen and getidx:
        raise CommandError(messages.LCS_LEN_AND_IDX)
    alen, blen = len(a), len(b)
    if alen >= 0xFFFFFFFE or blen >= 0xFFFFFFFE:
        raise CommandError(messages.LCS_TOO_LONG)
    if (alen + 1) * (blen + 1) * 4 > PROTO_MAX_BULK_LEN:
        raise CommandError(messages.LCS_TOO_MUCH_MEMORY)

    computelcs = getidx or not getlen
    length, rows = _lcs_rows(a, b, computelcs)
    if not computelcs:
        return length

    result = bytearray(length)
    matches = []
    idx = length
    arange_start = alen  # alen: no range being tracked
    arange_end = brange_start = brange_end = 0
    i, j = alen, blen
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            result[idx - 1] = a[i - 1]
            if arange_start == alen:
                arange_start = arange_end = i - 1
                brange_start = brange_end = j - 1
            elif arange_start == i and brange_start == j:
                arange_start -= 1
                brange_start -= 1
            else:
                emit = True
            if arange_start == 0 or brange_start == 0:
                emit = True
            idx -= 1
            i -= 1
            j -= 1
        else:
            # LCS(i-1, j) > LCS(i, j-1) ? go up : go left (the DP table's tie-break).
            lcs_up = j - (rows[i - 1] & ((1 << j) - 1)).bit_count()
            lcs_left = (j - 1) - (rows[i] & ((1 << (j - 1)) - 1)).bit_count()
            if lcs_up > lcs_left:
                i -= 1
            else:
                j -= 1
            if arange_start != alen:
                emit = True
        if emit:
            match_len = arange_end - arange_start + 1
            if getidx and (minmatchlen == 0 or match_len >= minmatchlen):
                entry = [[arange_start, arange_end], [brange_start, brange_end]]
                if withmatchlen:
                    entry.append(match_len)
                matches.append(entry)
            arange_start = alen
    if getidx:
        return {b"matches": matches, b"len": length}
    return bytes(result)
