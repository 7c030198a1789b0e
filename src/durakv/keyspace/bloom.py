"""The Bloom filter value type, bit for bit as valkey-bloom 1.0.1 keeps it (its `BloomObject` over the Rust
`bloomfilter` crate 3.0.1 with `siphasher` 1.0.1), so that a DUMP or RDB file from valkey-bundle loads here and
back, and a filter answers the same for the same items on every node.

A `Bloom` holds one or more `SubFilter`s (a scaling filter adds one each time the last is full). Each sub-filter
is one bytearray in the crate's own layout, which is also what the module writes to RDB for it:

    version u8 (1) | bitmap length in bytes u64 LE | hash functions k u32 LE | seed [32] | bitmap

An item's bits: h0 and h1 are SipHash-1-3 of the item as Rust hashes a `[u8]` (its length as u64 LE, then its
bytes), keyed by seed[0:16] and seed[16:32]; hash i >= 2 is (h0 + i * h1 mod 2^64) mod 0xFFFFFFFFFFFFFFC5; each
picks bit (hash mod bits), least significant first in a byte. Every sub-filter of an object has the first one's
seed, a random one (`bf.bloom-use-random-seed yes`, chosen by the primary and journaled with the filter's
creation) or the module's FIXED_SEED.

Sizes follow the crate: bitmap bytes = ceil(capacity * ln(fp) / (-8 ln(2)^2)), k = max(1, round(bits / capacity *
ln 2)). A new sub-filter's error rate is fp * tightening^n (n = filters so far; Rust's powi, replayed exactly by
`powi` below) and its capacity the last one's times the expansion. Memory figures (BF.INFO SIZE, the
bf.bloom-memory-usage-limit checks, MAXSCALEDCAPACITY) count the module's Rust structures on a 64-bit machine:
BloomObject 48 bytes, 8 per slot of its filter vector (whose capacity grows 1, 4, 8, 16, ... as Rust's Vec does),
and per sub-filter 24 (BloomFilter) + 184 (the crate's Bloom) + the bitmap.

Hashing runs in keyspace/_bloom.c when it was built (the pure-Python functions here are the reference and the
fallback); both are checked against the crate's own output in tests/unit/test_bloom_units.py.
"""

import math
import struct
import weakref

from .. import messages

FIXED_SEED = bytes((89, 15, 245, 34, 234, 120, 17, 218, 167, 20, 216, 9, 59, 62, 123, 217,
                    29, 137, 138, 115, 62, 152, 136, 135, 48, 127, 151, 205, 40, 7, 51, 131))
SEED_BYTES = 32
HEADER = struct.Struct("<BQI32s")      # the crate's bitmap header: version, bitmap bytes, k, seed
HEADER_BYTES = HEADER.size              # 45
CRATE_VERSION = 1

# The module's Rust structures (x86_64), for its memory figures.
OBJECT_BYTES = 48          # size_of::<BloomObject>()
SLOT_BYTES = 8             # size_of::<Box<BloomFilter>>(), one slot of the filter vector
FILTER_BYTES = 24 + 184    # size_of::<BloomFilter>() + size_of::<bloomfilter::Bloom<[u8]>>()

# configs.rs
CAPACITY_MIN, CAPACITY_MAX = 1, (1 << 63) - 1
EXPANSION_MIN, EXPANSION_MAX = 1, (1 << 32) - 1
MAX_FILTERS = (1 << 31) - 1            # BLOOM_NUM_FILTERS_PER_OBJECT_LIMIT_MAX (i32::MAX)
DEFAULT_MEMORY_LIMIT = 128 * 1024 * 1024
F64_MIN_POSITIVE = 2.2250738585072014e-308
_LN2_2 = math.log(2.0) * math.log(2.0)
_LARGEST_U64_PRIME = 0xFFFFFFFFFFFFFFC5
_MASK64 = (1 << 64) - 1
_USIZE_MAX = (1 << 64) - 1

