"""List commands against a real server (valkey-py, RESP2 and RESP3) plus effect determinism."""



import pytest

from helpers.replay import run_and_replay

# -- helpers ------------------------------------------------------------------------------------


from helpers.wire import err, raw, resp3, wire  # noqa: F401

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


NULL_BULK = {False: b"$-1\r\n", True: b"_\r\n"}
NULL_ARRAY = {False: b"*-1\r\n", True: b"_\r\n"}
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


# -- push / pop -----------------------------------------------------------------------------------


def test_push_and_range(rr):
    assert rr.lpush("l", "a", "b", "c") == 3
    assert rr.rpush("l", "d", "e") == 5
    assert rr.lrange("l", 0, -1) == [b"c", b"b", b"a", b"d", b"e"]
    assert rr.lpushx("l", "z") == 6
    assert rr.rpushx("l", "y") == 7
    assert rr.lrange("l", 0, -1) == [b"z", b"c", b"b", b"a", b"d", b"e", b"y"]
    assert rr.lpushx("nokey", "a") == 0
    assert rr.rpushx("nokey", "a") == 0
    assert rr.exists("nokey") == 0
    assert rr.type("l") == b"list"


def test_lrange_indexes(rr):
    rr.rpush("l", *"abcdef")
    assert rr.lrange("l", 0, 2) == [b"a", b"b", b"c"]
    assert rr.lrange("l", -3, -1) == [b"d", b"e", b"f"]
    assert rr.lrange("l", -100, 1) == [b"a", b"b"]
    assert rr.lrange("l", 4, 100) == [b"e", b"f"]
    assert rr.lrange("l", 3, 2) == []
    assert rr.lrange("l", 6, 10) == []
    assert rr.lrange("l", -1, -2) == []
    assert rr.lrange("l", 5, 5) == [b"f"]
    assert rr.lrange("missing", 0, -1) == []
    assert err(rr, "LRANGE", "l", "a", "1") == "value is not an integer or out of range"


def test_lrange_large_list_both_ends(rr):
    rr.rpush("big", *range(1000))
    assert rr.lrange("big", 0, 2) == [b"0", b"1", b"2"]
    assert rr.lrange("big", 997, 999) == [b"997", b"998", b"999"]
    assert rr.lrange("big", -3, -1) == [b"997", b"998", b"999"]
    assert rr.lrange("big", 600, 602) == [b"600", b"601", b"602"]
    assert len(rr.lrange("big", 0, -1)) == 1000


def test_lpop_rpop(rr):
    rr.rpush("l", "a", "b", "c", "d", "e")
    assert rr.lpop("l") == b"a"
    assert rr.rpop("l") == b"e"
    assert raw(rr, "LPOP", "l", 2) == [b"b", b"c"]
    assert raw(rr, "RPOP", "l", 0) == []
    assert raw(rr, "RPOP", "l", 5) == [b"d"]
    assert rr.exists("l") == 0
    rr.rpush("l", "a", "b", "c")
    assert raw(rr, "RPOP", "l", 2) == [b"c", b"b"]
    assert raw(rr, "LPOP", "l", 1) == [b"a"]
    assert rr.exists("l") == 0


def test_pop_missing_key_shapes(rr):
    p3 = resp3(rr)
    assert wire(rr, "LPOP", "missing") == NULL_BULK[p3]
    assert wire(rr, "RPOP", "missing") == NULL_BULK[p3]
    assert wire(rr, "LPOP", "missing", 2) == NULL_ARRAY[p3]
    assert wire(rr, "RPOP", "missing", 0) == NULL_ARRAY[p3]
    rr.rpush("l", "a")
    assert wire(rr, "LPOP", "l", 0) == b"*0\r\n"
    assert wire(rr, "LPOP", "l", 3) == b"*1\r\n$1\r\na\r\n"


def test_pop_errors(rr):
    rr.rpush("l", "a")
    assert err(rr, "LPOP", "l", -1) == "value is out of range, must be positive"
    assert err(rr, "RPOP", "l", "x") == "value is out of range, must be positive"
    assert err(rr, "LPOP", "l", 1, 2) == "wrong number of arguments for 'lpop' command"
    assert err(rr, "RPOP", "l", 1, 2) == "wrong number of arguments for 'rpop' command"
    assert rr.lrange("l", 0, -1) == [b"a"]


# -- reads ----------------------------------------------------------------------------------------


def test_llen_lindex(rr):
    p3 = resp3(rr)
    rr.rpush("l", "a", "b", "c")
    assert rr.llen("l") == 3
    assert rr.llen("missing") == 0
    assert rr.lindex("l", 0) == b"a"
    assert rr.lindex("l", -1) == b"c"
    assert rr.lindex("l", -3) == b"a"
    assert rr.lindex("l", 3) is None
    assert rr.lindex("l", -4) is None
    assert wire(rr, "LINDEX", "l", 10) == NULL_BULK[p3]
    assert wire(rr, "LINDEX", "missing", 0) == NULL_BULK[p3]
    assert err(rr, "LINDEX", "l", "1.5") == "value is not an integer or out of range"


