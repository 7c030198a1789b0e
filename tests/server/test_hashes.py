"""Hash commands against a real server (valkey-py, RESP2 and RESP3), exact wire shapes, and effect
determinism (journal replay)."""

import random

import pytest

from helpers.replay import execute, make_pipeline
from durakv.commands.numeric import format_long_double_human, parse_long_double, round_long_double
from durakv.commands.session import Session
from durakv.keyspace import Keyspace
from helpers.replay import run_and_replay

# -- helpers (also used by test_sets) -----------------------------------------------------------


from helpers.wire import err, is_resp3, raw, wire  # noqa: F401

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


def local():
    """A pipeline on a fresh keyspace, for tests that look at internal state."""
    ks = Keyspace(clock_ms=lambda: 1_700_000_000_000, rng=random.Random(7))
    d = make_pipeline(ks)
    s = Session()

    def run(*args):
        reply, _eff, _cmd = execute(d, s, [a if isinstance(a, bytes) else str(a).encode() for a in args])
        return reply
    return ks, run


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NULL_BULK = {False: b"$-1\r\n", True: b"_\r\n"}


# -- HSET / HMSET / HSETNX / HGET / HMGET ---------------------------------------------------------


def test_hset_counts_new_fields(rr):
    assert rr.hset("h", "a", "1") == 1
    assert rr.hset("h", "a", "2") == 0
    assert raw(rr, "HSET", "h", "b", "1", "c", "2", "a", "3") == 2
    assert raw(rr, "HSET", "h", "d", "1", "d", "2") == 1  # a field repeated in one call
    assert rr.hgetall("h") == {b"a": b"3", b"b": b"1", b"c": b"2", b"d": b"2"}
    assert wire(rr, "HSET", "h", "e", "1") == b":1\r\n"


def test_hmset_replies_ok(rr):
    assert wire(rr, "HMSET", "h", "a", "1", "b", "2") == b"+OK\r\n"
    assert rr.hmget("h", "a", "b") == [b"1", b"2"]


def test_hset_odd_arguments(rr):
    assert err(rr, "HSET", "h", "a", "1", "b") == "wrong number of arguments for 'hset' command"
    assert err(rr, "HMSET", "h", "a", "1", "b") == "wrong number of arguments for 'hmset' command"
    assert err(rr, "HSET", "h", "a") == "wrong number of arguments for 'hset' command"
    assert rr.exists("h") == 0


def test_hsetnx(rr):
    assert rr.hsetnx("h", "f", "1") == 1
    assert rr.hsetnx("h", "f", "2") == 0
    assert rr.hget("h", "f") == b"1"
    assert raw(rr, "HSETNX", "h", "g", "3") == 1
    assert rr.hlen("h") == 2


def test_hget_hmget_missing(rr):
    assert rr.hget("nokey", "f") is None
    assert wire(rr, "HGET", "nokey", "f") == NULL_BULK[is_resp3(rr)]
    rr.hset("h", "a", "1")
    assert rr.hget("h", "zz") is None
    assert rr.hmget("h", "a", "zz", "a") == [b"1", None, b"1"]
    assert rr.hmget("nokey", "a", "b") == [None, None]
    null = NULL_BULK[is_resp3(rr)]
    assert wire(rr, "HMGET", "h", "zz", "a") == b"*2\r\n" + null + b"$1\r\n1\r\n"


def test_binary_fields_and_values(r):
    field, value = b"\x00\xff\r\n f", b"\r\n\x00" * 100
    assert r.hset("h", field, value) == 1
    assert r.hget("h", field) == value
    assert r.hstrlen("h", field) == 300
    assert r.hgetall("h") == {field: value}


# -- HDEL / HLEN / HSTRLEN / HEXISTS ----------------------------------------------------------------


def test_hdel_counts_and_deletes_empty_key(rr):
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert rr.hdel("h", "a", "zz", "a") == 1
    assert rr.hdel("nokey", "a") == 0
    assert rr.hdel("h", "zz") == 0
    assert rr.hlen("h") == 2
    assert rr.hdel("h", "b", "c") == 2
    assert rr.exists("h") == 0
    assert rr.hlen("h") == 0
    assert rr.hgetall("h") == {}


def test_hlen_hstrlen_hexists(rr):
    assert rr.hlen("h") == 0
    assert rr.hstrlen("h", "a") == 0
    assert rr.hexists("h", "a") is False
    rr.hset("h", mapping={"a": "hello", "n": "12345"})
    assert rr.hlen("h") == 2
    assert rr.hstrlen("h", "a") == 5
    assert rr.hstrlen("h", "n") == 5
    assert rr.hstrlen("h", "zz") == 0
    assert raw(rr, "HEXISTS", "h", "a") == 1
    assert raw(rr, "HEXISTS", "h", "zz") == 0