# bincode's BloomObject serialization (BF.LOAD, the module's AOF rewrite): a version byte, then its fields.
BINCODE_VERSION = 1
_BINCODE_HEAD = struct.Struct("<BIddB")   # version, expansion u32, fp_rate, tightening_ratio, is_seed_random
_U64 = struct.Struct("<Q")
_I64_PAIR = struct.Struct("<qq")


class BloomError(Exception):
    """A Bloom operation refused; `text` is the reply (messages.py)."""

    def __init__(self, text):
        super().__init__(text)
        self.text = text


# -- SipHash-1-3 and the crate's bit operations (the reference; _bloom.c is their compiled twin) ---------------

def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & _MASK64


def _rounds(v0, v1, v2, v3, n):
    for _ in range(n):
        v0 = (v0 + v1) & _MASK64
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 = (v2 + v3) & _MASK64
        v3 = _rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & _MASK64
        v3 = _rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & _MASK64
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash(key16: bytes, message: bytes, c_rounds=1, d_rounds=3) -> int:
    """SipHash-c-d of message keyed by key16 (SipHash-1-3 by default, what siphasher's SipHasher13 computes)."""
    k0, k1 = struct.unpack("<QQ", key16)
    v0, v1 = k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d
    v2, v3 = k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573
    n = len(message)
    full = n - n % 8
    for i in range(0, full, 8):
        m = int.from_bytes(message[i:i + 8], "little")
        v3 ^= m
        v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, c_rounds)
        v0 ^= m
    b = ((n & 0xFF) << 56) | int.from_bytes(message[full:], "little")
    v3 ^= b
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, c_rounds)
    v0 ^= b
    v2 ^= 0xFF
    v0, v1, v2, v3 = _rounds(v0, v1, v2, v3, d_rounds)
    return v0 ^ v1 ^ v2 ^ v3


def sip13_py(key16: bytes, item: bytes) -> int:
    """What `item.hash(&mut SipHasher13::new_with_key(key16))` finishes with for a `[u8]` item."""
    return siphash(key16, _U64.pack(len(item)) + bytes(item))


def _positions(data, item, seed_cache):
    k = int.from_bytes(data[9:13], "little")
    nbits = (len(data) - HEADER_BYTES) * 8
    seed = bytes(data[13:HEADER_BYTES])
    hashes = seed_cache.get(seed)
    if hashes is None:
        hashes = seed_cache[seed] = (sip13_py(seed[:16], item), sip13_py(seed[16:], item))
    h0, h1 = hashes
    for i in range(k):
        h = h0 if i == 0 else h1 if i == 1 else ((h0 + i * h1) & _MASK64) % _LARGEST_U64_PRIME
        yield h % nbits


def contains_py(filters, item) -> bool:
    """Whether all of item's bits are set in any of the sub-filters (their bytearrays)."""
    cache = {}
    for data in filters:
        if all(data[HEADER_BYTES + (bit >> 3)] & (1 << (bit & 7)) for bit in _positions(data, item, cache)):
            return True
    return False


def add_py(data, item):
    """Sets item's bits in one sub-filter's bytearray."""
    for bit in _positions(data, item, {}):
        data[HEADER_BYTES + (bit >> 3)] |= 1 << (bit & 7)


try:
    from ._bloom import add as _add, contains as _contains, sip13   # noqa: F401
    HASH_COMPILED = True
except ImportError:   # installed without a C compiler
    _add, _contains, sip13 = add_py, contains_py, sip13_py
    HASH_COMPILED = False


# -- the crate's and the module's arithmetic --------------------------------------------------------------------

def powi(base: float, exp: int) -> float:
    """Rust's f64::powi (LLVM's __powidf2: square and multiply), which is not always Python's `**` to the ulp:
    a scaled filter's error rate, hence its size, must be the module's."""
    recip = exp < 0
    if recip:
        exp = -exp
    r = 1.0
    while True:
        if exp & 1:
            r *= base
        exp >>= 1
        if exp == 0:
            break
        base *= base
    return 1.0 / r if recip else r


def bitmap_bytes(capacity: int, fp_rate: float) -> int:
    """Bloom::compute_bitmap_size: ceil(n * ln(p) / (-8 * ln(2)^2)) as usize (saturating, as Rust's `as`)."""
    size = math.ceil(float(capacity) * math.log(fp_rate) / (-8.0 * _LN2_2))
    return min(size, _USIZE_MAX)