def test_lpos(rr):
    p3 = resp3(rr)
    rr.rpush("l", "a", "b", "c", "1", "2", "3", "c", "c")
    assert rr.lpos("l", "c") == 2
    assert rr.lpos("l", "c", rank=2) == 6
    assert rr.lpos("l", "c", rank=-1) == 7
    assert rr.lpos("l", "c", rank=-3) == 2
    assert rr.lpos("l", "c", rank=4) is None
    assert rr.lpos("l", "c", count=0) == [2, 6, 7]
    assert rr.lpos("l", "c", count=2) == [2, 6]
    assert rr.lpos("l", "c", count=2, rank=-1) == [7, 6]
    assert rr.lpos("l", "c", count=0, rank=2) == [6, 7]
    assert rr.lpos("l", "c", count=0, maxlen=7) == [2, 6]
    assert rr.lpos("l", "c", maxlen=2) is None
    assert rr.lpos("l", "c", count=0, rank=-1, maxlen=2) == [7, 6]
    assert rr.lpos("l", "x", count=5) == []
    assert wire(rr, "LPOS", "l", "x") == NULL_BULK[p3]
    assert wire(rr, "LPOS", "missing", "x") == NULL_BULK[p3]
    assert wire(rr, "LPOS", "missing", "x", "COUNT", 0) == b"*0\r\n"
    assert err(rr, "LPOS", "l", "c", "RANK", 0) == (
        "RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
        "or use negative to start from the end of the list")
    assert err(rr, "LPOS", "l", "c", "COUNT", -1) == "COUNT can't be negative"
    assert err(rr, "LPOS", "l", "c", "MAXLEN", -1) == "MAXLEN can't be negative"
    assert err(rr, "LPOS", "l", "c", "RANK", "x") == "value is not an integer or out of range"
    assert err(rr, "LPOS", "l", "c", "RANK", "-9223372036854775808") == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    assert err(rr, "LPOS", "l", "c", "FOO", 1) == "syntax error"
    assert err(rr, "LPOS", "l", "c", "RANK") == "syntax error"


# -- updates --------------------------------------------------------------------------------------


def test_lset(rr):
    rr.rpush("l", "a", "b", "c")
    assert rr.lset("l", 1, "B") is True
    assert rr.lset("l", -1, "C") is True
    assert rr.lrange("l", 0, -1) == [b"a", b"B", b"C"]
    assert err(rr, "LSET", "l", 3, "x") == "index out of range"
    assert err(rr, "LSET", "l", -4, "x") == "index out of range"
    assert err(rr, "LSET", "missing", 0, "x") == "no such key"
    assert err(rr, "LSET", "l", "x", "x") == "value is not an integer or out of range"


def test_linsert(rr):
    rr.rpush("l", "a", "c")
    assert rr.linsert("l", "BEFORE", "c", "b") == 3
    assert rr.linsert("l", "after", "c", "d") == 4
    assert rr.lrange("l", 0, -1) == [b"a", b"b", b"c", b"d"]
    assert rr.linsert("l", "BEFORE", "zz", "x") == -1
    assert rr.linsert("missing", "BEFORE", "a", "x") == 0
    assert rr.exists("missing") == 0
    assert err(rr, "LINSERT", "l", "MIDDLE", "a", "x") == "syntax error"


def test_ltrim(rr):
    rr.rpush("l", *"abcdef")
    assert rr.ltrim("l", 1, -2) is True
    assert rr.lrange("l", 0, -1) == [b"b", b"c", b"d", b"e"]
    assert rr.ltrim("l", -2, 100) is True
    assert rr.lrange("l", 0, -1) == [b"d", b"e"]
    assert rr.ltrim("l", 0, -1) is True
    assert rr.lrange("l", 0, -1) == [b"d", b"e"]
    assert rr.ltrim("l", 5, 10) is True
    assert rr.exists("l") == 0
    rr.rpush("l", *range(100))
    assert rr.ltrim("l", 90, 95) is True
    assert rr.lrange("l", 0, -1) == [b"90", b"91", b"92", b"93", b"94", b"95"]
    assert rr.ltrim("l", 1, 0) is True
    assert rr.exists("l") == 0
    assert rr.ltrim("missing", 0, 1) is True
    assert err(rr, "LTRIM", "l", "a", 1) == "value is not an integer or out of range"


