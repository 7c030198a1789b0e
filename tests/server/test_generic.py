"""SORT SORT_RO DUMP RESTORE WAIT WAITAOF: real server (valkey-py), replay determinism, kill -9 restart."""

import time
from collections import deque

import pytest
import valkey

from durakv.commands.generic import LEGACY_DUMP_VERSION, dump_payload, load_payload, sort_score, verify_payload
from durakv.keyspace import ZSet
from helpers.replay import run_and_replay

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


def _err(fn, *args):
    with pytest.raises(valkey.ResponseError) as exc:
        fn(*args)
    return str(exc.value)


def sort(c, *args):
    return c.execute_command("SORT", *args)


# -- SORT: ordering ----------------------------------------------------------------------------------

def test_sort_numeric_list_set_zset(rr):
    rr.rpush("l", 3, 1, 10, 2, "-1.5", "1e1")
    assert sort(rr, "l") == [b"-1.5", b"1", b"2", b"3", b"10", b"1e1"]  # ties: binary order of elements
    assert sort(rr, "l", "DESC") == [b"1e1", b"10", b"3", b"2", b"1", b"-1.5"]
    rr.sadd("s", 5, 3, 4)
    assert sort(rr, "s") == [b"3", b"4", b"5"]
    rr.zadd("z", {"3": 1, "1": 2, "2": 3})
    assert sort(rr, "z") == [b"1", b"2", b"3"]  # by the members' value, not the scores
    assert sort(rr, "missing") == []


def test_sort_alpha_and_errors(rr):
    rr.rpush("words", "banana", "apple", "Cherry", "apple2")
    assert sort(rr, "words", "ALPHA") == [b"Cherry", b"apple", b"apple2", b"banana"]
    assert sort(rr, "words", "alpha", "desc") == [b"banana", b"apple2", b"apple", b"Cherry"]
    assert _err(sort, rr, "words") == "One or more scores can't be converted into double"
    rr.rpush("nan", "1", "nan")
    assert _err(sort, rr, "nan") == "One or more scores can't be converted into double"
    # Valkey 9 reads weights with valkey_strtod (fast_float): no leading or trailing space, no hex float
    rr.rpush("spaces", " 2", "1")
    assert _err(sort, rr, "spaces") == "One or more scores can't be converted into double"
    rr.rpush("trailing", "2 ", "1")
    assert _err(sort, rr, "trailing") == "One or more scores can't be converted into double"
    rr.rpush("hexbig", "0x1p99999", "1")
    assert _err(sort, rr, "hexbig") == "One or more scores can't be converted into double"
    rr.rpush("hex", "0x1p3", "9", "1")
    assert _err(sort, rr, "hex") == "One or more scores can't be converted into double"
    rr.rpush("tiny", "1e-310", "1")
    assert sort(rr, "tiny") == [b"1e-310", b"1"]
    rr.set("str", "x")
    assert _err(sort, rr, "str") == "WRONGTYPE Operation against a key holding the wrong kind of value"
    rr.hset("h", "f", "v")
    assert _err(sort, rr, "h") == "WRONGTYPE Operation against a key holding the wrong kind of value"
    assert _err(sort, rr, "words", "FOO") == "syntax error"
    assert _err(sort, rr, "words", "LIMIT", "1") == "syntax error"
    assert _err(sort, rr, "words", "LIMIT", "a", "1") == "value is not an integer or out of range"
    assert _err(sort, rr, "words", "BY") == "syntax error"
    assert _err(sort, rr, "words", "GET") == "syntax error"
    assert _err(sort, rr, "words", "STORE") == "syntax error"
    # Options are parsed before the key is looked up.
    assert _err(sort, rr, "str", "FOO") == "syntax error"


def test_sort_limit(r):
    r.rpush("l", *range(10))
    assert sort(r, "l", "LIMIT", 0, 3) == [b"0", b"1", b"2"]
    assert sort(r, "l", "LIMIT", 8, 5) == [b"8", b"9"]
    assert sort(r, "l", "LIMIT", -5, 2) == [b"0", b"1"]
    assert sort(r, "l", "LIMIT", 3, -1) == [b"3", b"4", b"5", b"6", b"7", b"8", b"9"]
    assert sort(r, "l", "LIMIT", 3, 0) == []
    assert sort(r, "l", "LIMIT", 10, 1) == []
    assert sort(r, "l", "LIMIT", 100, 1) == []
    assert sort(r, "l", "DESC", "LIMIT", 1, 2) == [b"8", b"7"]
    assert sort(r, "l", "LIMIT", 0, 2, "LIMIT", 5, 1) == [b"5"]  # the last LIMIT wins


