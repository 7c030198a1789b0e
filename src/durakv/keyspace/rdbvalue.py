"""Valkey's DUMP / RESTORE payload: one value in the RDB object serialization.

payload = type byte + serialized object + RDB version (2 bytes LE) + CRC-64/Jones (8 bytes LE) of all
that comes before it. `load` reads every object type Valkey 8.0's rdbLoadObject reads (RDB versions up
to 11: dumps of Redis 2.x to 7.x and of Valkey 7.2 / 8.0). `dump` writes RDB version 10 and only types
that exist there, so Redis 7.0 and every Valkey accept it. The formats are those of Valkey's rdb.c,
listpack.c, ziplist.c, intset.c, zipmap.c and t_stream.c.

Values are durakv's: bytes, deque of bytes, set of bytes, dict bytes -> bytes, ZSet, Stream, and the values of
the valkey-bundle module types durakv serves natively (RDB_TYPE_MODULE_2: the module type's id, its values each
behind an opcode, an EOF opcode; see MODULE_TYPES). A hash with field TTLs (Valkey 9) is RDB_TYPE_HASH_2 in RDB
version 80: dump(value, field_ttls), load_with_field_ttls.

Streams: a loaded stream gets durakv's node model from the payload's listpacks (one node per listpack,
its tombstones counted), so that XADD node splits, approximate trimming and XINFO's radix-tree-keys go on
as on the server that made it. durakv keeps no deleted entries, so a dumped stream has one listpack per
durakv node holding its live entries only. Consumer active-time does not exist in RDB 10: a stream whose
consumers' active-times all equal their seen-times is written as RDB_TYPE_STREAM_LISTPACKS_2 in RDB 10
(Valkey restores such a payload with active-time = seen-time), any other as RDB_TYPE_STREAM_LISTPACKS_3 in
RDB 11 (Redis 7.2, Valkey 7.2 and later), so that no active-time is lost (a consumer never active has -1).
"""

import struct
from bisect import bisect_left
from collections import deque

from ..protocol.numbers import string2ll
from .bloom import Bloom, BloomError
from .jsondoc import JsonDoc, JsonError, dumps as json_dumps, format_double, make_double, parse as json_parse
from .stream import MASK64, Nack, Stream, _Node
from .zset import ZSet


class RdbError(ValueError):
    """A malformed payload, or a value that has no payload."""


RDB_VERSION_WRITTEN = 10  # the newest version Redis 7.0 restores; Valkey 7.2 and 8.0 do too
RDB_VERSION_MAX = 11      # the newest version Valkey 8.0 restores (verifyDumpPayload)
# Valkey 9.0's RDB version (rdb.h: 12-79 are left to Redis' formats): a hash with field TTLs is written as
# RDB_TYPE_HASH_2 in it, a payload or file with such a hash carries it (a file with the VALKEY magic)
RDB_VERSION_FIELD_TTL = 80
RDB_VERSION_ACTIVE_TIME = 11   # RDB_TYPE_STREAM_LISTPACKS_3: consumers' active-time (Redis 7.2, Valkey 7.2)


def _version_read(version: int) -> bool:
    """The RDB versions this reader takes: Redis' and Valkey's up to 11, and Valkey 9.0's 80."""
    return 1 <= version <= RDB_VERSION_MAX or version == RDB_VERSION_FIELD_TTL

# Object types (rdb.h).
T_STRING, T_LIST, T_SET, T_ZSET, T_HASH, T_ZSET_2, T_MODULE_PRE_GA, T_MODULE_2 = range(8)
T_HASH_ZIPMAP, T_LIST_ZIPLIST, T_SET_INTSET, T_ZSET_ZIPLIST, T_HASH_ZIPLIST = 9, 10, 11, 12, 13
T_LIST_QUICKLIST, T_STREAM_LISTPACKS, T_HASH_LISTPACK, T_ZSET_LISTPACK = 14, 15, 16, 17
T_LIST_QUICKLIST_2, T_STREAM_LISTPACKS_2, T_SET_LISTPACK, T_STREAM_LISTPACKS_3 = 18, 19, 20, 21
T_HASH_2 = 22   # Valkey 9.0: a hash whose entries are field, value, expire time (ms, int64 LE; -1: none)
_NO_EXPIRY = -1

ENC_INT8, ENC_INT16, ENC_INT32, ENC_LZF = 0, 1, 2, 3
QL_PLAIN, QL_PACKED = 1, 2
STREAM_FLAG_DELETED, STREAM_FLAG_SAMEFIELDS = 1, 2

# quicklist.c with list-max-listpack-size -2: a node is closed before it would pass 8 KB, estimating
# an entry as its length + 8; elements of packed_threshold (1 GB) or more get a plain node of their own.
LIST_NODE_MAX_BYTES = 8192
LIST_ENTRY_OVERHEAD_BYTES = 8
LIST_PLAIN_MIN_BYTES = 1 << 30
# For a stream whose node model does not cover its entries: stream-node-max-entries' default.
STREAM_CHUNK_ENTRIES = 100

_LP_HEADER_BYTES = 6
_ZL_HEADER_BYTES = 10
_COUNT_UNKNOWN = 65535  # a listpack or ziplist header's count when the entries must be counted
def _signed64(x):
    x &= MASK64
    return x - (1 << 64) if x >> 63 else x


def _as_bytes(x):
    return b"%d" % x if type(x) is int else x


# -- CRC-64/Jones (crc64.c) ------------------------------------------------------------------------

# The reflected algorithm shifts right, so it divides by 0xad93d23594c935a9 bit-reversed.
_CRC64_POLY_REFLECTED = 0x95AC9329AC4BC9B5


def _crc64_of_byte(c):
    for _ in range(8):
        c = (c >> 1) ^ _CRC64_POLY_REFLECTED if c & 1 else c >> 1
    return c


_CRC64_TABLE = [_crc64_of_byte(i) for i in range(256)]


def crc64_py(data, crc=0) -> int:
    """The reference: one table step per byte (about 0.16 s per MB). `crc64` is the compiled twin
    (keyspace/_crc64.c, built by pip install where a C compiler is found) when it is there."""
    t = _CRC64_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


try:
    from ._crc64 import crc64
    CRC64_COMPILED = True
except ImportError:   # installed without a C compiler
    crc64 = crc64_py
    CRC64_COMPILED = False


# -- LZF (lzf_d.c) -------------------------------------------------------------------------------------

