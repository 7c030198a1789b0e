"""HyperLogLog values: byte-compatible with Valkey's representation (hyperloglog.c).

An HLL is an ordinary string value. Its bytes are exactly Valkey's, so a value written by Valkey
(DUMP/RESTORE, GET/SET, a snapshot import) works here and the other way round:

    header (16 bytes)   "HYLL", encoding (0 dense, 1 sparse), 3 unused bytes, cached cardinality
                        (8 bytes little endian; the top bit of the last byte set = "cache invalid")
    dense               16384 registers of 6 bits, packed LSB first (12288 bytes)
    sparse              run-length opcodes: ZERO 00xxxxxx (1..64 zero registers), XZERO 01xxxxxx
                        yyyyyyyy (1..16384 zero registers), VAL 1vvvvvxx (1..4 registers set to 1..32)

Registers are computed with Valkey's hash (MurmurHash64A, seed 0xadc83b19) and counted with its
estimator (Ertl's improved raw estimator), so counts equal Valkey's for the same elements. Sparse
updates follow hllSparseSet step by step (split, then merge of adjacent VAL opcodes within a
5-opcode window, promotion to dense past 3000 bytes or for a register above 32), so the bytes are
identical to Valkey's, and deterministic: replaying the same PFADD/PFMERGE gives the same bytes.

PFCOUNT stores the cardinality in the header as Valkey does (commands/hyperloglog.py: with_cached_count,
a journaled write); where it must not write (a replica) the count is memoized in a small dict keyed by
the (immutable) value.

Vector work on all 16384 registers (decode, max-merge, histogram) uses bytes.translate and big-int
arithmetic on byte lanes instead of per-register Python loops.
"""

import math
import re
import struct
from bisect import bisect_right
from collections import Counter
from itertools import accumulate

MAGIC = b"HYLL"
HDR_SIZE = 16
P = 14
Q = 64 - P
REGISTERS = 1 << P
P_MASK = REGISTERS - 1
DENSE_BYTES = REGISTERS * 6 // 8
DENSE_SIZE = HDR_SIZE + DENSE_BYTES
DENSE = 0
SPARSE = 1
SPARSE_MAX_BYTES = 3000      # server.hll_sparse_max_bytes (default)
SPARSE_VAL_MAX_VALUE = 32
SPARSE_VAL_MAX_LEN = 4
SPARSE_ZERO_MAX_LEN = 64
ALPHA_INF = 0.721347520444481703680  # 0.5 / ln(2)

_M = 0xC6A4A7935BD1E995
_MASK64 = 0xFFFFFFFFFFFFFFFF
_SEED = 0xADC83B19
_Q_BIT = 1 << Q

_PROMOTE = 2  # sparse_set result: the register cannot be set in the sparse form


class Corrupt(Exception):
    """The value has an HLL header but its registers are invalid (INVALIDOBJ)."""


# -- hashing ------------------------------------------------------------------------------------

_BLOCKS = [struct.Struct("<%dQ" % n).unpack_from for n in range(64)]


def murmurhash64a(data: bytes, seed: int = _SEED) -> int:
    """MurmurHash2 64-bit (MurmurHash64A) as Valkey computes it (little-endian blocks)."""
    n = len(data)
    h = (seed ^ (n * _M)) & _MASK64
    nblocks = n >> 3
    if nblocks:
        blocks = _BLOCKS[nblocks](data) if nblocks < 64 else struct.unpack_from("<%dQ" % nblocks, data)
        for k in blocks:
            k = (k * _M) & _MASK64
            k ^= k >> 47
            h = ((h ^ ((k * _M) & _MASK64)) * _M) & _MASK64
    tail = n & 7
    if tail:
        h = ((h ^ int.from_bytes(data[n - tail:], "little")) * _M) & _MASK64
    h ^= h >> 47
    h = (h * _M) & _MASK64
    return h ^ (h >> 47)


def pat_len(element: bytes):
    """(register index, run length of the 000..1 pattern) for element (hllPatLen)."""
    h = murmurhash64a(element)
    rest = (h >> P) | _Q_BIT
    return h & P_MASK, (rest & -rest).bit_length()