# -- HKEYS / HVALS / HGETALL -------------------------------------------------------------------------


def test_hkeys_hvals_hgetall(rr):
    fields = {f"f{i}".encode(): f"v{i}".encode() for i in range(50)}
    rr.hset("h", mapping=fields)
    assert sorted(rr.hkeys("h")) == sorted(fields)
    assert sorted(rr.hvals("h")) == sorted(fields.values())
    assert rr.hgetall("h") == fields
    # keys and values come in the same order
    assert dict(zip(rr.hkeys("h"), rr.hvals("h"))) == fields


def test_hgetall_shapes(rr):
    resp3 = is_resp3(rr)
    assert wire(rr, "HGETALL", "nokey") == (b"%0\r\n" if resp3 else b"*0\r\n")
    assert wire(rr, "HKEYS", "nokey") == b"*0\r\n"
    assert wire(rr, "HVALS", "nokey") == b"*0\r\n"
    rr.hset("h", "a", "1")
    assert wire(rr, "HGETALL", "h") == (b"%1\r\n" if resp3 else b"*2\r\n") + b"$1\r\na\r\n$1\r\n1\r\n"
    assert wire(rr, "HKEYS", "h") == b"*1\r\n$1\r\na\r\n"
    assert wire(rr, "HVALS", "h") == b"*1\r\n$1\r\n1\r\n"


def test_hgetall_in_multi_sees_state_at_its_turn(r):
    r.hset("h", "a", "1")
    pipe = r.pipeline(transaction=True)
    pipe.hgetall("h")
    pipe.hset("h", "b", "2")
    pipe.hgetall("h")
    assert pipe.execute() == [{b"a": b"1"}, 1, {b"a": b"1", b"b": b"2"}]


# -- HINCRBY -----------------------------------------------------------------------------------------


def test_hincrby(rr):
    assert rr.hincrby("h", "n", 5) == 5
    assert rr.hincrby("h", "n", -7) == -2
    assert rr.hget("h", "n") == b"-2"
    rr.hset("h", "big", "17179869184")
    assert rr.hincrby("h", "big", 17179869184) == 34359738368
    assert wire(rr, "HINCRBY", "h", "n", "1") == b":-1\r\n"


def test_hincrby_errors(rr):
    rr.hset("h", mapping={"s": "abc", "sp": " 1", "plus": "+1", "zero": "01", "max": str(2**63 - 1),
                          "min": str(-2**63)})
    for field in ("s", "sp", "plus", "zero"):
        assert err(rr, "HINCRBY", "h", field, "1") == "hash value is not an integer"
    assert err(rr, "HINCRBY", "h", "x", "1.5") == "value is not an integer or out of range"
    assert err(rr, "HINCRBY", "h", "x", str(2**63)) == "value is not an integer or out of range"
    assert err(rr, "HINCRBY", "h", "max", "1") == "increment or decrement would overflow"
    assert err(rr, "HINCRBY", "h", "min", "-1") == "increment or decrement would overflow"
    assert rr.hincrby("h", "max", -1) == 2**63 - 2
    assert err(rr, "HINCRBY", "nokey", "f", "x") == "value is not an integer or out of range"
    assert rr.exists("nokey") == 0
    assert rr.hget("h", "s") == b"abc"


# -- HINCRBYFLOAT ------------------------------------------------------------------------------------


def test_hincrbyfloat(rr):
    assert raw(rr, "HINCRBYFLOAT", "h", "f", "10.50") == b"10.5"
    assert raw(rr, "HINCRBYFLOAT", "h", "f", "0.1") == b"10.6"
    rr.hset("h", "e", "5.0e3")
    assert raw(rr, "HINCRBYFLOAT", "h", "e", "2.0e2") == b"5200"
    assert raw(rr, "HINCRBYFLOAT", "h", "p", "0.1") == b"0.1"
    assert raw(rr, "HINCRBYFLOAT", "h", "p", "0.2") == b"0.3"
    assert raw(rr, "HINCRBYFLOAT", "h", "p", "-0.3") == b"0"
    assert raw(rr, "HINCRBYFLOAT", "h", "big", "1e20") == b"100000000000000000000"
    rr.hset("h", "i", "17179869184")
    assert raw(rr, "HINCRBYFLOAT", "h", "i", "1") == b"17179869185"
    assert raw(rr, "HINCRBYFLOAT", "h", "neg", "-1.1") == b"-1.1"
    assert rr.hget("h", "neg") == b"-1.1"
    assert rr.hincrbyfloat("h", "f", 1) == pytest.approx(11.6)
    # a bulk string in both protocols (not a RESP3 double)
    assert wire(rr, "HINCRBYFLOAT", "h", "w", "1.5") == b"$3\r\n1.5\r\n"


