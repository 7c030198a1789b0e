"""Sorted set commands against a real server (valkey-py, RESP2 and RESP3) plus effect determinism."""

import math


import pytest

from helpers.replay import run_and_replay

# -- helpers ------------------------------------------------------------------------------------


from helpers.wire import err, raw, resp3, wire  # noqa: F401

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


def sc(client, text):
    """A score as the raw reply carries it: a double in RESP3, a bulk string in RESP2."""
    return float(text) if resp3(client) else text.encode()


def pairs(client, *items):
    """WITHSCORES replies: flat member, score in RESP2; [member, score] pairs in RESP3."""
    if resp3(client):
        return [[m.encode(), float(s)] for m, s in items]
    out = []
    for m, s in items:
        out += [m.encode(), s.encode()]
    return out


NULL_BULK = {False: b"$-1\r\n", True: b"_\r\n"}
NULL_ARRAY = {False: b"*-1\r\n", True: b"_\r\n"}
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def fill(client, key="z"):
    raw(client, "ZADD", key, 1, "a", 2, "b", 3, "c", 4, "d", 5, "e")


# -- ZADD / ZINCRBY -------------------------------------------------------------------------------


def test_zadd_basic_and_options(rr):
    assert raw(rr, "ZADD", "z", 1, "a", 2, "b") == 2
    assert raw(rr, "ZADD", "z", 3, "a", 2, "b", 9, "c") == 1
    assert raw(rr, "ZADD", "z", "CH", 4, "a", 2, "b", 8, "d") == 2
    assert raw(rr, "ZADD", "z", "NX", 100, "a", 5, "e") == 1
    assert raw(rr, "ZSCORE", "z", "a") == sc(rr, "4")
    assert raw(rr, "ZADD", "z", "XX", 10, "a", 10, "new") == 0
    assert raw(rr, "ZSCORE", "z", "a") == sc(rr, "10")
    assert raw(rr, "ZSCORE", "z", "new") is None
    assert raw(rr, "ZADD", "z", "XX", "CH", 11, "a", 10, "new") == 1
    # GT / LT update only in one direction, but still add new members.
    assert raw(rr, "ZADD", "z", "GT", "CH", 5, "a", 12, "c", 1, "f") == 2
    assert raw(rr, "ZMSCORE", "z", "a", "c", "f") == [sc(rr, "11"), sc(rr, "12"), sc(rr, "1")]
    assert raw(rr, "ZADD", "z", "LT", "CH", 20, "a", 0.5, "c") == 1
    assert raw(rr, "ZMSCORE", "z", "a", "c") == [sc(rr, "11"), sc(rr, "0.5")]
    assert raw(rr, "ZADD", "z", "XX", "GT", "CH", 12, "a", 99, "nope") == 1
    assert raw(rr, "ZSCORE", "z", "a") == sc(rr, "12")
    assert raw(rr, "ZADD", "missing", "XX", 1, "a") == 0
    assert rr.exists("missing") == 0


def test_zadd_errors(rr):
    assert err(rr, "ZADD", "z", "NX", "XX", 1, "a") == "XX and NX options at the same time are not compatible"
    for opts in (("GT", "NX"), ("LT", "NX"), ("GT", "LT")):
        assert err(rr, "ZADD", "z", *opts, 1, "a") == (
            "GT, LT, and/or NX options at the same time are not compatible")
    assert err(rr, "ZADD", "z", "INCR", 1, "a", 2, "b") == "INCR option supports a single increment-element pair"
    assert err(rr, "ZADD", "z", 1, "a", 2) == "syntax error"
    assert err(rr, "ZADD", "z", "NX", "CH") == "syntax error"
    assert err(rr, "ZADD", "z", "NX") == "wrong number of arguments for 'zadd' command"
    for bad in ("x", "nan", "1e400", " 1", "1 ", "", "1_0"):
        assert err(rr, "ZADD", "z", bad, "a") == "value is not a valid float", bad
    assert rr.exists("z") == 0
    raw(rr, "ZADD", "z", "-inf", "a")
    assert err(rr, "ZADD", "z", "INCR", "+inf", "a") == "resulting score is not a number (NaN)"
    assert err(rr, "ZINCRBY", "z", "+inf", "a") == "resulting score is not a number (NaN)"
    assert raw(rr, "ZSCORE", "z", "a") == sc(rr, "-inf")


def test_zadd_incr_and_zincrby(rr):
    p3 = resp3(rr)
    assert raw(rr, "ZINCRBY", "z", 2.5, "a") == sc(rr, "2.5")
    assert raw(rr, "ZINCRBY", "z", -1, "a") == sc(rr, "1.5")
    assert raw(rr, "ZADD", "z", "INCR", 1, "a") == sc(rr, "2.5")
    assert raw(rr, "ZADD", "z", "INCR", "NX", 1, "a") is None
    assert wire(rr, "ZADD", "z", "INCR", "NX", 1, "a") == NULL_BULK[p3]
    assert raw(rr, "ZADD", "z", "INCR", "XX", 1, "b") is None
    assert raw(rr, "ZADD", "z", "INCR", "GT", -1, "a") is None
    assert raw(rr, "ZADD", "z", "INCR", "LT", -1, "a") == sc(rr, "1.5")
    assert raw(rr, "ZADD", "z", "INCR", "NX", 7, "b") == sc(rr, "7")
    assert raw(rr, "ZINCRBY", "z", "inf", "c") == sc(rr, "inf")
    assert raw(rr, "ZINCRBY", "z", "1e300", "d") == sc(rr, "1e+300")
    assert wire(rr, "ZINCRBY", "z", 0.1, "e") == (b",0.1\r\n" if p3 else b"$3\r\n0.1\r\n")
    assert rr.zincrby("z", 1, "a") == 2.5
    assert rr.zadd("z", {"a": 1}, incr=True) == 3.5
    assert err(rr, "ZINCRBY", "z", "abc", "a") == "value is not a valid float"