def test_sort_by_patterns(rr):
    rr.rpush("ids", 1, 2, 3, 4)
    rr.mset({"w_1": 30, "w_2": 10, "w_3": 20})  # w_4 missing: weight 0
    assert sort(rr, "ids", "BY", "w_*") == [b"4", b"2", b"3", b"1"]
    assert sort(rr, "ids", "BY", "w_*", "DESC") == [b"1", b"3", b"2", b"4"]
    rr.hset("obj_1", "age", 40)
    rr.hset("obj_2", "age", 5)
    rr.hset("obj_3", "age", 7)
    rr.hset("obj_4", "age", 6)
    assert sort(rr, "ids", "BY", "obj_*->age") == [b"2", b"4", b"3", b"1"]
    rr.set("bad_1", "x")
    assert _err(sort, rr, "ids", "BY", "bad_*") == "One or more scores can't be converted into double"
    rr.mset({"n_1": "d", "n_2": "b", "n_3": "c"})
    assert sort(rr, "ids", "BY", "n_*", "ALPHA") == [b"4", b"2", b"3", b"1"]  # missing sorts first
    # A weight key of another type counts as missing.
    rr.rpush("w_4", "x")
    assert sort(rr, "ids", "BY", "w_*") == [b"4", b"2", b"3", b"1"]


def test_sort_by_nosort_keeps_native_order(rr):
    rr.rpush("l", 3, 1, 2)
    assert sort(rr, "l", "BY", "nosort") == [b"3", b"1", b"2"]
    assert sort(rr, "l", "BY", "nosort", "DESC") == [b"2", b"1", b"3"]
    assert sort(rr, "l", "BY", "nosort", "LIMIT", 1, 1) == [b"1"]
    assert sort(rr, "l", "BY", "nosort", "DESC", "LIMIT", 1, 5) == [b"1", b"3"]
    rr.zadd("z", {"a": 3, "b": 1, "c": 2, "d": 0})
    assert sort(rr, "z", "BY", "nosort") == [b"d", b"b", b"c", b"a"]
    assert sort(rr, "z", "BY", "nosort", "DESC") == [b"a", b"c", b"b", b"d"]
    assert sort(rr, "z", "BY", "nosort", "LIMIT", 1, 2) == [b"b", b"c"]
    assert sort(rr, "z", "BY", "nosort", "DESC", "LIMIT", 1, 2) == [b"c", b"b"]
    assert sort(rr, "z", "BY", "nosort", "LIMIT", 4, 2) == []
    # A constant BY stays in force even if a later BY has a '*' (Valkey never resets it).
    rr.mset({"w_3": 1, "w_1": 2, "w_2": 3})
    assert sort(rr, "l", "BY", "nosort", "BY", "w_*") == [b"3", b"1", b"2"]


def test_sort_get_patterns(rr):
    rr.rpush("ids", 2, 1, 3)
    rr.mset({"name_1": "one", "name_2": "two"})
    rr.hset("user_1", "email", "a@x")
    rr.hset("user_3", "email", "c@x")
    assert sort(rr, "ids", "GET", "name_*") == [b"one", b"two", None]
    assert sort(rr, "ids", "GET", "#", "GET", "name_*", "GET", "user_*->email") == [
        b"1", b"one", b"a@x", b"2", b"two", None, b"3", None, b"c@x"]
    assert sort(rr, "ids", "GET", "constant") == [None, None, None]
    assert sort(rr, "ids", "GET", "user_*->") == [None, None, None]  # "->" with no field: a key name
    rr.set("user_2->", "literal")
    assert sort(rr, "ids", "GET", "user_*->") == [None, b"literal", None]
    assert sort(rr, "ids", "LIMIT", 1, 1, "GET", "#", "GET", "name_*") == [b"2", b"two"]


