"""Bitmaps: SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO, and LCS. Replies, error texts,
RESP2/RESP3 shapes, replay determinism of the effects, and a kill -9 restart."""

import random

import pytest
import valkey

from durakv import messages
from durakv.commands.bitmaps import _lcs_rows
from helpers.replay import Direct
from durakv.protocol.resp import ErrorReply
from helpers.replay import run_and_replay
from helpers.wire import error_of

BIT_OFFSET = "ERR bit offset is not an integer or out of range"
BIT_VALUE = "ERR bit is not an integer or out of range"
BAD_TYPE = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INT = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"


def direct():
    """Commands run in-process (replay_util.Direct, on this file's seed)."""
    return Direct(seed=3)


# -- SETBIT / GETBIT ----------------------------------------------------------------------------

def test_setbit_getbit(rr):
    assert rr.setbit("k", 7, 1) == 0
    assert rr.get("k") == b"\x01"
    assert rr.setbit("k", 7, 1) == 1
    assert rr.setbit("k", 0, 1) == 0
    assert rr.get("k") == b"\x81"
    assert rr.setbit("k", 23, 1) == 0          # grows with zero bytes
    assert rr.get("k") == b"\x81\x00\x01"
    assert rr.setbit("k", 0, 0) == 1
    assert rr.get("k") == b"\x01\x00\x01"
    assert rr.setbit("k", 100, 0) == 0          # clearing past the end still grows the string
    assert rr.strlen("k") == 13
    assert [rr.getbit("k", i) for i in (0, 7, 23, 24, 99, 100, 10**6)] == [0, 1, 1, 0, 0, 0, 0]
    assert rr.getbit("missing", 5) == 0
    assert rr.setbit("new", 0, 0) == 0
    assert rr.get("new") == b"\x00"
    rr.set("s", "a")                            # 'a' = 0b01100001
    assert [rr.getbit("s", i) for i in range(8)] == [0, 1, 1, 0, 0, 0, 0, 1]


def test_setbit_keeps_ttl(r):
    r.set("k", "x", px=100_000)
    r.setbit("k", 1, 0)
    r.setbit("k", 40, 1)
    assert r.pttl("k") > 0


def test_setbit_getbit_errors(r):
    r.rpush("list", "a")
    for off in ("-1", "x", "1.5", "", "+1", "01", "#1", str(512 * 1024 * 1024 * 8), str(2**63)):
        assert error_of(r, "SETBIT", "k", off, "1") == BIT_OFFSET, off
        assert error_of(r, "GETBIT", "k", off) == BIT_OFFSET, off
    for bit in ("2", "-1", "x", "01", "1.0"):
        assert error_of(r, "SETBIT", "k", "0", bit) == BIT_VALUE
    assert error_of(r, "SETBIT", "list", "0", "1") == WRONGTYPE
    assert error_of(r, "GETBIT", "list", "0") == WRONGTYPE
    assert error_of(r, "GETBIT", "list", "x") == BIT_OFFSET  # arguments are checked first
    assert error_of(r, "SETBIT", "k", "0") == "ERR wrong number of arguments for 'setbit' command"
    assert not r.exists("k")


# -- BITCOUNT -----------------------------------------------------------------------------------

def test_bitcount(rr):
    rr.set("k", "foobar")
    assert rr.bitcount("k") == 26
    assert rr.bitcount("k", 0, 0) == 4
    assert rr.bitcount("k", 1, 1) == 6
    assert rr.bitcount("k", 1, 1, "BYTE") == 6
    assert rr.bitcount("k", 5, 30, "BIT") == 17
    assert rr.bitcount("k", -2, -1) == 7
    assert rr.bitcount("k", -2, -5) == 0
    assert rr.bitcount("k", 3, 2) == 0
    assert rr.bitcount("k", 0, 1000) == 26
    assert rr.bitcount("k", -1000, 1000) == 26
    assert rr.execute_command("BITCOUNT", "k", "2") == 26 - 10   # Valkey 8: end is optional
    assert rr.execute_command("BITCOUNT", "k", "-1") == 4
    assert rr.execute_command("BITCOUNT", "k", "0", "-1", "bit") == 26
    assert rr.execute_command("BITCOUNT", "k", "1", "6", "bit") == 4
    assert rr.execute_command("BITCOUNT", "k", "-3", "-1", "BIT") == 1
    assert rr.bitcount("missing") == 0
    assert rr.bitcount("missing", 0, 5) == 0
    rr.set("e", "")
    assert rr.bitcount("e") == 0 and rr.bitcount("e", 0, -1) == 0


