"""The Bloom filter value type (keyspace/bloom.py, keyspace/_bloom.c) against what valkey-bloom 1.0.1 computes.

The expected bytes below are the Rust `bloomfilter` crate 3.0.1's own output (with `siphasher` 1.0.1, the
versions valkey-bloom 1.0.1 builds with): a filter created with Bloom::new_for_fp_rate_with_seed for the seed,
capacity and error rate, after Bloom::set of each item, dumped with Bloom::as_slice (what the module writes to
RDB and DUMP for each sub-filter). They were produced once by running the crate, outside this project; nothing
of it is in the repository. The SipHash-2-4 vectors are the reference implementation's (Aumasson & Bernstein,
key 00..0f, message 00..n-1); SipHash-1-3 with a zero key is CPython's own bytes hash under PYTHONHASHSEED=0.
The module's figures (384 bytes, MAXSCALEDCAPACITY 26214300 for a default filter) are its documentation's; the
MAXSCALEDCAPACITY cases are its utils.rs unit tests'.
"""

import hashlib
import math
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from durakv.keyspace import bloom as B
from durakv.keyspace import rdbvalue

COUNTING_SEED = bytes(range(32))

# (seed, capacity, error rate, items, hash functions, bitmap bits, items already reported present, sha256 of
# as_slice()) -- the crate's output
CRATE_CASES = [
    (B.FIXED_SEED, 100, 0.01, [b"item1", b"", b"\x00\xff", b"a" * 100], 7, 960, 0,
     "3c3bcd37c3e24cfc88e6dc02d81598b130a44b29eefcad7ab57738236eeac58b"),
    (COUNTING_SEED, 1000, 0.001, [b"key%d" % i for i in range(50)], 10, 14384, 0,
     "4620dafb1acaffb4a88013bf28024f5f193e30aa6ccd68ca2d1b5bf59d602780"),
    (COUNTING_SEED, 1, 0.5, [b"x"], 6, 8, 0,
     "4894d2cd337460019f7deb1ca14fc999682199b8d3d8090dc75b4636dd01d1d8"),
    (B.FIXED_SEED, 200, 0.005, [b"k%d" % i for i in range(300)], 8, 2208, 4,
     "75faf8d23283872d98bcc719ab71e73fa2c881d2060bbc907c7ebdfd3b044d51"),
]
# the first case's bytes in full: header (version 1, 120 bitmap bytes, k 7, FIXED_SEED), then the bitmap
CRATE_FIXED_100 = bytes.fromhex(
    "01780000000000000007000000590ff522ea7811daa714d8093b3e7bd91d898a733e988887307f97cd2807338302100000400000"
    "0000080000e000000000000000000040000000000000400000000000000201000000000040180800000010000004000000000000"
    "00000000000000000000000000100040000244000400001000000000000004000000000000000000400000000000000000000000"
    "000000000001000100")


def _implementations():
    impls = [("python", B.contains_py, B.add_py)]
    if B.HASH_COMPILED:
        impls.append(("compiled", B._contains, B._add))
    return impls


