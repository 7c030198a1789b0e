"""DEBUG: DIGEST / DIGEST-VALUE computed as Valkey's debug.c does (checked against a real redis-server fed
the same writes), OBJECT, PROTOCOL, POPULATE, LOG and the harmless knobs. Real servers, valkey-py."""

import os
import shutil
import signal
import socket
import subprocess

import pytest
import valkey

from conftest import free_port, wait_until
from durakv import messages
from durakv.commands.debugging import dataset_digest, mix_digest, xor_digest
from durakv.keyspace import Keyspace
from durakv.protocol.resp import fpconv_dtoa
from helpers.wire import _encode, _read_reply, error_of, raw, wire

REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture
def redis_server(tmp_path):
    assert REDIS_SERVER, "redis-server is needed: apt-get install redis-server"
    port = free_port()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path), "--enable-debug-command", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    client = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        wait_until(lambda: client.ping(), 10, what="redis-server")
        yield client
    finally:
        client.close()
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _same_writes(c):
    c.flushall()
    c.set("s", "hello")
    c.set("n", "12345")
    c.rpush("l", "a", "b", "c", "1", "2")
    c.sadd("st", "x", "y", "3")
    c.hset("h", mapping={"f1": "v1", "f2": "v2"})
    # Integer and short binary fractions: Redis 7.0 prints scores with %.17g, Valkey 8 with fpconv_dtoa,
    # which agree on these (Valkey's own digest of 0.1 is checked below without a second server).
    c.zadd("z", {"a": 1, "b": 2.5, "c": -3, "d": 1000})
    c.set("e", "v", ex=1000)
    c.xadd("x", {"a": "1", "b": "2"}, id="1-1")
    c.xadd("x", {"c": "3"}, id="2-0")
    c.execute_command("SELECT", 3)
    c.set("other", "x")
    c.execute_command("SELECT", 0)


def test_digest_matches_redis_server(r, redis_server):
    assert r.execute_command("DEBUG", "DIGEST") == b"0" * 40
    assert redis_server.execute_command("DEBUG", "DIGEST") == b"0" * 40
    _same_writes(r)
    _same_writes(redis_server)
    assert r.execute_command("DEBUG", "DIGEST") == redis_server.execute_command("DEBUG", "DIGEST")
    keys = ["s", "n", "l", "st", "h", "z", "e", "x", "missing"]
    mine = r.execute_command("DEBUG", "DIGEST-VALUE", *keys)
    assert mine == redis_server.execute_command("DEBUG", "DIGEST-VALUE", *keys)
    assert mine[-1] == b"0" * 40
    # Order matters for a list, not for a set or a hash.
    r.rpush("l2", "b", "a")
    redis_server.rpush("l2", "a", "b")
    assert r.execute_command("DEBUG", "DIGEST-VALUE", "l2") != redis_server.execute_command(
        "DEBUG", "DIGEST-VALUE", "l2")
    r.sadd("s2", "b", "a")
    redis_server.sadd("s2", "a", "b")
    assert r.execute_command("DEBUG", "DIGEST-VALUE", "s2") == redis_server.execute_command(
        "DEBUG", "DIGEST-VALUE", "s2")


def test_digest_known_values():
    """Valkey 8.0.1's answers for the same data (taken from a Valkey 8.0.1 server): a zset score is hashed
    in fpconv_dtoa's form ('0.1'), the db id is mixed in."""
    ks = Keyspace(16)
    from durakv.keyspace import ZSet
    z = ZSet()
    z.add(b"a", 0.1)
    ks.dbs[0].data[b"z2"] = z
    from durakv.commands.debugging import key_digest, object_digest
    assert object_digest(bytes(20), z, False).hex() == "6605f56364a85f2c14bc54c5b4318ac4616eb60a"
    assert key_digest(ks.dbs[0], b"z2", z) != object_digest(bytes(20), z, False)
    assert dataset_digest(Keyspace(16)) == bytes(20)
    assert fpconv_dtoa(0.1) == b"0.1" and fpconv_dtoa(1e18) == b"1e+18" and fpconv_dtoa(-0.0) == b"-0"
    d = xor_digest(bytes(20), b"abc")
    assert d.hex() == "a9993e364706816aba3e25717850c26c9cd0d89d"  # SHA1("abc") xor 0
    assert mix_digest(bytes(20), b"abc") != d