def test_lrem(rr):
    rr.rpush("l", "a", "x", "b", "x", "c", "x")
    assert rr.lrem("l", 2, "x") == 2
    assert rr.lrange("l", 0, -1) == [b"a", b"b", b"c", b"x"]
    rr.rpush("l", "x", "d", "x")
    assert rr.lrem("l", -2, "x") == 2
    assert rr.lrange("l", 0, -1) == [b"a", b"b", b"c", b"x", b"d"]
    assert rr.lrem("l", 1, "x") == 1
    assert rr.lrem("l", -1, "zz") == 0
    assert rr.lrem("l", 0, "a") == 1
    assert rr.lrange("l", 0, -1) == [b"b", b"c", b"d"]
    assert rr.lrem("l", -1, "d") == 1
    assert rr.lrange("l", 0, -1) == [b"b", b"c"]
    assert rr.lrem("missing", 0, "a") == 0
    rr.rpush("same", "v", "v")
    assert rr.lrem("same", 0, "v") == 2
    assert rr.exists("same") == 0
    assert err(rr, "LREM", "l", "x", "a") == "value is not an integer or out of range"


# -- moves ----------------------------------------------------------------------------------------


def test_lmove_and_rpoplpush(rr):
    p3 = resp3(rr)
    rr.rpush("src", "a", "b", "c")
    assert rr.lmove("src", "dst", "LEFT", "RIGHT") == b"a"
    assert rr.lmove("src", "dst", "RIGHT", "LEFT") == b"c"
    assert rr.lrange("dst", 0, -1) == [b"c", b"a"]
    assert rr.rpoplpush("src", "dst") == b"b"
    assert rr.exists("src") == 0
    assert rr.lrange("dst", 0, -1) == [b"b", b"c", b"a"]
    assert wire(rr, "LMOVE", "missing", "dst", "LEFT", "LEFT") == NULL_BULK[p3]
    assert wire(rr, "RPOPLPUSH", "missing", "dst") == NULL_BULK[p3]
    # Rotation on one key, including a single-element list.
    assert rr.rpoplpush("dst", "dst") == b"a"
    assert rr.lrange("dst", 0, -1) == [b"a", b"b", b"c"]
    assert rr.lmove("dst", "dst", "LEFT", "RIGHT") == b"a"
    assert rr.lrange("dst", 0, -1) == [b"b", b"c", b"a"]
    rr.rpush("one", "x")
    assert rr.lmove("one", "one", "LEFT", "LEFT") == b"x"
    assert rr.lrange("one", 0, -1) == [b"x"]
    assert err(rr, "LMOVE", "dst", "other", "UP", "LEFT") == "syntax error"
    assert err(rr, "LMOVE", "dst", "other", "LEFT", "DOWN") == "syntax error"


def test_lmove_wrongtype_destination_keeps_source(rr):
    rr.rpush("src", "a")
    rr.set("str", "x")
    assert err(rr, "LMOVE", "src", "str", "LEFT", "LEFT") == WRONGTYPE
    assert err(rr, "RPOPLPUSH", "src", "str") == WRONGTYPE
    assert rr.lrange("src", 0, -1) == [b"a"]
    # A missing source wins over a wrong-type destination: nil, no error.
    assert rr.rpoplpush("missing", "str") is None


def test_lmpop(rr):
    p3 = resp3(rr)
    rr.rpush("l2", "a", "b", "c", "d")
    assert raw(rr, "LMPOP", 2, "l1", "l2", "LEFT") == [b"l2", [b"a"]]
    assert raw(rr, "LMPOP", 2, "l1", "l2", "right", "COUNT", 2) == [b"l2", [b"d", b"c"]]
    assert raw(rr, "LMPOP", 1, "l2", "LEFT", "COUNT", 10) == [b"l2", [b"b"]]
    assert rr.exists("l2") == 0
    assert wire(rr, "LMPOP", 2, "l1", "l2", "LEFT") == NULL_ARRAY[p3]
    rr.rpush("l1", "x")
    assert wire(rr, "LMPOP", 1, "l1", "LEFT") == b"*2\r\n$2\r\nl1\r\n*1\r\n$1\r\nx\r\n"


def test_lmpop_errors(rr):
    rr.rpush("l", "a")
    rr.set("s", "x")
    assert err(rr, "LMPOP", 0, "l", "LEFT") == "numkeys should be greater than 0"
    assert err(rr, "LMPOP", -1, "l", "LEFT") == "numkeys should be greater than 0"
    assert err(rr, "LMPOP", "x", "l", "LEFT") == "numkeys should be greater than 0"
    assert err(rr, "LMPOP", 2, "l", "LEFT") == "syntax error"
    assert err(rr, "LMPOP", 1, "l", "UP") == "syntax error"
    assert err(rr, "LMPOP", 1, "l", "LEFT", "COUNT", 0) == "count should be greater than 0"
    assert err(rr, "LMPOP", 1, "l", "LEFT", "COUNT", "x") == "count should be greater than 0"
    assert err(rr, "LMPOP", 1, "l", "LEFT", "COUNT", 1, "COUNT", 1) == "syntax error"
    assert err(rr, "LMPOP", 1, "l", "LEFT", "COUNT") == "syntax error"
    assert err(rr, "LMPOP", 2, "s", "l", "LEFT") == WRONGTYPE
    # A missing first key is skipped, the wrong type behind a non-empty list is never seen.
    assert raw(rr, "LMPOP", 3, "missing", "l", "s", "LEFT") == [b"l", [b"a"]]