@pytest.mark.parametrize("name,contains,add", _implementations(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("case", CRATE_CASES, ids=lambda c: "cap%d-fp%s" % (c[1], c[2]))
def test_bits_are_the_crates(name, contains, add, case):
    seed, capacity, fp, items, k, bits, present, digest = case
    f = B.SubFilter.new(capacity, fp, seed)
    assert f.hash_functions == k and f.bitmap_bytes * 8 == bits
    seen = 0
    for item in items:
        seen += contains([f.data], item)
        add(f.data, item)
    assert seen == present
    assert hashlib.sha256(bytes(f.data)).hexdigest() == digest
    assert all(contains([f.data], item) for item in items)
    if seed == B.FIXED_SEED and capacity == 100:
        assert bytes(f.data) == CRATE_FIXED_100


def test_the_compiled_hashing_is_built():
    """pip install builds keyspace/_bloom.c wherever it builds _crc64.c (setup.py); CI has a compiler."""
    from durakv.keyspace import rdbvalue as rv
    assert B.HASH_COMPILED == rv.CRC64_COMPILED


def test_siphash_reference_vectors():
    key = bytes(range(16))
    # SipHash-2-4 of 00..n-1 under key 00..0f (the paper's vectors, first and last of the 64)
    assert B.siphash(key, b"", 2, 4) == 0x726fdb47dd0e0e31
    assert B.siphash(key, bytes(range(63)), 2, 4) == 0x958a324ceb064572
    assert B.siphash(key, bytes(range(15)), 2, 4) == 0xa129ca6149be45e5
    # the crate's SipHasher13 over a length-prefixed [u8] (Rust's Hash for slices), as the crate hashed them
    assert B.sip13_py(B.FIXED_SEED[:16], b"item1") == 4917643575661180449
    assert B.sip13_py(COUNTING_SEED[:16], b"") == 6681494030261746940
    assert B.sip13_py(COUNTING_SEED[:16], b"0123456789abcdefg") == 7484428527096616731


def test_siphash13_is_cpythons_with_a_zero_key():
    """CPython hashes bytes with SipHash-1-3 (sys.hash_info.algorithm); PYTHONHASHSEED=0 makes its key zero."""
    code = "import sys; print(sys.hash_info.algorithm, [hash(bytes(range(n))) for n in (1, 7, 8, 9, 31, 64)])"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": "0"},
                         capture_output=True, text=True, check=True).stdout.split(" ", 1)
    if out[0] != "siphash13":
        pytest.skip("this CPython hashes bytes with " + out[0])
    expected = [int(x) for x in out[1].strip(" []\n").split(", ")]
    for n, h in zip((1, 7, 8, 9, 31, 64), expected):
        mine = B.siphash(bytes(16), bytes(range(n)))
        signed = mine - (1 << 64) if mine >= 1 << 63 else mine
        assert h == (-2 if signed == -1 else signed)   # CPython keeps -1 for errors


@settings(max_examples=300, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), item=st.binary(max_size=200),
       capacity=st.integers(1, 3000), fp=st.floats(1e-6, 0.9))
def test_compiled_and_reference_agree(seed, item, capacity, fp):
    if not B.HASH_COMPILED:
        pytest.skip("no compiled twin on this install")
    assert B.sip13(seed[:16], item) == B.sip13_py(seed[:16], item)
    a = B.SubFilter.new(capacity, fp, seed)
    b = a.copy()
    B._add(a.data, item)
    B.add_py(b.data, item)
    assert a.data == b.data
    other = B.SubFilter.new(capacity, fp, seed[::-1])
    for filters in ([a.data], [other.data, a.data], [other.data]):
        assert B._contains(filters, item) == B.contains_py(filters, item)


def test_rusts_powi_not_pythons_pow():
    """f64::powi as the crate's caller computes it (square and multiply): not Python's ** to the last ulp."""
    assert B.powi(0.3, 13) == 1.5943229999999997e-07 != 0.3 ** 13
    assert B.powi(0.9, 100) == 2.6561398887587605e-05 != 0.9 ** 100
    assert B.powi(0.123456789, 7) == 4.3712418962088546e-07
    assert B.powi(0.5, 1000) == 9.332636185032189e-302
    assert B.powi(0.3, 0) == 1.0


def test_sizes_are_the_crates():
    # Bloom::compute_bitmap_size, as the crate computed them
    for capacity, fp, size in ((100, 0.01, 120), (200, 0.005, 276), (400, 0.0025, 624), (100000, 0.001, 179720),
                               (7, 0.01 * 0.5 ** 5, 15), (3, 0.999999, 1), (12345, 1e-10, 73955)):
        assert B.bitmap_bytes(capacity, fp) == size
    # optimal_k_num rounds half away from zero (f64::round), not to even
    for bits, items, k in ((960, 100, 7), (14384, 1000, 10), (8, 1, 6), (8, 3, 2), (7, 2, 2)):
        assert B.hash_count(bits, items) == k


def test_the_modules_memory_figures():
    bloom = B.Bloom.reserve(0.01, 0.5, 100, 2, B.FIXED_SEED, False, B.DEFAULT_MEMORY_LIMIT)
    assert bloom.memory_usage() == 384                 # the module's documented BF.INFO SIZE of a default filter
    assert bloom.max_scaled_capacity(B.DEFAULT_MEMORY_LIMIT) == 26214300
    # utils.rs test_calculate_max_scaled_capacity: (capacity, fp, scale to, expansion, capacity reached)
    for capacity, fp, scale_to, expansion, reached in ((1000, 0.01, 10000, 2, 15000),
                                                       (10000, 0.001, 100000, 4, 210000),
                                                       (50000, 0.0001, 500000, 3, 650000),
                                                       (100000, 0.00001, 1000000, 2, 1500000),
                                                       (100, 0.00001, 1000, 1, 1000)):
        limit = B.DEFAULT_MEMORY_LIMIT
        assert B.max_scaled_capacity(capacity, fp, scale_to, 0.5, expansion, limit) == reached
        most = B.max_scaled_capacity(capacity, fp, -1, 0.5, expansion, limit)
        with pytest.raises(B.BloomError) as e:
            B.max_scaled_capacity(capacity, fp, most + 1, 0.5, expansion, limit)
        assert e.value.text == (B.messages.BF_VALIDATE_SCALE_TO_FP if expansion == 1
                                else B.messages.BF_VALIDATE_SCALE_TO_MEMORY)


