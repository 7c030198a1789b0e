"""MIGRATE between real durakv servers: keys move with their TTL, COPY / REPLACE / KEYS / db, the target's
errors and connection errors in Valkey 8.0.1's words, the source's DEL journaled (a kill -9 does not bring a
migrated key back), and AUTH arguments redacted in MONITOR and the slow log.

Before this, MIGRATE answered "unknown command" (Valkey's introspection and slowlog units stopped there)."""

import socket

import pytest
import valkey

from conftest import free_port


def _migrate(c, *args):
    return c.execute_command("MIGRATE", *args)


def _err(c, *args):
    with pytest.raises(valkey.ResponseError) as e:
        _migrate(c, *args)
    return str(e.value)


def test_migrate_moves_keys_with_their_ttl(server_factory):
    src, dst = server_factory(), server_factory()
    a, b = src.client(), dst.client()
    assert _migrate(a, "127.0.0.1", dst.port, "missing", 0, 1000) == b"NOKEY"
    a.set("k", "v", px=60000)
    a.rpush("l", *range(5))
    a.hset("h", mapping={"f": "1"})
    assert _migrate(a, "127.0.0.1", dst.port, "k", 0, 1000) == b"OK"
    assert a.exists("k") == 0 and b.get("k") == b"v" and 0 < b.pttl("k") <= 60000
    assert a.info("stats")["migrate_cached_sockets"] == 1     # kept for the next MIGRATE (10 s idle at most)
    # COPY into db 3, several keys (missing ones skipped)
    assert _migrate(a, "127.0.0.1", dst.port, "", 3, 1000, "COPY", "KEYS", "l", "h", "nope") == b"OK"
    assert a.exists("l", "h") == 2
    b3 = dst.client(db=3)
    assert b3.lrange("l", 0, -1) == [b"0", b"1", b"2", b"3", b"4"] and b3.hgetall("h") == {b"f": b"1"}
    # the target refuses an existing key unless REPLACE
    assert _err(a, "127.0.0.1", dst.port, "", 3, 1000, "KEYS", "l") == \
        "Target instance replied with error: BUSYKEY Target key name already exists."
    assert a.exists("l") == 1           # not acknowledged: kept
    a.rpush("l", "5")
    assert _migrate(a, "127.0.0.1", dst.port, "", 3, 1000, "REPLACE", "KEYS", "l") == b"OK"
    assert a.exists("l") == 0 and b3.llen("l") == 6


def test_migrate_errors_in_valkeys_words(server_factory):
    src = server_factory()
    a = src.client()
    a.set("a", "1")
    assert _err(a, "127.0.0.1", src.port, "a", 0, 1000, "KEYS", "x") == \
        "When using MIGRATE KEYS option, the key argument must be set to the empty string"
    assert _err(a, "127.0.0.1", src.port, "a", 0, 1000, "AUTH") == "syntax error"
    assert _err(a, "127.0.0.1", src.port, "a", 0, 1000, "BOGUS") == "syntax error"
    assert _err(a, "127.0.0.1", src.port, "a", "x", 1000) == "value is not an integer or out of range"
    assert _err(a, "127.0.0.1", src.port, "a", 0, "y") == "value is not an integer or out of range"
    closed = free_port()
    assert _err(a, "127.0.0.1", closed, "a", 0, 1000) == "IOERR error or timeout writing to target instance"
    dst = server_factory()
    assert _err(a, "127.0.0.1", dst.port, "a", 0, 1000, "AUTH", "pw") == (
        "Target instance replied with error: ERR AUTH <password> called without any password configured for "
        "the default user. Are you sure your configuration is correct?")
    assert _err(a, "127.0.0.1", dst.port, "a", 0, 1000, "AUTH2", "u", "pw") == \
        "Target instance replied with error: WRONGPASS invalid username-password pair or user is disabled."
    # an error from the target (here its AUTH) keeps the key here, as in Valkey, even if its RESTORE ran there
    assert a.get("a") == b"1"
    assert a.ping()