def hash_count(bits: int, capacity: int) -> int:
    """Bloom::optimal_k_num: max(1, round(m / n * ln 2)), rounding half away from zero as f64::round."""
    k = math.floor(float(bits) / float(capacity) * math.log(2.0) + 0.5)
    return max(1, min(k, (1 << 32) - 1))


def filter_bytes(capacity: int, fp_rate: float) -> int:
    """BloomFilter::compute_size: the memory of a sub-filter of this capacity and error rate."""
    return FILTER_BYTES + bitmap_bytes(capacity, fp_rate)


def object_bytes(vec_capacity: int) -> int:
    """BloomObject::compute_size: the object without its sub-filters."""
    return OBJECT_BYTES + vec_capacity * SLOT_BYTES


def fp_rate_of(fp_rate: float, num_filters: int, tightening_ratio: float) -> float:
    """BloomObject::calculate_fp_rate: the error rate of sub-filter number num_filters (0-based)."""
    rate = fp_rate * powi(tightening_ratio, num_filters)
    if rate > F64_MIN_POSITIVE:
        return rate
    raise BloomError(messages.BF_FP_DEGRADES_TO_ZERO)


def _grown(capacity: int) -> int:
    """A Rust Vec's capacity after one push into a full one (RawVec::grow_amortized, MIN_NON_ZERO_CAP 4)."""
    return max(capacity * 2, capacity + 1, 4)


def max_scaled_capacity(capacity, fp_rate, scale_to, tightening_ratio, expansion, memory_limit) -> int:
    """BloomObject::calculate_max_scaled_capacity. scale_to -1 (BF.INFO MAXSCALEDCAPACITY): the largest total
    capacity the object can reach before its error rate or bf.bloom-memory-usage-limit stops it; otherwise
    (BF.INSERT VALIDATESCALETO) the total reached once it passed scale_to, or the error that stops it first."""
    filter_capacity = capacity
    total = 0
    num = 0
    filters_memory = 0
    while total < scale_to or scale_to == -1:
        try:
            rate = fp_rate_of(fp_rate, num, tightening_ratio)
        except BloomError:
            if scale_to == -1:
                return total
            raise BloomError(messages.BF_VALIDATE_SCALE_TO_FP) from None
        size = filter_bytes(filter_capacity, rate)
        # the vector's capacity as pushes grow it: 1 for one filter, then the power of two from 4 on
        slots = 1 if num == 0 else 1 << (max(4, num + 1) - 1).bit_length()
        if object_bytes(slots) + filters_memory + size > memory_limit:
            if scale_to == -1:
                return total
            raise BloomError(messages.BF_VALIDATE_SCALE_TO_MEMORY)
        filters_memory += size
        total += filter_capacity
        filter_capacity *= expansion
        if filter_capacity > CAPACITY_MAX:
            raise BloomError(messages.BF_BAD_CAPACITY)
        num += 1
    return total


# -- the value type ---------------------------------------------------------------------------------------------

class SubFilter:
    """One Bloom filter of an object: the crate's bytes (header and bitmap), its capacity and items added."""

    __slots__ = ("data", "capacity", "num_items")

    def __init__(self, data: bytearray, capacity: int, num_items: int):
        self.data = data
        self.capacity = capacity
        self.num_items = num_items

    @classmethod
    def new(cls, capacity: int, fp_rate: float, seed: bytes):
        """Bloom::new_for_fp_rate_with_seed: an empty filter for capacity items at fp_rate."""
        nbytes = bitmap_bytes(capacity, fp_rate)
        data = bytearray(HEADER_BYTES + nbytes)
        HEADER.pack_into(data, 0, CRATE_VERSION, nbytes, hash_count(nbytes * 8, capacity), seed)
        return cls(data, capacity, 0)

    @staticmethod
    def check_layout(data) -> bool:
        """Bloom::from_slice's checks: the header, version 1, k > 0 and a bitmap of the length it states."""
        if len(data) < HEADER_BYTES:
            return False
        version, nbytes, k, _seed = HEADER.unpack_from(data, 0)
        # the bitmap may not be empty: its bit count is what positions are taken modulo
        return version == CRATE_VERSION and k != 0 and nbytes == len(data) - HEADER_BYTES and nbytes > 0

    @property
    def seed(self) -> bytes:
        return bytes(self.data[13:HEADER_BYTES])

    @property
    def hash_functions(self) -> int:
        return int.from_bytes(self.data[9:13], "little")

    @property
    def bitmap_bytes(self) -> int:
        return len(self.data) - HEADER_BYTES

    def memory(self) -> int:
        """BloomFilter::number_of_bytes."""
        return FILTER_BYTES + len(self.data) - HEADER_BYTES

    def copy(self):
        return SubFilter(bytearray(self.data), self.capacity, self.num_items)