# -- reads ----------------------------------------------------------------------------------------


def test_zcard_zscore_zmscore(rr):
    p3 = resp3(rr)
    fill(rr)
    assert rr.zcard("z") == 5
    assert rr.zcard("missing") == 0
    assert raw(rr, "ZSCORE", "z", "c") == sc(rr, "3")
    assert wire(rr, "ZSCORE", "z", "c") == (b",3\r\n" if p3 else b"$1\r\n3\r\n")
    assert wire(rr, "ZSCORE", "z", "nope") == NULL_BULK[p3]
    assert wire(rr, "ZSCORE", "missing", "a") == NULL_BULK[p3]
    assert raw(rr, "ZMSCORE", "z", "a", "nope", "e") == [sc(rr, "1"), None, sc(rr, "5")]
    assert raw(rr, "ZMSCORE", "missing", "a", "b") == [None, None]
    assert rr.zscore("z", "b") == 2.0


def test_zrank_zrevrank(rr):
    p3 = resp3(rr)
    fill(rr)
    assert rr.zrank("z", "a") == 0
    assert rr.zrank("z", "e") == 4
    assert rr.zrevrank("z", "a") == 4
    assert rr.zrevrank("z", "e") == 0
    assert raw(rr, "ZRANK", "z", "c", "WITHSCORE") == [2, sc(rr, "3")]
    assert raw(rr, "ZREVRANK", "z", "c", "withscore") == [2, sc(rr, "3")]
    assert wire(rr, "ZRANK", "z", "nope") == NULL_BULK[p3]
    assert wire(rr, "ZRANK", "missing", "a") == NULL_BULK[p3]
    assert wire(rr, "ZRANK", "z", "nope", "WITHSCORE") == NULL_ARRAY[p3]
    assert wire(rr, "ZREVRANK", "missing", "a", "WITHSCORE") == NULL_ARRAY[p3]
    assert err(rr, "ZRANK", "z", "a", "WITHSCORES") == "syntax error"
    assert err(rr, "ZRANK", "z", "a", "WITHSCORE", "x") == "wrong number of arguments for 'zrank' command"
    assert err(rr, "ZREVRANK", "z", "a", "WITHSCORE", "x") == "wrong number of arguments for 'zrevrank' command"


def test_zrank_ties_order_by_member(rr):
    raw(rr, "ZADD", "z", 1, "b", 1, "a", 1, "c", 0, "z")
    assert rr.zrank("z", "a") == 1
    assert rr.zrank("z", "c") == 3
    assert rr.zrange("z", 0, -1) == [b"z", b"a", b"b", b"c"]


def test_zcount(rr):
    raw(rr, "ZADD", "z", "-inf", "m", 1, "a", 2, "b", 3, "c", "+inf", "n")
    assert rr.zcount("z", "-inf", "+inf") == 5
    assert rr.zcount("z", 1, 3) == 3
    assert rr.zcount("z", "(1", 3) == 2
    assert rr.zcount("z", "(1", "(3") == 1
    assert rr.zcount("z", "(-inf", "(inf") == 3
    assert rr.zcount("z", 3, 1) == 0
    assert rr.zcount("z", "(2", "2") == 0
    assert rr.zcount("missing", 0, 1) == 0
    assert err(rr, "ZCOUNT", "z", "x", 1) == "min or max is not a float"
    assert err(rr, "ZCOUNT", "z", 1, "((2") == "min or max is not a float"
    assert err(rr, "ZCOUNT", "z", "nan", 1) == "min or max is not a float"


def test_zlexcount(rr):
    raw(rr, "ZADD", "z", 0, "a", 0, "b", 0, "c", 0, "d", 0, "e")
    assert rr.zlexcount("z", "-", "+") == 5
    assert rr.zlexcount("z", "[b", "[d") == 3
    assert rr.zlexcount("z", "(b", "(d") == 1
    assert rr.zlexcount("z", "(a", "+") == 4
    assert rr.zlexcount("z", "+", "-") == 0
    assert rr.zlexcount("z", "[d", "[b") == 0
    assert rr.zlexcount("missing", "-", "+") == 0
    for bad in (("a", "+"), ("-", "b"), ("+x", "+"), ("-", "-x")):
        assert err(rr, "ZLEXCOUNT", "z", *bad) == "min or max not valid string range item"


# -- ZRANGE family --------------------------------------------------------------------------------