def test_migrated_keys_stay_moved_after_kill9(server_factory):
    src, dst = server_factory("--durability", "sync"), server_factory("--durability", "sync")
    a = src.client()
    for i in range(50):
        a.set(f"k{i}", f"v{i}")
    assert _migrate(a, "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *[f"k{i}" for i in range(0, 50, 2)]) == b"OK"
    src.kill()
    dst.kill()
    src.start()
    dst.start()
    a, b = src.client(), dst.client()
    assert sorted(a.keys()) == sorted(f"k{i}".encode() for i in range(1, 50, 2))
    assert sorted(b.keys()) == sorted(f"k{i}".encode() for i in range(0, 50, 2))
    assert b.get("k10") == b"v10"


def test_migrate_auth_is_redacted_in_monitor_and_slowlog(server_factory):
    srv = server_factory()
    c = srv.client()
    c.config_set("slowlog-log-slower-than", 0)
    c.slowlog_reset()
    mon = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    mon.sendall(b"MONITOR\r\n")
    assert mon.recv(100).startswith(b"+OK")
    _migrate(c, "127.0.0.1", srv.port, "key", 9, 5000)
    _migrate(c, "127.0.0.1", srv.port, "key", 9, 5000, "AUTH", "user")
    _migrate(c, "127.0.0.1", srv.port, "key", 9, 5000, "AUTH2", "user", "password")
    c.config_set("slowlog-log-slower-than", -1)
    seen = b""
    while seen.count(b"\r\n") < 3:
        seen += mon.recv(65536)
    mon.close()
    lines = [l for l in seen.split(b"\r\n") if b"migrate" in l.lower()]
    assert b'"key" "9" "5000"' in lines[0] and b"redacted" not in lines[0]
    assert lines[1].endswith(b'"key" "9" "5000" "AUTH" "(redacted)"')
    assert lines[2].endswith(b'"key" "9" "5000" "AUTH2" "(redacted)" "(redacted)"')
    entries = [e for e in c.execute_command("SLOWLOG", "GET") if e[3][0].lower() == b"migrate"]
    assert [e[3][3:] for e in reversed(entries)] == [
        [b"key", b"9", b"5000"], [b"key", b"9", b"5000", b"AUTH", b"(redacted)"],
        [b"key", b"9", b"5000", b"AUTH2", b"(redacted)", b"(redacted)"]]


def test_payloads_and_migrate_between_durakv_and_redis_server(server_factory, redis_server):
    # DUMP is Valkey's payload format now: redis-server (Redis 7.0, what CI installs) RESTOREs durakv's DUMP,
    # durakv RESTOREs redis-server's, and MIGRATE moves keys from durakv into redis-server
    port, redis = redis_server("--sanitize-dump-payload", "yes")
    d = server_factory().client()
    d.rpush("l", *[f"e{i}" for i in range(300)])
    d.hset("h", mapping={f"f{i}": i for i in range(10)})
    d.zadd("z", {"a": 1.5, "b": float("-inf")})
    d.sadd("s", *range(100))
    d.set("n", 12345)
    d.xadd("x", {"f": "v"}, id="1-1")
    d.xgroup_create("x", "g", id="0")
    d.xreadgroup("g", "alice", {"x": ">"})
    for key in ("l", "h", "z", "s", "n", "x"):
        assert redis.restore(key, 0, d.dump(key))
        assert d.restore(key + ":back", 0, redis.dump(key))
    assert redis.lrange("l", 0, -1) == d.lrange("l:back", 0, -1) == d.lrange("l", 0, -1)
    assert redis.hgetall("h") == d.hgetall("h:back")
    assert redis.zrange("z", 0, -1, withscores=True) == d.zrange("z:back", 0, -1, withscores=True)
    assert set(redis.smembers("s")) == set(d.smembers("s:back")) == {b"%d" % i for i in range(100)}
    assert redis.get("n") == d.get("n:back") == b"12345"
    assert redis.xpending("x", "g")["pending"] == d.xpending("x:back", "g")["pending"] == 1
    d.set("moving", "here", px=60000)
    assert _migrate(d, "127.0.0.1", port, "moving", 0, 5000) == b"OK"
    assert d.exists("moving") == 0 and redis.get("moving") == b"here" and 0 < redis.pttl("moving") <= 60000
