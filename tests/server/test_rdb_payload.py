"""DUMP / RESTORE payloads (durakv.keyspace.rdbvalue).

Pure tests: the CRC, LZF, listpack, ziplist, intset and zipmap formats on hand-made bytes, every legacy
object type from hand-made payloads, malformed payloads, and load(dump(v)) round trips.
Server tests: values of every type and encoding are made on a real server, DUMPed, loaded, compared with
what the server answers, dumped again and RESTOREd next to the original (DEBUG DIGEST-VALUE must agree).
They run against redis-server (Redis 7.0, RDB 10: on CI) and against Valkey 8.0.1 where it is built.
"""

import math
import os
import random
import shutil
import socket
import struct
import subprocess
import time
from collections import deque

import pytest
import valkey
from hypothesis import given, settings, strategies as st

from durakv.keyspace import rdbvalue
from durakv.keyspace.rdbvalue import (RdbError, crc64, crc64_py, dump, intset_decode, listpack_decode, listpack_encode,
                                      load, lzf_decompress, verify, ziplist_decode, zipmap_decode)
from durakv.keyspace.stream import INVALID_ENTRIES_READ, TRIM_MAXLEN, Nack, Stream, id_bytes
from durakv.keyspace.zset import ZSet

VALKEY_SERVER = "/work/valkey-8.0.1/src/valkey-server"
BOUNDED = settings(max_examples=50, deadline=None)


# -- helpers -----------------------------------------------------------------------------------------

def payload(rdbtype, body, version=10):
    """A payload around a hand-made object body, with the footer verifyDumpPayload checks."""
    head = bytes((rdbtype,)) + body + version.to_bytes(2, "little")
    return head + crc64(head).to_bytes(8, "little")


def raw(b):
    """An RDB string of fewer than 64 bytes (6-bit length)."""
    assert len(b) < 64
    return bytes((len(b),)) + b


def lp(*entries):
    """A listpack around hand-encoded entries (each with its backlen)."""
    total = 6 + sum(map(len, entries)) + 1
    return total.to_bytes(4, "little") + len(entries).to_bytes(2, "little") + b"".join(entries) + b"\xff"


def zl(*entries):
    """A ziplist around hand-encoded entries (encoding + data), adding each prevlen."""
    body, prev, tail = b"", 0, 10
    for e in entries:
        tail = 10 + len(body)
        prevlen = bytes((prev,)) if prev < 254 else b"\xfe" + prev.to_bytes(4, "little")
        body += prevlen + e
        prev = len(prevlen) + len(e)
    total = 10 + len(body) + 1
    return (total.to_bytes(4, "little") + tail.to_bytes(4, "little") + len(entries).to_bytes(2, "little")
            + body + b"\xff")


def rdb_len(n):
    if n < 64:
        return bytes((n,))
    if n < 16384:
        return bytes((0x40 | n >> 8, n & 0xFF))
    return b"\x80" + n.to_bytes(4, "big")


def rdb_str(b):
    return rdb_len(len(b)) + b


def read_len(buf, pos):
    b = buf[pos]
    if b >> 6 == 0:
        return b & 0x3F, pos + 1
    if b >> 6 == 1:
        return (b & 0x3F) << 8 | buf[pos + 1], pos + 2
    assert b == 0x80
    return int.from_bytes(buf[pos + 1:pos + 5], "big"), pos + 5


def quicklist_nodes(p):
    """(container, LZF-compressed?) of every node in a type-18 payload."""
    assert p[0] == 18
    count, pos = read_len(p, 1)
    out = []
    for _ in range(count):
        container, pos = read_len(p, pos)
        if p[pos] == 0xC3:
            clen, pos = read_len(p, pos + 1)
            _, pos = read_len(p, pos)
            out.append((container, True))
        else:
            clen, pos = read_len(p, pos)
            out.append((container, False))
        pos += clen
    return out


def zset_state(z):
    """Member -> (score, sign): equality that tells -0.0 from 0.0."""
    return {m: (s, math.copysign(1.0, s)) for m, s in z.scores.items()}


def sid(ms, seq=0):
    return ms << 64 | seq


# -- CRC64, LZF ------------------------------------------------------------------------------------------

def test_crc64_check_value():
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA
    assert crc64(b"") == 0
    # Incremental use gives the same CRC as one pass.
    assert crc64(b"56789", crc64(b"1234")) == 0xE9C6D914C4B8D9CA


@given(st.binary(max_size=300), st.integers(0, (1 << 64) - 1))
@settings(max_examples=300, deadline=None)
def test_compiled_crc64_equals_the_reference(data, start):
    """keyspace/_crc64.c (slicing-by-8) gives what the pure-Python reference gives, from any starting crc and
    over every length (the 8-byte steps and the byte tail). pip install builds it where a C compiler is found,
    as on every CI machine: a missing module here means that build broke."""
    from durakv.keyspace import _crc64
    assert rdbvalue.CRC64_COMPILED and rdbvalue.crc64 is _crc64.crc64
    assert _crc64.crc64(data, start) == crc64_py(data, start)
    assert _crc64.crc64(bytearray(data)) == crc64_py(data)


def test_compiled_crc64_of_a_large_payload_with_the_gil_released():
    data = bytes(range(256)) * 4096 + b"tail"           # 1 MiB + 4: past the 64 KiB bound, an odd tail
    assert crc64(data) == crc64_py(data)


def test_lzf_literals_and_back_references():
    assert lzf_decompress(b"\x02abc", 3) == b"abc"
    # Literal "abc", then 6 bytes from distance 3 (overlapping its own output).
    assert lzf_decompress(b"\x02abc\x80\x02", 9) == b"abcabcabc"
    # A long back reference: length 7 + 3 + 2 = 12 from distance 1.
    assert lzf_decompress(b"\x00a\xe0\x03\x00", 13) == b"a" * 13
    # Non-overlapping copy from further back: "hello world" then "hello" again (distance 12).
    assert lzf_decompress(b"\x0bhello world \x60\x0b", 17) == b"hello world hello"
    assert lzf_decompress(b"", 0) == b""


@pytest.mark.parametrize("data,out_len", [
    (b"\x20\x00", 3),          # back reference before the start
    (b"\x05ab", 6),            # literal run past the input
    (b"\x02abc", 4),           # shorter than declared
    (b"\x02abc\x80\x02", 5),   # longer than declared
    (b"\x00a\xe0", 13),        # truncated long back reference
])
def test_lzf_rejects_malformed(data, out_len):
    with pytest.raises(RdbError):
        lzf_decompress(data, out_len)


