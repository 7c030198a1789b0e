"""String commands: GET SET (all options) SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX
INCR DECR INCRBY DECRBY INCRBYFLOAT APPEND STRLEN GETRANGE SUBSTR SETRANGE."""


import pytest

from durakv import messages
from durakv.commands import strings
from durakv.protocol.resp import ErrorReply, OK
from helpers.replay import NOW, Direct, run_and_replay
from helpers.wire import error_of, raw

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


# -- GET / SET ---------------------------------------------------------------------------------

def test_get_set_basic(rr):
    assert rr.get("missing") is None
    assert rr.set("k", "v") is True
    assert rr.get("k") == b"v"
    assert rr.set("k", b"\x00\xffbin") is True
    assert rr.get("k") == b"\x00\xffbin"
    rr.rpush("list", "a")
    assert error_of(rr, "GET", "list") == messages.WRONGTYPE


def test_set_nx_xx(r):
    assert r.set("k", "1", nx=True) is True
    assert r.set("k", "2", nx=True) is None
    assert r.get("k") == b"1"
    assert r.set("k", "3", xx=True) is True
    assert r.get("k") == b"3"
    assert r.set("other", "x", xx=True) is None
    assert r.exists("other") == 0
    assert error_of(r, "SET", "k", "v", "NX", "XX") == messages.SYNTAX
    assert error_of(r, "SET", "k", "v", "XX", "NX") == messages.SYNTAX
    # Repeating a flag is allowed, as in Valkey.
    assert r.execute_command("SET", "k", "4", "XX", "XX") is True
    assert r.get("k") == b"4"


def test_set_get_option(r):
    assert r.set("k", "1", get=True) is None
    assert r.get("k") == b"1"
    assert r.set("k", "2", get=True) == b"1"
    assert r.get("k") == b"2"
    # NX + GET: returns the old value and does not set.
    assert raw(r, "SET", "k", "3", "NX", "GET") == b"2"
    assert r.get("k") == b"2"
    assert raw(r, "SET", "new", "3", "XX", "GET") is None
    assert r.exists("new") == 0
    r.rpush("list", "a")
    assert error_of(r, "SET", "list", "v", "GET") == messages.WRONGTYPE
    assert r.type("list") == b"list"
    # Without GET, SET overwrites any type.
    assert r.set("list", "now a string") is True
    assert r.get("list") == b"now a string"


def test_set_expire_options(r):
    assert r.set("ex", "v", ex=100) is True
    assert 99 <= r.ttl("ex") <= 100
    assert r.set("px", "v", px=100000) is True
    assert 99000 <= r.pttl("px") <= 100000
    assert r.execute_command("SET", "exat", "v", "EXAT", 4_000_000_000) is True
    assert r.expiretime("exat") == 4_000_000_000
    assert r.execute_command("SET", "pxat", "v", "PXAT", 4_000_000_000_123) is True
    assert r.pexpiretime("pxat") == 4_000_000_000_123
    # The same expire option twice: the last one wins.
    assert r.execute_command("SET", "twice", "v", "EX", 10, "EX", 1000) is True
    assert 999 <= r.ttl("twice") <= 1000
    # A plain SET drops the TTL, KEEPTTL keeps it.
    assert r.set("ex", "w", keepttl=True) is True
    assert 99 <= r.ttl("ex") <= 100
    assert r.set("ex", "x") is True
    assert r.ttl("ex") == -1