def _pat_lens(elements):
    """pat_len for many elements, with the hash inlined (PFADD's hot loop)."""
    blocks_of = _BLOCKS
    m, mask, seed, qbit = _M, _MASK64, _SEED, _Q_BIT
    for data in elements:
        n = len(data)
        h = (seed ^ (n * m)) & mask
        nblocks = n >> 3
        if nblocks:
            blocks = blocks_of[nblocks](data) if nblocks < 64 else struct.unpack_from("<%dQ" % nblocks, data)
            for k in blocks:
                k = (k * m) & mask
                k ^= k >> 47
                h = ((h ^ ((k * m) & mask)) * m) & mask
        tail = n & 7
        if tail:
            h = ((h ^ int.from_bytes(data[n - tail:], "little")) * m) & mask
        h ^= h >> 47
        h = (h * m) & mask
        h ^= h >> 47
        rest = (h >> P) | qbit
        yield h & P_MASK, (rest & -rest).bit_length()


# -- validation and construction ----------------------------------------------------------------

def is_hll(value: bytes) -> bool:
    """isHLLObjectOrReply: magic, known encoding, exact dense size (a sparse body is checked later)."""
    if len(value) < HDR_SIZE or value[:4] != MAGIC:
        return False
    enc = value[4]
    if enc > SPARSE:
        return False
    return enc != DENSE or len(value) == DENSE_SIZE


def _new_header() -> bytearray:
    return bytearray(MAGIC + b"\x01" + bytes(11))


def new_sparse() -> bytes:
    """createHLLObject: an empty sparse HLL (one XZERO opcode covering all registers)."""
    return bytes(_new_header()) + _xzero(REGISTERS).to_bytes(2, "big")


# -- sparse opcodes -----------------------------------------------------------------------------
# An opcode is kept as an int: ZERO is its byte (0x00-0x3f), VAL its byte (0x80-0xff), XZERO its two
# bytes big-endian (0x4000-0x7fff). `starts[i]` is the first register opcode i covers.

def _xzero(n):
    return 0x4000 | (n - 1)


def _val(value, n):
    return 0x80 | ((value - 1) << 2) | (n - 1)


def _span(op):
    if op < 0x40:
        return op + 1
    if op >= 0x4000:
        return (op & 0x3FFF) + 1
    return (op & 3) + 1


def _zero_run(n):
    return _xzero(n) if n > SPARSE_ZERO_MAX_LEN else n - 1


_XZERO_SPLIT = re.compile(rb"([\x40-\x7f].)", re.S)
_ONE_BYTE_SPAN = bytes(((b & 3) + 1) if b & 0x80 else b + 1 if b < 0x40 else 0 for b in range(256))


class _OpBytes(dict):
    def __missing__(self, op):
        b = self[op] = op.to_bytes(2, "big")
        return b


_OP_BYTES = _OpBytes((i, bytes((i,))) for i in range(256))