def test_scaling_tightens_and_the_vector_grows_as_rusts():
    bloom = B.Bloom.reserve(0.01, 0.5, 10, 2, COUNTING_SEED, True, None)
    added = sum(bloom.add(b"i%d" % i) for i in range(2000))
    assert bloom.cardinality() == added
    caps = [f.capacity for f in bloom.filters]
    assert caps == [10 * 2 ** i for i in range(len(caps))]
    for i, f in enumerate(bloom.filters):
        assert f.bitmap_bytes == B.bitmap_bytes(f.capacity, 0.01 * B.powi(0.5, i))
        assert f.seed == COUNTING_SEED and f.num_items <= f.capacity
    assert all(f.num_items == f.capacity for f in bloom.filters[:-1])
    # Vec capacity: 1, then 4, 8, 16 (RawVec's growth); the module's memory figure counts it
    assert bloom.vec_capacity == {1: 1, 2: 4, 3: 4, 4: 4}.get(len(caps), 1 << (len(caps) - 1).bit_length())
    assert all(bloom.exists(b"i%d" % i) for i in range(2000))


def test_nonscaling_full_and_the_memory_limit():
    bloom = B.Bloom.reserve(0.01, 0.5, 2, 0, COUNTING_SEED, True, None)
    assert bloom.add(b"a") == bloom.add(b"b") == 1
    with pytest.raises(B.BloomError) as e:
        bloom.add(b"c")
    assert e.value.text == "ERR non scaling filter is full"
    with pytest.raises(B.BloomError) as e:
        B.Bloom.reserve(0.001, 0.5, 76000000, 1, COUNTING_SEED, True, B.DEFAULT_MEMORY_LIMIT)
    assert e.value.text == "ERR operation exceeds bloom object memory limit"
    scaling = B.Bloom.reserve(0.01, 0.5, 1, 2, COUNTING_SEED, True, None)
    scaling.add(b"a")
    with pytest.raises(B.BloomError):
        scaling.add(b"b", memory_limit=scaling.memory_usage())    # no room for a second filter
    assert scaling.add(b"b") == 1 and len(scaling.filters) == 2   # a replay checks no limit


def test_rdb_module_value_round_trip_and_its_bytes():
    bloom = B.Bloom.reserve(0.01, 0.5, 100, 2, B.FIXED_SEED, False, None)
    for item in (b"item1", b"", b"\x00\xff", b"a" * 100):
        bloom.add(item)
    payload = rdbvalue.dump(bloom)
    # RDB_TYPE_MODULE_2, the id of "bloomfltr" version 1, each value behind its opcode, EOF, version 10, CRC
    ident = rdbvalue.module_type_id("bloomfltr", 1)
    assert rdbvalue.module_type_name(ident) == "bloomfltr" and ident & 1023 == 1
    body = (b"\x07" + b"\x81" + ident.to_bytes(8, "big")
            + b"\x02\x01" + b"\x02\x02" + b"\x04" + struct.pack("<d", 0.01) + b"\x04" + struct.pack("<d", 0.5)
            + b"\x02\x00"
            + b"\x05" + b"\x40\xa5" + CRATE_FIXED_100 + b"\x02\x40\x64" + b"\x02\x04"
            + b"\x00" + b"\x0a\x00")
    assert payload == body + rdbvalue.crc64(body).to_bytes(8, "little")
    back = rdbvalue.load(payload)
    assert back.to_bincode() == bloom.to_bincode() and back.memory_usage() == 384


def _lzf_literal_runs(data):
    """A valid LZF stream made of literal runs only (what a decoder must read like any other)."""
    out = bytearray()
    for i in range(0, len(data), 32):
        chunk = data[i:i + 32]
        out.append(len(chunk) - 1)
        out += chunk
    return bytes(out)