def test_set_option_errors(r):
    for bad in (["EX", 10, "PX", 10], ["PX", 10, "EX", 10], ["EX", 10, "EXAT", 10], ["PXAT", 1, "EX", 1],
                ["KEEPTTL", "EX", 10], ["EX", 10, "KEEPTTL"], ["EX"], ["PX"], ["FOO"], ["PERSIST"],
                ["EX", "abc", "NX", "XX"]):
        assert error_of(r, "SET", "k", "v", *bad) == messages.SYNTAX, bad
    for opt in ("EX", "PX", "EXAT", "PXAT"):
        for value in (0, -1):
            assert error_of(r, "SET", "k", "v", opt, value) == "ERR invalid expire time in 'set' command"
        assert error_of(r, "SET", "k", "v", opt, "abc") == messages.NOT_INTEGER
        assert error_of(r, "SET", "k", "v", opt, "1.5") == messages.NOT_INTEGER
    # Seconds that overflow once turned into ms, and relative times that overflow with "now" added.
    assert error_of(r, "SET", "k", "v", "EX", 2 ** 62) == "ERR invalid expire time in 'set' command"
    assert error_of(r, "SET", "k", "v", "EXAT", 2 ** 62) == "ERR invalid expire time in 'set' command"
    assert error_of(r, "SET", "k", "v", "PX", 2 ** 63 - 1) == "ERR invalid expire time in 'set' command"
    assert error_of(r, "SET", "k", "v", "EX", 2 ** 63) == messages.NOT_INTEGER
    assert r.exists("k") == 0
    # The expire value is checked before GET looks at the key's type.
    r.rpush("list", "a")
    assert error_of(r, "SET", "list", "v", "GET", "EX", 0) == "ERR invalid expire time in 'set' command"


def test_set_expire_in_the_past(r):
    r.set("k", "old")
    assert r.execute_command("SET", "k", "new", "PXAT", 1) is True
    assert r.exists("k") == 0
    assert r.execute_command("SET", "missing", "v", "EXAT", 1) is True
    assert r.exists("missing") == 0
    r.set("k", "old")
    assert raw(r, "SET", "k", "new", "EXAT", 1, "GET") == b"old"
    assert r.exists("k") == 0


def test_setnx_setex_psetex(r):
    assert r.setnx("k", "1") is True
    assert r.setnx("k", "2") is False
    assert r.get("k") == b"1"
    assert r.setex("se", 100, "v") is True
    assert r.get("se") == b"v"
    assert 99 <= r.ttl("se") <= 100
    assert r.psetex("pse", 100000, "v") is True
    assert 99000 <= r.pttl("pse") <= 100000
    assert error_of(r, "SETEX", "k", 0, "v") == "ERR invalid expire time in 'setex' command"
    assert error_of(r, "SETEX", "k", -5, "v") == "ERR invalid expire time in 'setex' command"
    assert error_of(r, "PSETEX", "k", 0, "v") == "ERR invalid expire time in 'psetex' command"
    assert error_of(r, "SETEX", "k", "x", "v") == messages.NOT_INTEGER
    assert error_of(r, "SETEX", "k", 10) == "ERR wrong number of arguments for 'setex' command"
    r.rpush("list", "a")
    assert r.setex("list", 100, "str") is True  # overwrites any type
    assert r.get("list") == b"str"


def test_getset_getdel(r):
    assert r.getset("k", "1") is None
    assert r.getset("k", "2") == b"1"
    assert r.get("k") == b"2"
    r.expire("k", 100)
    assert r.getset("k", "3") == b"2"
    assert r.ttl("k") == -1  # GETSET drops the TTL
    r.rpush("list", "a")
    assert error_of(r, "GETSET", "list", "v") == messages.WRONGTYPE
    assert r.getdel("k") == b"3"
    assert r.exists("k") == 0
    assert r.getdel("k") is None
    assert error_of(r, "GETDEL", "list") == messages.WRONGTYPE
    assert r.llen("list") == 1


def test_getex(r):
    assert r.getex("missing", ex=10) is None
    r.set("k", "v")
    assert r.getex("k") == b"v"
    assert r.ttl("k") == -1
    assert r.getex("k", ex=100) == b"v"
    assert 99 <= r.ttl("k") <= 100
    assert r.getex("k", px=200000) == b"v"
    assert 199000 <= r.pttl("k") <= 200000
    assert r.getex("k", exat=4_000_000_000) == b"v"
    assert r.expiretime("k") == 4_000_000_000
    assert r.getex("k", pxat=4_000_000_000_555) == b"v"
    assert r.pexpiretime("k") == 4_000_000_000_555
    assert r.getex("k", persist=True) == b"v"
    assert r.ttl("k") == -1
    assert r.execute_command("GETEX", "k", "PERSIST") == b"v"  # no TTL: nothing to do
    # An absolute time in the past deletes the key after replying with its value.
    assert r.getex("k", pxat=1) == b"v"
    assert r.exists("k") == 0