def lzf_decompress(data, out_len: int) -> bytes:
    """The out_len bytes that data decompresses to; RdbError when it does not decompress to exactly that."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        ctrl = data[i]
        i += 1
        if ctrl < 32:  # a literal run of ctrl + 1 bytes
            run = ctrl + 1
            if i + run > n:
                raise RdbError("LZF literal run past the end of the input")
            out += data[i:i + run]
            i += run
        else:  # a back reference: length (3 bits, 7 = one more byte follows) and a 13-bit distance
            length = ctrl >> 5
            if length == 7:
                if i >= n:
                    raise RdbError("truncated LZF back reference")
                length += data[i]
                i += 1
            if i >= n:
                raise RdbError("truncated LZF back reference")
            distance = ((ctrl & 0x1F) << 8 | data[i]) + 1
            i += 1
            length += 2
            ref = len(out) - distance
            if ref < 0:
                raise RdbError("LZF back reference before the start of the output")
            if distance >= length:
                out += out[ref:ref + length]
            else:  # the copy overlaps its own output: the last `distance` bytes repeat
                out += (out[ref:] * (length // distance + 1))[:length]
        if len(out) > out_len:
            raise RdbError("LZF output longer than declared")
    if len(out) != out_len:
        raise RdbError("LZF output shorter than declared")
    return bytes(out)


# -- listpack (listpack.c) -------------------------------------------------------------------------

def _lp_backlen(n):
    """lpEncodeBacklen: the entry length, 7 bits a byte, high bit set on all but the first byte."""
    size = 1 if n <= 127 else 2 if n < 16383 else 3 if n < 2097151 else 4 if n < 268435455 else 5
    return bytes([n >> 7 * (size - 1)] + [n >> 7 * (size - 1 - k) & 127 | 128 for k in range(1, size)])


_LP_INT_WIDTH = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}


def listpack_decode(blob) -> list:
    """The entries of a listpack, bytes for string entries and int for integer ones. Checks what
    lpValidateIntegrity's deep mode checks: header size and count, every backlen, the terminator."""
    size = len(blob)
    if size < _LP_HEADER_BYTES + 1 or int.from_bytes(blob[0:4], "little") != size or blob[-1] != 0xFF:
        raise RdbError("bad listpack header")
    declared = blob[4] | blob[5] << 8
    out = []
    p, end = _LP_HEADER_BYTES, size - 1
    while p < end:
        b = blob[p]
        string = True
        if b < 0x80:
            string, value, head, dlen = False, b, 1, 0
        elif b < 0xC0:
            head, dlen = 1, b & 0x3F
        elif b < 0xE0:
            u = (b & 0x1F) << 8 | blob[p + 1]
            string, value, head, dlen = False, u - 8192 if u >= 4096 else u, 2, 0
        elif b < 0xF0:
            head, dlen = 2, (b & 0x0F) << 8 | blob[p + 1]
        elif b == 0xF0:
            head, dlen = 5, int.from_bytes(blob[p + 1:p + 5], "little")
        elif b in _LP_INT_WIDTH:
            width = _LP_INT_WIDTH[b]
            string, head, dlen = False, 1 + width, 0
            value = int.from_bytes(blob[p + 1:p + 1 + width], "little", signed=True)
        else:
            raise RdbError("bad listpack entry encoding 0x%02x" % b)
        q = p + head + dlen
        back = _lp_backlen(q - p)
        if q + len(back) > end or blob[q:q + len(back)] != back:
            raise RdbError("listpack entry runs past the end or has a wrong backlen")
        out.append(bytes(blob[p + head:q]) if string else value)
        p = q + len(back)
    if declared != _COUNT_UNKNOWN and declared != len(out):
        raise RdbError("listpack count does not match its entries")
    return out


def _lp_int_entry(v):
    if 0 <= v <= 127:
        enc = bytes((v,))
    elif -4096 <= v <= 4095:
        u = v & 0x1FFF
        enc = bytes((0xC0 | u >> 8, u & 0xFF))
    else:
        tag, width = next((t, w) for t, w in _LP_INT_WIDTH.items() if -(1 << 8 * w - 1) <= v < 1 << 8 * w - 1)
        enc = bytes((tag,)) + v.to_bytes(width, "little", signed=True)
    return enc + _lp_backlen(len(enc))


def _lp_entry(x):
    """One encoded entry, as lpAppend writes it: an int when x is one's canonical decimal form."""
    if type(x) is int:
        return _lp_int_entry(x)
    v = string2ll(x)
    if v is not None:
        return _lp_int_entry(v)
    n = len(x)
    if n < 64:
        head = bytes((0x80 | n,))
    elif n < 4096:
        head = bytes((0xE0 | n >> 8, n & 0xFF))
    else:
        head = b"\xf0" + n.to_bytes(4, "little")
    return head + x + _lp_backlen(len(head) + n)


def _lp_assemble(entries):
    total = _LP_HEADER_BYTES + 1 + sum(map(len, entries))
    if total >= 1 << 32:
        raise RdbError("listpack larger than 4 GB")
    count = min(len(entries), _COUNT_UNKNOWN)
    return total.to_bytes(4, "little") + count.to_bytes(2, "little") + b"".join(entries) + b"\xff"


def listpack_encode(items) -> bytes:
    """A listpack of items (bytes or int), encoded as Valkey encodes them."""
    return _lp_assemble([_lp_entry(x) for x in items])


# -- ziplist, intset, zipmap (read only: no current server writes them) ----------------------------

_ZL_INT_WIDTH = {0xFE: 1, 0xC0: 2, 0xF0: 3, 0xD0: 4, 0xE0: 8}


def ziplist_decode(blob) -> list:
    """The entries of a ziplist (bytes or int), checked as ziplistValidateIntegrity's deep mode does:
    header size, tail offset and count, every prevlen, the terminator."""
    size = len(blob)
    if size < _ZL_HEADER_BYTES + 1 or int.from_bytes(blob[0:4], "little") != size or blob[-1] != 0xFF:
        raise RdbError("bad ziplist header")
    tail = int.from_bytes(blob[4:8], "little")
    declared = blob[8] | blob[9] << 8
    if tail > size - 1:
        raise RdbError("ziplist tail offset past the end")
    out = []
    p, end = _ZL_HEADER_BYTES, size - 1
    prev_size, last = 0, None
    while p < end:
        start = p
        b = blob[p]
        if b < 254:
            prevlen, p = b, p + 1
        elif b == 254:
            prevlen, p = int.from_bytes(blob[p + 1:p + 5], "little"), p + 5
        else:
            raise RdbError("ziplist end marker before its end")
        if prevlen != prev_size or p >= end:
            raise RdbError("bad ziplist entry header")
        enc = blob[p]
        string = True
        if enc >> 6 == 0:
            head, dlen = 1, enc & 0x3F
        elif enc >> 6 == 1:
            head, dlen = 2, (enc & 0x3F) << 8 | blob[p + 1]
        elif enc >> 6 == 2:
            head, dlen = 5, int.from_bytes(blob[p + 1:p + 5], "big")
        elif enc in _ZL_INT_WIDTH:
            string, head, dlen = False, 1, _ZL_INT_WIDTH[enc]
        elif 0xF1 <= enc <= 0xFD:  # 4-bit immediate 0..12
            string, head, dlen = False, 1, 0
        else:
            raise RdbError("bad ziplist entry encoding 0x%02x" % enc)
        q = p + head + dlen
        if q > end:
            raise RdbError("ziplist entry runs past the end")
        data = blob[p + head:q]
        if string:
            out.append(bytes(data))
        else:
            out.append(int.from_bytes(data, "little", signed=True) if dlen else (enc & 0x0F) - 1)
        prev_size, last, p = q - start, start, q
    if last is not None and last != tail:
        raise RdbError("ziplist tail offset does not point to its last entry")
    if declared != _COUNT_UNKNOWN and declared != len(out):
        raise RdbError("ziplist count does not match its entries")
    return out