def test_zrange_by_rank(rr):
    fill(rr)
    assert rr.zrange("z", 0, -1) == [b"a", b"b", b"c", b"d", b"e"]
    assert rr.zrange("z", 1, 2) == [b"b", b"c"]
    assert rr.zrange("z", -2, -1) == [b"d", b"e"]
    assert rr.zrange("z", -100, 0) == [b"a"]
    assert rr.zrange("z", 3, 100) == [b"d", b"e"]
    assert rr.zrange("z", 3, 1) == []
    assert rr.zrange("z", 5, 10) == []
    assert raw(rr, "ZRANGE", "z", 0, 1, "REV") == [b"e", b"d"]
    assert raw(rr, "ZRANGE", "z", -2, -1, "REV") == [b"b", b"a"]
    assert raw(rr, "ZREVRANGE", "z", 0, 1) == [b"e", b"d"]
    assert raw(rr, "ZRANGE", "z", 0, 1, "WITHSCORES") == pairs(rr, ("a", "1"), ("b", "2"))
    assert raw(rr, "ZREVRANGE", "z", 0, 1, "WITHSCORES") == pairs(rr, ("e", "5"), ("d", "4"))
    assert raw(rr, "ZRANGE", "missing", 0, -1) == []
    assert err(rr, "ZRANGE", "z", "a", 1) == "value is not an integer or out of range"


def test_zrange_withscores_wire_shapes(rr):
    raw(rr, "ZADD", "z", 1.5, "a")
    if resp3(rr):
        assert wire(rr, "ZRANGE", "z", 0, -1, "WITHSCORES") == b"*1\r\n*2\r\n$1\r\na\r\n,1.5\r\n"
    else:
        assert wire(rr, "ZRANGE", "z", 0, -1, "WITHSCORES") == b"*2\r\n$1\r\na\r\n$3\r\n1.5\r\n"


def test_zrange_by_score(rr):
    raw(rr, "ZADD", "z", "-inf", "m", 1, "a", 2, "b", 3, "c", 4, "d", "+inf", "n")
    assert raw(rr, "ZRANGE", "z", 2, 3, "BYSCORE") == [b"b", b"c"]
    assert raw(rr, "ZRANGE", "z", "(1", "(4", "BYSCORE") == [b"b", b"c"]
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE") == [b"m", b"a", b"b", b"c", b"d", b"n"]
    assert raw(rr, "ZRANGE", "z", "(-inf", "(+inf", "BYSCORE") == [b"a", b"b", b"c", b"d"]
    assert raw(rr, "ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", 1, 2) == [b"d", b"c"]
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 2, 3) == [b"b", b"c", b"d"]
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 4, -1) == [b"d", b"n"]
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 0, 0) == []
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 10, 1) == []
    assert raw(rr, "ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", -1, 1) == []
    assert raw(rr, "ZRANGE", "z", 1, 2, "BYSCORE", "WITHSCORES") == pairs(rr, ("a", "1"), ("b", "2"))
    assert raw(rr, "ZRANGEBYSCORE", "z", "(1", 3) == [b"b", b"c"]
    assert raw(rr, "ZRANGEBYSCORE", "z", 1, 3, "WITHSCORES", "LIMIT", 1, 1) == pairs(rr, ("b", "2"))
    assert raw(rr, "ZREVRANGEBYSCORE", "z", 3, "(1") == [b"c", b"b"]
    assert raw(rr, "ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", 0, 2) == [b"n", b"d"]
    assert raw(rr, "ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES", "LIMIT", 0, 1) == pairs(rr, ("n", "inf"))
    assert raw(rr, "ZRANGEBYSCORE", "z", 3, 1) == []
    assert raw(rr, "ZRANGEBYSCORE", "missing", 0, 1) == []
    assert err(rr, "ZRANGEBYSCORE", "z", "x", 1) == "min or max is not a float"
    assert err(rr, "ZRANGE", "z", 1, "(x", "BYSCORE") == "min or max is not a float"


def test_zrange_by_lex(rr):
    raw(rr, "ZADD", "z", 0, "a", 0, "b", 0, "c", 0, "d", 0, "e", 0, "f")
    assert raw(rr, "ZRANGE", "z", "[b", "(e", "BYLEX") == [b"b", b"c", b"d"]
    assert raw(rr, "ZRANGE", "z", "-", "+", "BYLEX", "LIMIT", 1, 2) == [b"b", b"c"]
    assert raw(rr, "ZRANGE", "z", "+", "-", "BYLEX", "REV", "LIMIT", 0, 2) == [b"f", b"e"]
    assert raw(rr, "ZRANGE", "z", "(e", "[b", "BYLEX", "REV") == [b"d", b"c", b"b"]
    assert raw(rr, "ZRANGEBYLEX", "z", "-", "[c") == [b"a", b"b", b"c"]
    assert raw(rr, "ZRANGEBYLEX", "z", "(c", "+", "LIMIT", 1, 10) == [b"e", b"f"]
    assert raw(rr, "ZREVRANGEBYLEX", "z", "[c", "-") == [b"c", b"b", b"a"]
    assert raw(rr, "ZREVRANGEBYLEX", "z", "+", "(d", "LIMIT", 1, 1) == [b"e"]
    assert raw(rr, "ZRANGEBYLEX", "z", "+", "-") == []
    assert raw(rr, "ZRANGEBYLEX", "z", "-", "-") == []
    assert raw(rr, "ZRANGEBYLEX", "z", "[c", "[b") == []
    assert raw(rr, "ZRANGEBYLEX", "z", "[cc", "[dd") == [b"d"]
    assert raw(rr, "ZRANGEBYLEX", "missing", "-", "+") == []
    assert err(rr, "ZRANGEBYLEX", "z", "a", "+") == "min or max not valid string range item"
    assert err(rr, "ZRANGE", "z", "-", "x", "BYLEX") == "min or max not valid string range item"