def test_debug_object(r):
    r.set("n", "100")
    r.rpush("l", "a")
    text = r.execute_command("DEBUG", "OBJECT", "n")
    assert text.startswith(b"Value at:0x")
    fields = dict(f.split(b":", 1) for f in text.split()[1:])
    assert fields[b"encoding"] == b"int" and fields[b"refcount"] == b"2147483647"
    assert b"serializedlength" in fields and b"lru_seconds_idle" in fields and b"lfu_freq" in fields
    fast = r.execute_command("DEBUG", "OBJECT", "l", "fast")
    assert b"encoding:listpack" in fast and b"serializedlength" not in fast
    assert error_of(r, "DEBUG", "OBJECT", "missing") == "ERR no such key"
    r.config_set("list-max-listpack-size", "2")
    try:
        r.rpush("q", "a", "b", "c")
        assert b"encoding:quicklist" in r.execute_command("DEBUG", "OBJECT", "q")
        assert b"ql_listpack_max:2 ql_compressed:0" in r.execute_command("DEBUG", "OBJECT", "q")
    finally:
        r.config_set("list-max-listpack-size", "-2")


def _two_replies(client, *args):
    kw = client.connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"]), timeout=10) as s:
        f = s.makefile("rb")
        s.sendall(_encode(["HELLO", "3"]))
        _read_reply(f)
        s.sendall(_encode(args))
        return _read_reply(f), _read_reply(f)


def test_debug_protocol(rr):
    r3 = rr.connection_pool.connection_kwargs.get("protocol") == 3
    assert wire(rr, "DEBUG", "PROTOCOL", "string") == b"$11\r\nHello World\r\n"
    assert wire(rr, "DEBUG", "PROTOCOL", "integer") == b":12345\r\n"
    assert wire(rr, "DEBUG", "PROTOCOL", "double") == (b",3.141\r\n" if r3 else b"$5\r\n3.141\r\n")
    assert wire(rr, "DEBUG", "PROTOCOL", "true") == (b"#t\r\n" if r3 else b":1\r\n")
    assert wire(rr, "DEBUG", "PROTOCOL", "null") == (b"_\r\n" if r3 else b"$-1\r\n")
    assert wire(rr, "DEBUG", "PROTOCOL", "bignum") == (
        b"(1234567999999999999999999999999999999\r\n" if r3 else b"$37\r\n1234567999999999999999999999999999999\r\n")
    real = b"$39\r\nSome real reply following the attribute\r\n"
    if r3:  # an attribute, then the real reply
        assert _two_replies(rr, "DEBUG", "PROTOCOL", "attrib") == (
            b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n", real)
    else:
        assert wire(rr, "DEBUG", "PROTOCOL", "attrib") == real
    assert wire(rr, "DEBUG", "PROTOCOL", "verbatim") == (
        b"=29\r\ntxt:This is a verbatim\nstring\r\n" if r3 else b"$25\r\nThis is a verbatim\nstring\r\n")
    if r3:
        assert _two_replies(rr, "DEBUG", "PROTOCOL", "push") == (
            b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n", b"$40\r\nSome real reply following the push reply\r\n")
    else:
        assert wire(rr, "DEBUG", "PROTOCOL", "push") == b"-ERR RESP2 is not supported by this command\r\n"
    assert wire(rr, "DEBUG", "PROTOCOL", "nope") == (
        b"-ERR Wrong protocol type name. Please use one of the following: "
        b"string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false\r\n")


def test_debug_populate_log_and_knobs(r):
    assert r.execute_command("DEBUG", "POPULATE", "5") == b"OK"
    assert r.dbsize() == 5 and r.get("key:3") == b"value:3"
    r.set("p:1", "mine")
    r.execute_command("DEBUG", "POPULATE", "3", "p", "10")
    assert r.get("p:1") == b"mine"  # existing keys are left alone
    assert r.get("p:2") == b"value:2" + b"\x00" * 3
    assert r.execute_command("DEBUG", "LOG", "hello from a test") == b"OK"
    assert r.execute_command("DEBUG", "DICT-RESIZING", "0") == b"OK"
    assert r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "1b") == b"OK"
    assert r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "0") == b"OK"
    assert error_of(r, "DEBUG", "QUICKLIST-PACKED-THRESHOLD", "5gb") == (
        "ERR argument must be a memory value bigger than 1 and smaller than 4gb")
    assert error_of(r, "DEBUG", "HTSTATS", "0") == (
        "ERR unknown subcommand or wrong number of arguments for 'HTSTATS'. Try DEBUG HELP.")
    assert r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1") == b"OK"


