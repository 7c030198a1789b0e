"""HyperLogLog: PFADD PFCOUNT PFMERGE, the value format (byte-compatible with Valkey), accuracy,
errors, effects (replay determinism, reads without effects) and a kill -9 restart.

Expected counts and value digests were produced by a Valkey-compatible server (same hash, same
sparse/dense encodings, same estimator) for the same elements."""

import hashlib
import random

import pytest
import valkey

from durakv import messages
from helpers.replay import Direct
from durakv.keyspace import hll
from durakv.protocol.resp import ErrorReply
from helpers.replay import run_and_replay
from helpers.wire import error_of

HLL_WRONGTYPE = "WRONGTYPE Key is not a valid HyperLogLog string value."
INVALIDOBJ = "INVALIDOBJ Corrupted HLL object detected"

# PFADD x a b c d e f g in Valkey: the sparse body after the 16-byte header.
SEVEN_BODY = bytes.fromhex("466d80560c80443c84388050b184498c80426d80425a")
# elem:0 .. elem:999 (sparse, 1913 bytes) and elem:0 .. elem:4999 (dense).
THOUSAND_DIGEST = "9c00b29f3f1112013348c14ef9a0a93c74d0e1a79c1ec95740ddb968100388d3"
FIVE_THOUSAND_DIGEST = "3fcb934c3f93494cd180231a4e785ecceb3d905e17255008b71088b0c3170bef"
MERGE_X_Y_DIGEST = "510613cede83b3ac14a88e3925916daeecc002086d74941066e8edb6ad4c2ed4"


def direct():
    """Commands run in-process (replay_util.Direct, on this file's seed)."""
    return Direct(seed=3)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# -- the hash and the estimator -----------------------------------------------------------------

def test_murmurhash64a_vectors():
    # Reference values of MurmurHash64A(seed 0xadc83b19) as computed by Valkey's C code.
    assert hll.murmurhash64a(b"") == _c_murmur(b"")
    for data in (b"a", b"abcdefg", b"abcdefgh", b"abcdefghi", b"x" * 100, bytes(range(256))):
        assert hll.murmurhash64a(data) == _c_murmur(data)
    index, count = hll.pat_len(b"a")
    assert 0 <= index < 16384 and 1 <= count <= 51


def _c_murmur(data):
    """A literal transcription of the C function, byte by byte, as an independent check."""
    m, r, mask = 0xC6A4A7935BD1E995, 47, (1 << 64) - 1
    n = len(data)
    h = (0xADC83B19 ^ (n * m)) & mask
    end = n - (n & 7)
    for i in range(0, end, 8):
        k = 0
        for b in range(8):
            k |= data[i + b] << (8 * b)
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h ^= k
        h = (h * m) & mask
    rest = n & 7
    if rest:
        for b in range(rest - 1, -1, -1):
            h ^= data[end + b] << (8 * b)
        h = (h * m) & mask
    h ^= h >> r
    h = (h * m) & mask
    h ^= h >> r
    return h


def test_dense_register_packing_roundtrip():
    rng = random.Random(1)
    raw = bytes(rng.randrange(64) for _ in range(16384))
    dense = hll.raw_to_dense(raw)
    assert len(dense) == 12288
    assert hll.dense_to_raw(dense) == raw
    buf = bytearray(hll.MAGIC + bytes(12)) + dense
    for i in (0, 1, 2, 3, 4, 5, 16382, 16383):
        assert hll.registers_get(buf, i) == raw[i]
    other = bytes(rng.randrange(64) for _ in range(16384))
    assert hll.raw_max(raw, other) == bytes(map(max, raw, other))


# -- PFADD / PFCOUNT ----------------------------------------------------------------------------

def test_pfadd_pfcount_basic(rr):
    assert rr.pfcount("h") == 0
    assert rr.pfadd("h", *"abcdefg") == 1
    assert rr.pfcount("h") == 7
    assert rr.pfadd("h", "a", "b") == 0
    assert rr.pfadd("h", "zzz") == 1
    assert rr.pfcount("h") == 8
    assert rr.execute_command("TYPE", "h") in (b"string", "string")


def test_pfadd_without_elements(rr):
    assert rr.execute_command("PFADD", "h") == 1      # creates the key
    assert rr.exists("h") == 1
    assert rr.pfcount("h") == 0
    assert rr.execute_command("PFADD", "h") == 0      # exists: nothing changed