def intset_decode(blob) -> list:
    """The members of an intset (16, 32 or 64-bit, LE), which must be non-empty and strictly ascending."""
    if len(blob) < 8:
        raise RdbError("intset shorter than its header")
    width = int.from_bytes(blob[0:4], "little")
    count = int.from_bytes(blob[4:8], "little")
    if width not in (2, 4, 8) or 8 + count * width != len(blob) or not count:
        raise RdbError("bad intset header")
    out = [int.from_bytes(blob[k:k + width], "little", signed=True) for k in range(8, len(blob), width)]
    if any(a >= b for a, b in zip(out, out[1:])):
        raise RdbError("intset members not strictly ascending")
    return out


def zipmap_decode(blob) -> list:
    """The (field, value) pairs of a zipmap (Redis 2.4 hashes), checked as zipmapValidateIntegrity."""
    size = len(blob)
    if size < 2 or blob[-1] != 0xFF:
        raise RdbError("bad zipmap")
    end = size - 1

    def length_at(p):
        b = blob[p]
        return (b, 1) if b < 254 else (int.from_bytes(blob[p + 1:p + 5], "little"), 5)

    pairs = []
    p = 1
    while p < end:
        if blob[p] == 0xFF:
            raise RdbError("zipmap end marker before its end")
        flen, head = length_at(p)
        p += head
        field = bytes(blob[p:p + flen])
        p += flen
        if p >= end:
            raise RdbError("zipmap entry runs past the end")
        vlen, head = length_at(p)
        p += head
        if p >= end:
            raise RdbError("zipmap entry runs past the end")
        free = blob[p]
        value = bytes(blob[p + 1:p + 1 + vlen])
        p += 1 + vlen + free
        if p > end:
            raise RdbError("zipmap entry runs past the end")
        pairs.append((field, value))
    if not pairs or (blob[0] != 254 and blob[0] != len(pairs)):
        raise RdbError("zipmap empty or its count does not match")
    return pairs


# -- reading -------------------------------------------------------------------------------------------

_SPECIAL_DOUBLES = {253: float("nan"), 254: float("inf"), 255: float("-inf")}


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, end):
        self.buf, self.pos, self.end = buf, 0, end

    def take(self, n):
        p = self.pos
        if p + n > self.end:
            raise RdbError("truncated payload")
        self.pos = p + n
        return self.buf[p:p + n]

    def byte(self):
        if self.pos >= self.end:
            raise RdbError("truncated payload")
        self.pos += 1
        return self.buf[self.pos - 1]

    def len_or_enc(self):
        """(value, is a string encoding) as rdbLoadLenByRef reads them."""
        b = self.byte()
        kind = b >> 6
        if kind == 3:
            return b & 0x3F, True
        if kind == 0:
            return b & 0x3F, False
        if kind == 1:
            return (b & 0x3F) << 8 | self.byte(), False
        if b == 0x80:
            return int.from_bytes(self.take(4), "big"), False
        if b == 0x81:
            return int.from_bytes(self.take(8), "big"), False
        raise RdbError("unknown length encoding 0x%02x" % b)

    def length(self):
        n, encoded = self.len_or_enc()
        if encoded:
            raise RdbError("a string encoding where a length belongs")
        return n

    def string(self):
        n, encoded = self.len_or_enc()
        if not encoded:
            return self.take(n)
        if n <= ENC_INT32:
            return b"%d" % int.from_bytes(self.take(1 << n), "little", signed=True)
        if n == ENC_LZF:
            compressed_len = self.length()
            out_len = self.length()
            return lzf_decompress(self.take(compressed_len), out_len)
        raise RdbError("unknown string encoding %d" % n)

    def skip_string(self):
        """Steps over what string() would read, without decompressing it: where only its end matters."""
        n, encoded = self.len_or_enc()
        if not encoded:
            self.skip(n)
        elif n <= ENC_INT32:
            self.skip(1 << n)
        elif n == ENC_LZF:
            compressed_len = self.length()
            self.length()
            self.skip(compressed_len)
        else:
            raise RdbError("unknown string encoding %d" % n)

    def skip(self, n):
        if self.pos + n > self.end:
            raise RdbError("truncated payload")
        self.pos += n

    def millis(self):
        return int.from_bytes(self.take(8), "little", signed=True)

    def stream_id(self):
        ms = self.length()
        return ms << 64 | self.length()

    def raw_id(self):
        return int.from_bytes(self.take(16), "big")

    def text_double(self):
        """rdbLoadDoubleValue: a length byte (253 nan, 254 inf, 255 -inf) and the decimal text."""
        n = self.byte()
        return _SPECIAL_DOUBLES[n] if n in _SPECIAL_DOUBLES else _parse_score(self.take(n))


def _parse_score(text):
    try:
        return float(text)
    except ValueError:
        raise RdbError("bad score %r" % bytes(text)) from None


def _nonempty(value, what):
    if not value:
        raise RdbError("empty %s" % what)
    return value


def _as_set(items):
    s = set(map(_as_bytes, items))
    if len(s) != len(items):
        raise RdbError("duplicate set members")
    return _nonempty(s, "set")


def _as_hash(items):
    """A dict from a flat field, value, ... list (listpack and ziplist entries or RDB strings)."""
    if len(items) % 2:
        raise RdbError("hash with an odd number of entries")
    d = dict(zip(map(_as_bytes, items[0::2]), map(_as_bytes, items[1::2])))
    if len(d) * 2 != len(items):
        raise RdbError("duplicate hash fields")
    return _nonempty(d, "hash")


def _as_zset(members, scores):
    d = dict(zip(members, scores))
    if len(d) != len(members):
        raise RdbError("duplicate sorted set members")
    if any(score != score for score in scores):
        raise RdbError("sorted set with a NaN score")
    return ZSet.from_scores(_nonempty(d, "sorted set"))


def _zset_from_items(items):
    """member, score, ... from a ziplist or listpack; a score is an integer entry or decimal text."""
    if len(items) % 2:
        raise RdbError("sorted set with an odd number of entries")
    return _as_zset(list(map(_as_bytes, items[0::2])),
                    [float(x) if type(x) is int else _parse_score(x) for x in items[1::2]])


def _load_zset(r, binary):
    members, scores = [], []
    for _ in range(r.length()):
        members.append(r.string())
        scores.append(struct.unpack("<d", r.take(8))[0] if binary else r.text_double())
    return _as_zset(members, scores)


def _load_quicklist(r, version2):
    n = r.length()
    out = deque()
    for _ in range(n):
        container = r.length() if version2 else QL_PACKED
        if container not in (QL_PLAIN, QL_PACKED):
            raise RdbError("bad quicklist container %d" % container)
        data = r.string()
        if not data:
            raise RdbError("empty quicklist node")
        if container == QL_PLAIN:
            out.append(bytes(data))
        else:
            out.extend(map(_as_bytes, listpack_decode(data) if version2 else ziplist_decode(data)))
    return _nonempty(out, "list")