def test_sort_store(rr):
    rr.rpush("l", 3, 1, 2)
    rr.set("dst", "old", ex=100)
    assert sort(rr, "l", "STORE", "dst") == 3
    assert rr.lrange("dst", 0, -1) == [b"1", b"2", b"3"]
    assert rr.ttl("dst") == -1  # setKey drops the TTL
    assert sort(rr, "l", "GET", "nope_*", "STORE", "dst") == 3
    assert rr.lrange("dst", 0, -1) == [b"", b"", b""]  # missing GETs are stored as ""
    assert sort(rr, "missing", "STORE", "dst") == 0
    assert rr.exists("dst") == 0  # an empty result deletes the destination
    assert sort(rr, "missing", "STORE", "dst") == 0
    assert sort(rr, "l", "DESC", "STORE", "l") == 3  # onto the sorted key itself
    assert rr.lrange("l", 0, -1) == [b"3", b"2", b"1"]
    rr.sadd("myset", *"a b c d e f g h i l m n o p q r s t u v z aa aaa azz".split())
    # BY <constant> + STORE on a set sorts ALPHA so the stored order is deterministic.
    assert sort(rr, "myset", "ALPHA", "BY", "_", "STORE", "sl") == 24
    assert rr.lrange("sl", 0, -1) == [x.encode() for x in
                                      "a aa aaa azz b c d e f g h i l m n o p q r s t u v z".split()]


def test_sort_ro(rr):
    rr.rpush("l", 2, 1)
    assert rr.execute_command("SORT_RO", "l") == [b"1", b"2"]
    assert rr.execute_command("SORT_RO", "l", "DESC", "GET", "#") == [b"2", b"1"]
    assert _err(rr.execute_command, "SORT_RO", "l", "STORE", "dst") == "syntax error"
    assert rr.exists("dst") == 0


def test_sort_store_in_transaction_and_watch(r):
    r.rpush("l", 2, 1)
    r.set("dst", "x")
    with r.pipeline() as p:
        p.watch("dst")
        p.multi()
        p.get("dst")
        other = valkey.Valkey(connection_pool=r.connection_pool)
        assert sort(other, "l", "STORE", "dst") == 2
        with pytest.raises(valkey.WatchError):
            p.execute()


def test_sort_score_parser():
    assert sort_score(b"7") == 7.0 and sort_score(b"+1.5") == 1.5 and sort_score(b"1e-310") == 1e-310
    assert sort_score(b"-inf") == float("-inf")
    for bad in (b"", b"  7", b"0x10", b" ", b"1 ", b"1e999", b"1e-999", b"nan", b"1_000", b"abc", b"1e"):
        assert sort_score(bad) is None, bad


# -- SORT: determinism -------------------------------------------------------------------------------

def test_sort_store_replays_deterministically():
    cmds = [["sadd", "s"] + [f"m{i}" for i in range(40)],
            ["mset"] + [x for i in range(40) for x in (f"w_m{i}", "1" if i % 2 else "x")],
            ["sort", "s", "by", "w_*", "alpha", "store", "dst"],   # ties: set iteration order
            ["sort", "s", "by", "nosort", "store", "dst2"],
            ["rpush", "l", "3", "1", "2"],
            ["sort", "l", "store", "l"],
            ["set", "gone", "v"],
            ["sort", "missing", "store", "gone"],
            ["sort", "missing", "store", "never"],
            ["sort", "l", "get", "nope_*", "store", "dst3"],
            ["zadd", "z", "1", "a", "2", "b"],
            ["sort", "z", "by", "nosort", "desc", "store", "dst4"]]
    replies, effects = run_and_replay(cmds)
    assert replies[2] == 40 and replies[7] == 0 and replies[8] == 0
    names = [argv[0] for _db, argv in effects]
    assert b"sort" not in [n.lower() for n in names]
    assert (0, (b"DEL", b"gone")) in effects
    assert not any(argv[-1:] == (b"never",) or (len(argv) > 1 and argv[1] == b"never") for _db, argv in effects)


def test_sort_store_big_result_is_chunked():
    cmds = [["rpush", "l"] + [str(i) for i in range(1500)], ["sort", "l", "desc", "store", "out"]]
    replies, effects = run_and_replay(cmds)
    assert replies[1] == 1500
    pushes = [argv for _db, argv in effects if argv[0] == b"RPUSH"]
    assert [len(a) - 2 for a in pushes] == [512, 512, 476]


# -- DUMP / RESTORE ----------------------------------------------------------------------------------