# -- listpack ----------------------------------------------------------------------------------------------

LP_ENTRIES = [  # (hand-encoded entry with backlen, decoded value, the string that encodes to it)
    (b"\x05\x01", 5, b"5"),                                                  # 7-bit uint
    (b"\x7f\x01", 127, b"127"),
    (b"\x83abc\x04", b"abc", b"abc"),                                          # 6-bit string
    (b"\xdf\xff\x02", -1, b"-1"),                                              # 13-bit int
    (b"\xcf\xff\x02", 4095, b"4095"),
    (b"\xd0\x00\x02", -4096, b"-4096"),
    (b"\xe0\x64" + b"y" * 100 + b"\x66", b"y" * 100, b"y" * 100),              # 12-bit string
    (b"\xe0\xc8" + b"z" * 200 + b"\x01\xca", b"z" * 200, b"z" * 200),          # 2-byte backlen
    (b"\xf0\x88\x13\x00\x00" + b"w" * 5000 + b"\x27\x8d", b"w" * 5000, b"w" * 5000),  # 32-bit string
    (b"\xf1\x00\x80\x03", -32768, b"-32768"),                                  # 16-bit int
    (b"\xf2\xff\xff\x7f\x04", 8388607, b"8388607"),                            # 24-bit int
    (b"\xf3\x00\x00\x00\x80\x05", -2147483648, b"-2147483648"),                # 32-bit int
    (b"\xf4" + b"\xff" * 7 + b"\x7f\x09", 2 ** 63 - 1, b"9223372036854775807"),  # 64-bit int
    (b"\x81-\x02", b"-", b"-"),
    (b"\x82-0\x03", b"-0", b"-0"),                                             # not canonical: a string
    (b"\x83007\x04", b"007", b"007"),
    (b"\x80\x01", b"", b""),
]


def test_listpack_decodes_every_encoding():
    blob = lp(*[e for e, _, _ in LP_ENTRIES])
    assert listpack_decode(blob) == [v for _, v, _ in LP_ENTRIES]
    # The writer picks the same encodings as Valkey's lpAppend.
    assert listpack_encode([s for _, _, s in LP_ENTRIES]) == blob
    # Header count 65535 means "unknown": the entries are counted instead.
    assert listpack_decode(blob[:4] + b"\xff\xff" + blob[6:]) == [v for _, v, _ in LP_ENTRIES]


@pytest.mark.parametrize("blob", [
    lp(b"\x83abc\x05"),                     # wrong backlen
    lp(b"\x83abc\x04")[:4] + b"\x02\x00" + lp(b"\x83abc\x04")[6:],   # wrong count
    b"\x0c\x00\x00\x00\x01\x00\x83abc\x04",  # total bytes larger than the blob, no terminator
    lp(b"\x85abc\x04"),                     # string runs past the end
    lp(b"\xf5\x01"),                        # unknown encoding
    b"\x06\x00\x00\x00\x00\x00",            # shorter than header + terminator
])
def test_listpack_rejects_malformed(blob):
    with pytest.raises(RdbError):
        listpack_decode(blob)


@BOUNDED
@given(st.lists(st.one_of(st.binary(max_size=5000), st.integers(-2 ** 70, 2 ** 70).map(lambda i: b"%d" % i)),
                max_size=40))
def test_listpack_round_trip(items):
    decoded = listpack_decode(listpack_encode(items))
    assert [b"%d" % x if isinstance(x, int) else x for x in decoded] == items


# -- ziplist, intset, zipmap -------------------------------------------------------------------------

def test_ziplist_decodes_every_encoding():
    entries = [
        (b"\x03abc", b"abc"),                                          # 6-bit string
        (b"\x40\x41" + b"x" * 65, b"x" * 65),                           # 14-bit string
        (b"\x80\x00\x00\x01\x2c" + b"q" * 300, b"q" * 300),             # 32-bit string; next prevlen is 5 bytes
        (b"\xfe\x85", -123),                                           # int8
        (b"\xc0\x00\x80", -32768),                                     # int16
        (b"\xf0\xff\xff\x7f", 8388607),                                # int24
        (b"\xf0\x00\x00\x80", -8388608),
        (b"\xd0\x00\x00\x00\x80", -2147483648),                        # int32
        (b"\xe0" + (-2 ** 63).to_bytes(8, "little", signed=True), -2 ** 63),   # int64
        (b"\xf1", 0),                                                  # 4-bit immediates
        (b"\xfd", 12),
    ]
    assert ziplist_decode(zl(*[e for e, _ in entries])) == [v for _, v in entries]
    assert ziplist_decode(zl()) == []


def test_ziplist_rejects_malformed():
    good = zl(b"\x03abc", b"\xf2")
    assert ziplist_decode(good) == [b"abc", 1]
    bad_prevlen = good[:15] + b"\x04" + good[16:]
    bad_tail = good[:4] + (10).to_bytes(4, "little") + good[8:]
    bad_count = good[:8] + b"\x03\x00" + good[10:]
    for blob in (bad_prevlen, bad_tail, bad_count, good[:-1] + b"\x00", zl(b"\x05abc"), zl(b"\xf0\x01")[:-2]):
        with pytest.raises(RdbError):
            ziplist_decode(blob)


def test_intset_widths_and_checks():
    assert intset_decode(b"\x02\x00\x00\x00\x03\x00\x00\x00" + struct.pack("<3h", -5, 0, 7)) == [-5, 0, 7]
    assert intset_decode(b"\x04\x00\x00\x00\x02\x00\x00\x00" + struct.pack("<2i", -70000, 70000)) == [-70000, 70000]
    assert intset_decode(b"\x08\x00\x00\x00\x02\x00\x00\x00" + struct.pack("<2q", -2 ** 63, 2 ** 63 - 1)) == \
        [-2 ** 63, 2 ** 63 - 1]
    for blob in (b"\x02\x00\x00\x00\x02\x00\x00\x00" + struct.pack("<2h", 7, 3),   # not ascending
                 b"\x02\x00\x00\x00\x02\x00\x00\x00" + struct.pack("<2h", 3, 3),   # duplicate
                 b"\x02\x00\x00\x00\x00\x00\x00\x00",                              # empty
                 b"\x03\x00\x00\x00\x01\x00\x00\x00abc",                           # bad width
                 b"\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00"):                     # truncated
        with pytest.raises(RdbError):
            intset_decode(blob)