_LOADERS = {
    T_STRING: lambda r: bytes(r.string()),
    T_LIST: lambda r: deque(_nonempty([r.string() for _ in range(r.length())], "list")),
    T_SET: lambda r: _as_set([r.string() for _ in range(r.length())]),
    T_ZSET: lambda r: _load_zset(r, binary=False),
    T_HASH: lambda r: _as_hash([r.string() for _ in range(2 * r.length())]),
    T_ZSET_2: lambda r: _load_zset(r, binary=True),
    T_HASH_ZIPMAP: lambda r: _as_hash([x for pair in zipmap_decode(r.string()) for x in pair]),
    T_LIST_ZIPLIST: lambda r: deque(map(_as_bytes, _nonempty(ziplist_decode(r.string()), "list"))),
    T_SET_INTSET: lambda r: _as_set(intset_decode(r.string())),
    T_ZSET_ZIPLIST: lambda r: _zset_from_items(ziplist_decode(r.string())),
    T_HASH_ZIPLIST: lambda r: _as_hash(ziplist_decode(r.string())),
    T_LIST_QUICKLIST: lambda r: _load_quicklist(r, version2=False),
    T_HASH_LISTPACK: lambda r: _as_hash(listpack_decode(r.string())),
    T_ZSET_LISTPACK: lambda r: _zset_from_items(listpack_decode(r.string())),
    T_LIST_QUICKLIST_2: lambda r: _load_quicklist(r, version2=True),
    T_SET_LISTPACK: lambda r: _as_set(listpack_decode(r.string())),
}
_STREAM_TYPES = (T_STREAM_LISTPACKS, T_STREAM_LISTPACKS_2, T_STREAM_LISTPACKS_3)


# -- module values (RDB_TYPE_MODULE_2: rdb.c rdbLoadObject, module.c VM_Save* / VM_Load*) ------------------------

MODULE_OPCODE_EOF, MODULE_OPCODE_SINT, MODULE_OPCODE_UINT, MODULE_OPCODE_FLOAT = 0, 1, 2, 3
MODULE_OPCODE_DOUBLE, MODULE_OPCODE_STRING = 4, 5
_MODULE_CHARSET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def module_type_id(name: str, encver: int) -> int:
    """moduleTypeEncodeId: the 9-character type name in 6 bits a character, then the 10-bit encoding version."""
    ident = 0
    for ch in name.encode():
        ident = ident << 6 | _MODULE_CHARSET.index(ch)
    return ident << 10 | encver


def module_type_name(ident: int) -> str:
    """moduleTypeNameByID: the type name an id carries (its lower 10 bits are the encoding version)."""
    ident >>= 10
    return bytes(_MODULE_CHARSET[(ident >> (6 * (8 - j))) & 63] for j in range(9)).decode()


class _ModuleReader:
    """A module's rdb_load view of a _Reader: each value behind its opcode, as VM_LoadUnsigned & co check it."""

    __slots__ = ("r",)

    def __init__(self, r):
        self.r = r

    def _opcode(self, expected):
        if self.r.length() != expected:
            raise RdbError("module value: unexpected opcode")

    def unsigned(self):
        self._opcode(MODULE_OPCODE_UINT)
        return self.r.length()

    def double(self):
        self._opcode(MODULE_OPCODE_DOUBLE)
        return struct.unpack("<d", self.r.take(8))[0]

    def string(self):
        self._opcode(MODULE_OPCODE_STRING)
        return bytes(self.r.string())


def _module_unsigned(n):
    return _len(MODULE_OPCODE_UINT) + _len(n)


def _module_values(fields):
    """VM_SaveUnsigned / VM_SaveDouble / VM_SaveStringBuffer of ('u' | 'd' | 's', value) in order."""
    out = []
    for kind, v in fields:
        if kind == "u":
            out.append(_module_unsigned(v))
        elif kind == "d":
            out.append(_len(MODULE_OPCODE_DOUBLE) + struct.pack("<d", v))
        else:
            out.append(_len(MODULE_OPCODE_STRING) + _string(v))
    return out


# valkey-json (dom.cc dom_save / dom_load): encoding version 3 is the document as one string of compact JSON;
# version 0, older dumps, is the tree node by node, each node a type code then its content
JSON_TYPE_NAME, JSON_ENCVER = "ReJSON-RL", 3
_JSON_NULL, _JSON_STRING, _JSON_DOUBLE, _JSON_INTEGER = 0x01, 0x02, 0x04, 0x08
_JSON_BOOLEAN, _JSON_OBJECT, _JSON_ARRAY, _JSON_PAIR = 0x10, 0x20, 0x40, 0x80


def _load_json(m, encver):
    """valkey-json's DocumentType_RdbLoad (type "ReJSON-RL"): a JsonDoc. Its nesting is bounded as a document's
    text is (jsondoc.NESTING_CEILING), whatever json.max-path-limit says."""
    if encver > JSON_ENCVER:
        raise RdbError("ReJSON-RL encoding version %d is newer than %d" % (encver, JSON_ENCVER))
    if encver == 3:
        try:
            return JsonDoc(json_parse(m.string(), 1 << 30))
        except JsonError as exc:
            raise RdbError("JSON document that does not parse (%s)" % exc.code) from None
    if encver == 0:
        return JsonDoc(_load_json_v0(m, 0))
    raise RdbError("unknown ReJSON-RL encoding version %d" % encver)


def _load_json_v0(m, level):
    """rdbLoadJValue: one node (a recursion per level: the document nests at most NESTING_CEILING)."""
    from .jsondoc import NESTING_CEILING
    code = m.unsigned()
    if code == _JSON_NULL:
        return None
    if code == _JSON_STRING:
        return m.string().decode("utf-8", "surrogateescape")
    if code == _JSON_DOUBLE:
        value = m.double()
        return make_double(value, format_double(value))
    if code == _JSON_INTEGER:
        n = m.unsigned()
        return n - (1 << 64) if n >> 63 else n
    if code == _JSON_BOOLEAN:
        s = m.string()
        if s not in (b"0", b"1"):
            raise RdbError("invalid boolean in a JSON document")
        return s == b"1"
    if code == _JSON_OBJECT or code == _JSON_ARRAY:
        count = m.unsigned()          # untrusted: never allocated ahead, each element read (or the load fails)
        if level >= NESTING_CEILING:
            raise RdbError("JSON document nested past the path limit")
        if code == _JSON_ARRAY:
            arr = []
            for _ in range(count):
                arr.append(_load_json_v0(m, level + 1))
            return arr
        obj = {}
        for _ in range(count):
            if m.unsigned() != _JSON_PAIR:
                raise RdbError("invalid pair code in a JSON document")
            name = m.string().decode("utf-8", "surrogateescape")
            obj[name] = _load_json_v0(m, level + 1)
        return obj
    raise RdbError("invalid value code 0x%x in a JSON document" % code)


def _load_bloom(m, encver):
    """valkey-bloom's load_from_rdb (type "bloomfltr", encoding version 1)."""
    if encver > BLOOM_ENCVER:
        raise RdbError("bloomfltr encoding version %d is newer than %d" % (encver, BLOOM_ENCVER))
    try:
        return Bloom.from_rdb(m.unsigned, m.double, m.string)
    except BloomError as exc:
        raise RdbError("bloom object: %s" % exc.text) from None


BLOOM_TYPE_NAME, BLOOM_ENCVER = "bloomfltr", 1
# module type name -> its rdb_load: (reader, encver) -> value
MODULE_TYPES = {JSON_TYPE_NAME: _load_json, BLOOM_TYPE_NAME: _load_bloom}