def test_getex_errors(r):
    r.set("k", "v")
    for bad in (["EX", 1, "PX", 1], ["PERSIST", "EX", 1], ["EX", 1, "PERSIST"], ["NX"], ["XX"], ["GET"],
                ["KEEPTTL"], ["EX"], ["FOO"]):
        assert error_of(r, "GETEX", "k", *bad) == messages.SYNTAX, bad
    for opt in ("EX", "PX", "EXAT", "PXAT"):
        assert error_of(r, "GETEX", "k", opt, 0) == "ERR invalid expire time in 'getex' command"
        assert error_of(r, "GETEX", "k", opt, -1) == "ERR invalid expire time in 'getex' command"
        assert error_of(r, "GETEX", "k", opt, "x") == messages.NOT_INTEGER
    assert r.ttl("k") == -1
    # Valkey 9.1 validates the expire time before it looks the key up (8.0 answered nil / WRONGTYPE first)
    assert error_of(r, "GETEX", "missing", "EX", 0) == "ERR invalid expire time in 'getex' command"
    r.rpush("list", "a")
    assert error_of(r, "GETEX", "list", "EX", 0) == "ERR invalid expire time in 'getex' command"
    assert error_of(r, "GETEX", "list", "EX", 1) == messages.WRONGTYPE


def test_mget_mset_msetnx(rr):
    assert rr.mset({"a": "1", "b": "2"}) is True
    rr.rpush("list", "x")
    assert rr.mget("a", "b", "missing", "list") == [b"1", b"2", None, None]
    assert error_of(rr, "MSET", "a", "1", "b") == "ERR wrong number of arguments for 'mset' command"
    assert error_of(rr, "MSETNX", "a", "1", "b") == "ERR wrong number of arguments for 'msetnx' command"
    assert rr.msetnx({"c": "3", "a": "x"}) is False
    assert rr.exists("c") == 0
    assert rr.get("a") == b"1"
    assert rr.msetnx({"c": "3", "d": "4"}) is True
    assert rr.mget("c", "d") == [b"3", b"4"]
    # MSET keeps the last value of a repeated key and drops TTLs.
    rr.expire("a", 100)
    assert raw(rr, "MSET", "a", "x", "a", "y") == b"OK"
    assert rr.get("a") == b"y"
    assert rr.ttl("a") == -1


# -- counters ----------------------------------------------------------------------------------

def test_incr_decr(rr):
    assert rr.incr("n") == 1
    assert rr.incr("n") == 2
    assert rr.decr("n") == 1
    assert rr.incrby("n", 10) == 11
    assert rr.decrby("n", 20) == -9
    assert rr.get("n") == b"-9"
    assert rr.decr("fresh") == -1
    rr.set("big", str(2 ** 63 - 1))
    assert error_of(rr, "INCR", "big") == messages.OVERFLOW
    rr.set("small", str(-2 ** 63))
    assert error_of(rr, "DECR", "small") == messages.OVERFLOW
    assert error_of(rr, "DECRBY", "n", str(-2 ** 63)) == "ERR decrement would overflow"
    assert error_of(rr, "INCRBY", "n", "1.5") == messages.NOT_INTEGER
    assert error_of(rr, "INCRBY", "n", str(2 ** 63)) == messages.NOT_INTEGER
    for stored in ("abc", " 1", "1 ", "01", "1.0", "", "+1"):
        rr.set("s", stored)
        assert error_of(rr, "INCR", "s") == messages.NOT_INTEGER, stored
    rr.rpush("list", "x")
    assert error_of(rr, "INCR", "list") == messages.WRONGTYPE
    assert rr.incrby("n", str(-2 ** 63 + 9)) == -2 ** 63