def test_value_bytes_match_valkey(r):
    r.pfadd("x", *"abcdefg")
    v = r.get("x")
    assert v[:5] == b"HYLL\x01" and v[5:8] == b"\x00\x00\x00"
    assert v[15] & 0x80  # cached cardinality marked invalid
    assert v[16:] == SEVEN_BODY
    r.pfadd("y", *[f"elem:{i}" for i in range(1000)])
    v = r.get("y")
    assert len(v) == 1913 and v[4] == hll.SPARSE and sha(v[16:]) == THOUSAND_DIGEST
    assert r.pfcount("y") == 1005
    for i in range(0, 5000, 1000):
        r.pfadd("z", *[f"elem:{j}" for j in range(i, i + 1000)])
    v = r.get("z")
    assert len(v) == 12304 and v[4] == hll.DENSE and sha(v[16:]) == FIVE_THOUSAND_DIGEST
    assert r.pfcount("z") == 4973
    assert r.pfcount("y", "z") == 4973
    assert r.pfcount("x", "y") == 1013


def test_pfcount_stores_the_cardinality_once(r):
    r.pfadd("h", *[f"e{i}" for i in range(300)])
    before = r.get("h")
    assert before[15] & 0x80                     # PFADD left the cache invalid
    count = r.pfcount("h")
    after = r.get("h")
    # as Valkey: the count in the header, the registers untouched
    assert after[:8] + after[16:] == before[:8] + before[16:]
    assert int.from_bytes(after[8:16], "little") == count
    assert r.pfcount("h") == count and r.get("h") == after
    assert r.pfcount("h", "missing") > 0 and r.get("h") == after   # several keys: never written


def test_pfcount_effects_only_when_it_stores_the_cache():
    d = direct()
    d("PFADD", "a", *[f"a{i}" for i in range(50)])
    d("PFADD", "b", *[f"b{i}" for i in range(50)])
    d.effects.clear()
    assert d("PFCOUNT", "a") == 50
    assert d.effects == [(0, (b"PFCOUNT", b"a"))]    # replayed, it writes the same count
    d.effects.clear()
    assert d("PFCOUNT", "a") == 50                   # the cache is valid: nothing to write
    assert d("PFCOUNT", "a", "b") == 100
    assert d("PFCOUNT", "missing") == 0
    assert d.effects == []


def test_valid_cached_cardinality_is_honoured(r):
    # A value produced by Valkey after PFCOUNT carries a valid cache; it is used as Valkey does.
    r.pfadd("h", *"abcdefg")
    v = bytearray(r.get("h"))
    v[8:16] = (12345).to_bytes(8, "little")
    r.set("h", bytes(v))
    assert r.pfcount("h") == 12345
    assert r.pfcount("h", "other") == 7          # the union is always computed
    assert r.pfadd("h", "new-element") == 1      # a change invalidates the cache
    assert r.get("h")[15] & 0x80
    assert r.pfcount("h") == 8


def test_imported_valkey_value_keeps_working(r):
    value = b"HYLL\x01\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00" + SEVEN_BODY
    r.set("h", value)
    assert r.pfcount("h") == 7
    assert r.pfadd("h", *"abcdefg") == 0
    assert r.get("h") == value
    assert r.pfadd("h", "h") == 1
    assert r.pfcount("h") == 8


def test_sparse_to_dense_promotion(r):
    r.pfadd("h", *[f"p{i}" for i in range(100)])
    assert r.get("h")[4] == hll.SPARSE
    n = 100
    while r.get("h")[4] == hll.SPARSE:
        r.pfadd("h", *[f"p{i}" for i in range(n, n + 100)])
        n += 100
    assert len(r.get("h")) == hll.DENSE_SIZE
    assert 1000 < n < 2500          # promoted once the sparse form would pass 3000 bytes
    assert abs(r.pfcount("h") - n) <= 0.03 * n


def test_accuracy_100k(r):
    n = 100_000
    for i in range(0, n, 10_000):
        r.pfadd("h", *[f"user-{j}" for j in range(i, i + 10_000)])
    assert r.pfcount("h") == 100165  # Valkey's count for these elements
    assert abs(r.pfcount("h") - n) / n < 0.02


def test_accuracy_1m(r):
    n = 1_000_000
    batch = 20_000
    pipe = r.pipeline(transaction=False)
    for i in range(0, n, batch):
        pipe.execute_command("PFADD", "big", *[b"user-%d" % j for j in range(i, i + batch)])
    replies = pipe.execute()
    assert all(x in (0, 1) for x in replies) and replies[0] == 1
    count = r.pfcount("big")
    assert count == 1003993  # Valkey's count for these elements
    assert abs(count - n) / n < 0.02


def test_union_count(r):
    r.pfadd("a", *[f"x{i}" for i in range(2000)])
    r.pfadd("b", *[f"x{i}" for i in range(1000, 3000)])
    union = r.pfcount("a", "b")
    assert abs(union - 3000) < 90
    assert r.pfcount("a", "b", "missing") == union
    assert r.pfcount("missing1", "missing2") == 0


