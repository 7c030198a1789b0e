"""OBJECT ENCODING as Valkey 8.0 answers it: the encoding config names (and their `ziplist` aliases) are
accepted and decide the encoding, and the encoding follows the value's history as Valkey's does.
Real server, valkey-py; plus unit checks of keyspace/encoding.py."""

from collections import deque

import pytest

from durakv.keyspace import Keyspace
from durakv.keyspace import encoding as enc_mod
from durakv.keyspace.encoding import EncodingRules
from helpers.wire import error_of

ENCODING_CONFIGS = {
    "list-max-listpack-size": "-2", "hash-max-listpack-entries": "512", "hash-max-listpack-value": "64",
    "set-max-intset-entries": "512", "set-max-listpack-entries": "128", "set-max-listpack-value": "64",
    "zset-max-listpack-entries": "128", "zset-max-listpack-value": "64", "list-compress-depth": "0",
    "stream-node-max-entries": "100", "stream-node-max-bytes": "4096", "hll-sparse-max-bytes": "3000",
}


@pytest.fixture
def rc(r):
    """A client on the shared server whose encoding configs are put back to Valkey's defaults after."""
    yield r
    for name, value in ENCODING_CONFIGS.items():
        r.config_set(name, value)


def enc(r, key):
    return r.execute_command("OBJECT", "ENCODING", key)


def test_encoding_configs_have_valkey_defaults_and_aliases(rc):
    got = rc.config_get("*")
    for name, value in ENCODING_CONFIGS.items():
        assert got[name] == value, name
    # The old names are aliases of the same settings.
    assert rc.config_set("list-max-ziplist-size", "3")
    assert rc.config_get("list-max-listpack-size") == {"list-max-listpack-size": "3"}
    assert rc.config_get("list-max-ziplist-size") == {"list-max-ziplist-size": "3"}
    for old, new in (("hash-max-ziplist-entries", "hash-max-listpack-entries"),
                     ("hash-max-ziplist-value", "hash-max-listpack-value"),
                     ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
                     ("zset-max-ziplist-value", "zset-max-listpack-value")):
        rc.config_set(old, "7")
        assert rc.config_get(new) == {new: "7"}
    assert error_of(rc, "CONFIG", "SET", "set-max-intset-entries", "abc") == (
        "ERR CONFIG SET failed (possibly related to argument 'set-max-intset-entries') - "
        "argument couldn't be parsed into an integer")
    assert error_of(rc, "CONFIG", "SET", "hash-max-listpack-value", "-1") == (
        "ERR CONFIG SET failed (possibly related to argument 'hash-max-listpack-value') - "
        "argument must be a memory value")          # Valkey 9.1.2: a memory config, unsigned
    assert error_of(rc, "CONFIG", "SET", "set-max-listpack-value", "-1") == (
        "ERR CONFIG SET failed (possibly related to argument 'set-max-listpack-value') - "
        "argument must be between 0 and 9223372036854775807 inclusive")


def test_config_get_several_patterns(r):
    got = r.config_get("maxmemory", "hash-max-*-entries", "list-max-listpack-size", "maxmemory")
    assert got == {"maxmemory": "0", "hash-max-listpack-entries": "512", "hash-max-ziplist-entries": "512",
                   "list-max-listpack-size": "-2"}


def test_strings_int_embstr_raw(r):
    r.set("i", "12345")
    assert enc(r, "i") == b"int"
    r.set("e", "x" * 44)
    assert enc(r, "e") == b"embstr"
    r.set("raw", "x" * 45)
    assert enc(r, "raw") == b"raw"
    # An in-place change leaves a raw string, however short (dbUnshareStringValue).
    r.set("a", "1")
    r.append("a", "2")
    assert enc(r, "a") == b"raw"
    r.set("a", "12")
    assert enc(r, "a") == b"int"
    r.set("sr", "1234")
    assert r.setrange("sr", 0, "") == 4
    assert enc(r, "sr") == b"int"  # nothing set, nothing changed
    r.setrange("sr", 1, "3")
    assert enc(r, "sr") == b"raw"
    r.set("b", "1")
    r.setbit("b", 0, 0)
    assert enc(r, "b") == b"raw"
    r.incr("b2")
    assert enc(r, "b2") == b"int"
    r.append("new", "12")  # APPEND creating the key encodes it like SET
    assert enc(r, "new") == b"int"


def test_hash_listpack_to_hashtable_is_sticky(rc):
    r = rc
    r.config_set("hash-max-ziplist-value", "8")
    r.hset("h", "f", "v")
    assert enc(r, "h") == b"listpack"
    r.hset("h", "big", "x" * 9)
    assert enc(r, "h") == b"hashtable"
    r.hdel("h", "big")
    assert enc(r, "h") == b"hashtable"  # Valkey never converts back
    r.config_set("hash-max-listpack-entries", "2")
    r.hset("h2", mapping={"a": "1", "b": "2"})
    assert enc(r, "h2") == b"listpack"
    r.hset("h2", "c", "3")
    assert enc(r, "h2") == b"hashtable"