# Every live Bloom, for INFO bf's totals (the module's counters; a Bloom freed with its key leaves the set).
_LIVE = weakref.WeakSet()


class Bloom:
    """A Bloom object (valkey-bloom's BloomObject). expansion 0 means NONSCALING."""

    __slots__ = ("expansion", "fp_rate", "tightening_ratio", "is_seed_random", "filters", "vec_capacity",
                 "__weakref__")

    def __init__(self, expansion, fp_rate, tightening_ratio, is_seed_random, filters, vec_capacity):
        self.expansion = expansion
        self.fp_rate = fp_rate
        self.tightening_ratio = tightening_ratio
        self.is_seed_random = is_seed_random
        self.filters = filters
        self.vec_capacity = vec_capacity    # the Rust Vec's capacity: part of the module's memory figure
        _LIVE.add(self)

    @classmethod
    def reserve(cls, fp_rate, tightening_ratio, capacity, expansion, seed, is_seed_random, memory_limit=None):
        """BloomObject::new_reserved: one empty sub-filter. memory_limit None: not checked (a journal's replay and
        a replica take what the primary accepted, as the module skips the check for its replicated commands)."""
        if memory_limit is not None:
            size = object_bytes(1) + filter_bytes(capacity, fp_rate)
            if size > memory_limit:
                raise BloomError(messages.BF_EXCEEDS_MEMORY_LIMIT)
        return cls(expansion, fp_rate, tightening_ratio, is_seed_random,
                   [SubFilter.new(capacity, fp_rate, seed)], 1)

    # -- reads ---------------------------------------------------------------------------------------------
    def exists(self, item) -> bool:
        return _contains([f.data for f in self.filters], item)

    @property
    def seed(self) -> bytes:
        return self.filters[0].seed

    def cardinality(self) -> int:
        return sum(f.num_items for f in self.filters)

    def capacity(self) -> int:
        return sum(f.capacity for f in self.filters)

    def starting_capacity(self) -> int:
        return self.filters[0].capacity

    def memory_usage(self) -> int:
        """BloomObject::memory_usage: what BF.INFO SIZE answers."""
        return object_bytes(self.vec_capacity) + sum(f.memory() for f in self.filters)

    def max_scaled_capacity(self, memory_limit) -> int:
        return max_scaled_capacity(self.starting_capacity(), self.fp_rate, -1, self.tightening_ratio,
                                   self.expansion, memory_limit)

    # -- writes --------------------------------------------------------------------------------------------
    def add(self, item, memory_limit=None) -> int:
        """BloomObject::add_item: 1 if item was added, 0 if it (probably) was there. A full last sub-filter is
        followed by a new one (scaling) or refused (NONSCALING); memory_limit as in reserve()."""
        if _contains([f.data for f in self.filters], item):
            return 0
        last = self.filters[-1]
        if last.num_items < last.capacity:
            _add(last.data, item)
            last.num_items += 1
            return 1
        if self.expansion == 0:
            raise BloomError(messages.BF_NONSCALING_FULL)
        num = len(self.filters)
        if num == MAX_FILTERS:
            raise BloomError(messages.BF_MAX_FILTERS)
        rate = fp_rate_of(self.fp_rate, num, self.tightening_ratio)
        capacity = last.capacity * self.expansion
        if capacity > CAPACITY_MAX:
            raise BloomError(messages.BF_BAD_CAPACITY)
        if memory_limit is not None and self.memory_usage() + filter_bytes(capacity, rate) > memory_limit:
            raise BloomError(messages.BF_EXCEEDS_MEMORY_LIMIT)
        sub = SubFilter.new(capacity, rate, self.seed)
        _add(sub.data, item)
        sub.num_items = 1
        if num == self.vec_capacity:
            self.vec_capacity = _grown(self.vec_capacity)
        self.filters.append(sub)
        return 1

    def copy(self):
        """BloomObject::create_copy_from (COPY): the filter vector keeps its capacity."""
        return Bloom(self.expansion, self.fp_rate, self.tightening_ratio, self.is_seed_random,
                     [f.copy() for f in self.filters], self.vec_capacity)

    # -- BF.LOAD's form (bincode, the module's AOF rewrite) -------------------------------------------------
    def to_bincode(self) -> bytes:
        """BloomObject::encode_object: a version byte, then bincode 1.3's fixed-width little-endian encoding of
        (expansion u32, fp_rate f64, tightening_ratio f64, is_seed_random bool, filters: u64 count and per
        filter its bytes (u64 length, the crate's slice), num_items i64, capacity i64)."""
        out = [_BINCODE_HEAD.pack(BINCODE_VERSION, self.expansion, self.fp_rate, self.tightening_ratio,
                                  1 if self.is_seed_random else 0), _U64.pack(len(self.filters))]
        for f in self.filters:
            out.append(_U64.pack(len(f.data)))
            out.append(bytes(f.data))
            out.append(_I64_PAIR.pack(f.num_items, f.capacity))
        return b"".join(out)

    @classmethod
    def from_bincode(cls, data, memory_limit=None):
        """BloomObject::decode_object (BF.LOAD). BloomError with the module's text when data is not one; an
        object with no sub-filter is refused too (the module would accept it and crash on its first use)."""
        if not data:
            raise BloomError(messages.BF_DECODE_FAILED)
        if data[0] != BINCODE_VERSION:
            raise BloomError(messages.BF_DECODE_UNSUPPORTED_VERSION)
        try:
            version, expansion, fp_rate, tightening, random_flag = _BINCODE_HEAD.unpack_from(data, 0)
            pos = _BINCODE_HEAD.size
            if random_flag > 1:
                raise ValueError("a bool is 0 or 1")
            (count,) = _U64.unpack_from(data, pos)
            pos += 8
            if count == 0 or count * (8 + HEADER_BYTES + 1 + 16) > len(data) - pos:
                raise ValueError("filter count past the data")
            filters = []
            for _ in range(count):
                (n,) = _U64.unpack_from(data, pos)
                pos += 8
                if n > len(data) - pos:
                    raise ValueError("filter past the data")
                raw = bytearray(data[pos:pos + n])
                pos += n
                if not SubFilter.check_layout(raw):
                    raise ValueError("not the crate's layout")
                num_items, capacity = _I64_PAIR.unpack_from(data, pos)
                pos += 16
                filters.append(SubFilter(raw, capacity, num_items))
        except (struct.error, ValueError):
            raise BloomError(messages.BF_DECODE_FAILED) from None
        # bincode allows trailing bytes (bincode::deserialize's default options)
        if not 0.0 < fp_rate < 1.0 or not 0.0 < tightening < 1.0:
            raise BloomError(messages.BF_ERROR_RATE_RANGE)
        if count >= MAX_FILTERS:
            raise BloomError(messages.BF_MAX_FILTERS)
        # serde gives the deserialized Vec exactly its length as capacity
        bloom = cls(expansion, fp_rate, tightening, random_flag == 1, filters, len(filters))
        if memory_limit is not None and bloom.memory_usage() > memory_limit:
            raise BloomError(messages.BF_EXCEEDS_MEMORY_LIMIT)
        return bloom

    # -- the module's RDB form (module type "bloomfltr", encoding version 1) ---------------------------------
    def rdb_fields(self):
        """bloom_rdb_save's values in order, as ('u', int) | ('d', float) | ('s', bytes): num_filters,
        expansion, fp_rate, tightening_ratio, is_seed_random, then per sub-filter its bytes and capacity, and
        the number of items of the last one only (the others are full)."""
        out = [("u", len(self.filters)), ("u", self.expansion), ("d", self.fp_rate),
               ("d", self.tightening_ratio), ("u", 1 if self.is_seed_random else 0)]
        last = len(self.filters) - 1
        for i, f in enumerate(self.filters):
            out.append(("s", bytes(f.data)))
            out.append(("u", f.capacity))
            if i == last:
                out.append(("u", f.num_items))
        return out

    @classmethod
    def from_rdb(cls, read_unsigned, read_double, read_string):
        """load_from_rdb, reading through the three callables (each raises on malformed input). Returns the
        object, or raises BloomError(None-like reason) when the module would refuse it (it logs and fails the
        load). The per-object memory limit is the caller's to check (RESTORE on a primary)."""
        num_filters = read_unsigned()
        expansion = read_unsigned()
        fp_rate = read_double()
        tightening = read_double()
        is_seed_random = read_unsigned() == 1
        if num_filters == 0 or num_filters > MAX_FILTERS:
            raise BloomError("a bloom object with %d filters" % num_filters)
        if expansion > EXPANSION_MAX:
            raise BloomError("expansion out of range")
        if not 0.0 < fp_rate < 1.0 or not 0.0 < tightening < 1.0:
            raise BloomError("error rate or tightening ratio out of range")
        # the module checks the rate the object's next filter would get (its code passes num_filters, not
        # the filter's index): an object whose rate has degraded to zero is refused
        fp_rate_of(fp_rate, num_filters, tightening)
        filters = []
        vec_capacity = 1                      # Vec::with_capacity(1), then grown by each push
        for i in range(num_filters):
            raw = bytearray(read_string())
            capacity = read_unsigned()
            num_items = read_unsigned() if i == num_filters - 1 else capacity
            if not SubFilter.check_layout(raw) or not CAPACITY_MIN <= capacity <= CAPACITY_MAX \
                    or num_items > CAPACITY_MAX:
                raise BloomError("a filter that is not the crate's")
            sub = SubFilter(raw, capacity, num_items)
            if not is_seed_random and sub.seed != FIXED_SEED:
                raise BloomError("Object in fixed seed mode, but seed does not match FIXED_SEED.")
            if i == vec_capacity:
                vec_capacity = _grown(vec_capacity)
            filters.append(sub)
        return cls(expansion, fp_rate, tightening, is_seed_random, filters, vec_capacity)