def _load_module(r):
    ident = r.length()
    name = module_type_name(ident)
    loader = MODULE_TYPES.get(name)
    if loader is None:
        raise RdbError("module data I can't load: no matching module type '%s'" % name)
    value = loader(_ModuleReader(r), ident & 1023)
    if r.length() != MODULE_OPCODE_EOF:
        raise RdbError("module value of type '%s' not terminated by the module value EOF marker" % name)
    return value


def _load_hash_2(r):
    """RDB_TYPE_HASH_2 (rdbLoadObject): (the hash, {field: expire_at_ms} of the fields that have one). Fields
    whose time has passed are kept, as Valkey's RESTORE keeps them (active expiry removes them later)."""
    n = r.length()
    h = {}
    ttls = {}
    for _ in range(n):
        field = _as_bytes(r.string())
        value = _as_bytes(r.string())
        at = int.from_bytes(r.take(8), "little", signed=True)
        if field in h:
            raise RdbError("duplicate hash fields")
        h[field] = value
        if at != _NO_EXPIRY:
            if at < 0:
                raise RdbError("bad hash field expire time")
            ttls[field] = at
    return _nonempty(h, "hash"), ttls


# -- streams -------------------------------------------------------------------------------------------

def _load_stream_node(s, master, blob, prev_id):
    """Adds the live entries of one stream listpack (t_stream.c layout) to s; returns the node model
    (None when every entry in it is deleted) and the last id in it."""
    items = listpack_decode(blob)
    n_items = len(items)

    def num(k):
        x = items[k] if k < n_items else None
        if type(x) is not int:
            x = string2ll(x) if type(x) is bytes else None
            if x is None:
                raise RdbError("stream listpack: missing or non-integer entry")
        return x

    live, dead, n_names = num(0), num(1), num(2)
    if n_names < 0:
        raise RdbError("stream listpack: negative field count")
    names = tuple(map(_as_bytes, items[3:3 + n_names]))
    p = 3 + n_names
    if num(p) != 0:
        raise RdbError("stream listpack: no master entry terminator")
    p += 1
    master_ms, master_seq = master >> 64, master & MASK64
    found_live = found_dead = 0
    last = prev_id
    while p < n_items:
        flags = num(p)
        i = ((master_ms + num(p + 1)) & MASK64) << 64 | ((master_seq + num(p + 2)) & MASK64)
        p += 3
        if flags & STREAM_FLAG_SAMEFIELDS:  # values only: the names are the master entry's
            n, fields = n_names, names
            values = items[p:p + n]
            p += n
        else:  # its own names, each followed by its value
            n = num(p)
            if n < 0:
                raise RdbError("stream listpack: negative field count")
            pairs = items[p + 1:p + 1 + 2 * n]
            fields, values = tuple(map(_as_bytes, pairs[0::2])), pairs[1::2]
            p += 1 + 2 * n
        if len(fields) != n or len(values) != n:
            raise RdbError("stream listpack: truncated entry")
        extra = 3 if flags & STREAM_FLAG_SAMEFIELDS else 4 + n
        if num(p) != n + extra:
            raise RdbError("stream listpack: wrong lp-count")
        p += 1
        if i <= last:
            raise RdbError("stream entries not in ascending ID order")
        last = i
        if flags & STREAM_FLAG_DELETED:
            found_dead += 1
            continue
        found_live += 1
        entry = tuple(x for pair in zip(fields, map(_as_bytes, values)) for x in pair)
        s.entries[i] = entry
        s.ids.a.append(i)
        s.data_bytes += sum(map(len, entry))
    if (found_live, found_dead) != (live, dead):
        raise RdbError("stream listpack: master entry counts do not match its entries")
    if not live:
        return None, last
    node = _Node(master, names, len(blob))
    node.last, node.live, node.total = last, live, live + dead
    return node, last


def _load_stream(r, rdbtype, clock_ms):
    s = Stream()
    blobs = {}
    for _ in range(r.length()):
        key = r.string()
        if len(key) != 16:
            raise RdbError("stream node key is not a stream ID")
        master = int.from_bytes(key, "big")
        if master in blobs:
            raise RdbError("stream listpack re-added with an existing key")
        blob = r.string()
        if len(blob) <= _LP_HEADER_BYTES + 1:
            raise RdbError("empty listpack inside stream")
        blobs[master] = blob
    last = -1
    for master in sorted(blobs):
        node, last = _load_stream_node(s, master, blobs[master], last)
        if node is not None:
            s.nodes.append(node)
            s.node_firsts.append(node.first)
    length = r.length()
    s.last_id = r.stream_id()
    if rdbtype >= T_STREAM_LISTPACKS_2:
        r.stream_id()  # the recorded first id: durakv derives it from the entries (Stream.first_id)
        s.max_deleted_id = r.stream_id()
        s.entries_added = r.length()
    else:  # rdb.c: a v1 stream counts its current length as everything ever added, without tombstones
        s.entries_added = length
    if length != len(s.ids):
        raise RdbError("stream length does not match its entries")
    if s.ids and s.ids.last() > s.last_id:
        raise RdbError("stream entry after the stream's last id")
    now_ms = clock_ms or 0
    for _ in range(r.length()):
        name = bytes(r.string())
        last_id = r.stream_id()
        if rdbtype >= T_STREAM_LISTPACKS_2:
            entries_read = _signed64(r.length())  # SCG_INVALID_ENTRIES_READ (-1) is stored as 2**64 - 1
        else:
            entries_read = s.estimate_distance(last_id)
        g = s.create_group(name, last_id, entries_read)
        if g is None:
            raise RdbError("duplicate consumer group")
        for _ in range(r.length()):
            i = r.raw_id()
            if i in g.pel:
                raise RdbError("duplicate group PEL entry")
            delivery_time = r.millis()
            g.pel.add(i, Nack(None, delivery_time, r.length()))
        for _ in range(r.length()):
            # Valkey stamps a consumer with the current time and then overwrites it with the stored one.
            c = g.create_consumer(bytes(r.string()), now_ms)
            if c is None:
                raise RdbError("duplicate stream consumer")
            c.seen_time = r.millis()
            c.active_time = r.millis() if rdbtype >= T_STREAM_LISTPACKS_3 else c.seen_time
            for _ in range(r.length()):
                i = r.raw_id()
                nack = g.pel.get(i)
                if nack is None or nack.consumer is not None:
                    raise RdbError("consumer PEL entry missing from the group PEL or owned twice")
                nack.consumer = c
                c.pel.add(i, nack)
        if any(n.consumer is None for n in g.pel.map.values()):
            raise RdbError("group PEL entry without a consumer")
    return s


def _stream_chunks(s):
    """(master id, master field names, live ids) per listpack: durakv's nodes when they cover the
    entries, else runs of STREAM_CHUNK_ENTRIES."""
    ids = s.ids.to_list()
    nodes = s.nodes
    if not ids:
        return []
    if nodes and nodes[0].first <= ids[0]:
        bounds = [bisect_left(ids, n.first) for n in nodes] + [len(ids)]
        return [(n.first, tuple(n.fields), ids[bounds[k]:bounds[k + 1]])
                for k, n in enumerate(nodes) if bounds[k] < bounds[k + 1]]
    return [(ids[k], tuple(s.entries[ids[k]][0::2]), ids[k:k + STREAM_CHUNK_ENTRIES])
            for k in range(0, len(ids), STREAM_CHUNK_ENTRIES)]