def test_dump_restore_roundtrip_every_type(rr):
    rr.set("s", b"bin\x00ary\xff")
    rr.rpush("l", "a", "", "c" * 300)
    rr.sadd("set", "x", "y")
    rr.zadd("z", {"a": 1.5, "b": float("-inf"), "c": 0})
    rr.hset("h", mapping={"f1": "v1", "f2": ""})
    for key in ("s", "l", "set", "z", "h"):
        payload = rr.dump(key)
        assert isinstance(payload, bytes)
        assert rr.restore(key + "_copy", 0, payload) in (True, b"OK")
    assert rr.get("s_copy") == b"bin\x00ary\xff"
    assert rr.lrange("l_copy", 0, -1) == [b"a", b"", b"c" * 300]
    assert set(rr.smembers("set_copy")) == {b"x", b"y"}
    assert rr.zrange("z_copy", 0, -1, withscores=True) == rr.zrange("z", 0, -1, withscores=True)
    assert rr.hgetall("h_copy") == {b"f1": b"v1", b"f2": b""}
    assert rr.dump("missing") is None
    assert rr.ttl("s_copy") == -1


def test_dump_restore_stream(rr):
    rr.xadd("st", {"a": "1"}, id="1-1")
    rr.xadd("st", {"b": "2"}, id="2-1")
    rr.xadd("st", {"c": "3"}, id="3-1")
    rr.xgroup_create("st", "g", id="0")
    rr.xreadgroup("g", "alice", {"st": ">"}, count=2)
    rr.xdel("st", "2-1")
    rr.execute_command("XGROUP", "CREATECONSUMER", "st", "g", "bob")
    assert rr.restore("st2", 0, rr.dump("st"))
    assert rr.xrange("st2") == rr.xrange("st")
    info, info2 = (rr.execute_command("XINFO", "STREAM", k, "FULL") for k in ("st", "st2"))
    norm = lambda i: i if isinstance(i, dict) else dict(zip(i[0::2], i[1::2]))  # noqa: E731
    for field in (b"length", b"last-generated-id", b"max-deleted-entry-id", b"entries-added", b"entries"):
        assert norm(info2)[field] == norm(info)[field]
    assert rr.execute_command("XPENDING", "st2", "g") == rr.execute_command("XPENDING", "st", "g")
    assert rr.execute_command("OBJECT", "ENCODING", "st2") == b"stream"
    assert _err(sort, rr, "st2") == "WRONGTYPE Operation against a key holding the wrong kind of value"
    assert rr.execute_command("MEMORY", "USAGE", "st2", "SAMPLES", "0") > 0


def test_restore_stream_payload_runs_only_stream_commands(r):
    from crc32c import crc32c
    import struct
    argv = [b"FLUSHALL"]
    body = (b"\x0f" + struct.pack("<I", 1) + struct.pack("<I", 1) + struct.pack("<I", len(argv[0])) + argv[0]
            + struct.pack("<H", LEGACY_DUMP_VERSION))
    r.set("keep", "1")
    assert _err(r.execute_command, "RESTORE", "n", "0", body + struct.pack("<I", crc32c(body))) == \
        "Bad data format"
    assert r.get("keep") == b"1"


def test_restore_ttl_replace_absttl(r):
    r.set("k", "v")
    payload = r.dump("k")
    assert _err(r.restore, "k", 0, payload) == "BUSYKEY Target key name already exists."
    assert r.restore("k", 0, payload, replace=True)
    assert r.restore("t", 5000, payload)
    assert 4000 < r.pttl("t") <= 5000
    at = int(time.time() * 1000) + 100000
    assert r.restore("a", at, payload, absttl=True)
    assert abs(r.pexpiretime("a") - at) <= 1
    # An absolute time already past: OK, nothing created; with REPLACE the old key is deleted.
    assert r.restore("past", 1, payload, absttl=True)
    assert r.exists("past") == 0
    r.set("old", "x")
    assert r.restore("old", 1, payload, absttl=True, replace=True)
    assert r.exists("old") == 0