def test_bitcount_errors(r):
    r.set("k", "foobar")
    r.rpush("list", "a")
    assert error_of(r, "BITCOUNT", "k", "0", "1", "bits") == SYNTAX
    assert error_of(r, "BITCOUNT", "k", "0", "1", "BIT", "x") == SYNTAX
    assert error_of(r, "BITCOUNT", "k", "x", "1") == NOT_INT
    assert error_of(r, "BITCOUNT", "k", "0", "y") == NOT_INT
    # the range is validated even for a missing key, and before the short negative-range path
    assert error_of(r, "BITCOUNT", "missing", "0", "x") == NOT_INT
    assert error_of(r, "BITCOUNT", "k", "-1", "-2", "x") == SYNTAX
    assert error_of(r, "BITCOUNT", "list") == WRONGTYPE
    assert error_of(r, "BITCOUNT", "list", "0", "1") == WRONGTYPE


# -- BITPOS -------------------------------------------------------------------------------------

def test_bitpos(rr):
    rr.set("k", b"\xff\xf0\x00")
    assert rr.bitpos("k", 0) == 12
    rr.set("k", b"\x00\xff\xf0")
    assert rr.bitpos("k", 1, 0) == 8
    assert rr.bitpos("k", 1, 2) == 16
    assert rr.bitpos("k", 1, 2, -1, "byte") == 16
    assert rr.bitpos("k", 1, 7, 15, "bit") == 8
    assert rr.bitpos("k", 1, 7, -3, "bit") == 8
    assert rr.bitpos("k", 0, 9, -1, "bit") == 20
    assert rr.bitpos("k", 1, 17, 19, "bit") == 17
    assert rr.bitpos("k", 0, 8, 11, "bit") == -1
    rr.set("ones", b"\xff\xff\xff")
    assert rr.bitpos("ones", 0) == 24            # no end given: the right is zero padded
    assert rr.bitpos("ones", 0, 0) == 24
    assert rr.bitpos("ones", 0, 0, -1) == -1     # explicit end: no 0 in the range
    assert rr.bitpos("ones", 1, 5, 3) == -1      # empty range
    rr.set("zeros", b"\x00\x00")
    assert rr.bitpos("zeros", 1) == -1
    assert rr.bitpos("zeros", 0) == 0
    assert rr.bitpos("missing", 1) == -1
    assert rr.bitpos("missing", 0) == 0
    assert rr.bitpos("missing", 0, 3, 7, "bit") == 0
    rr.set("e", "")
    assert rr.bitpos("e", 1) == -1 and rr.bitpos("e", 0) == -1


def test_bitpos_errors(r):
    r.set("k", "x")
    r.rpush("list", "a")
    assert error_of(r, "BITPOS", "k", "2") == "ERR The bit argument must be 1 or 0."
    assert error_of(r, "BITPOS", "k", "x") == NOT_INT
    assert error_of(r, "BITPOS", "k", "1", "0", "1", "bits") == SYNTAX
    assert error_of(r, "BITPOS", "k", "1", "0", "1", "bit", "x") == SYNTAX
    assert error_of(r, "BITPOS", "missing", "1", "0", "1", "bit", "x") == SYNTAX
    assert error_of(r, "BITPOS", "k", "1", "a") == NOT_INT
    assert error_of(r, "BITPOS", "list", "1") == WRONGTYPE