def test_zipmap():
    # The example in zipmap.c's header comment.
    assert zipmap_decode(b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff") == \
        [(b"foo", b"bar"), (b"hello", b"world")]
    # Free bytes after a value, and a 5-byte length.
    big = b"v" * 300
    blob = b"\x02\x01a\x02\x03xy\x00\x00\x00\x01b\xfe" + (300).to_bytes(4, "little") + b"\x00" + big + b"\xff"
    assert zipmap_decode(blob) == [(b"a", b"xy"), (b"b", big)]
    for bad in (b"\x00\xff", b"\x03\x03foo\x03\x00bar\xff", b"\x01\x03foo\x09\x00bar\xff", b"\x01\x03foo",
                b"\x01\x03foo\x03\x00bar\xff\x01a\xff"):
        with pytest.raises(RdbError):
            zipmap_decode(bad)


# -- every object type from hand-made payloads ------------------------------------------------------

def test_strings_all_encodings():
    assert load(payload(0, b"\xc0\xfb")) == b"-5"
    assert load(payload(0, b"\xc1\x00\x80")) == b"-32768"
    assert load(payload(0, b"\xc2\xff\xff\xff\x7f")) == b"2147483647"
    assert load(payload(0, b"\xc3\x05\x0d\x00a\xe0\x03\x00")) == b"a" * 13        # LZF
    assert load(payload(0, b"\x41\x00" + b"s" * 256)) == b"s" * 256                 # 14-bit length
    assert load(payload(0, b"\x80\x00\x00\x00\x03abc")) == b"abc"                   # 32-bit length
    assert load(payload(0, b"\x81" + (3).to_bytes(8, "big") + b"abc")) == b"abc"    # 64-bit length
    assert load(payload(0, b"\x00")) == b""


def test_legacy_list_set_hash_zset_types():
    assert load(payload(1, b"\x03" + raw(b"a") + b"\xc0\x05" + raw(b""))) == deque([b"a", b"5", b""])
    z = load(payload(3, b"\x04" + raw(b"a") + b"\x031.5" + raw(b"b") + b"\xfe" + raw(b"c") + b"\xff"
                     + raw(b"d") + b"\x02-0"))
    assert zset_state(z) == {b"a": (1.5, 1.0), b"b": (math.inf, 1.0), b"c": (-math.inf, -1.0), b"d": (0.0, -1.0)}
    assert [m for _, m in z.order] == [b"c", b"d", b"a", b"b"]
    zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff"
    assert load(payload(9, raw(zm))) == {b"foo": b"bar", b"hello": b"world"}
    assert load(payload(10, rdb_str(zl(b"\x03abc", b"\xfe\x85", b"\xfd")))) == deque([b"abc", b"-123", b"12"])
    intset = b"\x02\x00\x00\x00\x03\x00\x00\x00" + struct.pack("<3h", -5, 0, 7)
    assert load(payload(11, raw(intset))) == {b"-5", b"0", b"7"}
    z = load(payload(12, rdb_str(zl(b"\x02m1", b"\x031.5", b"\x02m2", b"\xf4", b"\x02m3", b"\x04-inf"))))
    assert z.scores == {b"m1": 1.5, b"m2": 3.0, b"m3": -math.inf}
    assert load(payload(13, rdb_str(zl(b"\x01f", b"\xfe\x07", b"\x01g", b"\x01v")))) == {b"f": b"7", b"g": b"v"}
    # Quicklist of ziplists; an empty ziplist node is skipped as Valkey does.
    body = b"\x03" + rdb_str(zl(b"\x01a", b"\x01b")) + rdb_str(zl()) + rdb_str(zl(b"\xf3"))
    assert load(payload(14, body)) == deque([b"a", b"b", b"2"])


def test_listpack_types():
    assert load(payload(16, rdb_str(listpack_encode([b"f", b"1", b"g", b"v"])))) == {b"f": b"1", b"g": b"v"}
    z = load(payload(17, rdb_str(listpack_encode([b"a", b"1", b"b", b"2.5", b"c", b"inf"]))))
    assert z.scores == {b"a": 1.0, b"b": 2.5, b"c": math.inf}
    assert load(payload(20, rdb_str(listpack_encode([b"x", b"12", b"-7"])))) == {b"x", b"12", b"-7"}
    # Quicklist 2: a plain node and a packed one.
    body = b"\x02" + b"\x01" + raw(b"plain") + b"\x02" + rdb_str(listpack_encode([b"a", b"9"]))
    assert load(payload(18, body)) == deque([b"plain", b"a", b"9"])


def test_payload_version_and_crc():
    p = dump(b"hello")
    assert verify(p)
    assert p[-10:-8] == b"\x0a\x00"
    assert not verify(p[:3] + b"X" + p[4:])
    assert not verify(p[:-1] + bytes((p[-1] ^ 1,)))
    assert not verify(p[:9])
    assert verify(payload(0, raw(b"x"), version=11)) and load(payload(0, raw(b"x"), version=11)) == b"x"
    assert not verify(payload(0, raw(b"x"), version=12))
    with pytest.raises(RdbError):
        load(payload(0, raw(b"x"), version=12))
    with pytest.raises(RdbError):
        load(b"\x00\x00" + b"\x00" * 7)


def _stream_body(pel_owner=True, group_pel=True, length=1, dup_group=False):
    """A type-19 stream with one entry 1-0 and one group holding it as pending (variants corrupt it)."""
    entries = listpack_encode([1, 0, 1, b"f", 0, 2, 0, 0, b"v", 4])
    body = b"\x01" + raw(sid(1).to_bytes(16, "big")) + rdb_str(entries)
    body += rdb_len(length) + b"\x01\x00" + b"\x01\x00" + b"\x00\x00" + b"\x01"
    group = raw(b"g") + b"\x01\x00" + b"\x01"
    group += (b"\x01" + sid(1).to_bytes(16, "big") + struct.pack("<q", 1000) + b"\x01") if group_pel else b"\x00"
    group += b"\x01" + raw(b"c") + struct.pack("<q", 1000)
    group += (b"\x01" + sid(1).to_bytes(16, "big")) if pel_owner else b"\x00"
    return body + (b"\x02" + group + group if dup_group else b"\x01" + group)


def test_hand_made_stream():
    s = load(payload(19, _stream_body()))
    assert s.entries == {sid(1): (b"f", b"v")} and s.entries_added == 1 and s.last_id == sid(1)
    g = s.groups[b"g"]
    assert g.last_id == sid(1) and g.entries_read == 1
    c = g.consumers[b"c"]
    assert c.seen_time == c.active_time == 1000
    assert g.pel.map[sid(1)] is c.pel.map[sid(1)] and c.pel.map[sid(1)].consumer is c


MALFORMED = {
    "truncated string": payload(0, b"\x05ab"),
    "trailing bytes": payload(0, raw(b"ab") + b"x"),
    "unknown type 8": payload(8, raw(b"ab")),
    "unknown type 22": payload(22, raw(b"ab")),
    "module type": payload(7, b"\x01\x00"),
    "pre-GA module type": payload(6, b"\x01\x00"),
    "unknown string encoding": payload(0, b"\xc4\x00"),
    "unknown length encoding": payload(0, b"\x82\x00"),
    "bad LZF": payload(0, b"\xc3\x02\x05\x01ab"),
    "empty list": payload(1, b"\x00"),
    "empty set": payload(2, b"\x00"),
    "empty hash": payload(4, b"\x00"),
    "empty zset": payload(5, b"\x00"),
    "empty quicklist": payload(18, b"\x00"),
    "quicklist of empty listpacks": payload(18, b"\x01\x02" + rdb_str(listpack_encode([]))),
    "empty quicklist node": payload(18, b"\x01\x02\x00"),
    "bad quicklist container": payload(18, b"\x01\x03" + rdb_str(listpack_encode([b"a"]))),
    "empty set listpack": payload(20, rdb_str(listpack_encode([]))),
    "empty hash listpack": payload(16, rdb_str(listpack_encode([]))),
    "empty ziplist list": payload(10, rdb_str(zl())),
    "empty intset": payload(11, raw(b"\x02\x00\x00\x00\x00\x00\x00\x00")),
    "duplicate set members": payload(2, b"\x02" + raw(b"a") + raw(b"a")),
    "duplicate set listpack members": payload(20, rdb_str(listpack_encode([b"1", b"1"]))),
    "duplicate intset members": payload(11, raw(b"\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00\x01\x00")),
    "duplicate hash fields": payload(4, b"\x02" + raw(b"f") + raw(b"1") + raw(b"f") + raw(b"2")),
    "duplicate hash listpack fields": payload(16, rdb_str(listpack_encode([b"f", b"1", b"f", b"2"]))),
    "duplicate hash ziplist fields": payload(13, rdb_str(zl(b"\x01f", b"\x01a", b"\x01f", b"\x01b"))),
    "duplicate zipmap fields": payload(9, raw(b"\x02\x01f\x01\x00a\x01f\x01\x00b\xff")),
    "odd hash listpack": payload(16, rdb_str(listpack_encode([b"f", b"1", b"g"]))),
    "duplicate zset members": payload(5, b"\x02" + (raw(b"m") + struct.pack("<d", 1.0)) * 2),
    "NaN binary score": payload(5, b"\x01" + raw(b"m") + struct.pack("<d", math.nan)),
    "NaN text score": payload(3, b"\x01" + raw(b"m") + b"\xfd"),
    "NaN listpack score": payload(17, rdb_str(listpack_encode([b"m", b"nan"]))),
    "bad text score": payload(3, b"\x01" + raw(b"m") + b"\x03abc"),
    "bad listpack": payload(16, rdb_str(lp(b"\x81f\x03", b"\x81v\x02"))),
    "bad ziplist": payload(10, rdb_str(zl(b"\x03abc")[:-1] + b"\x00")),
    "bad intset": payload(11, raw(b"\x03\x00\x00\x00\x01\x00\x00\x00abc")),
    "consumer PEL entry not in group PEL": payload(19, _stream_body(group_pel=False)),
    "group PEL entry without consumer": payload(19, _stream_body(pel_owner=False)),
    "stream length mismatch": payload(19, _stream_body(length=2)),
    "duplicate consumer group": payload(19, _stream_body(dup_group=True)),
    "truncated stream": payload(19, _stream_body()[:-3]),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_payloads_raise(name):
    p = MALFORMED[name]
    assert verify(p)  # well-formed footers: load itself must find the fault
    with pytest.raises(RdbError):
        load(p)


def test_empty_collections_have_no_payload():
    for v in (deque(), set(), {}, ZSet()):
        with pytest.raises(RdbError):
            dump(v)


# -- round trips -------------------------------------------------------------------------------------

INT_EDGES = [b"0", b"-1", b"127", b"128", b"-128", b"-129", b"32767", b"32768", b"-32768", b"-32769",
             b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"9223372036854775807",
             b"-9223372036854775808", b"9223372036854775808", b"-9223372036854775809",
             b"18446744073709551615", b"007", b"-0", b"+1", b" 1", b"1 ", b"1.0", b"", b"-"]


@pytest.mark.parametrize("s", INT_EDGES)
def test_integer_like_strings(s):
    p = dump(s)
    assert load(p) == s
    # Valkey's rdbTryIntegerEncoding: canonical decimals of 32-bit ints use RDB_ENC_INT8/16/32.
    if s in (b"0", b"-1", b"127", b"-128"):
        assert p[1] == 0xC0
    elif s in (b"128", b"-129", b"32767", b"-32768"):
        assert p[1] == 0xC1
    elif s in (b"32768", b"-32769", b"2147483647", b"-2147483648"):
        assert p[1] == 0xC2
    else:
        assert p[1:2 + len(s)] == bytes((len(s),)) + s
    # As list elements and hash values they go through the listpack's integer encodings too.
    assert load(dump(deque([s, b"x"]))) == deque([s, b"x"])
    assert load(dump({s: s})) == {s: s}


ELEMENT = st.one_of(st.binary(max_size=80), st.integers(-2 ** 65, 2 ** 65).map(lambda i: b"%d" % i),
                    st.sampled_from(INT_EDGES))


@BOUNDED
@given(ELEMENT)
def test_round_trip_strings(v):
    assert load(dump(v)) == v


@BOUNDED
@given(st.lists(ELEMENT, min_size=1, max_size=60))
def test_round_trip_lists(items):
    assert load(dump(deque(items))) == deque(items)


@BOUNDED
@given(st.sets(ELEMENT, min_size=1, max_size=60))
def test_round_trip_sets(items):
    assert load(dump(items)) == items


@BOUNDED
@given(st.dictionaries(ELEMENT, ELEMENT, min_size=1, max_size=40))
def test_round_trip_hashes(d):
    assert load(dump(d)) == d


@BOUNDED
@given(st.dictionaries(ELEMENT, st.one_of(st.floats(allow_nan=False), st.sampled_from([-0.0, 0.0, math.inf,
                                                                                      -math.inf])),
                       min_size=1, max_size=40))
def test_round_trip_zsets(scores):
    z = ZSet.from_scores(dict(scores))
    back = load(dump(z))
    assert isinstance(back, ZSet) and zset_state(back) == zset_state(z) and back.order == z.order


def test_round_trip_large_values():
    rnd = random.Random(7)
    big = rnd.randbytes(100 * 1024)
    assert load(dump(big)) == big
    lst = deque(b"e%d" % i if i % 3 else rnd.randbytes(rnd.randrange(30)) for i in range(5000))
    p = dump(lst)
    assert load(p) == lst
    nodes = quicklist_nodes(p)
    assert len(nodes) > 5 and all(c == 2 for c, _ in nodes)
    lst = deque([big, b"small", big])  # elements over the node limit get a node each
    assert load(dump(lst)) == lst and len(quicklist_nodes(dump(lst))) == 3
    members = {b"m%d" % i for i in range(5000)}
    assert load(dump(members)) == members
    h = {b"f%d" % i: b"%d" % (i * 7) for i in range(5000)}
    assert load(dump(h)) == h
    z = ZSet.from_scores({b"m%d" % i: i / 3 for i in range(5000)})
    z.add(b"lo", -math.inf)
    z.add(b"hi", math.inf)
    z.add(b"nz", -0.0)
    assert zset_state(load(dump(z))) == zset_state(z)


def build_stream(data):
    """A stream made through durakv's Stream API from hypothesis data: entries in several node layouts,
    XDELs, trims, groups with PELs (some pointing at deleted entries) and consumers."""
    s = Stream()
    node_max = data.draw(st.sampled_from([0, 3, 10, 100]))
    ms, seq, ids = 0, 0, []
    for _ in range(data.draw(st.integers(0, 80))):
        if data.draw(st.booleans()):
            ms += data.draw(st.integers(1, 2 ** 20))
            seq = data.draw(st.integers(0, 3))
        else:
            seq += data.draw(st.integers(1, 3))
        nfields = data.draw(st.integers(1, 3))
        names = data.draw(st.sampled_from([(b"f",), (b"f", b"g"), (b"1", b"name", b"")]))[:nfields]
        fields = tuple(x for n in names for x in (n, data.draw(ELEMENT)))
        s.append(sid(ms, seq), fields, node_max_entries=node_max)
        ids.append(sid(ms, seq))
    for i in data.draw(st.lists(st.sampled_from(ids), max_size=20)) if ids else ():
        s.delete(i)
    if ids and data.draw(st.booleans()):
        s.trim(TRIM_MAXLEN, maxlen=data.draw(st.integers(0, len(s))), approx=data.draw(st.booleans()))
    for name in sorted(data.draw(st.sets(st.binary(min_size=1, max_size=4), max_size=3))):
        last = data.draw(st.sampled_from(ids + [0]))
        g = s.create_group(name, last, data.draw(st.sampled_from([INVALID_ENTRIES_READ, 0, 3, 2 ** 40])))
        consumers = []
        for cname in sorted(data.draw(st.sets(st.binary(max_size=4), max_size=3))):
            c = g.create_consumer(cname, data.draw(st.integers(0, 2 ** 42)))
            c.active_time = data.draw(st.sampled_from([-1, c.seen_time, 2 ** 42 + 1]))
            consumers.append(c)
        if consumers and ids:
            for i in sorted(data.draw(st.sets(st.sampled_from(ids), max_size=10))):
                c = data.draw(st.sampled_from(consumers))
                nack = Nack(c, data.draw(st.integers(-1, 2 ** 42)), data.draw(st.integers(0, 2 ** 33)))
                g.pel.add(i, nack)
                c.pel.add(i, nack)
    return s


def check_stream_round_trip(s):
    back = load(dump(s))
    assert back == s
    assert back.first_id == s.first_id
    assert [(n.first, n.live, tuple(n.fields)) for n in back.nodes] == \
        [(n.first, n.live, tuple(n.fields)) for n in s.nodes]
    for name, g in (s.groups or {}).items():
        for cname, c in g.consumers.items():
            c2 = back.groups[name].consumers[cname]
            # a stream whose active-times differ from the seen-times goes in RDB 11 (STREAM_LISTPACKS_3)
            assert c2.seen_time == c.seen_time and c2.active_time == c.active_time
        for i in g.pel.keys:
            assert back.groups[name].pel.map[i] is back.groups[name].consumers[g.pel.map[i].consumer.name].pel.map[i]
    return back


@BOUNDED
@given(st.data())
def test_round_trip_streams(data):
    check_stream_round_trip(build_stream(data))


def test_round_trip_large_stream():
    s = Stream()
    for k in range(5000):
        s.append(sid(1000 + k // 3, k % 3), (b"f", b"%d" % k, b"payload", b"x" * (k % 50)))
    for k in range(0, 5000, 7):
        s.delete(sid(1000 + k // 3, k % 3))
    s.trim(TRIM_MAXLEN, maxlen=4000)
    g = s.create_group(b"g", s.last_id, s.entries_added)
    c = g.create_consumer(b"c", 5)
    for i in s.ids.head_ids(500):
        n = Nack(c, 7, 2)
        g.pel.add(i, n)
        c.pel.add(i, n)
    back = check_stream_round_trip(s)
    assert len(back.nodes) == len(s.nodes) > 40


def test_stream_without_node_model_is_chunked():
    s = Stream()
    for k in range(250):
        s.append(sid(k + 1), (b"f", b"v"))
    s.nodes, s.node_firsts = [], []  # as if built without the node model
    back = load(dump(s))
    assert back == s and [n.live for n in back.nodes] == [100, 100, 50]


def test_seq_deltas_below_the_master_id():
    # Valkey stores entry ids as (ms, seq) deltas from the node's master id: seq deltas go negative.
    s = Stream()
    s.append(sid(5, 2 ** 64 - 1), (b"f", b"a"))
    s.append(sid(6, 0), (b"f", b"b"))
    s.append(sid(2 ** 64 - 1, 3), (b"g", b"c"))
    assert check_stream_round_trip(s).ids.to_list() == [sid(5, 2 ** 64 - 1), sid(6, 0), sid(2 ** 64 - 1, 3)]


# -- the legacy stream payloads of Valkey's tests/unit/type/stream-cgroups.tcl ----------------------

# "Loading from legacy (Redis <= v6.2.x, rdb_ver < 10) persistence": DUMPed from Redis 5 after
# XADD x 1-0..6-0 data a..f, XDEL x 3-0, XGROUP CREATE x g1 0, XGROUP CREATE x g2 0,
# XREADGROUP GROUP g1 c11 COUNT 4 STREAMS x >, XTRIM x MAXLEN = 2.
LEGACY_V1 = (
    b"\x0F\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\xC3\x40\x4A\x40\x57"
    b"\x16\x57\x00\x00\x00\x23\x00\x02\x01\x04\x01\x01\x01\x84\x64\x61\x74\x61\x05\x00\x01\x03\x01\x00"
    b"\x20\x01\x03\x81\x61\x02\x04\x20\x0A\x00\x01\x40\x0A\x00\x62\x60\x0A\x00\x02\x40\x0A\x00\x63\x60"
    b"\x0A\x40\x22\x01\x81\x64\x20\x0A\x40\x39\x20\x0A\x00\x65\x60\x0A\x00\x05\x40\x0A\x00\x66\x20\x0A"
    b"\x00\xFF\x02\x06\x00\x02\x02\x67\x31\x05\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00"
    b"\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00"
    b"\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00"
    b"\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00"
    b"\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x01\x03\x63\x31\x31\x3E\xF7\x83"
    b"\x43\x7A\x01\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00"
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x02\x67"
    b"\x32\x00\x00\x00\x00\x09\x00\x3D\x52\xEF\x68\x67\x52\x1D\xFA"
)
# "Loading from legacy (Redis <= v7.0.x, rdb_ver < 11) persistence": DUMPed from Redis 7.0 after
# XGROUP CREATE x g $ MKSTREAM, XADD x 1-1 f v, XREADGROUP GROUP g Alice STREAMS x >.
LEGACY_V2 = (
    b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x1D\x1D\x00\x00\x00"
    b"\x0A\x00\x01\x01\x00\x01\x01\x01\x81\x66\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81\x76\x02\x04\x01"
    b"\xFF\x01\x01\x01\x01\x01\x00\x00\x01\x01\x01\x67\x01\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x01"
    b"\x00\x00\x00\x00\x00\x00\x00\x01\xF5\x5A\x71\xC7\x84\x01\x00\x00\x01\x01\x05\x41\x6C\x69\x63\x65"
    b"\xF5\x5A\x71\xC7\x84\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"
    b"\x01\x0B\x00\xA7\xA9\x14\xA5\x27\xFF\x9B\x9B"
)


def test_legacy_stream_payloads():
    assert verify(LEGACY_V1) and verify(LEGACY_V2)
    s = load(LEGACY_V1)
    # The TCL test's assertions on XINFO STREAM FULL.
    assert s.max_deleted_id == 0
    assert s.entries_added == 2
    g1, g2 = s.groups[b"g1"], s.groups[b"g2"]
    assert (g1.entries_read, s.group_lag(g1)) == (1, 1)
    assert (g2.entries_read, s.group_lag(g2)) == (0, 2)
    # What the payload holds besides: two live entries in one listpack of six, c11's four pending ids.
    assert s.entries == {sid(5): (b"data", b"e"), sid(6): (b"data", b"f")}
    assert [(n.first, n.live, n.total) for n in s.nodes] == [(sid(1), 2, 6)]
    assert g1.last_id == sid(5) and g1.pel.keys.to_list() == [sid(1), sid(2), sid(4), sid(5)]
    assert list(g1.consumers) == [b"c11"] and len(g1.consumers[b"c11"].pel) == 4

    s = load(LEGACY_V2)
    c = s.groups[b"g"].consumers[b"Alice"]
    assert c.seen_time == c.active_time
    assert s.entries == {sid(1, 1): (b"f", b"v")} and s.groups[b"g"].entries_read == 1
    check_stream_round_trip(s)


# -- against real servers --------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RealServer:
    def __init__(self, kind, binary, data_dir):
        self.kind = kind
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(data_dir), "--daemonize", "no", "--enable-debug-command", "yes",
             # RESTORE then checks payloads as deeply as Valkey can (listpack entries, duplicates).
             "--sanitize-dump-payload", "yes", "--logfile", str(data_dir / "server.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.client = valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=10)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except valkey.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.02)

    def stop(self):
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# redis-server everywhere (CI installs it); Valkey 8.0.1 as a second reference where it is built
@pytest.fixture(scope="module", params=["redis"] + (["valkey"] if os.path.exists(VALKEY_SERVER) else []))
def server(request, tmp_path_factory):
    if request.param == "valkey":
        binary = VALKEY_SERVER
    else:
        binary = shutil.which("redis-server")
        assert binary, "redis-server must be on PATH (scripts/test.sh installs it)"
    srv = RealServer(request.param, binary, tmp_path_factory.mktemp(request.param))
    yield srv
    srv.stop()


@pytest.fixture
def c(server):
    server.client.flushall()
    return server.client


def exchange(c, key):
    """DUMPs key, loads it, RESTOREs dump() of the loaded value next to it, checks both digests agree;
    returns (loaded value, the restored copy's DUMP loaded again, the copy's key)."""
    original = c.dump(key)
    assert verify(original)
    value = load(original)
    copy = key + b":copy"
    c.restore(copy, 0, dump(value))
    digests = c.execute_command("DEBUG", "DIGEST-VALUE", key, copy)
    assert digests[0] == digests[1]
    return value, load(c.dump(copy)), copy


def test_server_strings(c):
    rnd = random.Random(3)
    values = {b"small": b"12", b"neg": b"-32768", b"int32": b"2147483647", b"int64": b"9223372036854775807",
              b"zeros": b"007", b"empty": b"", b"binary": bytes(range(256)), b"lzf": b"a" * 1000,
              b"big": rnd.randbytes(100 * 1024), b"text": b"hello world " * 300}
    for key, v in values.items():
        c.set(key, v)
    assert c.dump(b"lzf")[1] == 0xC3  # the server LZF-compressed it, so load() decompressed it
    assert c.dump(b"small")[1] == 0xC0
    for key, v in values.items():
        value, again, copy = exchange(c, key)
        assert value == v == again == c.get(copy)


def test_server_lists(c, server):
    c.rpush(b"small", b"a", b"1", b"-70000", b"")
    c.rpush(b"big", *[b"e%d" % i if i % 2 else b"%d" % (i * 1000003) for i in range(5000)])
    c.config_set("list-compress-depth", 1)
    c.rpush(b"compressed", *[b"item-%d-%s" % (i, b"z" * (i % 40)) for i in range(3000)])
    c.config_set("list-compress-depth", 0)
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100")
    # Past 8 KB the list is a quicklist on Valkey too; past the threshold its elements get plain nodes.
    c.rpush(b"plain", b"x" * 9000, b"small", b"y" * 300)
    c.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "0")
    # Redis 7.0 has no listpack-encoded lists yet; its quicklists are dumped the same way.
    assert c.object("encoding", b"small") == (b"listpack" if server.kind == "valkey" else b"quicklist")
    assert c.object("encoding", b"big") == b"quicklist"
    assert len(quicklist_nodes(c.dump(b"big"))) > 3
    assert any(lzf for _, lzf in quicklist_nodes(c.dump(b"compressed")))
    assert any(container == 1 for container, _ in quicklist_nodes(c.dump(b"plain")))
    for key in (b"small", b"big", b"compressed", b"plain"):
        value, again, copy = exchange(c, key)
        assert list(value) == c.lrange(key, 0, -1) == list(again) == c.lrange(copy, 0, -1)


def test_server_sets(c, server):
    c.sadd(b"intset", *range(-5, 10))
    c.sadd(b"intset64", -2 ** 63, 2 ** 63 - 1, 0)
    c.sadd(b"bigints", *range(600))
    c.sadd(b"small", b"a", b"b", b"12", b"")
    c.sadd(b"big", *[b"member-%d" % i for i in range(1000)])
    c.sadd(b"long", b"x" * 100, b"y")
    types = {key: c.dump(key)[0] for key in (b"intset", b"intset64", b"bigints", b"small", b"big", b"long")}
    assert types[b"intset"] == types[b"intset64"] == 11 and types[b"bigints"] == types[b"big"] == 2
    assert types[b"small"] == (20 if server.kind == "valkey" else 2)
    for key in types:
        value, again, copy = exchange(c, key)
        assert value == set(c.smembers(key)) == again == set(c.smembers(copy))


def test_server_hashes(c):
    c.hset(b"small", mapping={b"f": b"1", b"g": b"v", b"-5": b"", b"": b"e"})
    c.hset(b"big", mapping={b"field-%d" % i: b"%d" % (i * 31) for i in range(1000)})
    c.hset(b"long", mapping={b"f": b"v" * 100, b"g": b"1"})
    assert [c.dump(k)[0] for k in (b"small", b"big", b"long")] == [16, 4, 4]
    for key in (b"small", b"big", b"long"):
        value, again, copy = exchange(c, key)
        assert value == c.hgetall(key) == again == c.hgetall(copy)


def test_server_zsets(c):
    c.zadd(b"small", {b"a": 1.5, b"b": -2, b"c": 0, b"d": 1e300, b"e": 1 / 3})
    c.zadd(b"big", {b"m%d" % i: (i * 7919 % 1000) / 7 for i in range(500)})
    c.zadd(b"inf", {b"lo": float("-inf"), b"hi": float("inf"), b"mid": 2.5})
    c.execute_command("ZADD", b"zero", b"-0", b"z", b"0.1", b"y")
    c.zadd(b"longmember", {b"m" * 100: 1, b"n": 2})
    assert [c.dump(k)[0] for k in (b"small", b"big", b"inf", b"longmember")] == [17, 5, 17, 5]
    for key in (b"small", b"big", b"inf", b"zero", b"longmember"):
        value, again, copy = exchange(c, key)
        server_view = [(m, float(s)) for m, s in c.zrange(key, 0, -1, withscores=True)]
        assert [(m, s) for s, m in value.order] == server_view
        assert zset_state(again) == zset_state(value)
        assert c.zrange(copy, 0, -1, withscores=True) == c.zrange(key, 0, -1, withscores=True)


def _as_dict(flat):
    return dict(zip(flat[0::2], flat[1::2]))


def server_xinfo(c, key):
    """XINFO STREAM key FULL as nested dicts, without radix-tree-nodes (not part of durakv's model)."""
    info = _as_dict(c.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0"))
    info.pop(b"radix-tree-nodes")
    info[b"entries"] = [[i, list(f)] for i, f in info[b"entries"]]
    groups = []
    for g in info[b"groups"]:
        g = _as_dict(g)
        g[b"consumers"] = [_as_dict(x) for x in g[b"consumers"]]
        groups.append(g)
    info[b"groups"] = groups
    return info


def durakv_xinfo(s, with_active_time):
    """The same reply built from a loaded Stream, the way durakv's XINFO STREAM FULL builds it."""
    groups = []
    for name in sorted(s.groups or {}):
        g = s.groups[name]
        consumers = []
        for cname in sorted(g.consumers):
            cons = g.consumers[cname]
            d = {b"name": cname, b"seen-time": cons.seen_time}
            if with_active_time:
                d[b"active-time"] = cons.active_time
            d[b"pel-count"] = len(cons.pel)
            d[b"pending"] = [[id_bytes(i), cons.pel.map[i].delivery_time, cons.pel.map[i].delivery_count]
                             for i in cons.pel.keys]
            consumers.append(d)
        groups.append({
            b"name": name, b"last-delivered-id": id_bytes(g.last_id),
            b"entries-read": None if g.entries_read == INVALID_ENTRIES_READ else g.entries_read,
            b"lag": s.group_lag(g), b"pel-count": len(g.pel),
            b"pending": [[id_bytes(i), g.pel.map[i].consumer.name, g.pel.map[i].delivery_time,
                          g.pel.map[i].delivery_count] for i in g.pel.keys],
            b"consumers": consumers})
    return {b"length": len(s), b"radix-tree-keys": len(s.nodes), b"last-generated-id": id_bytes(s.last_id),
            b"max-deleted-entry-id": id_bytes(s.max_deleted_id), b"entries-added": s.entries_added,
            b"recorded-first-entry-id": id_bytes(s.first_id),
            b"entries": [[id_bytes(i), list(s.entries[i])] for i in s.ids], b"groups": groups}


def without_active_time(info):
    for g in info[b"groups"]:
        for cons in g[b"consumers"]:
            cons.pop(b"active-time", None)
    return info


def check_stream_key(c, key):
    """The loaded stream shows what the server shows; its dump() restores to the same stream."""
    value, again, copy = exchange(c, key)
    shown = server_xinfo(c, key)
    has_active = any(b"active-time" in cons for g in shown[b"groups"] for cons in g[b"consumers"])
    assert durakv_xinfo(value, has_active) == shown
    assert c.xrange(key) == [(id_bytes(i), dict(zip(value.entries[i][0::2], value.entries[i][1::2])))
                             for i in value.ids]
    # The restored copy: same state, except that RDB 10 carries no active-time (restored = seen-time).
    restored = server_xinfo(c, copy)
    for g in restored[b"groups"]:
        for cons in g[b"consumers"]:
            assert cons.get(b"active-time", cons[b"seen-time"]) == cons[b"seen-time"]
    assert without_active_time(restored) == without_active_time(server_xinfo(c, key))
    assert again == value
    for name in value.groups or {}:
        assert c.xpending(key, name) == c.xpending(copy, name)
        pel = value.groups[name].pel
        details = [[(d["message_id"], d["consumer"], d["times_delivered"])
                    for d in c.xpending_range(k, name, "-", "+", 1000)] for k in (key, copy)]
        assert details[0] == details[1] == [(id_bytes(i), pel.map[i].consumer.name, pel.map[i].delivery_count)
                                            for i in pel.keys]
        # Reading on from the group gives the same entries and counters on both.
        orig_read, copy_read = (c.xreadgroup(name, b"reader", {k: b">"}, count=3) for k in (key, copy))
        assert (orig_read[0][1] if orig_read else None) == (copy_read[0][1] if copy_read else None)
        xinfo = [server_xinfo(c, k) for k in (key, copy)]
        for g_orig, g_copy in zip(*(x[b"groups"] for x in xinfo)):
            for field in (b"last-delivered-id", b"entries-read", b"lag", b"pel-count"):
                assert g_orig[field] == g_copy[field]
    return value


def _xid(i):
    # Four entries a millisecond; every other millisecond's last one has a 41-bit sequence number.
    return b"%d-%d" % (i // 4 + 1, 2 ** 40 if i % 8 == 7 else i % 4)


def test_server_streams(c):
    c.config_set("stream-node-max-entries", 10)
    for i in range(1, 60):
        fields = {b"f": i, b"g": b"v" * (i % 5)} if i % 7 else {b"other": b"x", b"n": -i}
        c.xadd(b"x", fields, id=_xid(i))
    c.xdel(b"x", _xid(5), _xid(14), _xid(22))      # tombstones inside nodes
    c.xdel(b"x", *[_xid(i) for i in range(31, 39)])
    c.xgroup_create(b"x", b"g1", id=b"0")
    c.xgroup_create(b"x", b"g2", id=b"$")
    c.execute_command("XGROUP", "CREATE", b"x", b"g3", b"5-0", "ENTRIESREAD", 17)
    c.xreadgroup(b"g1", b"alice", {b"x": b">"}, count=6)
    c.xreadgroup(b"g1", b"bob", {b"x": b">"}, count=4)
    c.xreadgroup(b"g3", b"carol", {b"x": b">"}, count=2)
    c.execute_command("XCLAIM", b"x", b"g1", b"bob", 0, _xid(1), _xid(2), "RETRYCOUNT", 5, "TIME", 1700000000000)
    c.xack(b"x", b"g1", _xid(3))
    c.xdel(b"x", _xid(4))                            # pending for alice, now deleted
    c.execute_command("XGROUP", "CREATECONSUMER", b"x", b"g1", b"dave")
    c.execute_command("XTRIM", b"x", "MAXLEN", "=", 45)   # marks the head node's entries deleted
    c.execute_command("XTRIM", b"x", "MAXLEN", "~", 30)   # drops whole nodes
    # An empty stream with a group, and a stream whose entries were all deleted.
    c.execute_command("XGROUP", "CREATE", b"empty", b"g", b"$", "MKSTREAM")
    c.xadd(b"gone", {b"a": b"1"}, id=b"7-0")
    c.xadd(b"gone", {b"a": b"2"}, id=b"8-0")
    c.xdel(b"gone", b"7-0", b"8-0")
    # Many entries and fields, node split by size.
    c.config_set("stream-node-max-entries", 100)
    for i in range(800):
        c.xadd(b"big", {b"field": b"%d" % i, b"payload": b"p" * (i % 90)})
    s = check_stream_key(c, b"x")
    assert len(s.nodes) >= 3 and any(n.total > n.live for n in s.nodes)
    assert s.max_deleted_id and len(s.groups[b"g1"].pel) >= 8
    assert check_stream_key(c, b"empty").groups[b"g"].last_id == 0
    assert check_stream_key(c, b"gone").entries_added == 2
    assert len(check_stream_key(c, b"big").nodes) > 8

    # The loaded node model goes on as the server's radix tree: XADDs split nodes at the same entries
    # (by count and by bytes, tombstones counted), approximate trims drop the same nodes.
    c.config_set("stream-node-max-entries", 10)
    s = load(c.dump(b"x"))
    for k in range(1, 40):
        fields = (b"f", b"%d" % k, b"pad", b"p" * (k * 397 % 1500))
        c.xadd(b"x", dict(zip(fields[0::2], fields[1::2])), id=id_bytes(sid(100 + k)))
        s.append(sid(100 + k), fields, node_max_bytes=4096, node_max_entries=10)
        assert server_xinfo(c, b"x")[b"radix-tree-keys"] == len(s.nodes)
    c.execute_command("XTRIM", b"x", "MAXLEN", "~", 25)
    s.trim(TRIM_MAXLEN, maxlen=25, approx=True)
    shown = server_xinfo(c, b"x")
    assert durakv_xinfo(s, any(b"active-time" in x for g in shown[b"groups"] for x in g[b"consumers"])) == shown


def test_server_legacy_stream_payloads(c):
    c.set(b"probe", b"1")
    server_rdb_version = int.from_bytes(c.dump(b"probe")[-10:-8], "little")
    for key, p in ((b"v1", LEGACY_V1), (b"v2", LEGACY_V2)):
        if int.from_bytes(p[-10:-8], "little") > server_rdb_version:
            # Redis 7.0 (RDB 10) refuses LEGACY_V2's footer (RDB 11), as verify() would with its limit.
            with pytest.raises(valkey.exceptions.ResponseError, match="version or checksum"):
                c.restore(key, 0, p)
            continue
        c.restore(key, 0, p)
        check_stream_key(c, key)