def test_zrange_option_errors(rr):
    fill(rr)
    assert err(rr, "ZRANGE", "z", 0, 1, "LIMIT", 0, 1) == (
        "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    assert err(rr, "ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES") == (
        "syntax error, WITHSCORES not supported in combination with BYLEX")
    assert err(rr, "ZRANGEBYLEX", "z", "-", "+", "WITHSCORES") == (
        "syntax error, WITHSCORES not supported in combination with BYLEX")
    assert err(rr, "ZREVRANGE", "z", 0, 1, "LIMIT", 0, 1) == (
        "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    assert err(rr, "ZRANGE", "z", 0, 1, "BYSCORE", "BYLEX") == "syntax error"
    assert err(rr, "ZRANGE", "z", 0, 1, "REV", "REV") == "syntax error"
    assert err(rr, "ZRANGE", "z", 0, 1, "FOO") == "syntax error"
    assert err(rr, "ZRANGE", "z", 0, 1, "BYSCORE", "LIMIT", 0) == "syntax error"
    assert err(rr, "ZRANGE", "z", 0, 1, "BYSCORE", "LIMIT", "x", 1) == "value is not an integer or out of range"
    assert err(rr, "ZREVRANGE", "z", 0, 1, "REV") == "syntax error"
    assert err(rr, "ZRANGEBYSCORE", "z", 0, 1, "BYLEX") == "syntax error"
    assert err(rr, "ZRANGESTORE", "d", "z", 0, 1, "WITHSCORES") == "syntax error"


def test_zrangestore(rr):
    fill(rr)
    assert rr.zrangestore("d", "z", 1, 3) == 3
    assert raw(rr, "ZRANGE", "d", 0, -1, "WITHSCORES") == pairs(rr, ("b", "2"), ("c", "3"), ("d", "4"))
    assert raw(rr, "ZRANGESTORE", "d", "z", 4, 2, "BYSCORE", "REV", "LIMIT", 0, 2) == 2
    assert rr.zrange("d", 0, -1) == [b"c", b"d"]
    raw(rr, "ZADD", "lex", 0, "a", 0, "b", 0, "c")
    assert raw(rr, "ZRANGESTORE", "d", "lex", "(a", "+", "BYLEX") == 2
    assert rr.zrange("d", 0, -1) == [b"b", b"c"]
    rr.set("str", "x")
    assert raw(rr, "ZRANGESTORE", "str", "z", 0, 0) == 1
    assert rr.type("str") == b"zset"
    rr.expire("d", 1000)
    assert raw(rr, "ZRANGESTORE", "d", "z", 0, 0) == 1
    assert rr.ttl("d") == -1
    assert raw(rr, "ZRANGESTORE", "d", "z", 10, 20) == 0
    assert rr.exists("d") == 0
    assert raw(rr, "ZRANGESTORE", "d", "missing", 0, -1) == 0
    assert raw(rr, "ZRANGESTORE", "z", "z", 0, 1) == 2
    assert rr.zrange("z", 0, -1) == [b"a", b"b"]
    assert err(rr, "ZRANGESTORE", "d", "str2", 0, 1, "BYLEX") == "min or max not valid string range item"


# -- range removal --------------------------------------------------------------------------------


def test_zremrange(rr):
    fill(rr)
    assert rr.zremrangebyrank("z", 0, 1) == 2
    assert rr.zrange("z", 0, -1) == [b"c", b"d", b"e"]
    assert rr.zremrangebyrank("z", -1, -1) == 1
    assert rr.zremrangebyrank("z", 5, 10) == 0
    assert rr.zremrangebyrank("z", 1, 0) == 0
    assert rr.zremrangebyrank("z", -100, 100) == 2
    assert rr.exists("z") == 0
    fill(rr)
    assert rr.zremrangebyscore("z", "(1", 3) == 2
    assert rr.zremrangebyscore("z", "(5", "+inf") == 0
    assert rr.zremrangebyscore("z", "-inf", "+inf") == 3
    assert rr.exists("z") == 0
    raw(rr, "ZADD", "z", 0, "a", 0, "b", 0, "c", 0, "d")
    assert rr.zremrangebylex("z", "(a", "[c") == 2
    assert rr.zrange("z", 0, -1) == [b"a", b"d"]
    assert rr.zremrangebylex("z", "+", "-") == 0
    assert rr.zremrangebylex("z", "-", "+") == 2
    assert rr.exists("z") == 0
    assert rr.zremrangebyrank("missing", 0, -1) == 0
    assert err(rr, "ZREMRANGEBYSCORE", "z", "a", 1) == "min or max is not a float"
    assert err(rr, "ZREMRANGEBYLEX", "z", "a", "+") == "min or max not valid string range item"
    assert err(rr, "ZREMRANGEBYRANK", "z", "a", 1) == "value is not an integer or out of range"


def test_zrem(rr):
    fill(rr)
    assert rr.zrem("z", "a", "x", "b") == 2
    assert rr.zrem("z", "nope") == 0
    assert rr.zrem("missing", "a") == 0
    assert rr.zrem("z", "c", "d", "e", "c") == 3
    assert rr.exists("z") == 0


# -- pops -----------------------------------------------------------------------------------------


def test_zpopmin_zpopmax(rr):
    fill(rr)
    assert raw(rr, "ZPOPMIN", "z") == [b"a", sc(rr, "1")]
    assert raw(rr, "ZPOPMAX", "z") == [b"e", sc(rr, "5")]
    assert raw(rr, "ZPOPMIN", "z", 2) == pairs(rr, ("b", "2"), ("c", "3"))
    assert raw(rr, "ZPOPMAX", "z", 0) == []
    assert raw(rr, "ZPOPMAX", "z", 10) == pairs(rr, ("d", "4"))
    assert rr.exists("z") == 0
    assert raw(rr, "ZPOPMIN", "missing") == []
    assert raw(rr, "ZPOPMIN", "missing", 3) == []
    assert err(rr, "ZPOPMIN", "z", -1) == "value is out of range, must be positive"
    assert err(rr, "ZPOPMIN", "z", 1, 2) == "syntax error"
    fill(rr)
    # Single pops stay flat in RESP3 too.
    assert wire(rr, "ZPOPMIN", "z") == (b"*2\r\n$1\r\na\r\n" + (b",1\r\n" if resp3(rr) else b"$1\r\n1\r\n"))
    assert [tuple(p) for p in rr.zpopmax("z", 2)] == [(b"e", 5.0), (b"d", 4.0)]


def test_zmpop(rr):
    p3 = resp3(rr)
    fill(rr, "z2")
    assert raw(rr, "ZMPOP", 2, "z1", "z2", "MIN") == [b"z2", [[b"a", sc(rr, "1")]]]
    assert raw(rr, "ZMPOP", 2, "z1", "z2", "max", "COUNT", 2) == [b"z2", [[b"e", sc(rr, "5")], [b"d", sc(rr, "4")]]]
    assert raw(rr, "ZMPOP", 1, "z2", "MIN", "COUNT", 10) == [b"z2", [[b"b", sc(rr, "2")], [b"c", sc(rr, "3")]]]
    assert rr.exists("z2") == 0
    assert wire(rr, "ZMPOP", 2, "z1", "z2", "MIN") == NULL_ARRAY[p3]
    rr.set("s", "x")
    assert err(rr, "ZMPOP", 0, "z", "MIN") == "numkeys should be greater than 0"
    assert err(rr, "ZMPOP", 2, "z", "MIN") == "syntax error"
    assert err(rr, "ZMPOP", 1, "z", "LEFT") == "syntax error"
    assert err(rr, "ZMPOP", 1, "z", "MIN", "COUNT", 0) == "count should be greater than 0"
    assert err(rr, "ZMPOP", 1, "z", "MIN", "COUNT", 1, "COUNT", 1) == "syntax error"
    assert err(rr, "ZMPOP", 2, "missing", "s", "MIN") == WRONGTYPE


# -- ZRANDMEMBER ----------------------------------------------------------------------------------


def test_zrandmember(rr):
    p3 = resp3(rr)
    fill(rr)
    members = {b"a", b"b", b"c", b"d", b"e"}
    scores = {b"a": 1.0, b"b": 2.0, b"c": 3.0, b"d": 4.0, b"e": 5.0}
    assert raw(rr, "ZRANDMEMBER", "z") in members
    assert wire(rr, "ZRANDMEMBER", "missing") == NULL_BULK[p3]
    assert raw(rr, "ZRANDMEMBER", "missing", 5) == []
    assert raw(rr, "ZRANDMEMBER", "z", 0) == []
    three = raw(rr, "ZRANDMEMBER", "z", 3)
    assert len(three) == 3 and len(set(three)) == 3 and set(three) <= members
    assert sorted(raw(rr, "ZRANDMEMBER", "z", 10)) == sorted(members)
    many = raw(rr, "ZRANDMEMBER", "z", -20)
    assert len(many) == 20 and set(many) <= members
    ws = raw(rr, "ZRANDMEMBER", "z", -7, "WITHSCORES")
    if p3:
        assert len(ws) == 7 and all(scores[m] == s for m, s in ws)
    else:
        assert len(ws) == 14 and all(scores[m] == float(s) for m, s in zip(ws[::2], ws[1::2]))
    ws = raw(rr, "ZRANDMEMBER", "z", 2, "WITHSCORES")
    assert len(ws) == (2 if p3 else 4)
    assert err(rr, "ZRANDMEMBER", "z", 1, "SCORES") == "syntax error"
    assert err(rr, "ZRANDMEMBER", "z", "x") == "value is not an integer or out of range"
    assert err(rr, "ZRANDMEMBER", "z", "-9223372036854775808") == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    assert err(rr, "ZRANDMEMBER", "z", "-9223372036854775807", "WITHSCORES") == "value is out of range"
    assert rr.zcard("z") == 5


# -- set operations -------------------------------------------------------------------------------


def _setup_ops(c):
    raw(c, "ZADD", "z1", 1, "a", 2, "b", 3, "c")
    raw(c, "ZADD", "z2", 10, "b", 20, "c", 30, "d")
    c.sadd("s", "c", "d", "e")


def test_zunion_zinter_zdiff(rr):
    _setup_ops(rr)
    assert raw(rr, "ZUNION", 2, "z1", "z2") == [b"a", b"b", b"c", b"d"]
    assert raw(rr, "ZUNION", 2, "z1", "z2", "WITHSCORES") == pairs(
        rr, ("a", "1"), ("b", "12"), ("c", "23"), ("d", "30"))
    assert raw(rr, "ZUNION", 2, "z1", "z2", "WEIGHTS", 2, 0.5, "WITHSCORES") == pairs(
        rr, ("a", "2"), ("b", "9"), ("d", "15"), ("c", "16"))
    assert raw(rr, "ZUNION", 2, "z1", "z2", "AGGREGATE", "MIN", "WITHSCORES") == pairs(
        rr, ("a", "1"), ("b", "2"), ("c", "3"), ("d", "30"))
    assert raw(rr, "ZUNION", 3, "z1", "z2", "s", "AGGREGATE", "MAX", "WITHSCORES") == pairs(
        rr, ("a", "1"), ("e", "1"), ("b", "10"), ("c", "20"), ("d", "30"))
    assert raw(rr, "ZINTER", 2, "z1", "z2", "WITHSCORES") == pairs(rr, ("b", "12"), ("c", "23"))
    assert raw(rr, "ZINTER", 3, "z1", "z2", "s", "WITHSCORES") == pairs(rr, ("c", "24"))
    assert raw(rr, "ZINTER", 2, "z1", "z2", "AGGREGATE", "MAX") == [b"b", b"c"]
    assert raw(rr, "ZINTER", 2, "z1", "missing") == []
    assert raw(rr, "ZDIFF", 2, "z1", "z2", "WITHSCORES") == pairs(rr, ("a", "1"))
    assert raw(rr, "ZDIFF", 2, "z2", "s") == [b"b"]
    assert raw(rr, "ZDIFF", 2, "missing", "z1") == []
    assert raw(rr, "ZDIFF", 1, "z1") == [b"a", b"b", b"c"]
    assert rr.zintercard(2, ["z1", "z2"]) == 2
    assert rr.zintercard(2, ["z1", "z2"], limit=1) == 1
    assert rr.zintercard(3, ["z1", "z2", "s"]) == 1
    assert rr.zintercard(2, ["z1", "missing"]) == 0
    assert raw(rr, "ZINTERCARD", 2, "z1", "z2", "LIMIT", 0) == 2


def test_zunion_infinities_and_nan(rr):
    raw(rr, "ZADD", "p", "inf", "x", 1, "y")
    raw(rr, "ZADD", "n", "-inf", "x", 1, "y")
    # inf + -inf is NaN, which Valkey turns into 0; so is 0 * inf from a weight.
    assert raw(rr, "ZUNION", 2, "p", "n", "WITHSCORES") == pairs(rr, ("x", "0"), ("y", "2"))
    assert raw(rr, "ZINTER", 2, "p", "n", "WITHSCORES") == pairs(rr, ("x", "0"), ("y", "2"))
    assert raw(rr, "ZUNION", 1, "p", "WEIGHTS", 0, "WITHSCORES") == pairs(rr, ("x", "0"), ("y", "0"))
    assert raw(rr, "ZUNION", 2, "p", "n", "AGGREGATE", "MAX", "WITHSCORES") == pairs(rr, ("y", "1"), ("x", "inf"))
    assert raw(rr, "ZUNION", 2, "p", "n", "AGGREGATE", "MIN", "WITHSCORES") == pairs(rr, ("x", "-inf"), ("y", "1"))


def test_setop_errors(rr):
    _setup_ops(rr)
    rr.set("str", "x")
    assert err(rr, "ZUNION", 0, "z1") == "at least 1 input key is needed for 'zunion' command"
    assert err(rr, "ZINTERSTORE", "d", 0, "z1") == "at least 1 input key is needed for 'zinterstore' command"
    assert err(rr, "ZINTERCARD", 0, "z1") == "at least 1 input key is needed for 'zintercard' command"
    assert err(rr, "ZUNION", "x", "z1") == "value is not an integer or out of range"
    assert err(rr, "ZUNION", 3, "z1", "z2") == "syntax error"
    assert err(rr, "ZUNION", 2, "z1", "str") == WRONGTYPE
    assert err(rr, "ZUNION", 2, "z1", "z2", "WEIGHTS", 1) == "syntax error"
    assert err(rr, "ZUNION", 2, "z1", "z2", "WEIGHTS", 1, "x") == "weight value is not a float"
    assert err(rr, "ZUNION", 2, "z1", "z2", "AGGREGATE", "AVG") == "syntax error"
    assert err(rr, "ZDIFF", 2, "z1", "z2", "WEIGHTS", 1, 2) == "syntax error"
    assert err(rr, "ZDIFF", 2, "z1", "z2", "AGGREGATE", "SUM") == "syntax error"
    assert err(rr, "ZUNIONSTORE", "d", 2, "z1", "z2", "WITHSCORES") == "syntax error"
    assert err(rr, "ZINTERCARD", 2, "z1", "z2", "LIMIT", -1) == "LIMIT can't be negative"
    assert err(rr, "ZINTERCARD", 2, "z1", "z2", "WITHSCORES") == "syntax error"
    assert err(rr, "ZINTERCARD", 2, "z1", "z2", "WEIGHTS", 1, 1) == "syntax error"


def test_store_ops(rr):
    _setup_ops(rr)
    assert rr.zunionstore("d", ["z1", "z2"]) == 4
    assert raw(rr, "ZRANGE", "d", 0, -1, "WITHSCORES") == pairs(
        rr, ("a", "1"), ("b", "12"), ("c", "23"), ("d", "30"))
    assert raw(rr, "ZINTERSTORE", "d", 2, "z1", "z2", "WEIGHTS", 1, -1, "AGGREGATE", "MIN") == 2
    assert raw(rr, "ZRANGE", "d", 0, -1, "WITHSCORES") == pairs(rr, ("c", "-20"), ("b", "-10"))
    assert rr.zdiffstore("d", ["z2", "z1"]) == 1
    assert raw(rr, "ZRANGE", "d", 0, -1, "WITHSCORES") == pairs(rr, ("d", "30"))
    assert raw(rr, "ZINTERSTORE", "d", 2, "z1", "s") == 1
    assert raw(rr, "ZRANGE", "d", 0, -1, "WITHSCORES") == pairs(rr, ("c", "4"))
    assert rr.zinterstore("d", ["z1", "missing"]) == 0
    assert rr.exists("d") == 0
    # The destination may be a source, and any type is overwritten.
    assert rr.zunionstore("z1", ["z1", "z2"]) == 4
    assert rr.zcard("z1") == 4
    rr.set("str", "x")
    assert rr.zdiffstore("str", ["z2"]) == 3
    assert rr.type("str") == b"zset"


# -- ZSCAN ----------------------------------------------------------------------------------------


def test_zscan(rr):
    raw(rr, "ZADD", "z", 1, "a", 2.5, "b", 3, "c", "inf", "x1")
    cursor, items = raw(rr, "ZSCAN", "z", 0)
    assert cursor == b"0"
    flat = dict(zip(items[::2], items[1::2]))
    assert flat == {b"a": b"1", b"b": b"2.5", b"c": b"3", b"x1": b"inf"}
    assert raw(rr, "ZSCAN", "z", 0, "MATCH", "x*") == [b"0", [b"x1", b"inf"]]
    assert sorted(raw(rr, "ZSCAN", "z", 0, "NOSCORES")[1]) == [b"a", b"b", b"c", b"x1"]
    assert raw(rr, "ZSCAN", "missing", 0) == [b"0", []]
    assert rr.zscan("z", 0, match="a") == (0, [(b"a", 1.0)])
    assert err(rr, "ZSCAN", "z", "x") == "invalid cursor"
    assert err(rr, "ZSCAN", "z", 0, "COUNT", 0) == "syntax error"
    assert err(rr, "ZSCAN", "z", 0, "NOVALUES") == "NOVALUES option can only be used in HSCAN"
    assert err(rr, "ZSCAN", "z", 0, "TYPE", "zset") == "syntax error"


def test_zscan_large_set_visits_every_member(rr):
    members = {f"m{i}".encode(): float(i) for i in range(600)}
    rr.zadd("big", {k.decode(): v for k, v in members.items()})
    seen = {}
    cursor = 0
    for _ in range(10000):
        cursor, items = rr.zscan("big", cursor, count=50)
        seen.update(items)
        if cursor == 0:
            break
    assert seen == members


# -- types and misc -------------------------------------------------------------------------------


def test_wrongtype(rr):
    rr.set("s", "x")
    for args in (("ZADD", "s", 1, "a"), ("ZINCRBY", "s", 1, "a"), ("ZREM", "s", "a"), ("ZCARD", "s"),
                 ("ZSCORE", "s", "a"), ("ZMSCORE", "s", "a"), ("ZRANK", "s", "a"), ("ZREVRANK", "s", "a"),
                 ("ZCOUNT", "s", 0, 1), ("ZLEXCOUNT", "s", "-", "+"), ("ZRANGE", "s", 0, 1),
                 ("ZRANGEBYSCORE", "s", 0, 1), ("ZRANGEBYLEX", "s", "-", "+"), ("ZREVRANGE", "s", 0, 1),
                 ("ZRANGESTORE", "d", "s", 0, 1), ("ZREMRANGEBYRANK", "s", 0, 1),
                 ("ZREMRANGEBYSCORE", "s", 0, 1), ("ZREMRANGEBYLEX", "s", "-", "+"), ("ZPOPMIN", "s"),
                 ("ZPOPMAX", "s", 0), ("ZRANDMEMBER", "s"), ("ZRANDMEMBER", "s", 2), ("ZSCAN", "s", 0),
                 ("ZUNIONSTORE", "d", 1, "s"), ("ZINTERCARD", 1, "s")):
        assert err(rr, *args) == WRONGTYPE, args


def test_score_formatting_round_trips(rr):
    values = ["0.1", "1.5", "-2.25", "1e+20", "3.0000000000000004", "1.7976931348623157e+308", "5e-324"]
    for i, v in enumerate(values):
        raw(rr, "ZADD", "z", v, f"m{i}")
    for i, v in enumerate(values):
        assert rr.zscore("z", f"m{i}") == float(v)
    assert raw(rr, "ZSCORE", "z", "m0") == sc(rr, "0.1")
    assert raw(rr, "ZSCORE", "z", "m3") == sc(rr, "1e+20")


# -- effects ---------------------------------------------------------------------------------------


def test_effects_replay_zadd_family():
    replies, effects = run_and_replay([
        ["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        ["ZADD", "z", "NX", "10", "a", "4", "d"],
        ["ZADD", "z", "XX", "CH", "1.5", "a", "9", "nope"],
        ["ZADD", "z", "GT", "0", "b", "7", "c"],
        ["ZADD", "z", "LT", "100", "d"],
        ["ZADD", "z", "INCR", "0.1", "a"],
        ["ZINCRBY", "z", "0.2", "a"],
        ["ZINCRBY", "z", "-inf", "e"],
        ["ZADD", "z", "-0", "zero", "1e-300", "tiny", "1.7976931348623157e308", "huge"],
        ["ZINCRBY", "z", "0", "a"],
        ["ZADD", "z", "1", "dup", "2", "dup"],
    ])
    assert not any(hasattr(r, "text") for r in replies), replies
    incr = [argv for _db, argv in effects if argv[0] == b"ZADD" and b"a" in argv[2:]]
    assert incr[-1] == (b"ZADD", b"z", b"%r" % (1.5 + 0.1 + 0.2), b"a")
    assert all(argv[0] == b"ZADD" for _db, argv in effects)
    # No-ops propagate nothing: LT 100 on d=4 changes nothing, ZINCRBY 0 changes nothing.
    assert (0, (b"ZADD", b"z", b"LT", b"100", b"d")) not in effects
    assert len(effects) == 9


def test_effects_replay_removals_and_pops():
    _replies, effects = run_and_replay([
        ["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f", "7", "g"],
        ["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d"],
        ["ZREM", "z", "a", "nope"],
        ["ZREM", "z", "nope"],
        ["ZREMRANGEBYRANK", "z", "0", "0"],
        ["ZREMRANGEBYSCORE", "z", "(6", "+inf"],
        ["ZREMRANGEBYLEX", "lex", "[b", "(d"],
        ["ZPOPMIN", "z"],
        ["ZPOPMAX", "z", "2"],
        ["ZMPOP", "2", "missing", "z", "MIN", "COUNT", "5"],
        ["ZPOPMIN", "lex", "0"],
        ["ZRANDMEMBER", "lex", "-5"],
    ])
    names = [argv[0] for _db, argv in effects]
    # Valkey's rewrites: ZPOPMIN/ZPOPMAX propagate themselves, ZMPOP as ZPOPMIN/ZPOPMAX key <popped>
    assert b"ZMPOP" not in names
    assert (0, (b"ZPOPMIN", b"z")) in effects
    assert (0, (b"ZPOPMAX", b"z", b"2")) in effects
    assert (0, (b"ZPOPMIN", b"z", b"1")) in effects
    assert not any(argv[:2] == (b"ZPOPMIN", b"lex") for _db, argv in effects)
    assert (0, (b"ZREM", b"z", b"nope")) not in effects
    assert not any(argv[0] == b"ZRANDMEMBER" for _db, argv in effects)


def test_effects_replay_store_commands():
    _replies, effects = run_and_replay([
        ["ZADD", "z1", "0.1", "a", "0.2", "b", "inf", "c"],
        ["ZADD", "z2", "0.7", "a", "0.3", "b", "-inf", "c", "1", "x"],
        ["SADD", "s", "a", "x", "y"],
        ["ZUNIONSTORE", "u", "3", "z1", "z2", "s", "WEIGHTS", "0.3", "3", "0.1"],
        ["ZINTERSTORE", "i", "2", "z1", "z2", "AGGREGATE", "MAX"],
        ["ZDIFFSTORE", "df", "2", "z2", "z1"],
        ["ZRANGESTORE", "r", "z2", "(0", "+inf", "BYSCORE", "REV", "LIMIT", "1", "2"],
        ["ZUNIONSTORE", "z1", "2", "z1", "z2"],
        ["ZINTERSTORE", "u", "2", "u", "missing"],
        ["ZDIFFSTORE", "never", "1", "missing"],
        ["SET", "str", "v"],
        ["ZRANGESTORE", "str", "z2", "0", "0"],
    ])
    assert (0, (b"ZDIFFSTORE", b"never", b"1", b"missing")) not in effects
    assert (0, (b"ZINTERSTORE", b"u", b"2", b"u", b"missing")) in effects


def test_zset_float_edge_scores_replay():
    values = ["0.1", "0.30000000000000004", "-1e-310", "123456789012345678", "2.5e-7", "-0.0"]
    cmds = [["ZADD", "z", v, f"m{i}"] for i, v in enumerate(values)]
    cmds += [["ZINCRBY", "z", "0.1", f"m{i}"] for i in range(len(values))]
    _replies, effects = run_and_replay(cmds)
    assert effects


def test_zrangebylex_large_set_uses_bounds(rr):
    rr.zadd("z", {f"k{i:05d}": 0 for i in range(2000)})
    assert raw(rr, "ZRANGEBYLEX", "z", "[k01000", "(k01003") == [b"k01000", b"k01001", b"k01002"]
    assert rr.zlexcount("z", "(k00000", "[k01999") == 1999
    assert raw(rr, "ZREVRANGEBYLEX", "z", "+", "-", "LIMIT", 0, 2) == [b"k01999", b"k01998"]


def test_negative_zero_and_infinity_scores(rr):
    raw(rr, "ZADD", "z", "-inf", "lo", "+inf", "hi", 0, "zero")
    assert raw(rr, "ZRANGE", "z", 0, -1) == [b"lo", b"zero", b"hi"]
    assert raw(rr, "ZSCORE", "z", "lo") == sc(rr, "-inf")
    assert rr.zscore("z", "hi") == math.inf
    assert raw(rr, "ZRANGEBYSCORE", "z", "-inf", "-inf") == [b"lo"]
    assert raw(rr, "ZRANGEBYSCORE", "z", "(-inf", "+inf") == [b"zero", b"hi"]