def test_incr_keeps_ttl(r):
    r.set("n", "5", ex=100)
    assert r.incr("n") == 6
    assert 99 <= r.ttl("n") <= 100
    assert r.incrbyfloat("n", 0.5) == 6.5
    assert 99 <= r.ttl("n") <= 100


def test_incrbyfloat(rr):
    assert raw(rr, "INCRBYFLOAT", "f", "10.5") == b"10.5"
    assert raw(rr, "INCRBYFLOAT", "f", "0.1") == b"10.6"
    assert rr.get("f") == b"10.6"
    assert raw(rr, "INCRBYFLOAT", "g", "0.1") == b"0.1"
    assert raw(rr, "INCRBYFLOAT", "g", "0.2") == b"0.3"  # long double, as Valkey
    assert raw(rr, "INCRBYFLOAT", "e", "5.0e3") == b"5000"
    assert raw(rr, "INCRBYFLOAT", "e", "-5000") == b"0"
    assert raw(rr, "INCRBYFLOAT", "big", "1e20") == b"100000000000000000000"
    rr.set("n", "17179869184")
    assert raw(rr, "INCRBYFLOAT", "n", "1.5") == b"17179869185.5"
    rr.set("d", "1")
    assert raw(rr, "INCRBYFLOAT", "d", "-1.1") == b"-0.1"
    # No negative zero.
    raw(rr, "INCRBYFLOAT", "z", repr(1 / 41))
    raw(rr, "INCRBYFLOAT", "z", repr(-1 / 41))
    assert rr.get("z") == b"0"


def test_incrbyfloat_errors(rr):
    assert error_of(rr, "INCRBYFLOAT", "f", "inf") == "ERR increment would produce NaN or Infinity"
    assert error_of(rr, "INCRBYFLOAT", "f", "-inf") == "ERR increment would produce NaN or Infinity"
    assert rr.exists("f") == 0
    for bad in ("abc", "nan", " 1", "1 ", "", "1_0"):
        assert error_of(rr, "INCRBYFLOAT", "f", bad) == messages.NOT_FLOAT, bad
    for stored in ("abc", " 1", "1 ", "1\x002"):
        rr.set("s", stored)
        assert error_of(rr, "INCRBYFLOAT", "s", "1") == messages.NOT_FLOAT, stored
    rr.set("s", "1.5e308")
    assert error_of(rr, "INCRBYFLOAT", "s", "1.5e4932") == messages.NOT_FLOAT
    rr.rpush("list", "x")
    assert error_of(rr, "INCRBYFLOAT", "list", "1") == messages.WRONGTYPE


# -- APPEND / STRLEN / GETRANGE / SETRANGE -------------------------------------------------------

def test_append_strlen(rr):
    assert rr.strlen("k") == 0
    assert rr.append("k", "hello") == 5
    assert rr.append("k", " world") == 11
    assert rr.get("k") == b"hello world"
    assert rr.strlen("k") == 11
    rr.expire("k", 100)
    assert rr.append("k", "!") == 12
    assert rr.ttl("k") > 0
    assert rr.append("e", "") == 0
    assert rr.get("e") == b""
    rr.rpush("list", "x")
    assert error_of(rr, "APPEND", "list", "x") == messages.WRONGTYPE
    assert error_of(rr, "STRLEN", "list") == messages.WRONGTYPE