# -- PFMERGE ------------------------------------------------------------------------------------

def test_pfmerge(r):
    r.pfadd("x", *"abcdefg")
    r.pfadd("y", *[f"elem:{i}" for i in range(1000)])
    assert r.pfmerge("m", "x", "y") is True
    v = r.get("m")
    assert v[4] == hll.SPARSE and len(v) == 1924 and sha(v[16:]) == MERGE_X_Y_DIGEST
    assert r.pfcount("m") == 1013 == r.pfcount("x", "y")
    # the destination is a source too
    assert r.pfmerge("x", "y")
    assert r.pfcount("x") == 1013
    # dense sources give a dense destination
    for i in range(0, 5000, 1000):
        r.pfadd("z", *[f"elem:{j}" for j in range(i, i + 1000)])
    assert r.pfmerge("m2", "y", "z")
    v = r.get("m2")
    assert v[4] == hll.DENSE and sha(v[16:]) == FIVE_THOUSAND_DIGEST
    assert r.pfcount("m2") == 4973


def test_pfmerge_edge_cases(r):
    assert r.execute_command("PFMERGE", "d") in (b"OK", "OK", True)
    assert r.pfcount("d") == 0 and r.get("d")[:5] == b"HYLL\x01"
    assert r.pfmerge("d2", "missing1", "missing2")
    assert r.pfcount("d2") == 0
    r.pfadd("s", "a")
    r.pexpire("s", 100_000)
    assert r.pfmerge("s", "d")
    assert r.pttl("s") > 0          # merge into an existing key keeps its TTL
    assert r.pfcount("s") == 1


# -- errors -------------------------------------------------------------------------------------

def test_errors(r):
    r.set("str", "not an hll")
    r.rpush("list", "a")
    for args in (("PFADD", "str", "a"), ("PFCOUNT", "str"), ("PFCOUNT", "missing", "str"),
                 ("PFMERGE", "dest", "str"), ("PFMERGE", "str", "missing")):
        assert error_of(r, *args) == HLL_WRONGTYPE
    assert error_of(r, "PFADD", "list", "a").startswith("WRONGTYPE Operation against a key")
    assert error_of(r, "PFCOUNT", "list").startswith("WRONGTYPE Operation against a key")
    r.set("short", "HYLL")                          # shorter than the header
    assert error_of(r, "PFCOUNT", "short") == HLL_WRONGTYPE
    r.set("enc", b"HYLL\x02" + bytes(11) + b"\x7f\xff")  # unknown encoding
    assert error_of(r, "PFCOUNT", "enc") == HLL_WRONGTYPE
    r.pfadd("dense", *[f"d{i}" for i in range(5000)])
    r.set("dense_bad", r.get("dense")[:-1])           # dense with the wrong length
    assert error_of(r, "PFADD", "dense_bad", "x") == HLL_WRONGTYPE
    assert error_of(r, "PFADD") == "ERR wrong number of arguments for 'pfadd' command"
    assert error_of(r, "PFCOUNT") == "ERR wrong number of arguments for 'pfcount' command"
    assert error_of(r, "PFMERGE") == "ERR wrong number of arguments for 'pfmerge' command"
    assert r.get("str") == b"not an hll"
    assert not r.exists("dest")


def test_corrupted_sparse(r):
    r.pfadd("h", *"abcdefg")
    good = r.get("h")
    r.set("bad", good + b"\x01")                      # opcodes cover 16386 registers
    assert error_of(r, "PFCOUNT", "bad") == INVALIDOBJ
    assert error_of(r, "PFCOUNT", "bad", "h") == INVALIDOBJ
    assert error_of(r, "PFMERGE", "dest", "bad") == INVALIDOBJ
    assert not r.exists("dest")
    r.set("bad2", good[:16] + b"\x7f\xff" + b"\x80")  # VAL past the last register
    assert error_of(r, "PFCOUNT", "bad2") == INVALIDOBJ
    r.set("empty", good[:16])                          # no opcodes at all
    assert error_of(r, "PFADD", "empty", "a") == INVALIDOBJ
    assert r.get("empty") == good[:16]


# -- effects ------------------------------------------------------------------------------------