def test_hincrbyfloat_errors(rr):
    rr.hset("h", mapping={"sl": " 11", "sr": "11 ", "nul": b"1\x002", "txt": "abc", "inf": "inf",
                          "huge": "1e4932"})
    for field in ("sl", "sr", "nul", "txt"):
        assert err(rr, "HINCRBYFLOAT", "h", field, "1") == "hash value is not a float"
    assert err(rr, "HINCRBYFLOAT", "h", "x", "abc") == "value is not a valid float"
    assert err(rr, "HINCRBYFLOAT", "h", "x", "nan") == "value is not a valid float"
    assert err(rr, "HINCRBYFLOAT", "h", "x", " 1") == "value is not a valid float"
    assert err(rr, "HINCRBYFLOAT", "h", "x", "+inf") == "value is NaN or Infinity"
    assert err(rr, "HINCRBYFLOAT", "h", "x", "-inf") == "value is NaN or Infinity"
    assert err(rr, "HINCRBYFLOAT", "h", "inf", "1") == "increment would produce NaN or Infinity"
    assert err(rr, "HINCRBYFLOAT", "h", "huge", "1e4932") == "increment would produce NaN or Infinity"
    assert rr.hexists("h", "x") is False
    assert err(rr, "HINCRBYFLOAT", "nokey", "f", "x") == "value is not a valid float"
    assert rr.exists("nokey") == 0


def test_long_double_helpers():
    def add(a, b):
        value = round_long_double(parse_long_double(a) + parse_long_double(b))
        return None if value is None else format_long_double_human(value)

    assert add(b"0.1", b"0.2") == b"0.3"
    assert add(b"1", b"-1.1") == b"-0.1"
    assert add(b"3.0", b"1e-20") == b"3"
    assert add(b"-1e-30", b"0") == b"0"  # "-0.000..." prints as "0"
    assert add(b"0x10", b"1") == b"17"
    assert add(b"1.5", b"1.5") == b"3"
    # 2**64 + 1 is not representable with a 64-bit mantissa: ties-to-even drops the 1
    assert add(b"18446744073709551616", b"1") == b"18446744073709551616"
    assert add(b"1e4932", b"1e4932") is None
    assert add(b"1e-4940", b"0") == b"0"
    assert len(add(b"1e4932", b"0")) == 4933
    for bad in (b"", b" 1", b"1 ", b"nan", b"-nan", b"1e", b"1_0", b"abc", b"1e5000", b"1e-5000",
                b"\xff", b"1" * 5120):
        assert parse_long_double(bad) is None, bad
    assert parse_long_double(b"-infinity") == float("-inf")
    assert parse_long_double(b"Inf") == float("inf")


# -- HRANDFIELD ----------------------------------------------------------------------------------------


def test_hrandfield_without_count(rr):
    assert rr.hrandfield("nokey") is None
    assert wire(rr, "HRANDFIELD", "nokey") == NULL_BULK[is_resp3(rr)]
    rr.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    seen = {rr.hrandfield("h") for _ in range(100)}
    assert seen == {b"a", b"b", b"c"}


def test_hrandfield_with_count(rr):
    fields = {f"f{i}".encode(): f"v{i}".encode() for i in range(20)}
    rr.hset("h", mapping=fields)
    assert raw(rr, "HRANDFIELD", "nokey", "5") == []
    assert raw(rr, "HRANDFIELD", "h", "0") == []
    for count in (1, 5, 19):
        got = raw(rr, "HRANDFIELD", "h", count)
        assert len(got) == count and len(set(got)) == count and set(got) <= set(fields)
    assert sorted(raw(rr, "HRANDFIELD", "h", "20")) == sorted(fields)
    assert sorted(raw(rr, "HRANDFIELD", "h", "100")) == sorted(fields)
    got = raw(rr, "HRANDFIELD", "h", "-100")
    assert len(got) == 100 and set(got) <= set(fields) and len(set(got)) < 100
    assert len(raw(rr, "HRANDFIELD", "h", "-1")) == 1
    rr.hset("one", "x", "y")
    assert raw(rr, "HRANDFIELD", "one", "-5") == [b"x"] * 5