def test_getrange_substr(rr):
    rr.set("k", "Hello World")
    cases = [((0, 3), b"Hell"), ((-3, -1), b"rld"), ((0, -1), b"Hello World"), ((10, 100), b"d"),
             ((5, 3), b""), ((-1, -5), b""), ((20, 30), b""), ((-100, 2), b"Hel"), ((0, -100), b"H"),
             ((-100, -100), b"H"), ((11, 11), b"")]
    for (start, end), want in cases:
        assert rr.getrange("k", start, end) == want, (start, end)
        assert rr.execute_command("SUBSTR", "k", start, end) == want
    assert rr.getrange("missing", 0, -1) == b""
    rr.set("empty", "")
    assert rr.getrange("empty", 0, -1) == b""
    assert error_of(rr, "GETRANGE", "k", "a", 1) == messages.NOT_INTEGER
    assert error_of(rr, "GETRANGE", "missing", 0, "x") == messages.NOT_INTEGER
    rr.rpush("list", "x")
    assert error_of(rr, "GETRANGE", "list", 0, 1) == messages.WRONGTYPE


def test_setrange(rr):
    assert rr.setrange("k", 0, "Hello") == 5
    assert rr.setrange("k", 6, "World") == 11
    assert rr.get("k") == b"Hello\x00World"
    assert rr.setrange("k", 1, "ipp") == 11
    assert rr.get("k") == b"Hippo\x00World"
    assert rr.setrange("pad", 3, "x") == 4
    assert rr.get("pad") == b"\x00\x00\x00x"
    assert rr.setrange("missing", 5, "") == 0
    assert rr.exists("missing") == 0
    assert rr.setrange("k", 100, "") == 11
    assert error_of(rr, "SETRANGE", "k", -1, "x") == "ERR offset is out of range"
    assert error_of(rr, "SETRANGE", "k", "x", "x") == messages.NOT_INTEGER
    assert error_of(rr, "SETRANGE", "k", 512 * 1024 * 1024, "x") == \
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    assert error_of(rr, "SETRANGE", "new", 512 * 1024 * 1024 - 1, "xy") == \
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    assert rr.exists("new") == 0
    rr.rpush("list", "x")
    assert error_of(rr, "SETRANGE", "list", 0, "x") == messages.WRONGTYPE
    assert error_of(rr, "SETRANGE", "list", 0, "") == messages.WRONGTYPE
    rr.set("t", "abc", ex=100)
    rr.setrange("t", 1, "X")
    assert rr.get("t") == b"aXc"
    assert rr.ttl("t") > 0


def test_append_size_limit(monkeypatch):
    monkeypatch.setattr(strings, "PROTO_MAX_BULK_LEN", 10)
    run = Direct()
    assert run("SET", "k", "12345") is OK
    assert run("APPEND", "k", "67890") == 10
    assert run("APPEND", "k", "x") == ErrorReply(messages.STRING_TOO_LONG)
    assert run("GET", "k") == b"1234567890"
    assert run("SETRANGE", "k", 10, "x") == ErrorReply(messages.STRING_TOO_LONG)
    assert run("SETRANGE", "k", 9, "x") == 10


# -- exact TTL arithmetic with a controlled clock ----------------------------------------------