def _stream_listpack(s, master, names, ids):
    """streamAppendItem's layout: the master entry, then per entry its flags, id deltas, then its values
    (when its names are the master's) or its count and name, value pairs, and its lp-count."""
    master_ms, master_seq = master >> 64, master & MASK64
    items = [len(ids), 0, len(names), *names, 0]
    for i in ids:
        fields = s.entries[i]
        values = fields[1::2]
        n = len(values)
        delta = (_signed64((i >> 64) - master_ms), _signed64((i & MASK64) - master_seq))
        if tuple(fields[0::2]) == names:
            items += (STREAM_FLAG_SAMEFIELDS, *delta, *values, n + 3)
        else:
            items += (0, *delta, n, *fields, 2 * n + 4)
    return listpack_encode(items)


def _active_times_needed(s) -> bool:
    """Whether some consumer's active-time differs from its seen-time (RDB 10 cannot say it)."""
    return any(c.active_time != c.seen_time for g in (s.groups or {}).values() for c in g.consumers.values())


def _dump_stream(s, active_times=False):
    chunks = _stream_chunks(s)
    out = [_len(len(chunks))]
    for master, names, ids in chunks:
        out += (_string(master.to_bytes(16, "big")), _string(_stream_listpack(s, master, names, ids)))
    out += (_len(len(s.ids)), _id(s.last_id), _id(s.first_id), _id(s.max_deleted_id), _len(s.entries_added))
    groups = s.groups or {}
    out.append(_len(len(groups)))
    for name in sorted(groups):
        g = groups[name]
        out += (_string(name), _id(g.last_id), _len(g.entries_read & MASK64), _len(len(g.pel)))
        for i in g.pel.keys:
            nack = g.pel.map[i]
            out += (i.to_bytes(16, "big"), struct.pack("<q", nack.delivery_time), _len(nack.delivery_count))
        out.append(_len(len(g.consumers)))
        for cname in sorted(g.consumers):
            c = g.consumers[cname]
            out += (_string(cname), struct.pack("<q", c.seen_time))
            if active_times:
                out.append(struct.pack("<q", c.active_time))
            out.append(_len(len(c.pel)))
            out += [i.to_bytes(16, "big") for i in c.pel.keys]
    return b"".join(out)


# -- writing -------------------------------------------------------------------------------------------