def test_set_intset_listpack_hashtable(rc):
    r = rc
    r.sadd("s", 1, 2, 3)
    assert enc(r, "s") == b"intset"
    r.sadd("s", "a")
    assert enc(r, "s") == b"listpack"
    r.srem("s", "a")
    assert enc(r, "s") == b"listpack"  # not back to intset
    r.config_set("set-max-intset-entries", "4")
    r.sadd("ints", 1, 2, 3, 4)
    assert enc(r, "ints") == b"intset"
    r.sadd("ints", 5)
    assert enc(r, "ints") == b"hashtable"
    r.config_set("set-max-listpack-value", "3")
    r.sadd("lp", "a")
    r.sadd("lp", "abcd")
    assert enc(r, "lp") == b"hashtable"
    # SMOVE of a non-integer into an intset converts it; of an integer it does not.
    r.delete("s1", "s2")
    r.sadd("s1", 1, "a", "b")
    r.sadd("s2", 2, 3)
    r.smove("s1", "s2", 1)
    assert enc(r, "s2") == b"intset"
    r.smove("s1", "s2", "a")
    assert enc(r, "s2") == b"listpack"
    # A stored result gets the smallest encoding its content allows.
    r.sadd("l1", "a", "b", 1, 3)
    r.sadd("l2", "c", 1, 3)
    r.sinterstore("res", "l1", "l2")
    assert enc(r, "res") == b"intset"


def test_zset_listpack_skiplist(rc):
    r = rc
    r.config_set("zset-max-ziplist-entries", "2")
    r.zadd("z", {"a": 1, "b": 2})
    assert enc(r, "z") == b"listpack"
    r.zadd("z", {"c": 3})
    assert enc(r, "z") == b"skiplist"
    r.zrem("z", "c", "b")
    assert enc(r, "z") == b"skiplist"
    r.config_set("zset-max-listpack-entries", "0")
    r.zadd("z0", {"a": 1})
    assert enc(r, "z0") == b"skiplist"
    r.config_set("zset-max-listpack-entries", "128")
    r.zunionstore("zu", ["z"])  # a stored result is converted back when it fits
    assert enc(r, "zu") == b"listpack"


def test_list_listpack_quicklist_hysteresis(rc):
    r = rc
    r.config_set("list-max-listpack-size", "4")
    r.rpush("l", "a", "b", "c", "d")
    assert enc(r, "l") == b"listpack"
    r.rpush("l", "e")
    assert enc(r, "l") == b"quicklist"
    r.rpop("l", 2)
    assert enc(r, "l") == b"quicklist"  # 3 elements: above half the limit, no conversion yet
    r.rpop("l")
    assert enc(r, "l") == b"listpack"   # 2 <= 4 / 2
    # Byte-limited (-1: 4096 bytes a node), one large element.
    r.config_set("list-max-ziplist-size", "-1")
    r.delete("big")
    r.rpush("big", "a", "b")
    r.lset("big", 0, "x" * 5000)
    assert enc(r, "big") == b"quicklist"
    r.lset("big", 0, "c")
    assert enc(r, "big") == b"listpack"
    # list-max-listpack-size 0 counts as 1: a single element is still a listpack.
    r.config_set("list-max-listpack-size", "0")
    r.delete("one")
    r.rpush("one", "a")
    assert enc(r, "one") == b"listpack"
    r.rpush("one", "b")
    assert enc(r, "one") == b"quicklist"


def test_encoding_follows_rename_copy_and_move(rc):
    r = rc
    r.config_set("hash-max-listpack-value", "4")
    r.hset("h", "f", "toolong")
    r.hset("h", "f", "v")
    assert enc(r, "h") == b"hashtable"
    r.copy("h", "h2")
    r.rename("h", "h3")
    assert enc(r, "h2") == b"hashtable"
    assert enc(r, "h3") == b"hashtable"
    r.move("h3", 5)
    r.execute_command("SELECT", 5)
    assert enc(r, "h3") == b"hashtable"
    r.execute_command("SELECT", 0)
    # A key given a new value starts over.
    r.delete("h2")
    r.hset("h2", "f", "v")
    assert enc(r, "h2") == b"listpack"


def test_sort_store_encoding(rc):
    r = rc
    r.rpush("src", *range(10))
    r.sort("src", store="dst")
    assert enc(r, "dst") == b"listpack"
    r.rpush("src", *(["1"] * 6000))
    r.sort("src", store="dst")
    assert enc(r, "dst") == b"quicklist"