def test_restore_errors(r):
    r.set("k", "v")
    payload = r.dump("k")
    ex = r.execute_command
    assert _err(ex, "RESTORE", "n", "-1", payload) == "Invalid TTL value, must be >= 0"
    assert _err(ex, "RESTORE", "n", "x", payload) == "value is not an integer or out of range"
    assert _err(ex, "RESTORE", "n", "0", b"garbage") == "DUMP payload version or checksum are wrong"
    assert _err(ex, "RESTORE", "n", "0", b"") == "DUMP payload version or checksum are wrong"
    broken = payload[:1] + bytes([payload[1] ^ 1]) + payload[2:]
    assert _err(ex, "RESTORE", "n", "0", broken) == "DUMP payload version or checksum are wrong"
    assert _err(ex, "RESTORE", "n", "0", payload, "FOO") == "syntax error"
    assert _err(ex, "RESTORE", "n", "0", payload, "IDLETIME", "-1") == "Invalid IDLETIME value, must be >= 0"
    assert _err(ex, "RESTORE", "n", "0", payload, "FREQ", "256") == "Invalid FREQ value, must be >= 0 and <= 255"
    assert _err(ex, "RESTORE", "n", "0", payload, "IDLETIME", "1", "FREQ", "1") == "syntax error"
    assert _err(ex, "RESTORE", "n", "0", payload, "IDLETIME") == "syntax error"
    # Option errors come before BUSYKEY, BUSYKEY before the TTL and the payload.
    assert _err(ex, "RESTORE", "k", "0", payload, "FOO") == "syntax error"
    assert _err(ex, "RESTORE", "k", "-1", b"junk") == "BUSYKEY Target key name already exists."
    assert _err(ex, "RESTORE", "n") == "wrong number of arguments for 'restore' command"
    assert r.exists("n") == 0


def test_restore_bad_body_with_valid_checksum(r):
    from crc32c import crc32c
    import struct
    body = b"\x01" + struct.pack("<I", 2) + struct.pack("<2I", 5, 5) + b"abc" + struct.pack("<H", LEGACY_DUMP_VERSION)
    payload = body + struct.pack("<I", crc32c(body))
    assert verify_payload(payload)
    assert _err(r.execute_command, "RESTORE", "n", "0", payload) == "Bad data format"
    body = b"\x09" + struct.pack("<H", LEGACY_DUMP_VERSION)
    assert _err(r.execute_command, "RESTORE", "n", "0", body + struct.pack("<I", crc32c(body))) == \
        "Bad data format"


def test_restore_idletime_and_freq(r):
    r.set("k", "v")
    payload = r.dump("k")
    try:
        r.config_set("maxmemory-policy", "allkeys-lru")
        assert r.restore("idle", 0, payload, idletime=1000)
        assert 1000 <= r.object("idletime", "idle") <= 1002
        r.config_set("maxmemory-policy", "allkeys-lfu")
        assert r.restore("hot", 0, payload, frequency=100)
        assert r.execute_command("OBJECT", "FREQ", "hot") == 100
    finally:
        r.config_set("maxmemory-policy", "noeviction")


def test_dump_payload_unit():
    z = ZSet()
    z.add(b"m", 2.0)
    z.add(b"n", -0.0)
    for value in (b"", b"x" * 1000, {b"f": b"v"}, {b"a"}, z):
        p = dump_payload(value)
        assert verify_payload(p)
        back = load_payload(p)
        if isinstance(value, ZSet):
            assert back.order == value.order
        else:
            assert back == value
    assert not verify_payload(b"\x00" + b"\x0b\x00" + b"\x00" * 8)  # a Valkey-like footer


def test_restore_replays_deterministically():
    cmds = [["set", "k", "v"], ["rpush", "l", "a", "b"]]
    payload_s = dump_payload(b"v")
    payload_l = dump_payload(deque([b"a", b"b"]))
    cmds += [["restore", "k2", "5000", payload_s],
             ["restore", "l", "0", payload_l, "replace"],
             ["restore", "abs", "1800000000000", payload_s, "absttl"],
             ["restore", "k", "1", payload_s, "absttl", "replace"],
             ["restore", "n", "0", payload_s, "idletime", "10"]]
    replies, effects = run_and_replay(cmds, clock_ms=lambda: 1_700_000_000_000)
    assert replies[2:] == [b"+OK\r\n"] * 5
    assert (0, (b"restore", b"k2", b"1700000005000", payload_s, b"ABSTTL")) in effects
    assert (0, (b"UNLINK", b"k")) in effects
    assert (0, (b"restore", b"abs", b"1800000000000", payload_s, b"absttl")) in effects


def test_restore_stream_replays_deterministically():
    build = [["xadd", "s", "1-1", "a", "b"], ["xadd", "s", "2-1", "c", "d"], ["xgroup", "create", "s", "g", "0"],
             ["xreadgroup", "group", "g", "c1", "count", "1", "streams", "s", ">"], ["xdel", "s", "2-1"],
             ["dump", "s"]]
    replies, _ = run_and_replay(build)
    replies, effects = run_and_replay(build + [["restore", "s2", "0", replies[-1]]])
    assert replies[-1] == b"+OK\r\n"
    assert effects[-1][1][:3] == (b"restore", b"s2", b"0")