def totals():
    """INFO bf's core metrics over every live Bloom: (objects, filters, items, capacity, memory bytes)."""
    objects = filters = items = capacity = memory = 0
    for b in list(_LIVE):
        objects += 1
        filters += len(b.filters)
        items += b.cardinality()
        capacity += b.capacity()
        memory += b.memory_usage()
    return objects, filters, items, capacity, memory


class BloomDefaults:
    """The bf.* configs a new filter takes (valkey-bloom's module configs), followed live from CONFIG SET."""

    __slots__ = ("capacity", "expansion", "fp_rate", "tightening_ratio", "use_random_seed", "memory_limit")

    def __init__(self):
        self.capacity = 100
        self.expansion = 2
        self.fp_rate = 0.01
        self.tightening_ratio = 0.5
        self.use_random_seed = True
        self.memory_limit = DEFAULT_MEMORY_LIMIT

    def set(self, name, value) -> bool:
        """Takes one config value (its parsed form); False if the name is not a bf.* config kept here."""
        if name == "bf.bloom-capacity":
            self.capacity = value
        elif name == "bf.bloom-expansion":
            self.expansion = value
        elif name == "bf.bloom-fp-rate":
            self.fp_rate = float(value)
        elif name == "bf.bloom-tightening-ratio":
            self.tightening_ratio = float(value)
        elif name == "bf.bloom-use-random-seed":
            self.use_random_seed = value
        elif name == "bf.bloom-memory-usage-limit":
            self.memory_limit = value
        else:
            return False
        return True