def test_encoding_unit_rules():
    rules = EncodingRules()
    db = Keyspace(1).dbs[0]
    assert enc_mod.encoding_of(rules, db, b"k", deque([b"1"] * 4000)) == b"listpack"  # 2 bytes an entry
    assert enc_mod.encoding_of(rules, db, b"k", deque([b"1"] * 4100)) == b"quicklist"
    assert enc_mod.encoding_of(rules, db, b"k", b"-0") == b"embstr"
    assert enc_mod.encoding_of(rules, db, b"k", b"9223372036854775807") == b"int"
    assert enc_mod.encoding_of(rules, db, b"k", b"9223372036854775808") == b"embstr"
    assert enc_mod.encoding_of(rules, db, b"k", {b"f": b"v"}) == b"listpack"
    assert enc_mod.encoding_of(rules, db, b"k", {b"f%d" % i: b"v" for i in range(513)}) == b"hashtable"
    assert rules.set("list-max-listpack-size", 5) and rules.list_fill == 5
    assert not rules.set("maxmemory", 5)
    # The bracketing fast path and the exact size agree around a limit.
    for n in range(2040, 2060):
        values = [b"ab"] * n
        assert enc_mod.listpack_fits(values, 8192) == (enc_mod.listpack_bytes(values) <= 8192)
    for n in range(1, 4):
        values = [b"x" * 4000] * n
        assert enc_mod.listpack_fits(values, 8192) == (enc_mod.listpack_bytes(values) <= 8192)


def test_stream_node_limits_drive_approximate_trim(rc):
    r = rc
    r.config_set("stream-node-max-entries", "2")
    for i in range(1, 11):
        r.xadd("s", {"f": "v"}, id=f"{i}-0")
    # Nodes of two entries: MAXLEN ~ 5 drops whole nodes while at least 5 stay (as Valkey 8.0.1 answers).
    assert r.xtrim("s", maxlen=5, approximate=True) == 4
    assert r.xlen("s") == 6
    r.config_set("stream-node-max-entries", "100")
    for i in range(1, 11):
        r.xadd("s2", {"f": "v"}, id=f"{i}-0")
    assert r.xtrim("s2", maxlen=5, approximate=True) == 0


def test_hll_sparse_max_bytes_promotes_to_dense(rc):
    r = rc
    r.config_set("hll-sparse-max-bytes", "30")
    r.pfadd("h", *"abcdefghijklmnop")
    assert r.getrange("h", 4, 4) == b"\x00"  # dense
    r.pfadd("h2", "a")
    assert r.getrange("h2", 4, 4) == b"\x01"  # still sparse
    assert enc(r, "h2") == b"raw"


def test_approximate_trim_limit_follows_stream_node_max_entries(rc):
    r = rc
    r.config_set("stream-node-max-entries", "1")
    for _ in range(102):
        r.xadd("s", {"xitem": "v"})
    r.xtrim("s", maxlen=1, approximate=True)
    assert r.xlen("s") == 2  # at most 100 * 1 entries trimmed by one ~ trim
    r.delete("s")
    for _ in range(102):
        r.xadd("s", {"xitem": "v"})
    r.xtrim("s", maxlen=1, approximate=False)
    assert r.xlen("s") == 1


def test_lset_is_checked_as_an_append(rc):
    r = rc
    r.config_set("list-max-listpack-size", "3")
    r.rpush("l", "a", "b", "c")
    assert enc(r, "l") == b"listpack"
    r.lset("l", 0, "hello")  # as Valkey: 3 elements + the new one exceed 3, so a quicklist
    assert enc(r, "l") == b"quicklist"


def test_list_size_cache_stays_exact_under_random_operations():
    """For a listpack, Db.enc keeps (lpBytes, length) up to date through pushes and pops; whatever the
    mix of list commands, when it is there it equals the list's real listpack size."""
    import random
    from durakv.commands import load_all
    from durakv.commands.pipeline import Pipeline
    from durakv.commands.session import Session
    load_all()
    rng = random.Random(7)
    for fill in (-1, 5, 40):
        ks = Keyspace(1)
        ks.encoding_rules.set("list-max-listpack-size", fill)
        d, s = Pipeline(ks), Session(authenticated=True)
        db = ks.dbs[0]
        for _ in range(1500):
            value = rng.choice([b"a", b"123", b"-7", b"x" * rng.randint(1, 300), b"%d" % rng.randint(-10**12, 10**12)])
            op = rng.choice(["LPUSH", "RPUSH", "LPOP", "RPOP", "LSET", "LINSERT", "LTRIM", "LREM", "RPOPLPUSH"])
            argv = {"LPUSH": [b"LPUSH", b"l", value, value], "RPUSH": [b"RPUSH", b"l", value],
                    "LPOP": [b"LPOP", b"l"], "RPOP": [b"RPOP", b"l", b"2"], "LSET": [b"LSET", b"l", b"0", value],
                    "LINSERT": [b"LINSERT", b"l", b"BEFORE", b"a", value], "LTRIM": [b"LTRIM", b"l", b"0", b"60"],
                    "LREM": [b"LREM", b"l", b"1", b"a"], "RPOPLPUSH": [b"RPOPLPUSH", b"l", b"l2"]}[op]
            d.process(s, argv)
            for key in (b"l", b"l2"):
                state, dq = db.enc.get(key), db.data.get(key)
                if type(state) is tuple:
                    assert state == (enc_mod.listpack_bytes(dq), len(dq)), (fill, op)
                if dq is not None and state is None:
                    assert enc_mod.list_content_encoding(ks.encoding_rules, dq) == b"listpack"