def _len(n):
    """rdbSaveLen."""
    if n < 1 << 6:
        return bytes((n,))
    if n < 1 << 14:
        return bytes((0x40 | n >> 8, n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    if n <= MASK64:
        return b"\x81" + n.to_bytes(8, "big")
    raise RdbError("length does not fit in 64 bits")


def _id(i):
    return _len(i >> 64) + _len(i & MASK64)


def _string(b):
    """rdbSaveRawString without LZF: the canonical decimal of an int32 as RDB_ENC_INT*, else raw."""
    v = string2ll(b) if len(b) <= 11 else None
    if v is not None and -(1 << 31) <= v < 1 << 31:
        width = 1 if -128 <= v <= 127 else 2 if -32768 <= v <= 32767 else 4
        return bytes((0xC0 | width >> 1,)) + v.to_bytes(width, "little", signed=True)
    return _len(len(b)) + b


def _dump_list(items):
    """Quicklist nodes as Valkey fills them: listpacks closed before they would pass 8 KB."""
    nodes, entries = [], []

    def close():
        if entries:
            nodes.append(_len(QL_PACKED) + _string(_lp_assemble(entries)))
            entries.clear()
        return _LP_HEADER_BYTES + 1

    lp_bytes = close()
    for x in items:
        if len(x) >= LIST_PLAIN_MIN_BYTES:
            lp_bytes = close()
            nodes.append(_len(QL_PLAIN) + _string(x))
            continue
        if lp_bytes + len(x) + LIST_ENTRY_OVERHEAD_BYTES > LIST_NODE_MAX_BYTES:
            lp_bytes = close()
        entries.append(_lp_entry(x))
        lp_bytes += len(entries[-1])
    close()
    return _len(len(nodes)) + b"".join(nodes)


def _dump_body(value, field_ttls=None):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return T_STRING, _string(bytes(value))
    if isinstance(value, Stream):
        if _active_times_needed(value):
            return T_STREAM_LISTPACKS_3, _dump_stream(value, active_times=True)
        return T_STREAM_LISTPACKS_2, _dump_stream(value)
    if isinstance(value, JsonDoc):
        return T_MODULE_2, b"".join([_len(module_type_id(JSON_TYPE_NAME, JSON_ENCVER)),
                                     *_module_values([("s", json_dumps(value.root))]), _len(MODULE_OPCODE_EOF)])
    if isinstance(value, Bloom):
        return T_MODULE_2, b"".join([_len(module_type_id(BLOOM_TYPE_NAME, BLOOM_ENCVER)),
                                     *_module_values(value.rdb_fields()), _len(MODULE_OPCODE_EOF)])
    if not value:
        raise RdbError("an empty %s has no payload" % type(value).__name__)
    if isinstance(value, deque):
        return T_LIST_QUICKLIST_2, _dump_list(value)
    if isinstance(value, (set, frozenset)):
        return T_SET, _len(len(value)) + b"".join(map(_string, value))
    if isinstance(value, dict):
        if field_ttls:
            get = field_ttls.get
            return T_HASH_2, _len(len(value)) + b"".join(
                _string(f) + _string(v) + struct.pack("<q", get(f, _NO_EXPIRY)) for f, v in value.items())
        return T_HASH, _len(len(value)) + b"".join(_string(f) + _string(v) for f, v in value.items())
    if isinstance(value, ZSet):
        # Highest score first, as Valkey writes it: its loader then inserts every member at the head.
        return T_ZSET_2, _len(len(value)) + b"".join(
            _string(m) + struct.pack("<d", score) for score, m in reversed(value.order))
    raise TypeError("no RDB type for %s" % type(value).__name__)


# -- the payload -------------------------------------------------------------------------------------

def dump(value, field_ttls=None) -> bytes:
    """The DUMP payload of a durakv value (RDB version 10); of a hash with field TTLs ({field: expire_at_ms}),
    Valkey 9's RDB_TYPE_HASH_2 in RDB version 80; of a stream with consumers' active-times, version 11."""
    rdbtype, body = _dump_body(value, field_ttls)
    version = (RDB_VERSION_FIELD_TTL if rdbtype == T_HASH_2 else RDB_VERSION_ACTIVE_TIME
               if rdbtype == T_STREAM_LISTPACKS_3 else RDB_VERSION_WRITTEN)
    payload = bytes((rdbtype,)) + body + version.to_bytes(2, "little")
    return payload + crc64(payload).to_bytes(8, "little")


def rdb_file(databases, libraries=(), aux=()) -> bytes:
    """A whole RDB file (version 10, or 11 when a stream has consumers' active-times, as rdbSaveRio lays it
    out): aux fields, function libraries (their
    code), then per database SELECTDB, RESIZEDB and its keys (an expire time first where there is one),
    EOF and the CRC-64 of everything before it. databases: (db_id, [(key, value, expire_at_ms | None)
    [, field_ttls]]); when a hash has field TTLs the file is Valkey 9's (VALKEY080) and holds RDB_TYPE_HASH_2."""
    with_ttls = any(len(item) > 3 and item[3] for _db, items in databases for item in items)
    active_times = not with_ttls and any(isinstance(item[1], Stream) and _active_times_needed(item[1])
                                         for _db, items in databases for item in items)
    out = [b"VALKEY%03d" % RDB_VERSION_FIELD_TTL if with_ttls else
           b"REDIS%04d" % (RDB_VERSION_ACTIVE_TIME if active_times else RDB_VERSION_WRITTEN)]
    for name, value in aux:
        out.append(b"\xfa" + _string(name) + _string(value))
    for code in libraries:
        out.append(b"\xf5" + _string(code))
    for db_id, items in databases:
        if not items:
            continue
        out.append(b"\xfe" + _len(db_id) + b"\xfb" + _len(len(items))
                   + _len(sum(1 for item in items if item[2] is not None)))
        for item in items:
            key, value, expire_at_ms = item[:3]
            if expire_at_ms is not None:
                out.append(b"\xfc" + struct.pack("<q", expire_at_ms))
            rdbtype, body = _dump_body(value, item[3] if len(item) > 3 else None)
            out.append(bytes((rdbtype,)) + _string(key) + body)
    out.append(b"\xff")
    data = b"".join(out)
    return data + crc64(data).to_bytes(8, "little")


def _load_object(r, rdbtype, clock_ms):
    if rdbtype == T_HASH_2:
        raise RdbError("a hash with field TTLs where they cannot be kept")
    return _load_object_ttls(r, rdbtype, clock_ms)[0]


def _load_object_ttls(r, rdbtype, clock_ms):
    """(value, {field: expire_at_ms} for a hash with field TTLs, else None)."""
    if rdbtype == T_HASH_2:
        return _load_hash_2(r)
    return _load_one(r, rdbtype, clock_ms), None


def _load_one(r, rdbtype, clock_ms):
    if rdbtype in _STREAM_TYPES:
        return _load_stream(r, rdbtype, clock_ms)
    if rdbtype in _LOADERS:
        return _LOADERS[rdbtype](r)
    if rdbtype == T_MODULE_2:
        return _load_module(r)
    if rdbtype == T_MODULE_PRE_GA:
        raise RdbError("Pre-release module format not supported")
    raise RdbError("unknown RDB object type %d" % rdbtype)


def load_rdb_file(data, clock_ms=None, field_ttls=None):
    """An RDB file (rdbLoadRio: what a primary sends to a replica, what SAVE writes), RDB versions up to 11
    (REDIS magic) and Valkey 9.0's 80 (VALKEY magic). Returns ({db_id: [(key, value, expire_at_ms | None),
    ...]}, [function library code, ...]); the field TTLs of hashes that have some go into the dict
    field_ttls ({(db_id, key): {field: expire_at_ms}}), and without one such a hash is an error. The trailing
    CRC-64 is checked unless it is 0 (rdbchecksum no). Raises RdbError when the file is malformed or holds
    what durakv has not (module types it does not serve, module aux data)."""
    data = bytes(data)
    if len(data) >= 9 and data[:5] == b"REDIS" and data[5:9].isdigit():
        version = int(data[5:9])
        if version > RDB_VERSION_MAX:
            raise RdbError("RDB version %d is not supported" % version)
    elif len(data) >= 9 and data[:6] == b"VALKEY" and data[6:9].isdigit():
        version = int(data[6:9])
        if version != RDB_VERSION_FIELD_TTL:
            raise RdbError("RDB version %d is not supported" % version)
    else:
        raise RdbError("not an RDB file")
    if version < 1:
        raise RdbError("RDB version %d is not supported" % version)
    r = _Reader(data, len(data))
    r.pos = 9
    databases, libraries = {}, []
    db_id, expire_at_ms = 0, None
    while True:
        op = r.byte()
        if op == 0xFF:                                       # EOF
            if version >= 5:
                stored = int.from_bytes(r.take(8), "little")
                if stored and stored != crc64(data[:r.pos - 8]):
                    raise RdbError("RDB checksum mismatch")
            return databases, libraries
        if op == 0xFE:                                       # SELECTDB
            db_id = r.length()
        elif op == 0xFB:                                     # RESIZEDB: sizes are hints
            r.length()
            r.length()
        elif op == 0xFA:                                     # AUX field
            r.string()
            r.string()
        elif op == 0xFC:                                     # EXPIRETIME_MS
            expire_at_ms = r.millis()
        elif op == 0xFD:                                     # EXPIRETIME (seconds, old files)
            expire_at_ms = int.from_bytes(r.take(4), "little", signed=True) * 1000
        elif op == 0xF8:                                     # IDLE (LRU): not kept
            r.length()
        elif op == 0xF9:                                     # FREQ (LFU): not kept
            r.byte()
        elif op == 0xF5:                                     # FUNCTION2: a library's code
            libraries.append(bytes(r.string()))
        elif op in (0xF6, 0xF7):
            raise RdbError("pre-GA functions and module aux data are not supported")
        else:
            key = bytes(r.string())
            if field_ttls is None:
                value = _load_object(r, op, clock_ms)
            else:
                value, ttls = _load_object_ttls(r, op, clock_ms)
                if ttls:
                    field_ttls[(db_id, key)] = ttls
            databases.setdefault(db_id, []).append((key, value, expire_at_ms))
            expire_at_ms = None


def verify(payload) -> bool:
    """verifyDumpPayload: a footer with an RDB version this server reads and a matching CRC-64."""
    if len(payload) < 10:
        return False
    if not _version_read(int.from_bytes(payload[-10:-8], "little")):
        return False
    return crc64(payload[:-8]) == int.from_bytes(payload[-8:], "little")


def load(payload, clock_ms=None):
    """load_with_field_ttls without the field TTLs (a hash that has some is an RdbError)."""
    value, ttls = load_with_field_ttls(payload, clock_ms)
    if ttls:
        raise RdbError("a hash with field TTLs where they cannot be kept")
    return value


def load_with_field_ttls(payload, clock_ms=None):
    """(value, {field: expire_at_ms} or None) of a payload that passed verify() (the CRC is not checked
    again); the TTLs are a Valkey 9 hash's (RDB_TYPE_HASH_2). clock_ms is the time
    a loaded stream consumer is created at before its stored seen-time replaces it (rdb.c does the same).
    Raises RdbError when the payload is malformed or holds a type durakv has not (a module type it does not serve)."""
    payload = bytes(payload)
    if len(payload) < 10 or not _version_read(int.from_bytes(payload[-10:-8], "little")):
        raise RdbError("payload without a valid footer")
    r = _Reader(payload, len(payload) - 10)
    value, ttls = _load_object_ttls(r, r.byte(), clock_ms)
    if r.pos != r.end:
        raise RdbError("trailing bytes after the value")
    return value, ttls


# -- streaming a file -------------------------------------------------------------------------------

# What a streaming reader asks read() for beyond what it needs: enough that a file of small keys is read in
# few calls, little enough that a large value is held about once (plus this) while its bytes arrive.
STREAM_READ_AHEAD_BYTES = 64 * 1024
STREAM_READ_MAX_BYTES = 1 << 20


class _StreamReader(_Reader):
    """A _Reader over bytes that arrive from read(n): the decoders run on it unchanged. buf holds the bytes
    since the last mark() (the current record's, and up to STREAM_READ_AHEAD_BYTES of earlier ones) and what
    was read ahead; mark() folds the consumed bytes into the running CRC-64 of the file and drops them, so a
    large record's bytes are held only while it is read."""

    __slots__ = ("read", "crc")

    def __init__(self, read):
        super().__init__(bytearray(), 0)
        self.read = read
        self.crc = 0

    def _fill(self, n):
        buf = self.buf
        while len(buf) - self.pos < n:
            missing = n - (len(buf) - self.pos)
            chunk = self.read(min(max(missing, STREAM_READ_AHEAD_BYTES), STREAM_READ_MAX_BYTES))
            if not chunk:
                raise RdbError("truncated RDB file")
            buf += chunk
        self.end = len(buf)

    def take(self, n):
        if self.pos + n > self.end:
            self._fill(n)
        p = self.pos
        self.pos = p + n
        # one copy, as bytes: a bytearray slice would be copied again by the decoders' bytes()
        with memoryview(self.buf) as m:
            return m[p:p + n].tobytes()

    def byte(self):
        if self.pos >= self.end:
            self._fill(1)
        self.pos += 1
        return self.buf[self.pos - 1]

    def skip(self, n):
        if self.pos + n > self.end:
            self._fill(n)
        self.pos += n

    def mark(self, everything=False):
        """Folds the bytes consumed so far into the file's CRC-64 and forgets them: once they add up to the
        read-ahead (dropping them moves what was read ahead, so not after every small record), or everything."""
        if self.pos >= STREAM_READ_AHEAD_BYTES or (everything and self.pos):
            with memoryview(self.buf) as m:
                self.crc = crc64(m[:self.pos], self.crc)
            del self.buf[:self.pos]
            self.pos, self.end = 0, len(self.buf)

    def payload(self, rdbtype, start, version):
        """The DUMP payload of the object read from buf[start:pos]: its bytes as they are, not re-encoded."""
        head = _TYPE_BYTES[rdbtype]
        footer = _VERSION_BYTES[version]
        with memoryview(self.buf) as m:
            body = m[start:self.pos]
            crc = crc64(footer, crc64(body, _TYPE_BYTE_CRC[rdbtype]))
            out = b"".join((head, body, footer, crc.to_bytes(8, "little")))
            body.release()
        return out


_TYPE_BYTES = [bytes((t,)) for t in range(256)]
_TYPE_BYTE_CRC = [crc64(b) for b in _TYPE_BYTES]
_VERSION_BYTES = {v: v.to_bytes(2, "little") for v in (*range(1, RDB_VERSION_MAX + 1), RDB_VERSION_FIELD_TTL)}


def _rdb_header_version(header):
    """The RDB version of a file's 9-byte header (REDIS0001..REDIS0011, VALKEY080); RdbError otherwise."""
    if len(header) == 9 and header[:5] == b"REDIS" and header[5:9].isdigit():
        version = int(header[5:9])
        if not 1 <= version <= RDB_VERSION_MAX:
            raise RdbError("RDB version %d is not supported" % version)
        return version
    if len(header) == 9 and header[:6] == b"VALKEY" and header[6:9].isdigit():
        version = int(header[6:9])
        if version != RDB_VERSION_FIELD_TTL:
            raise RdbError("RDB version %d is not supported" % version)
        return version
    raise RdbError("not an RDB file")


def iter_rdb(read, clock_ms=None):
    """Records of an RDB stream, in file order, holding at most one value's bytes at a time. read(n) returns
    up to n bytes (b"" at the end), like a file's read or a buffered socket's. Yields tuples:
       ("aux", name: bytes, value: bytes)
       ("db", db_id: int)               # SELECTDB
       ("resizedb", db_id: int, keys: int, expires: int)   # RESIZEDB: the sizes the saver had, a hint
       ("key", db_id: int, key: bytes, payload: bytes, expire_at_ms: int | None)
       ("function", code: bytes)        # a FUNCTION2 library's code
    payload is a DUMP payload of the value exactly as RESTORE takes it: the object's type byte and its bytes
    as they stand in the file, then a 2-byte RDB version (the file's: its objects' encodings are that
    version's, and durakv's RESTORE reads every version a file may have) and the CRC-64. Each object but a
    string is decoded once on the way (by load_rdb_file's decoders), so a malformed one is found here, not at
    RESTORE; a string is stepped over (its encoding's lengths checked, an LZF body not decompressed).
    The file's trailing CRC-64 is checked incrementally at EOF (unless 0); raises RdbError on a malformed,
    truncated, wrong-magic or unsupported file, like load_rdb_file."""
    r = _StreamReader(read)
    r._fill(9)
    version = _rdb_header_version(bytes(r.buf[:9]))
    r.pos = 9
    db_id, expire_at_ms = 0, None
    while True:
        r.mark()
        op = r.byte()
        if op == 0xFF:                                       # EOF
            if version >= 5:
                r.mark(everything=True)
                stored = int.from_bytes(r.take(8), "little")
                if stored and stored != r.crc:
                    raise RdbError("RDB checksum mismatch")
            return
        if op == 0xFE:                                       # SELECTDB
            db_id = r.length()
            yield ("db", db_id)
        elif op == 0xFB:                                     # RESIZEDB: sizes are hints
            keys = r.length()
            yield ("resizedb", db_id, keys, r.length())
        elif op == 0xFA:                                     # AUX field
            name = bytes(r.string())
            yield ("aux", name, bytes(r.string()))
        elif op == 0xFC:                                     # EXPIRETIME_MS
            expire_at_ms = r.millis()
        elif op == 0xFD:                                     # EXPIRETIME (seconds, old files)
            expire_at_ms = int.from_bytes(r.take(4), "little", signed=True) * 1000
        elif op == 0xF8:                                     # IDLE (LRU): not kept
            r.length()
        elif op == 0xF9:                                     # FREQ (LFU): not kept
            r.byte()
        elif op == 0xF5:                                     # FUNCTION2: a library's code
            yield ("function", bytes(r.string()))
        elif op in (0xF6, 0xF7):
            raise RdbError("pre-GA functions and module aux data are not supported")
        else:
            key = bytes(r.string())
            start = r.pos
            if op == T_STRING:
                # RESTORE decodes it (and checks it) anyway: decompressing an LZF string twice (pure Python)
                # cost a REPLICAOF load of redis-server's DEBUG POPULATE keys a third of its rate
                r.skip_string()
            else:
                _load_object_ttls(r, op, clock_ms)   # for its boundaries and its checks; the value is not kept
            payload = r.payload(op, start, version)
            yield ("key", db_id, key, payload, expire_at_ms)
            expire_at_ms = None


def iter_rdb_file(path, clock_ms=None):
    """iter_rdb over the file at path (unbuffered: the reader does its own read-ahead)."""
    with open(path, "rb", buffering=0) as f:
        yield from iter_rdb(f.read, clock_ms)