def test_debug_lru_clock_advance_ages_keys_without_sleeping(server_factory):
    """durakv's DEBUG LRU-CLOCK-ADVANCE: the tests' injected clock for idle times (OBJECT IDLETIME, LRU
    eviction): every key ages at once, an access stamps the moved clock, and bad arguments are refused."""
    c = server_factory().client()
    c.set("a", "1")
    c.rpush("l", "x")
    assert c.object("idletime", "a") <= 1
    assert raw(c, "DEBUG", "LRU-CLOCK-ADVANCE", "100") == b"OK"
    assert all(100 <= c.object("idletime", k) <= 102 for k in ("a", "l"))
    c.get("a")                                         # stamped with the moved clock: idle again
    assert c.object("idletime", "a") <= 1 and c.object("idletime", "l") >= 100
    for bad in ("-1", "16777216"):
        assert error_of(c, "DEBUG", "LRU-CLOCK-ADVANCE", bad) == messages.DEBUG_LRU_CLOCK_SECONDS
    for bad in ("1_0", " 5", "x"):
        assert error_of(c, "DEBUG", "LRU-CLOCK-ADVANCE", bad) == messages.NOT_INTEGER
    assert c.object("idletime", "l") < 200 and c.ping()


def test_debug_digest_survives_restart(server_factory):
    srv = server_factory("--durability", "sync")
    c = srv.client()
    _same_writes(c)
    before = c.execute_command("DEBUG", "DIGEST")
    c.close()
    srv.stop()
    srv.start()
    c = srv.client()
    assert c.execute_command("DEBUG", "DIGEST") == before
    c.close()


@pytest.mark.parametrize("mode", ["none", "sync"])
@pytest.mark.parametrize("sub", [("RELOAD",), ("RELOAD", "NOSAVE"), ("LOADAOF",)])
def test_debug_reload_and_loadaof_load_what_a_restart_would(server_factory, mode, sub):
    """Valkey's suite reloads in place between steps (DEBUG RELOAD, and DEBUG LOADAOF under appendonly): the
    dataset afterwards is the same, with a journal (what it holds) and without (memory written first)."""
    srv = server_factory("--durability", mode)
    c = srv.client()
    _same_writes(c)
    c.set("reload:ttl", "v", px=600_000)
    before = c.execute_command("DEBUG", "DIGEST")
    if mode == "none" and sub == ("RELOAD", "NOSAVE"):
        # NOSAVE in none loads the last snapshot: nothing was saved, so the dataset is what SAVE wrote
        c.execute_command("SAVE")
    assert c.execute_command("DEBUG", *sub) in (b"OK", "OK", True)
    assert c.execute_command("DEBUG", "DIGEST") == before
    assert 0 < c.pttl("reload:ttl") <= 600_000
    for name, value in (("aof-use-rdb-preamble", "no"), ("primaryuser", "u"), ("repl-ping-replica-period", "3600")):
        assert c.config_set(name, value)
    with pytest.raises(Exception, match="only supports the MERGE, NOFLUSH and NOSAVE options"):
        c.execute_command("DEBUG", "RELOAD", "BOGUS")
    c.close()


def test_debug_reload_noflush_and_merge(server_factory):
    """functions.tcl: NOFLUSH onto a dataset that has the library is Valkey's duplicate error; NOFLUSH MERGE
    keeps both what is there and what was saved (the saved copy wins for the same name)."""
    srv = server_factory("--durability", "none")
    c = srv.client()
    lib = "#!lua name={0}\nserver.register_function('{0}', function() return '{1}' end)"
    c.execute_command("FUNCTION", "LOAD", lib.format("one", "saved"))
    c.set("k", "saved")
    with pytest.raises(Exception, match="Error trying to load the RDB"):
        c.execute_command("DEBUG", "RELOAD", "NOFLUSH")
    assert c.execute_command("DEBUG", "RELOAD", "NOFLUSH", "MERGE") in (b"OK", "OK", True)
    c.execute_command("DEBUG", "RELOAD")                        # the snapshot now holds one and k=saved
    c.execute_command("FUNCTION", "LOAD", "REPLACE", lib.format("one", "changed"))
    c.execute_command("FUNCTION", "LOAD", lib.format("two", "new"))
    c.set("k", "changed")
    c.set("only-here", "1")
    assert c.execute_command("DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE") in (b"OK", "OK", True)
    assert c.fcall("one", 0) == b"saved" and c.fcall("two", 0) == b"new"
    assert c.get("k") == b"saved" and c.get("only-here") == b"1"
    c.close()