def test_effects_replay_deterministically():
    rng = random.Random(5)
    cmds = [["PFADD", "a"], ["PFADD", "a"], ["PFADD", "a", "x", "y"], ["PFADD", "a", "x"]]
    cmds += [["PFADD", "b"] + [f"e{rng.randrange(10**6)}" for _ in range(300)] for _ in range(12)]
    cmds += [["PFADD", "c"] + [f"c{i}" for i in range(200)],
             ["PFMERGE", "m", "a", "c"],
             ["PFMERGE", "m", "b"],                  # sparse + dense -> dense
             ["PFMERGE", "n"],
             ["PFMERGE", "c", "a"],
             ["SET", "t", "x"], ["PEXPIRE", "c", 10_000_000],
             ["PFADD", "c", "more"], ["PFCOUNT", "a", "b", "c"], ["PFCOUNT", "b"]]
    replies, effects = run_and_replay(cmds)
    assert replies[:4] == [1, 0, 1, 0]
    assert not any(isinstance(x, ErrorReply) for x in replies)
    names = [argv[0].upper() for _db, argv in effects]
    assert names.count(b"PFCOUNT") == 1               # PFCOUNT b stored its cache; the union never does
    assert names.count(b"PFADD") == 2 + 12 + 2 and names.count(b"PFMERGE") == 4


def test_error_changes_nothing_and_propagates_nothing():
    d = direct()
    d("SET", "bad", hll.new_sparse()[:16])
    d.effects.clear()
    assert d("PFADD", "bad", "a", "b").text == messages.HLL_INVALID
    assert d("PFMERGE", "dest", "bad").text == messages.HLL_INVALID
    assert d.effects == []
    assert d.ks.dbs[0].data[b"bad"] == hll.new_sparse()[:16]


# -- durability ---------------------------------------------------------------------------------

def test_kill9_restart_keeps_acknowledged_hlls(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        c.pfadd("small", *"abcdefg")
        for i in range(0, 4000, 500):
            c.pfadd("dense", *[f"d{j}" for j in range(i, i + 500)])
        c.pfadd("other", *[f"o{i}" for i in range(100)])
        c.pfmerge("merged", "small", "other")
        c.pfmerge("merged2", "dense", "other")
        names = ("small", "dense", "other", "merged", "merged2")
        counts = {k: c.pfcount(k) for k in names}
        expected = {k: c.get(k) for k in names}   # with the cached counts PFCOUNT stored (journaled too)
        assert all(not v[15] & 0x80 for v in expected.values())
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert {k: c.get(k) for k in expected} == expected
        assert {k: c.pfcount(k) for k in expected} == counts


def test_pfdebug_and_pfselftest(r):
    r.delete("h")
    r.pfadd("h", "a", "b", "c", "d", "e")
    # The same opcodes and registers Valkey 8.0.1 shows for these five elements.
    assert r.execute_command("PFDEBUG", "DECODE", "h") == (
        b"Z:7292 v:1,1 Z:1143 v:1,1 Z:4274 v:2,1 Z:2445 v:1,1 Z:622 v:1,1 Z:603")
    assert r.execute_command("PFDEBUG", "ENCODING", "h") == b"sparse"
    regs = r.execute_command("PFDEBUG", "GETREG", "h")
    assert len(regs) == 16384 and sorted(regs)[-5:] == [1, 1, 1, 1, 2]
    assert r.execute_command("PFDEBUG", "ENCODING", "h") == b"dense"  # GETREG converted it
    assert r.execute_command("PFDEBUG", "TODENSE", "h") == 0
    assert r.pfcount("h") == 5
    assert error_of(r, "PFDEBUG", "DECODE", "h") == "ERR HLL encoding is not sparse"
    assert error_of(r, "PFDEBUG", "NOPE", "h") == "ERR Unknown PFDEBUG subcommand 'NOPE'"
    assert error_of(r, "PFDEBUG", "ENCODING", "missing") == "ERR The specified key does not exist"
    r.set("s", "x")
    assert error_of(r, "PFDEBUG", "ENCODING", "s") == "WRONGTYPE Key is not a valid HyperLogLog string value."
    r.pfadd("h2", "x")
    assert r.execute_command("PFDEBUG", "TODENSE", "h2") == 1
    assert r.getrange("h2", 4, 4) == b"\x00"
    assert r.execute_command("PFSELFTEST") == b"OK"


def test_pfdebug_todense_replays_to_the_same_bytes():
    replies, effects = run_and_replay([["PFADD", "h", "a", "b"], ["PFDEBUG", "GETREG", "h"],
                                       ["PFADD", "h2", "z"], ["PFDEBUG", "TODENSE", "h2"],
                                       ["PFDEBUG", "TODENSE", "h2"]])
    assert replies[3:] == [1, 0]
    assert [argv[:2] for _db, argv in effects if argv[0] == b"PFDEBUG"] == [(b"PFDEBUG", b"TODENSE")] * 2