def test_hrandfield_withvalues_shapes(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    resp3 = is_resp3(rr)
    for count in ("2", "5", "-3", "1"):
        got = raw(rr, "HRANDFIELD", "h", count, "WITHVALUES")
        n = min(int(count), 2) if int(count) > 0 else -int(count)
        if resp3:
            assert len(got) == n
            assert all(isinstance(p, list) and len(p) == 2 for p in got)
            pairs = [tuple(p) for p in got]
        else:
            assert len(got) == 2 * n
            pairs = list(zip(got[::2], got[1::2]))
        assert set(pairs) <= {(b"a", b"1"), (b"b", b"2")}
    rr.delete("h")
    rr.hset("h", "a", "1")
    expected = b"*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n" if resp3 else b"*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    assert wire(rr, "HRANDFIELD", "h", "1", "withvalues") == expected
    assert wire(rr, "HRANDFIELD", "nokey", "1", "WITHVALUES") == b"*0\r\n"


def test_hrandfield_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HRANDFIELD", "h", "x") == "value is not an integer or out of range"
    assert err(rr, "HRANDFIELD", "h", "1", "WITHSCORES") == "syntax error"
    assert err(rr, "HRANDFIELD", "h", "1", "WITHVALUES", "x") == "syntax error"
    assert err(rr, "HRANDFIELD", "h", str(-2**63)) == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    assert err(rr, "HRANDFIELD", "h", "-9223372036854770000", "WITHVALUES") == "value is out of range"
    assert err(rr, "HRANDFIELD", "h", "9223372036854770000", "WITHVALUES") == "value is out of range"


# -- HSCAN ---------------------------------------------------------------------------------------------


def _hscan_all(client, key, *opts):
    cursor, out, calls = "0", [], 0
    while True:
        cursor, items = raw(client, "HSCAN", key, cursor, *opts)
        out.extend(items)
        calls += 1
        if cursor == b"0":
            return out, calls
        assert calls < 10000


def test_hscan_small_hash_in_one_call(rr):
    rr.hset("h", mapping={"a": "1", "b": "2"})
    cursor, items = raw(rr, "HSCAN", "h", "0")
    assert cursor == b"0"
    assert dict(zip(items[::2], items[1::2])) == {b"a": b"1", b"b": b"2"}
    assert raw(rr, "HSCAN", "nokey", "0") == [b"0", []]
    assert rr.hscan("h", 0, no_values=True) == (0, [b"a", b"b"])


def test_hscan_large_hash_pages(rr):
    fields = {f"field:{i}".encode(): f"{i}".encode() for i in range(1000)}
    rr.hset("h", mapping=fields)
    items, calls = _hscan_all(rr, "h", "COUNT", "100")
    assert calls >= 10
    assert dict(zip(items[::2], items[1::2])) == fields
    assert len(items) == 2000  # no duplicates
    keys, _ = _hscan_all(rr, "h", "NOVALUES", "COUNT", "50")
    assert sorted(keys) == sorted(fields)
    matched, _ = _hscan_all(rr, "h", "MATCH", "field:1?", "COUNT", "200")
    assert dict(zip(matched[::2], matched[1::2])) == {f"field:1{i}".encode(): f"1{i}".encode() for i in range(10)}


def test_hscan_during_changes(r):
    r.hset("h", mapping={f"f{i}": "v" for i in range(500)})
    cursor, items = raw(r, "HSCAN", "h", "0", "COUNT", "100")
    seen = dict(zip(items[::2], items[1::2]))
    deleted = [f"f{i}".encode() for i in range(500) if f"f{i}".encode() not in seen][:50]
    r.hdel("h", *deleted)
    while cursor != b"0":
        cursor, items = raw(r, "HSCAN", "h", cursor, "COUNT", "100")
        seen.update(zip(items[::2], items[1::2]))
    assert not set(deleted) & set(seen)  # removed before their page: not returned
    assert seen == r.hgetall("h")        # everything present throughout: returned, current values


def test_hscan_errors(rr):
    rr.hset("h", "a", "1")
    assert err(rr, "HSCAN", "h", "x") == "invalid cursor"
    assert err(rr, "HSCAN", "h", "-1") == "invalid cursor"
    assert err(rr, "HSCAN", "h", "0", "COUNT", "0") == "syntax error"
    assert err(rr, "HSCAN", "h", "0", "COUNT", "x") == "value is not an integer or out of range"
    assert err(rr, "HSCAN", "h", "0", "NOSCORES") == "NOSCORES option can only be used in ZSCAN"
    assert err(rr, "HSCAN", "h", "0", "TYPE", "string") == "syntax error"
    assert err(rr, "HSCAN", "h", "0", "MATCH") == "syntax error"
    rr.set("s", "x")
    assert err(rr, "HSCAN", "s", "0") == WRONGTYPE
    # Valkey looks the key up before parsing options: a missing key ignores them
    assert raw(rr, "HSCAN", "nokey", "0", "COUNT", "0") == [b"0", []]


# -- wrong type ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", [
    ["HSET", "k", "f", "v"], ["HMSET", "k", "f", "v"], ["HSETNX", "k", "f", "v"], ["HGET", "k", "f"],
    ["HMGET", "k", "f"], ["HDEL", "k", "f"], ["HLEN", "k"], ["HSTRLEN", "k", "f"], ["HEXISTS", "k", "f"],
    ["HKEYS", "k"], ["HVALS", "k"], ["HGETALL", "k"], ["HINCRBY", "k", "f", "1"],
    ["HINCRBYFLOAT", "k", "f", "1"], ["HRANDFIELD", "k"], ["HRANDFIELD", "k", "2"],
    ["HRANDFIELD", "k", "-2", "WITHVALUES"], ["HSCAN", "k", "0"],
])
def test_wrong_type(r, cmd):
    r.rpush("k", "x")
    assert err(r, *cmd) == WRONGTYPE
    assert r.lrange("k", 0, -1) == [b"x"]