# -- BITOP --------------------------------------------------------------------------------------

def test_bitop(rr):
    rr.set("a", b"\xff\x0f\x01")
    rr.set("b", b"\x0f\xff")
    assert rr.bitop("AND", "d", "a", "b") == 3
    assert rr.get("d") == b"\x0f\x0f\x00"
    assert rr.bitop("or", "d", "a", "b") == 3
    assert rr.get("d") == b"\xff\xff\x01"
    assert rr.bitop("XOR", "d", "a", "b") == 3
    assert rr.get("d") == b"\xf0\xf0\x01"
    assert rr.bitop("XOR", "d", "a", "a", "b") == 3
    assert rr.get("d") == b"\x0f\xff\x00"
    assert rr.bitop("NOT", "d", "b") == 2
    assert rr.get("d") == b"\xf0\x00"
    assert rr.bitop("AND", "d", "a", "missing") == 3
    assert rr.get("d") == b"\x00\x00\x00"
    assert rr.bitop("OR", "d", "missing", "b") == 2
    assert rr.get("d") == b"\x0f\xff"
    assert rr.bitop("and", "a2", "a") == 3 and rr.get("a2") == b"\xff\x0f\x01"
    long_a = bytes(range(256)) * 40
    long_b = bytes(reversed(long_a))
    rr.set("la", long_a)
    rr.set("lb", long_b)
    assert rr.bitop("XOR", "lx", "la", "lb") == len(long_a)
    assert rr.get("lx") == bytes(x ^ y for x, y in zip(long_a, long_b))
    assert rr.bitop("AND", "lx", "la", "lb", "a") == len(long_a)
    assert rr.get("lx") == bytes(x & y & z for x, y, z in zip(long_a, long_b, b"\xff\x0f\x01" + bytes(10237)))
    # An empty result deletes the destination.
    rr.set("d", "old")
    assert rr.bitop("OR", "d", "missing", "missing2") == 0
    assert rr.exists("d") == 0
    rr.set("empty", "")
    assert rr.bitop("NOT", "d", "empty") == 0
    assert rr.exists("d") == 0


def test_bitop_dest_loses_ttl_and_type(r):
    r.set("a", "x")
    r.set("d", "y", px=100_000)
    r.bitop("NOT", "d", "a")
    assert r.pttl("d") == -1
    r.rpush("l", "1")
    assert r.bitop("OR", "l", "a") == 1         # the destination's old type does not matter
    assert r.get("l") == b"x"


def test_bitop_errors(r):
    r.set("a", "x")
    r.rpush("list", "a")
    assert error_of(r, "BITOP", "NAND", "d", "a") == SYNTAX
    assert error_of(r, "BITOP", "DIFF", "d", "a", "a") == SYNTAX   # not in Valkey 8.0
    assert error_of(r, "BITOP", "NOT", "d", "a", "a") == "ERR BITOP NOT must be called with a single source key."
    assert error_of(r, "BITOP", "AND", "d", "a", "list") == WRONGTYPE
    assert error_of(r, "BITOP", "AND", "d") == "ERR wrong number of arguments for 'bitop' command"
    assert not r.exists("d")


# -- BITFIELD -----------------------------------------------------------------------------------

def test_bitfield_docs_examples(rr):
    assert rr.execute_command("BITFIELD", "k", "INCRBY", "i5", "100", "1", "GET", "u4", "0") == [1, 0]
    replies = [rr.execute_command("BITFIELD", "m", "INCRBY", "u2", "100", "1",
                                  "OVERFLOW", "SAT", "INCRBY", "u2", "102", "1") for _ in range(4)]
    assert replies == [[1, 1], [2, 2], [3, 3], [0, 3]]
    assert rr.execute_command("BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u2", "102", "4") == [None]
    assert rr.execute_command("BITFIELD", "s", "SET", "i8", "0", "100", "SET", "i8", "#1", "-100",
                              "GET", "i8", "0", "GET", "i8", "#1", "GET", "u16", "0") == [0, 0, 100, -100, 25756]
    assert rr.get("s") == b"d\x9c"