def test_restored_keys_survive_kill9(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        c.rpush("l", *range(100))
        c.hset("h", mapping={"a": 1, "b": 2})
        c.zadd("z", {"x": 1.25})
        c.set("s", "v")
        payloads = {k: c.dump(k) for k in ("l", "h", "z", "s")}
        c.flushall()
        assert c.restore("l", 0, payloads["l"])
        assert c.restore("h", 600000, payloads["h"])
        assert c.restore("z", 0, payloads["z"])
        assert c.restore("z", 0, payloads["s"], replace=True)
        assert c.restore("gone", 1, payloads["s"], absttl=True)
        expire_h = c.pexpiretime("h")
        assert sort(c, "l", "DESC", "LIMIT", 0, 10, "STORE", "top") == 10
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.lrange("l", 0, -1) == [str(i).encode() for i in range(100)]
        assert c.hgetall("h") == {b"a": b"1", b"b": b"2"}
        assert c.pexpiretime("h") == expire_h
        assert c.type("z") == b"string" and c.get("z") == b"v"
        assert c.exists("gone") == 0
        assert c.lrange("top", 0, -1) == [str(i).encode() for i in range(99, 89, -1)]


# -- WAIT / WAITAOF ----------------------------------------------------------------------------------

def test_wait_without_replicas(rr):
    rr.set("k", "v")
    assert rr.execute_command("WAIT", 0, 0) == 0
    assert rr.execute_command("WAIT", -1, 0) == 0
    started = time.monotonic()
    assert rr.execute_command("WAIT", 1, 100) == 0  # blocks up to the timeout: no replica acknowledges
    assert time.monotonic() - started >= 0.08
    assert _err(rr.execute_command, "WAIT", "x", 0) == "value is not an integer or out of range"
    assert _err(rr.execute_command, "WAIT", 0, "x") == "timeout is not an integer or out of range"
    assert _err(rr.execute_command, "WAIT", 0, -1) == "timeout is negative"
    assert _err(rr.execute_command, "WAIT", 0) == "wrong number of arguments for 'wait' command"


def test_wait_in_transaction_does_not_block(r):
    with r.pipeline() as p:
        p.set("k", "v")
        p.execute_command("WAIT", 5, 0)
        assert p.execute() == [True, 0]


def test_waitaof_sync_mode(rr):
    assert rr.execute_command("WAITAOF", 0, 0, 0) == [1, 0]  # no write yet: the journal holds all of it
    rr.set("k", "v")
    assert rr.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    started = time.monotonic()
    assert rr.execute_command("WAITAOF", 1, 1, 100) == [1, 0]  # waits for a replica until the timeout
    assert time.monotonic() - started >= 0.08
    assert _err(rr.execute_command, "WAITAOF", 2, 0, 0) == "value is out of range, value must between 0 and 1"
    assert _err(rr.execute_command, "WAITAOF", "x", 0, 0) == "value is not an integer or out of range"
    assert _err(rr.execute_command, "WAITAOF", 0, -1, 0) == "value is out of range, must be positive"
    assert _err(rr.execute_command, "WAITAOF", 0, 0, -5) == "timeout is negative"


def test_waitaof_pipelined_after_write(r):
    with r.pipeline(transaction=False) as p:
        for i in range(50):
            p.set(f"k{i}", i)
            p.execute_command("WAITAOF", 1, 0, 0)
        out = p.execute()
    assert out[1::2] == [[1, 0]] * 50


def test_waitaof_without_journal(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        c.set("k", "v")
        assert _err(c.execute_command, "WAITAOF", 1, 0, 0) == \
            "WAITAOF cannot be used when numlocal is set but appendonly is disabled."
        assert c.execute_command("WAITAOF", 0, 0, 0) == [0, 0]


def test_waitaof_async_waits_for_the_commit(server_factory):
    srv = server_factory("--durability", "async")
    with srv.client() as c, srv.client(protocol=3) as c3:
        c.execute_command("DEBUG", "JOURNAL-STALL", 300)
        c.set("k", "v")  # acknowledged at once in async mode
        assert c.execute_command("WAITAOF", 1, 0, 20) == [0, 0]  # not committed within 20 ms
        started = time.monotonic()
        assert c.execute_command("WAITAOF", 1, 0, 0) == [1, 0]   # waits for the commit
        assert time.monotonic() - started > 0.05
        c.execute_command("DEBUG", "JOURNAL-STALL", 0)
        c3.set("k3", "v")
        assert c3.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