def test_rdb_module_value_with_an_lzf_bitmap_and_refusals():
    """Valkey compresses a string buffer of more than 20 bytes with LZF in DUMP (rdbcompression yes)."""
    bitmap = CRATE_FIXED_100
    compressed = _lzf_literal_runs(bitmap)
    ident = rdbvalue.module_type_id("bloomfltr", 1)

    def payload(bitmap_field, seed_random=0, encver=1, capacity=100):
        body = (b"\x07\x81" + rdbvalue.module_type_id("bloomfltr", encver).to_bytes(8, "big")
                + b"\x02\x01\x02\x02\x04" + struct.pack("<d", 0.01) + b"\x04" + struct.pack("<d", 0.5)
                + b"\x02" + bytes((seed_random,)) + b"\x05" + bitmap_field
                + b"\x02" + rdbvalue._len(capacity) + b"\x02\x04\x00\x0a\x00")
        return body + rdbvalue.crc64(body).to_bytes(8, "little")

    lzf = b"\xc3" + rdbvalue._len(len(compressed)) + rdbvalue._len(len(bitmap)) + compressed
    bloom = rdbvalue.load(payload(lzf))
    assert bytes(bloom.filters[0].data) == bitmap and bloom.cardinality() == 4 and not bloom.is_seed_random
    assert ident == rdbvalue.module_type_id("bloomfltr", 1)
    with pytest.raises(rdbvalue.RdbError):
        rdbvalue.load(payload(lzf, encver=2))           # a newer encoding version than the module's
    with pytest.raises(rdbvalue.RdbError):
        rdbvalue.load(payload(lzf, capacity=0))         # the module would panic on it
    bad_seed = bytearray(bitmap)
    bad_seed[13] ^= 1
    with pytest.raises(rdbvalue.RdbError):              # fixed-seed mode with a seed that is not FIXED_SEED
        rdbvalue.load(payload(rdbvalue._string(bytes(bad_seed))))
    assert rdbvalue.load(payload(rdbvalue._string(bytes(bad_seed)), seed_random=1)).is_seed_random
    short = bytearray(bitmap[:-1])
    with pytest.raises(rdbvalue.RdbError):              # the header says 120 bytes
        rdbvalue.load(payload(rdbvalue._string(bytes(short))))


def test_bincode_form_round_trip_and_refusals():
    bloom = B.Bloom.reserve(0.5, 0.5, 1000, 2, COUNTING_SEED, True, None)
    bloom.add(b"item1")
    data = bloom.to_bincode()
    assert data[0] == 1 and struct.unpack_from("<Iddb", data, 1) == (2, 0.5, 0.5, 1)
    back = B.Bloom.from_bincode(data, B.DEFAULT_MEMORY_LIMIT)
    assert back.exists(b"item1") and back.to_bincode() == data and back.vec_capacity == 1
    with pytest.raises(B.BloomError, match="Unsupported version"):
        B.Bloom.from_bincode(b"\x0a" + data[1:])
    with pytest.raises(B.BloomError, match="^ERR bloom object decoding failed$"):
        B.Bloom.from_bincode(b"")
    with pytest.raises(B.BloomError, match="^ERR bloom object decoding failed$"):
        B.Bloom.from_bincode(data[:-3])
    negative = bytearray(data)
    struct.pack_into("<d", negative, 5, -0.5)
    with pytest.raises(B.BloomError, match=r"^ERR \(0 < error rate range < 1\)$"):
        B.Bloom.from_bincode(bytes(negative))
    big = B.Bloom.reserve(0.01, 0.5, 114000000, 2, COUNTING_SEED, True, None).to_bincode()
    with pytest.raises(B.BloomError, match="exceeds bloom object memory limit"):
        B.Bloom.from_bincode(big, B.DEFAULT_MEMORY_LIMIT)
    assert B.Bloom.from_bincode(data + b"trailing").to_bincode() == data   # bincode allows trailing bytes


def test_fp_rate_degrades_to_zero():
    assert B.fp_rate_of(0.01, 3, 0.5) == 0.00125
    with pytest.raises(B.BloomError, match="degrades to 0"):
        B.fp_rate_of(1e-300, 100, 0.01)
    assert math.isclose(B.fp_rate_of(0.5, 1, 0.3), 0.15)