def test_expiry_arithmetic_with_clock():
    run = Direct()
    assert run("SET", "k", "v", "EX", 10) is OK
    assert run.ks.dbs[0].expires[b"k"] == NOW + 10_000
    assert run("SET", "k", "v", "PX", 10) is OK
    assert run.ks.dbs[0].expires[b"k"] == NOW + 10
    assert run("SETEX", "k", 5, "v") is OK
    assert run("PTTL", "k") == 5000
    assert run("GETEX", "k", "EXAT", NOW // 1000 + 3) == b"v"
    assert run("PEXPIRETIME", "k") == NOW + 3000
    run.now += 3000  # exactly at the expire time: gone
    assert run("GET", "k") is None
    assert run.effects[-1] == (0, (b"UNLINK", b"k"))
    # SET with EXAT equal to now counts as already expired.
    run("SET", "k", "v")
    assert run("SET", "k", "w", "PXAT", run.now) is OK
    assert run("EXISTS", "k") == 0
    assert run.effects[-1] == (0, (b"UNLINK", b"k"))
    assert run("SET", "k", "w", "PXAT", run.now + 1) is OK
    assert run("PTTL", "k") == 1


def test_set_effects():
    run = Direct()
    run("SET", "a", "1", "EX", 10, "GET")
    run("SETEX", "b", 10, "2")
    run("PSETEX", "c", 10, "3")
    run("SET", "d", "4", "KEEPTTL", "GET")
    run("SETNX", "e", "5")
    run("GETSET", "e", "6")
    run("GETEX", "a", "EX", 20)
    run("GETEX", "a", "PERSIST")
    run("GETEX", "a", "PERSIST")   # no TTL left: no effect
    run("GETDEL", "e")
    run("GETDEL", "e")             # missing: no effect
    run("MSETNX", "x", "1", "y", "2")
    run("MSETNX", "x", "1")        # refused: no effect
    run("INCRBYFLOAT", "f", "1.5")
    run("SET", "n", "1", "NX")
    run("SET", "n", "1", "NX")     # refused: no effect
    assert run.effects == [
        (0, (b"SET", b"a", b"1", b"PXAT", b"%d" % (NOW + 10_000))),
        (0, (b"SET", b"b", b"2", b"PXAT", b"%d" % (NOW + 10_000))),
        (0, (b"SET", b"c", b"3", b"PXAT", b"%d" % (NOW + 10))),
        (0, (b"SET", b"d", b"4", b"KEEPTTL")),
        (0, (b"SET", b"e", b"5")),
        (0, (b"SET", b"e", b"6")),
        (0, (b"PEXPIREAT", b"a", b"%d" % (NOW + 20_000))),
        (0, (b"PERSIST", b"a")),
        (0, (b"DEL", b"e")),
        (0, (b"MSET", b"x", b"1", b"y", b"2")),
        (0, (b"SET", b"f", b"1.5", b"KEEPTTL")),
        (0, (b"SET", b"n", b"1")),
    ]


# -- determinism: effects replayed give the same state -------------------------------------------

def test_replay_set_family():
    replies, effects = run_and_replay([
        ["SET", "a", "1", "EX", 100],
        ["SET", "b", "2", "PX", 5000, "GET"],
        ["SET", "b", "3", "KEEPTTL"],
        ["SET", "c", "x", "EXAT", 1],            # past, key missing: nothing
        ["SET", "a", "y", "PXAT", 5],            # past, key present: DEL
        ["SETEX", "d", 10, "v"],
        ["PSETEX", "e", 10, "v"],
        ["SETNX", "f", "v"],
        ["GETSET", "d", "w"],
        ["MSET", "m1", "1", "m2", "2"],
        ["MSETNX", "m3", "3", "m4", "4"],
    ])
    assert all(not isinstance(x, ErrorReply) for x in replies)
    assert (0, (b"UNLINK", b"a")) in effects


def test_replay_getex_and_counters():
    run_and_replay([
        ["SET", "k", "v"],
        ["GETEX", "k", "EX", 50],
        ["GETEX", "k", "PX", 70],
        ["GETEX", "k", "PERSIST"],
        ["GETEX", "k", "EXAT", 4_000_000_000],
        ["GETEX", "k", "PXAT", 1],               # past: DEL
        ["SET", "n", "10", "EX", 100],
        ["INCR", "n"], ["DECR", "n"], ["INCRBY", "n", 5], ["DECRBY", "n", 3],
        ["INCRBYFLOAT", "n", "0.1"],
        ["INCRBYFLOAT", "n", "0.2"],
        ["INCRBYFLOAT", "fresh", "3.0e2"],
        ["GETDEL", "fresh"],
    ])


def test_replay_append_setrange():
    run_and_replay([
        ["APPEND", "s", "abc"],
        ["APPEND", "s", "def"],
        ["SETRANGE", "s", 10, "xyz"],
        ["SETRANGE", "s", 0, "Z"],
        ["SETRANGE", "t", 2, "q"],
        ["SETRANGE", "u", 2, ""],
    ])