def test_wrongtype(rr):
    rr.set("s", "x")
    for args in (("LPUSH", "s", "a"), ("RPUSHX", "s", "a"), ("LPOP", "s"), ("RPOP", "s", 2),
                 ("LLEN", "s"), ("LINDEX", "s", 0), ("LRANGE", "s", 0, -1), ("LSET", "s", 0, "a"),
                 ("LTRIM", "s", 0, 1), ("LREM", "s", 0, "a"), ("LINSERT", "s", "BEFORE", "a", "b"),
                 ("LPOS", "s", "a"), ("LMOVE", "s", "d", "LEFT", "LEFT"), ("RPOPLPUSH", "s", "d")):
        assert err(rr, *args) == WRONGTYPE, args


def test_binary_elements(rr):
    values = [b"\x00\xff", b"", b"a\r\nb"]
    rr.rpush("bin", *values)
    assert rr.lrange("bin", 0, -1) == values
    assert rr.lpos("bin", b"") == 1
    assert rr.lrem("bin", 0, b"") == 1
    assert rr.lrange("bin", 0, -1) == [b"\x00\xff", b"a\r\nb"]


# -- effects ---------------------------------------------------------------------------------------


def test_effects_replay_all_mutations():
    replies, effects = run_and_replay([
        ["RPUSH", "l", "a", "b", "c", "d", "e", "f", "g"],
        ["LPUSH", "l", "z"],
        ["LPUSHX", "l", "y"],
        ["RPUSHX", "l", "h"],
        ["LPUSHX", "nokey", "x"],
        ["LPOP", "l"],
        ["RPOP", "l", "2"],
        ["LPOP", "l", "0"],
        ["LSET", "l", "-1", "F"],
        ["LINSERT", "l", "BEFORE", "c", "bb"],
        ["LINSERT", "l", "AFTER", "nope", "x"],
        ["LREM", "l", "-1", "bb"],
        ["RPUSH", "l", "a", "a"],
        ["LREM", "l", "2", "a"],
        ["LTRIM", "l", "1", "-1"],
        ["LTRIM", "l", "0", "-1"],
        ["LMOVE", "l", "m", "LEFT", "RIGHT"],
        ["RPOPLPUSH", "l", "m"],
        ["LMOVE", "m", "m", "RIGHT", "LEFT"],
        ["LMPOP", "2", "nokey", "l", "RIGHT", "COUNT", "2"],
        ["LMPOP", "1", "m", "LEFT"],
        ["LPOP", "missing", "3"],
    ])
    assert not any(hasattr(r, "text") for r in replies), replies
    names = [argv[0].upper() for _db, argv in effects]
    assert b"LMPOP" not in names
    assert (0, (b"RPOP", b"l", b"2")) in effects
    assert (0, (b"LPOP", b"m", b"1")) in effects
    # Commands that change nothing leave no effect.
    for argv in ((b"LPUSHX", b"nokey", b"x"), (b"LPOP", b"l", b"0"), (b"LTRIM", b"l", b"0", b"-1"),
                 (b"LINSERT", b"l", b"AFTER", b"nope", b"x"), (b"LPOP", b"missing", b"3")):
        assert (0, argv) not in effects


def test_effects_replay_emptying_and_recreating():
    _replies, effects = run_and_replay([
        ["RPUSH", "l", "a"],
        ["RPOPLPUSH", "l", "l"],
        ["LMOVE", "l", "other", "LEFT", "LEFT"],
        ["RPUSH", "l", "b", "c"],
        ["LTRIM", "l", "5", "10"],
        ["RPUSH", "l", "d"],
        ["LREM", "l", "0", "d"],
        ["RPUSH", "l", "e", "f", "g"],
        ["LMPOP", "1", "l", "LEFT", "COUNT", "10"],
        ["LPOP", "other"],
    ])
    assert effects


def test_lpos_lrange_index_on_large_list(rr):
    rr.rpush("big", *(["x"] * 500 + ["needle"] + ["x"] * 499))
    assert rr.lpos("big", "needle") == 500
    assert rr.lpos("big", "needle", rank=-1) == 500
    assert rr.lpos("big", "needle", maxlen=500) is None
    assert rr.lpos("big", "x", count=3, rank=-1) == [999, 998, 997]
    assert rr.lindex("big", 500) == b"needle"
    assert rr.lindex("big", -500) == b"needle"