# -- effects: replaying the journal rebuilds the same state ----------------------------------------------


def test_replay_hash_writes():
    replies, effects = run_and_replay([
        ["HSET", "h", "a", "1", "b", "2", "c", "x"],
        ["HMSET", "h", "d", "4"],
        ["HSETNX", "h", "a", "9"],
        ["HSETNX", "h", "e", "5"],
        ["HINCRBY", "h", "a", "10"],
        ["HINCRBY", "h", "c", "1"],  # error: no effect
        ["HINCRBYFLOAT", "h", "b", "0.1"],
        ["HINCRBYFLOAT", "h", "new", "1e20"],
        ["HDEL", "h", "zz"],
        ["HDEL", "h", "a", "d"],
        ["HSET", "g", "only", "1"],
        ["HDEL", "g", "only", "other"],
        ["HGETALL", "h"],
    ])
    assert replies[2] == 0 and replies[3] == 1 and replies[4] == 11
    assert replies[6] == b"2.1" and replies[7] == b"100000000000000000000"
    assert replies[-1] == {b"b": b"2.1", b"c": b"x", b"e": b"5", b"new": b"100000000000000000000"}
    names = [argv[0].upper() for _db, argv in effects]
    assert names == [b"HSET", b"HMSET", b"HSETNX", b"HINCRBY", b"HSET", b"HSET", b"HDEL", b"HSET", b"HDEL"]
    # HINCRBYFLOAT is journaled as HSET with the result, never as float arithmetic to redo
    assert effects[4][1] == (b"HSET", b"h", b"b", b"2.1")
    assert effects[5][1] == (b"HSET", b"h", b"new", b"100000000000000000000")


def test_replay_no_effect_when_nothing_changes():
    _replies, effects = run_and_replay([
        ["HSET", "h", "a", "1"],
        ["HSETNX", "h", "a", "2"],
        ["HDEL", "h", "zz"],
        ["HDEL", "nokey", "a"],
        ["HINCRBYFLOAT", "h", "a", "inf"],
        ["HRANDFIELD", "h", "-3", "WITHVALUES"],
    ])
    assert [argv[0] for _db, argv in effects] == [b"HSET"]


def test_replay_hincrbyfloat_keeps_ttl_and_exact_text():
    replies, effects = run_and_replay([
        ["HSET", "h", "f", "0.1"],
        ["PEXPIREAT", "h", "1800000000000"],
        ["HINCRBYFLOAT", "h", "f", "0.2"],
        ["HINCRBYFLOAT", "h", "f", "-0.3"],
        ["PTTL", "h"],
    ])
    assert replies[2] == b"0.3" and replies[3] == b"0"
    assert replies[4] == 1800000000000 - 1_700_000_000_000
    assert effects[-1][1] == (b"HSET", b"h", b"f", b"0")


def test_hdel_last_field_removes_key_locally():
    ks, run = local()
    run("HSET", "h", "a", "1", "b", "2")
    assert run("HDEL", "h", "a", "b", "c") == 2
    assert b"h" not in ks.dbs[0].data