class Sparse:
    """A sparse body being edited in place, as hllSparseSet edits its sds string."""

    __slots__ = ("ops", "starts", "size", "max_bytes")

    def __init__(self, body: bytes, hdr_size=HDR_SIZE, max_bytes=SPARSE_MAX_BYTES):
        self.max_bytes = max_bytes  # hll-sparse-max-bytes: past it, the HLL is promoted to dense
        # XZERO opcodes are the only ones starting with 01xxxxxx, so a left-to-right regex split
        # finds them; everything between is one-byte opcodes, decoded at C speed.
        ops, spans = [], []
        parts = _XZERO_SPLIT.split(body)
        last = len(parts) - 1
        for i, part in enumerate(parts):
            if i & 1:
                op = (part[0] << 8) | part[1]
                ops.append(op)
                spans.append((op & 0x3FFF) + 1)
            elif part:
                if i == last and 0x40 <= part[-1] < 0x80:
                    # A truncated XZERO: Valkey reads the string's NUL terminator as its 2nd byte.
                    ops.extend(part[:-1])
                    spans.extend(part[:-1].translate(_ONE_BYTE_SPAN))
                    ops.append(part[-1] << 8)
                    spans.append(((part[-1] & 0x3F) << 8) + 1)
                else:
                    ops.extend(part)
                    spans.extend(part.translate(_ONE_BYTE_SPAN))
        starts = list(accumulate(spans, initial=0))
        starts.pop()
        self.ops = ops
        self.starts = starts
        self.size = hdr_size + len(body)

    def encode(self) -> bytes:
        ops = self.ops
        try:
            return bytes(ops)
        except ValueError:  # some XZERO (two-byte) opcodes
            return b"".join(map(_OP_BYTES.__getitem__, ops))

    def set(self, index: int, count: int) -> int:
        """hllSparseSet: 1 updated, 0 unchanged, -1 corrupt, _PROMOTE (caller converts to dense)."""
        if count > SPARSE_VAL_MAX_VALUE:
            return _PROMOTE
        ops, starts = self.ops, self.starts
        k = bisect_right(starts, index) - 1
        if k < 0:
            return -1
        op = ops[k]
        first = starts[k]
        span = _span(op)
        if index > first + span - 1:
            return -1  # ran past the last opcode: invalid format
        is_val = op & 0x80 and op < 0x4000
        if is_val:
            curval = ((op >> 2) & 0x1F) + 1
            if curval >= count:
                return 0
            if span == 1:
                ops[k] = _val(count, 1)
                self._merge(k)
                return 1
        elif op < 0x40 and span == 1:
            ops[k] = _val(count, 1)
            self._merge(k)
            return 1
        # General case: split the opcode into up to three.
        last = first + span - 1
        new_ops, new_starts = [], []
        seqlen = 0
        if is_val:
            if index != first:
                new_ops.append(_val(curval, index - first))
                new_starts.append(first)
                seqlen += 1
            new_ops.append(_val(count, 1))
            new_starts.append(index)
            seqlen += 1
            if index != last:
                new_ops.append(_val(curval, last - index))
                new_starts.append(index + 1)
                seqlen += 1
        else:
            if index != first:
                z = _zero_run(index - first)
                new_ops.append(z)
                new_starts.append(first)
                seqlen += 2 if z >= 0x4000 else 1
            new_ops.append(_val(count, 1))
            new_starts.append(index)
            seqlen += 1
            if index != last:
                z = _zero_run(last - index)
                new_ops.append(z)
                new_starts.append(index + 1)
                seqlen += 2 if z >= 0x4000 else 1
        delta = seqlen - (2 if op >= 0x4000 else 1)
        if delta > 0 and self.size + delta > self.max_bytes:
            return _PROMOTE
        ops[k:k + 1] = new_ops
        starts[k:k + 1] = new_starts
        self.size += delta
        self._merge(k)
        return 1

    def _merge(self, k):
        """Step 4 of hllSparseSet: merge adjacent equal VAL opcodes, scanning 5 opcodes from the
        one before the updated opcode."""
        ops, starts = self.ops, self.starts
        i = k - 1 if k > 0 else 0
        scan = 5
        while i < len(ops) and scan:
            scan -= 1
            op = ops[i]
            if not (op & 0x80) or op >= 0x4000:
                i += 1
                continue
            if i + 1 < len(ops):
                nxt = ops[i + 1]
                if nxt & 0x80 and nxt < 0x4000 and (op & 0x7C) == (nxt & 0x7C):
                    n = (op & 3) + (nxt & 3) + 2
                    if n <= SPARSE_VAL_MAX_LEN:
                        ops[i] = (op & 0xFC) | (n - 1)
                        del ops[i + 1]
                        del starts[i + 1]
                        self.size -= 1
                        continue
            i += 1

    def to_raw(self) -> bytearray:
        """The registers as one byte each (hllSparseToDense / hllMerge); Corrupt if the opcodes
        do not cover exactly 16384 registers."""
        raw = bytearray(REGISTERS)
        idx = 0
        for op in self.ops:
            if op & 0x80 and op < 0x4000:
                n = (op & 3) + 1
                if idx + n > REGISTERS:
                    raise Corrupt()
                v = ((op >> 2) & 0x1F) + 1
                raw[idx:idx + n] = bytes((v,)) * n
                idx += n
            else:
                idx += _span(op)
        if idx != REGISTERS:
            raise Corrupt()
        return raw

    def histogram(self):
        """hllSparseRegHisto; Corrupt if the runs do not add up to 16384 registers."""
        histo = [0] * 64
        total = 0
        for op, k in Counter(self.ops).items():
            if op & 0x80 and op < 0x4000:
                n = ((op & 3) + 1) * k
                histo[((op >> 2) & 0x1F) + 1] += n
            else:
                n = _span(op) * k
                histo[0] += n
            total += n
        if total != REGISTERS:
            raise Corrupt()
        return histo