def test_bitfield_types_and_overflow(r):
    ex = r.execute_command
    assert ex("BITFIELD", "k", "SET", "i64", "0", str(-2**63), "GET", "i64", "0", "GET", "u63", "0") == \
        [0, -2**63, 2**62]
    assert ex("BITFIELD", "k", "INCRBY", "i64", "0", "-1") == [2**63 - 1]        # wraps
    assert ex("BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "i64", "0", "1") == [2**63 - 1]
    assert ex("BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "i64", "0", "1") == [None]
    assert ex("BITFIELD", "u", "SET", "u63", "0", str(2**63 - 1), "GET", "u63", "0") == [0, 2**63 - 1]
    assert ex("BITFIELD", "u", "INCRBY", "u63", "0", "1") == [0]
    assert ex("BITFIELD", "w", "SET", "u8", "0", "-1", "SET", "u8", "8", "256", "SET", "i4", "16", "9",
              "GET", "u8", "0", "GET", "u8", "8", "GET", "i4", "16") == [0, 0, 0, 255, 0, -7]
    assert ex("BITFIELD", "sat", "OVERFLOW", "SAT", "SET", "u8", "0", "-1", "SET", "i4", "8", "9",
              "SET", "i4", "12", "-9", "INCRBY", "u8", "0", "-300", "GET", "i4", "8", "GET", "i4", "12") == \
        [0, 0, 0, 0, 7, -8]
    # C's int64 arithmetic in the saturation limits, reproduced exactly
    assert ex("BITFIELD", "x", "OVERFLOW", "SAT", "SET", "i8", "0", str(-2**63), "GET", "i8", "0") == [0, 127]
    assert ex("BITFIELD", "x", "OVERFLOW", "WRAP", "SET", "i8", "0", str(-2**63), "GET", "i8", "0") == [127, 0]
    # unaligned fields across byte boundaries
    assert ex("BITFIELD", "y", "SET", "u13", "3", "8191", "GET", "u16", "0", "GET", "u3", "0",
              "GET", "u13", "3", "GET", "i13", "3") == [0, 8191, 0, 8191, -1]
    assert r.get("y") == b"\x1f\xff"
    # fields past the end read as zero; #n offsets multiply by the width
    assert ex("BITFIELD", "y", "GET", "u8", "1000", "GET", "u8", "#1", "GET", "i1", "#15") == [0, 255, -1]
    assert ex("BITFIELD", "y") == []
    assert ex("BITFIELD", "missing", "GET", "u8", "0") == [0]
    assert not r.exists("missing")


def test_bitfield_grows_only_for_writes(r):
    ex = r.execute_command
    assert ex("BITFIELD", "g", "GET", "u8", "100") == [0]
    assert not r.exists("g")
    assert ex("BITFIELD", "g", "SET", "u8", "16", "1") == [0]
    assert r.get("g") == b"\x00\x00\x01"
    # Even when every write fails, the string is created/grown as in Valkey.
    assert ex("BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u2", "100", "5") == [None]
    assert r.get("f") == bytes(13)
    r.set("t", "ab", px=100_000)
    ex("BITFIELD", "t", "SET", "u8", "24", "1")
    assert r.get("t") == b"ab\x00\x01" and r.pttl("t") > 0


def test_bitfield_ro(rr):
    rr.set("k", b"\x81")
    assert rr.execute_command("BITFIELD_RO", "k", "GET", "u1", "0", "GET", "i8", "0", "GET", "u4", "#1") == \
        [1, -127, 1]
    assert rr.execute_command("BITFIELD_RO", "missing", "GET", "u8", "0") == [0]
    assert rr.execute_command("BITFIELD_RO", "k") == []
    assert error_of(rr, "BITFIELD_RO", "k", "SET", "u8", "0", "1") == \
        "ERR BITFIELD_RO only supports the GET subcommand"
    assert error_of(rr, "BITFIELD_RO", "k", "GET", "u64", "0") == BAD_TYPE
    assert rr.get("k") == b"\x81"


def test_bitfield_errors(r):
    r.rpush("list", "a")
    ex = r.execute_command
    for t in ("u64", "i65", "i0", "u0", "x8", "U8", "u", "i08", "u-1", ""):
        assert error_of(r, "BITFIELD", "k", "GET", t, "0") == BAD_TYPE, t
    for off in ("-1", "x", "#x", "#-1", "##1", str(512 * 1024 * 1024 * 8)):
        assert error_of(r, "BITFIELD", "k", "GET", "u8", off) == BIT_OFFSET, off
    assert error_of(r, "BITFIELD", "k", "SET", "u8", "0", "x") == NOT_INT
    assert error_of(r, "BITFIELD", "k", "INCRBY", "u8", "0", str(2**63)) == NOT_INT
    assert error_of(r, "BITFIELD", "k", "OVERFLOW", "CLAMP") == "ERR Invalid OVERFLOW type specified"
    for args in (("FOO",), ("GET", "u8"), ("SET", "u8", "0"), ("OVERFLOW",), ("GET", "u8", "0", "x")):
        assert error_of(r, "BITFIELD", "k", *args) == SYNTAX, args
    assert error_of(r, "BITFIELD", "list", "GET", "u8", "0") == WRONGTYPE
    assert error_of(r, "BITFIELD", "list", "SET", "u8", "0", "1") == WRONGTYPE
    # an error anywhere means no operation runs
    assert error_of(r, "BITFIELD", "k", "SET", "u8", "0", "1", "GET", "u64", "0") == BAD_TYPE
    assert not r.exists("k")
    assert ex("BITFIELD", "k", "OVERFLOW", "wrap", "overflow", "Sat", "incrby", "u2", "0", "9") == [3]


def test_bitfield_resp3_null(r3):
    assert r3.execute_command("BITFIELD", "k", "OVERFLOW", "FAIL", "SET", "u2", "0", "9", "GET", "u2", "0") == \
        [None, 0]


# -- LCS ----------------------------------------------------------------------------------------

def test_lcs(rr):
    rr.set("key1", "ohmytext")
    rr.set("key2", "mynewtext")
    assert rr.execute_command("LCS", "key1", "key2") == b"mytext"
    assert rr.execute_command("LCS", "key1", "key2", "LEN") == 6
    assert rr.execute_command("LCS", "key1", "missing") == b""
    assert rr.execute_command("LCS", "missing", "missing", "LEN") == 0
    assert rr.execute_command("LCS", "key1", "key1") == b"ohmytext"


def test_lcs_idx_shapes(r, r3):
    r.set("key1", "ohmytext")
    r.set("key2", "mynewtext")
    assert r.execute_command("LCS", "key1", "key2", "IDX") == \
        [b"matches", [[[4, 7], [5, 8]], [[2, 3], [0, 1]]], b"len", 6]
    assert r.execute_command("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN") == \
        [b"matches", [[[4, 7], [5, 8], 4]], b"len", 6]
    assert r3.execute_command("LCS", "key1", "key2", "idx", "withmatchlen") == \
        {b"matches": [[[4, 7], [5, 8], 4], [[2, 3], [0, 1], 2]], b"len": 6}
    assert r3.execute_command("LCS", "key1", "missing", "IDX") == {b"matches": [], b"len": 0}
    assert r.execute_command("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "-5") == \
        [b"matches", [[[4, 7], [5, 8]], [[2, 3], [0, 1]]], b"len", 6]


def test_lcs_errors(r):
    r.set("a", "x")
    r.rpush("list", "x")
    assert error_of(r, "LCS", "a", "list") == "ERR The specified keys must contain string values"
    assert error_of(r, "LCS", "list", "a", "bogus") == "ERR The specified keys must contain string values"
    assert error_of(r, "LCS", "a", "a", "LEN", "IDX") == \
        "ERR If you want both the length and indexes, please just use IDX."
    assert error_of(r, "LCS", "a", "a", "bogus") == SYNTAX
    assert error_of(r, "LCS", "a", "a", "MINMATCHLEN") == SYNTAX
    assert error_of(r, "LCS", "a", "a", "MINMATCHLEN", "x") == NOT_INT
    d = direct()
    d("SET", "big1", b"a" * 12000)
    d("SET", "big2", b"b" * 12000)
    assert d("LCS", "big1", "big2").text == \
        "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"


def _naive_lcs_table(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    return table


def test_lcs_bit_parallel_rows_match_the_dp_table():
    rng = random.Random(4)
    for _ in range(60):
        alpha = rng.choice([b"ab", b"acgt", bytes(range(40, 60))])
        a = bytes(rng.choice(alpha) for _ in range(rng.randint(0, 40)))
        b = bytes(rng.choice(alpha) for _ in range(rng.randint(0, 40)))
        table = _naive_lcs_table(a, b)
        length, rows = _lcs_rows(a, b, True)
        assert length == table[len(a)][len(b)]
        for i in range(len(a) + 1):
            for j in range(len(b) + 1):
                assert j - (rows[i] & ((1 << j) - 1)).bit_count() == table[i][j]


def test_lcs_larger_strings(r):
    rng = random.Random(8)
    a = bytes(rng.choice(b"ACGT") for _ in range(3000))
    b = bytes(rng.choice(b"ACGT") for _ in range(2500))
    r.set("a", a)
    r.set("b", b)
    common = r.execute_command("LCS", "a", "b")
    length = r.execute_command("LCS", "a", "b", "LEN")
    assert len(common) == length > 1500
    it = iter(a)
    assert all(ch in it for ch in common)       # a subsequence of both strings
    it = iter(b)
    assert all(ch in it for ch in common)
    idx = r.execute_command("LCS", "a", "b", "IDX", "WITHMATCHLEN")
    assert idx[3] == length and sum(m[2] for m in idx[1]) == length


# -- effects ------------------------------------------------------------------------------------

def test_effects_replay_deterministically():
    cmds = [
        ["SETBIT", "b", "7", "1"], ["SETBIT", "b", "7", "1"], ["SETBIT", "b", "100", "0"],
        ["SETBIT", "b", "3", "1"], ["SETBIT", "b", "3", "0"], ["PEXPIRE", "b", "50000000"],
        ["SETBIT", "b", "200", "1"],
        ["SET", "x", b"\x0f\xf0\xaa"], ["SET", "y", b"\xff"],
        ["BITOP", "AND", "d1", "x", "y"], ["BITOP", "OR", "d2", "x", "y", "b"],
        ["BITOP", "XOR", "d3", "x", "missing"], ["BITOP", "NOT", "d4", "x"],
        ["SET", "d5", "old"], ["BITOP", "OR", "d5", "missing"], ["BITOP", "AND", "gone", "missing"],
        ["BITFIELD", "f", "SET", "i8", "0", "-3", "INCRBY", "u4", "#3", "7", "GET", "u8", "0"],
        ["BITFIELD", "f", "OVERFLOW", "SAT", "INCRBY", "u4", "#3", "100"],
        ["BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u4", "#3", "100"],   # changes nothing
        ["BITFIELD", "f", "OVERFLOW", "FAIL", "SET", "u2", "300", "9"],       # fails but grows
        ["BITFIELD", "f2", "OVERFLOW", "FAIL", "INCRBY", "u2", "100", "5"],   # fails but creates
        ["BITFIELD", "f", "SET", "u8", "0", "253"],                            # same value: no change
        ["BITFIELD", "f", "GET", "u8", "0"], ["BITFIELD_RO", "f", "GET", "u8", "0"],
        ["LCS", "x", "y"], ["BITCOUNT", "x"], ["BITPOS", "x", "1"], ["GETBIT", "x", "3"],
    ]
    replies, effects = run_and_replay(cmds)
    assert not any(isinstance(x, ErrorReply) for x in replies), replies
    assert replies[:5] == [0, 1, 0, 0, 1]
    names = [argv for _db, argv in effects]
    setbits = [a for a in names if a[0].upper() == b"SETBIT"]
    assert len(setbits) == 5                       # the no-op SETBIT propagated nothing
    bitfields = [a for a in names if a[0].upper() == b"BITFIELD"]
    assert len(bitfields) == 4                     # not the no-op FAIL, not the same-value SET, not GETs
    assert (b"DEL", b"d5") in names
    assert not any(a[0].upper() in (b"BITFIELD_RO", b"LCS", b"BITCOUNT", b"BITPOS", b"GETBIT") for a in names)


def test_noop_writes_have_no_effects():
    d = direct()
    d("SET", "k", b"\x80")
    d.effects.clear()
    assert d("SETBIT", "k", "0", "1") == 1
    assert d("SETBIT", "k", "1", "0") == 0
    assert d("BITFIELD", "k", "SET", "u1", "0", "1") == [1]
    assert d("BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u1", "0", "1") == [None]
    assert d("BITOP", "AND", "nothing", "missing") == 0
    assert d.effects == []
    assert d("SETBIT", "k", "bad", "1").text == messages.BIT_OFFSET
    assert d.effects == []


def test_random_ops_replay_deterministically():
    rng = random.Random(11)
    cmds = []
    for _ in range(300):
        k = rng.choice(["a", "b", "c"])
        c = rng.randrange(4)
        if c == 0:
            cmds.append(["SETBIT", k, str(rng.randrange(200)), str(rng.randrange(2))])
        elif c == 1:
            cmds.append(["BITOP", rng.choice(["AND", "OR", "XOR"]), k, "a", rng.choice(["b", "c", "zz"])])
        elif c == 2:
            cmds.append(["BITOP", "NOT", k, rng.choice(["a", "b", "c"])])
        else:
            cmds.append(["BITFIELD", k, "OVERFLOW", rng.choice(["WRAP", "SAT", "FAIL"]),
                         rng.choice(["SET", "INCRBY"]), rng.choice(["u5", "i7", "i64", "u63"]),
                         str(rng.randrange(150)), str(rng.randint(-2**63, 2**63 - 1))])
    replies, _effects = run_and_replay(cmds)
    assert not any(isinstance(x, ErrorReply) for x in replies)


# -- durability ---------------------------------------------------------------------------------

def test_kill9_restart_keeps_acknowledged_bitmaps(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        for i in range(0, 400, 7):
            c.setbit("bits", i, 1)
        c.setbit("bits", 14, 0)
        c.set("x", b"\x0f\xf0")
        c.bitop("XOR", "xored", "bits", "x")
        c.bitop("NOT", "notted", "x")
        c.execute_command("BITFIELD", "bf", "SET", "i16", "#2", "-1234", "OVERFLOW", "SAT", "INCRBY", "u4", "0", "99")
        c.execute_command("BITFIELD", "bf2", "OVERFLOW", "FAIL", "INCRBY", "u2", "100", "5")
        expected = {k: c.get(k) for k in ("bits", "x", "xored", "notted", "bf", "bf2")}
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert {k: c.get(k) for k in expected} == expected
        assert c.bitcount("bits") == len(range(0, 400, 7)) - 1
        assert c.execute_command("BITFIELD_RO", "bf", "GET", "i16", "#2", "GET", "u4", "0") == [-1234, 15]