# -- dense registers (vectorised on byte lanes) -------------------------------------------------

def _table(fn):
    return bytes(fn(i) & 0xFF for i in range(256))


_T_LOW6 = _table(lambda b: b & 63)
_T_SHR6 = _table(lambda b: b >> 6)
_T_LOW4_SHL2 = _table(lambda b: (b & 15) << 2)
_T_SHR4 = _table(lambda b: b >> 4)
_T_LOW2_SHL4 = _table(lambda b: (b & 3) << 4)
_T_SHR2 = _table(lambda b: b >> 2)
_T_LOW2_SHL6 = _table(lambda b: (b & 3) << 6)
_T_LOW4_SHL4 = _table(lambda b: (b & 15) << 4)
_T_SHL2 = _table(lambda b: b << 2)

_GROUPS = REGISTERS // 4  # 4 registers in every 3 bytes


def _or(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def dense_to_raw(dense) -> bytearray:
    """The 16384 registers of a dense body (12288 bytes), one byte each."""
    s0, s1, s2 = dense[0::3], dense[1::3], dense[2::3]
    raw = bytearray(REGISTERS)
    raw[0::4] = s0.translate(_T_LOW6)
    raw[1::4] = _or(s0.translate(_T_SHR6), s1.translate(_T_LOW4_SHL2))
    raw[2::4] = _or(s1.translate(_T_SHR4), s2.translate(_T_LOW2_SHL4))
    raw[3::4] = s2.translate(_T_SHR2)
    return raw


def raw_to_dense(raw) -> bytes:
    """Packs 16384 one-byte registers (each < 64) into the dense body."""
    r0, r1, r2, r3 = bytes(raw[0::4]), bytes(raw[1::4]), bytes(raw[2::4]), bytes(raw[3::4])
    out = bytearray(DENSE_BYTES)
    out[0::3] = _or(r0, r1.translate(_T_LOW2_SHL6))
    out[1::3] = _or(r1.translate(_T_SHR2), r2.translate(_T_LOW4_SHL4))
    out[2::3] = _or(r2.translate(_T_SHR4), r3.translate(_T_SHL2))
    return bytes(out)


_LANE_HIGH = int.from_bytes(b"\x80" * REGISTERS, "little")


def raw_max(a, b) -> bytes:
    """Register-wise max of two raw register arrays (values < 128), in big-int lanes."""
    x = int.from_bytes(a, "little")
    y = int.from_bytes(b, "little")
    ge = (((x | _LANE_HIGH) - y) & _LANE_HIGH) >> 7  # 1 in every lane where x >= y
    ge *= 0xFF
    return ((x & ge) | (y & ~ge)).to_bytes(REGISTERS, "little")


def raw_histogram(raw):
    """Counts of register values 0..Q+1 (larger values, only in hand-made dense strings, are not
    used by the estimator). Stops once all registers are accounted for."""
    histo = [0] * (Q + 2)
    count = raw.count
    total = 0
    for v in range(Q + 2):
        n = count(v)
        histo[v] = n
        total += n
        if total == REGISTERS:
            break
    return histo


def estimate(histo) -> int:
    """hllCount's estimator (Ertl, "New cardinality estimation algorithms for HyperLogLog
    sketches", arXiv:1702.01284), in doubles as Valkey computes it."""
    m = float(REGISTERS)
    z = m * _tau((m - histo[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histo[j]
        z *= 0.5
    z += m * _sigma(histo[0] / m)
    if z == 0.0 or z == math.inf:
        # No register below 52 (a hand-made dense string): C divides by zero and llroundl(inf)
        # is LLONG_MIN on x86-64; a string of all-zero registers has z = inf and counts 0.
        return -(1 << 63) if z == 0.0 else 0
    e = ALPHA_INF * m * m / z
    r = int(e)
    return r + 1 if e - r >= 0.5 else r


def _sigma(x):
    if x == 1.0:
        return math.inf
    y = 1.0
    z = x
    while True:
        x *= x
        z_prime = z
        z += x * y
        y += y
        if z_prime == z:
            return z


def _tau(x):
    if x == 0.0 or x == 1.0:
        return 0.0
    y = 1.0
    z = 1 - x
    while True:
        x = math.sqrt(x)
        z_prime = z
        y *= 0.5
        z -= (1 - x) ** 2 * y
        if z_prime == z:
            return z / 3


# -- operations on values -----------------------------------------------------------------------

def registers(value: bytes):
    """The raw registers of a valid-looking HLL value (hllMerge); Corrupt if the sparse body is bad."""
    if value[4] == DENSE:
        return dense_to_raw(value[HDR_SIZE:])
    return Sparse(value[HDR_SIZE:]).to_raw()


_count_cache = {}
_COUNT_CACHE_MAX = 128


def count(value: bytes) -> int:
    """PFCOUNT of one HLL value: the cached cardinality if the header holds a valid one, otherwise
    computed (and memoized outside the value). Corrupt for a bad sparse body."""
    if not value[15] & 0x80:
        return int.from_bytes(value[8:16], "little")
    card = _count_cache.get(value)
    if card is None:
        card = estimate_value(value)
        if len(_count_cache) >= _COUNT_CACHE_MAX:
            del _count_cache[next(iter(_count_cache))]
        _count_cache[value] = card
    return card


def cache_stale(value: bytes) -> bool:
    """The header's cached cardinality is marked invalid (HLL_VALID_CACHE false)."""
    return bool(value[15] & 0x80)


def with_cached_count(value: bytes, card: int) -> bytes:
    """The value with `card` stored as its valid cached cardinality (pfcountCommand's header write)."""
    return value[:8] + card.to_bytes(8, "little") + value[16:]


def estimate_value(value: bytes) -> int:
    """The cardinality of an HLL value, computed (no cache: also safe off the event loop, PFSELFTEST)."""
    if value[4] == DENSE:
        return estimate(raw_histogram(dense_to_raw(value[HDR_SIZE:])))
    return estimate(Sparse(value[HDR_SIZE:]).histogram())


def count_raw(raw) -> int:
    return estimate(raw_histogram(raw))


def _dense_set(buf, index, count_):
    """HLL_DENSE_SET_REGISTER on a bytearray holding a whole dense value (header included)."""
    pos = index * 6
    byte = HDR_SIZE + (pos >> 3)
    fb = pos & 7
    buf[byte] = (buf[byte] & ~(63 << fb) & 0xFF) | ((count_ << fb) & 0xFF)
    if fb > 2:
        fb8 = 8 - fb
        buf[byte + 1] = (buf[byte + 1] & ~(63 >> fb8) & 0xFF) | (count_ >> fb8)


dense_set = _dense_set


def empty_dense() -> bytes:
    """A dense HLL with every register 0 and the cardinality cache marked invalid."""
    buf = bytearray(DENSE_SIZE)
    buf[0:4] = MAGIC
    buf[4] = DENSE
    buf[15] = 0x80
    return bytes(buf)


def to_dense(value: bytes) -> bytes:
    """hllSparseToDense of a sparse value (Corrupt for a bad body); a dense value is returned as is."""
    if value[4] == DENSE:
        return value
    return bytes(_promote(bytearray(value[:HDR_SIZE]), Sparse(value[HDR_SIZE:])))


def sparse_decode(value: bytes) -> bytes:
    """PFDEBUG DECODE: the opcodes of a sparse body as 'z:len', 'Z:len' and 'v:value,len'."""
    body = value[HDR_SIZE:]
    out = []
    i, n = 0, len(body)
    while i < n:
        op = body[i]
        if op < 0x40:
            out.append(b"z:%d" % ((op & 0x3F) + 1))
            i += 1
        elif op < 0x80:
            nxt = body[i + 1] if i + 1 < n else 0  # Valkey reads the NUL terminator past a cut XZERO
            out.append(b"Z:%d" % ((((op & 0x3F) << 8) | nxt) + 1))
            i += 2
        else:
            out.append(b"v:%d,%d" % (((op >> 2) & 0x1F) + 1, (op & 3) + 1))
            i += 1
    return b" ".join(out)


def _promote(header: bytearray, sparse: Sparse) -> bytearray:
    """hllSparseToDense: the whole dense value (header copied, encoding set to dense)."""
    raw = sparse.to_raw()
    buf = bytearray(header)
    buf[4] = DENSE
    buf += raw_to_dense(raw)
    return buf


def add(value, elements, sparse_max_bytes=SPARSE_MAX_BYTES):
    """PFADD: (new value, updated) for adding elements to value (None: a new HLL). The new value is
    None when nothing changed. Corrupt for a bad sparse body (nothing is changed then)."""
    return add_pats(value, _pat_lens(elements), sparse_max_bytes)


def pat_lens(elements) -> list:
    """[(register index, run length)] of elements, as add() computes them (hllPatLen), for a caller that adds the
    same elements to several HLLs (PFSELFTEST's dense and sparse twins): hashed once."""
    return list(_pat_lens(elements))


def add_pats(value, pats, sparse_max_bytes=SPARSE_MAX_BYTES):
    """add() of elements already hashed: pats iterates (register index, run length) pairs (pat_lens)."""
    updated = 0
    if value is None:
        value = new_sparse()
        updated = 1
    pats = iter(pats)
    buf = None
    if value[4] == SPARSE:
        header = bytearray(value[:HDR_SIZE])
        sparse = Sparse(value[HDR_SIZE:], max_bytes=sparse_max_bytes)
        sparse_set = sparse.set
        for index, cnt in pats:
            r = sparse_set(index, cnt)
            if r == 1:
                updated += 1
            elif r == _PROMOTE:
                buf = _promote(header, sparse)
                _dense_set(buf, index, cnt)
                updated += 1
                break
            elif r < 0:
                raise Corrupt()
        else:
            if not updated:
                return None, 0
            header[15] |= 0x80
            return bytes(header) + sparse.encode(), updated
    else:
        buf = bytearray(value)
    # Dense: registers read and written in place.
    for index, cnt in pats:
        pos = index * 6
        byte = HDR_SIZE + (pos >> 3)
        fb = pos & 7
        if fb > 2:
            old = ((buf[byte] >> fb) | (buf[byte + 1] << (8 - fb))) & 63
        else:
            old = (buf[byte] >> fb) & 63
        if cnt > old:
            buf[byte] = (buf[byte] & ~(63 << fb) & 0xFF) | ((cnt << fb) & 0xFF)
            if fb > 2:
                fb8 = 8 - fb
                buf[byte + 1] = (buf[byte + 1] & ~(63 >> fb8) & 0xFF) | (cnt >> fb8)
            updated += 1
    if not updated:
        return None, 0
    buf[15] |= 0x80
    return bytes(buf), updated


def merge_into(dest, max_raw, use_dense, sparse_max_bytes=SPARSE_MAX_BYTES) -> bytes:
    """PFMERGE's write: dest (an HLL value or None) with every register raised to max_raw, in
    Valkey's order (dense if any input was dense, else sparse sets in register order with
    promotion as needed); the cached cardinality is invalidated."""
    if dest is None:
        dest = new_sparse()
    header = bytearray(dest[:HDR_SIZE])
    if use_dense or dest[4] == DENSE:
        if dest[4] == SPARSE:
            Sparse(dest[HDR_SIZE:]).to_raw()  # hllSparseToDense validates the destination
        header[4] = DENSE
        header[15] |= 0x80
        old = dense_to_raw(dest[HDR_SIZE:]) if dest[4] == DENSE else None
        regs = max_raw if old is None else raw_max(old, max_raw)
        return bytes(header) + raw_to_dense(regs)
    sparse = Sparse(dest[HDR_SIZE:], max_bytes=sparse_max_bytes)
    sparse_set = sparse.set
    buf = None
    for index in range(REGISTERS):
        cnt = max_raw[index]
        if not cnt:
            continue
        if buf is not None:
            old = registers_get(buf, index)
            if cnt > old:
                _dense_set(buf, index, cnt)
            continue
        if sparse_set(index, cnt) == _PROMOTE:
            buf = _promote(header, sparse)
            _dense_set(buf, index, cnt)
    if buf is not None:
        buf[15] |= 0x80
        return bytes(buf)
    header[15] |= 0x80
    return bytes(header) + sparse.encode()


def registers_get(buf, index) -> int:
    """HLL_DENSE_GET_REGISTER on a whole dense value (header included)."""
    pos = index * 6
    byte = HDR_SIZE + (pos >> 3)
    fb = pos & 7
    if fb > 2:
        return ((buf[byte] >> fb) | (buf[byte + 1] << (8 - fb))) & 63
    return (buf[byte] >> fb) & 63
