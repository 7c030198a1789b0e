"""Connection, server and transaction commands against a real server (valkey-py, RESP2 and RESP3)."""

import socket

import pytest
import valkey

from conftest import wait_until
from helpers.wire import wire, wire_replies


def raw(port, payload: bytes, expect_close=False, timeout=5.0) -> bytes:
    """Sends raw bytes and reads until the reply stops arriving (or the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        s.settimeout(0.5 if not expect_close else timeout)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out


def test_ping_echo(rr):
    assert rr.ping() is True
    assert rr.echo("hello") == b"hello"
    assert raw(rr.connection_pool.connection_kwargs["port"], b"PING x\r\n") == b"$1\r\nx\r\n"


def test_unknown_command_and_arity(r):
    with pytest.raises(valkey.ResponseError, match="unknown command 'NOPE', with args beginning with: 'a' 'b'"):
        r.execute_command("NOPE", "a", "b")
    with pytest.raises(valkey.ResponseError, match="wrong number of arguments for 'get' command"):
        r.execute_command("GET")
    with pytest.raises(valkey.ResponseError, match="unknown subcommand 'NOPE'. Try CLIENT HELP."):
        r.execute_command("CLIENT", "NOPE")


def test_hello_switches_protocol(shared_server):
    out = raw(shared_server.port, b"HELLO 3\r\nHGETALL nokey\r\nGET nokey\r\nHELLO 4\r\nHELLO 2\r\nGET nokey\r\n")
    assert out.startswith(b"%7\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n")
    assert b"$5\r\nproto\r\n:3\r\n" in out
    assert b"%0\r\n_\r\n-NOPROTO unsupported protocol version\r\n*14\r\n" in out
    assert out.endswith(b"$-1\r\n")
    c = shared_server.client(protocol=3)
    assert c.execute_command("HELLO", "3")[b"proto"] == 3 if isinstance(
        next(iter(c.execute_command("HELLO", "3"))), bytes) else c.execute_command("HELLO", "3")["proto"] == 3
    c.close()


def test_hello_and_client_list_take_integers_as_valkey_does(shared_server):
    """The protocol version and CLIENT LIST's IDs are string2ll integers: '03', '+3' and ' 3' are not numbers
    (answers checked against redis-server 7.0.15); the protocol stays as it was."""
    out = raw(shared_server.port, b"HELLO 03\r\nHELLO +3\r\nHELLO \" 3\"\r\nGET nokey\r\n")
    assert out == b"-ERR Protocol version is not an integer or out of range\r\n" * 3 + b"$-1\r\n"
    c = shared_server.client()
    try:
        my_id = c.client_id()
        # Valkey 9: the IDs end at the first argument that is not one, which is then read as a filter
        with pytest.raises(valkey.ResponseError, match="^syntax error$"):
            c.execute_command("CLIENT", "LIST", "ID", "+%d" % my_id)
        with pytest.raises(valkey.ResponseError, match="^syntax error$"):
            c.execute_command("CLIENT", "LIST", "ID", "%d" % my_id, "x")
        with pytest.raises(valkey.ResponseError, match="^Syntax error in HELLO option 'SETNAME'$"):
            c.execute_command("HELLO", "2", "SETNAME")
        assert b"id=%d " % my_id in c.execute_command("CLIENT", "LIST", "ID", "%d" % my_id)
    finally:
        c.close()


def test_select_and_dbsize(r):
    r.set("a", 1)
    assert r.dbsize() == 1
    r.execute_command("SELECT", 3)
    assert r.dbsize() == 0
    with pytest.raises(valkey.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", 16)
    with pytest.raises(valkey.ResponseError, match="value is not an integer or out of range"):
        r.execute_command("SELECT", "x")
    r.execute_command("SELECT", 0)
    assert r.get("a") == b"1"


def test_flushdb_flushall(r):
    r.set("a", 1)
    r.execute_command("SELECT", 1)
    r.set("b", 2)
    r.flushdb()
    assert r.dbsize() == 0
    r.execute_command("SELECT", 0)
    assert r.dbsize() == 1
    r.flushall()
    assert r.dbsize() == 0


def test_client_commands(shared_server):
    c = shared_server.client()
    c.client_setname("worker-1")
    assert c.client_getname() == "worker-1"
    me = c.client_id()
    assert isinstance(me, int) and me > 0
    listing = c.client_list()
    assert any(x["name"] == "worker-1" and int(x["id"]) == me for x in listing)
    with pytest.raises(valkey.ResponseError, match="Client names cannot contain spaces"):
        c.client_setname("bad name")
    other = shared_server.client()
    other.ping()
    other_id = other.client_id()
    assert c.client_kill_filter(_id=other_id) == 1
    wait_until(lambda: all(int(x["id"]) != other_id for x in c.client_list()), 5, what="client gone")
    info = c.execute_command("CLIENT", "INFO")
    assert b"name=worker-1" in info if isinstance(info, bytes) else "name=worker-1" in str(info)
    c.close()


def test_config_get_set(r):
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    r.config_set("maxmemory-policy", "allkeys-lru")
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
    r.config_set("maxmemory-policy", "noeviction")
    assert "durability" in r.config_get("dur*")
    with pytest.raises(valkey.ResponseError, match="Unknown option or number of arguments for CONFIG SET - 'nope'"):
        r.config_set("nope", "1")
    with pytest.raises(valkey.ResponseError, match="can't set immutable config"):
        r.config_set("databases", "1")     # (port is settable: it rebinds, see test_config_bounds.py)
    with pytest.raises(valkey.ResponseError, match="CONFIG SET failed"):
        r.config_set("maxmemory", "lots")


def test_info_sections(r):
    info = r.info("server")
    assert info["server_name"] == "durakv"
    assert info["valkey_version"] == "9.1.2"     # the release whose command set durakv implements
    assert "redis_version" in info
    r.set("k", "v")
    everything = r.info("everything")
    for field in ("connected_clients", "used_memory", "durability_mode", "journal_commit_index",
                  "total_commands_processed", "role", "used_cpu_user", "db0"):
        assert field in everything, field
    assert everything["used_memory"] > 0
    assert "cmdstat_set" in r.info("commandstats")
    dur = r.info("durability")
    assert dur["durability_mode"] == "sync"
    assert dur["journal_commit_index"] >= 1


def test_used_memory_tracks_data(r):
    before = r.info("memory")["used_memory"]
    r.mset({f"mem:{i}": "x" * 1000 for i in range(500)})
    after = r.info("memory")["used_memory"]
    assert after - before >= 500 * 1000
    r.flushall()
    assert r.info("memory")["used_memory"] < after


def test_command_table(r):
    count = r.execute_command("COMMAND COUNT")
    assert count > 100
    info = r.execute_command("COMMAND INFO", "set", "get", "nope")
    assert info[0][0] == b"set" and info[0][1] == -3
    assert "write" in map(_s, info[0][2]) and "denyoom" in map(_s, info[0][2])
    assert info[0][3:6] == [1, 1, 1]
    assert info[2] is None
    assert r.execute_command("COMMAND GETKEYS", "MSET", "a", "1", "b", "2") in ([b"a", b"b"], ["a", "b"])
    assert r.execute_command("COMMAND GETKEYS", "ZUNIONSTORE", "d", "2", "x", "y") in ([b"d", b"x", b"y"], ["d", "x", "y"])
    with pytest.raises(valkey.ResponseError, match="The command has no key arguments"):
        r.execute_command("COMMAND GETKEYS", "PING")
    docs = r.execute_command("COMMAND DOCS", "set")
    assert docs[0] == b"set" and b"arguments" in docs[1]
    names = r.execute_command("COMMAND LIST")
    assert b"get" in names and b"zadd" in names
    everything = r.command()  # valkey-py parses the full table into a dict
    assert "set" in everything and everything["set"]["arity"] == -3


def test_whole_table_replies_are_the_tables_own_on_every_path(rr):
    """COMMAND, COMMAND INFO and COMMAND DOCS without names are encoded once per protocol and kept (they cost 5.6 ms
    of the loop per call when built each time): each must be byte for byte what the same replies built entry by
    entry are, in either protocol, alone, in a transaction and in a script."""
    whole = wire(rr, "COMMAND")
    assert whole == wire(rr, "COMMAND") == wire(rr, "COMMAND", "INFO")
    names = list(rr.command())                      # valkey-py's dict of the table, in the reply's order
    assert len(names) == rr.execute_command("COMMAND COUNT") > 200
    head = b"*%d\r\n" % len(names)
    assert whole.startswith(head)
    assert whole == wire(rr, "COMMAND", "INFO", *names)      # built entry by entry, never kept
    if rr.connection_pool.connection_kwargs.get("protocol") == 3:
        assert b"~" in whole                         # flags, categories and key specs are sets in RESP3
    docs = wire(rr, "COMMAND", "DOCS")
    assert docs == wire(rr, "COMMAND", "DOCS") == wire(rr, "COMMAND", "DOCS", *names)
    # in MULTI/EXEC: the kept bytes are one element of EXEC's array
    assert wire_replies(rr, [["MULTI"], ["COMMAND"], ["PING"], ["EXEC"]]) == [
        b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n", b"*2\r\n" + whole + b"+PONG\r\n"]
    # a script sees the table as a Lua array of entries, the SET entry as it is
    assert rr.eval("return #redis.call('COMMAND')", 0) == len(names)
    assert rr.eval("for _, e in ipairs(redis.call('COMMAND')) do if e[1] == 'set' then return e[2] end end", 0) == -3


def test_getkeys_follows_valkeys_getkeys_procedures(r):
    """COMMAND GETKEYS(ANDFLAGS) answers as redis-server 7.0 / Valkey 8 do (answers checked against
    redis-server 7.0.15): the key specs first, the command's getkeys procedure when they cannot be followed."""
    def getkeys(*argv):  # valkey-py decodes this reply to str
        return [k if isinstance(k, bytes) else k.encode() for k in r.execute_command("COMMAND GETKEYS", *argv)]

    def with_flags(*argv):
        return [[key, sorted(flags)] for key, flags in r.execute_command("COMMAND GETKEYSANDFLAGS", *argv)]

    # bitfieldGetKeys: an unknown subcommand is a syntax error, so the key counts as written
    assert with_flags("BITFIELD", "k", "foo", "GET", "u8", "0") == [[b"k", [b"RW", b"access", b"update"]]]
    assert with_flags("BITFIELD", "k", "GET", "u8", "0") == [[b"k", [b"RO", b"access"]]]
    # a numkeys the spec walk refuses ('+2') is read by zunionInterDiffStoreGetKeys with atoi
    assert getkeys("ZUNIONSTORE", "d", "+2", "a", "b") == [b"a", b"b", b"d"]
    assert with_flags("ZUNIONSTORE", "d", "+2", "a", "b") == [[b"a", []], [b"b", []], [b"d", []]]
    assert getkeys("LMPOP", "+2", "a", "b", "LEFT") == [b"a", b"b"]
    assert getkeys("SORT", "k", "LIMIT", "0", "1", "STORE", "d") == [b"k", b"d"]
    assert getkeys("MIGRATE", "h", "1", "", "0", "5000", "KEYS", "a", "b") == [b"a", b"b"]
    assert getkeys("XREAD", "STREAMS", "a", "b", "0") == [b"a"]
    assert getkeys("GEORADIUS", "k", "0", "0", "1", "m", "STORE") == [b"k"]
    assert getkeys("EVAL", "s", "3", "a") == []


def test_multi_exec_discard(r):
    p = r.pipeline(transaction=True)
    p.set("a", 1).incr("a").get("a")
    assert p.execute() == [True, 2, b"2"]
    r.execute_command("MULTI")
    r.execute_command("SET", "x", "1")
    assert r.execute_command("DISCARD") == b"OK"
    assert r.get("x") is None
    with pytest.raises(valkey.ResponseError, match="EXEC without MULTI"):
        r.execute_command("EXEC")


def test_exec_abort_on_queue_error(shared_server):
    out = raw(shared_server.port, b"MULTI\r\nSET abort:a 1\r\nGET\r\nEXEC\r\nGET abort:a\r\n")
    assert b"-ERR wrong number of arguments for 'get' command" in out
    assert b"-EXECABORT Transaction discarded because of previous errors." in out
    assert out.endswith(b"$-1\r\n")


def test_watch(shared_server):
    a = shared_server.client()
    b = shared_server.client()
    a.flushall()
    a.set("w", 1)
    with a.pipeline(transaction=True) as p:
        p.watch("w")
        b.set("w", 2)
        p.multi()
        p.set("w", 3)
        with pytest.raises(valkey.WatchError):
            p.execute()
    assert a.get("w") == b"2"
    with a.pipeline(transaction=True) as p:
        p.watch("w")
        p.multi()
        p.set("w", 4)
        assert p.execute() == [True]
    assert a.get("w") == b"4"


def test_flushes_and_swapdb_touch_watched_keys_and_stale_keys_do_not(shared_server):
    # Valkey's multi unit: FLUSHALL / FLUSHDB / SWAPDB touch the watched keys they change (they did not), and
    # the lazy deletion of a key that had already expired when watched is no change (it failed EXEC)
    c = shared_server.client(single_connection_client=True)

    def tx():
        c.execute_command("MULTI")
        c.execute_command("PING")
        return c.execute_command("EXEC")
    c.flushall()
    for flush in (c.flushall, c.flushdb):
        c.set("x", 30)
        c.execute_command("WATCH", "x")
        flush()
        assert tx() is None
    c.execute_command("WATCH", "x")       # missing, and FLUSHALL leaves it missing: no change
    c.flushall()
    assert tx() == [b"PONG"]
    c.execute_command("SELECT", 1)
    c.set("x", 30)
    c.execute_command("SELECT", 0)
    c.execute_command("WATCH", "x")       # missing here; SWAPDB brings it
    c.swapdb(0, 1)
    assert tx() is None
    c.flushall()
    c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        def now_ms():
            sec, usec = c.time()
            return sec * 1000 + usec // 1000
        at = now_ms() + 1
        c.set("x", "foo", pxat=at)
        wait_until(lambda: now_ms() > at, 5, what="x to be past its expiry (by the server's clock)")
        c.execute_command("WATCH", "x")
        assert c.exists("x") == 0         # lazy expiry deletes it
        assert tx() == [b"PONG"]
    finally:
        c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        c.close()


def test_auth(server_factory):
    srv = server_factory("--requirepass", "s3cret", password="s3cret")
    c = srv.client()
    with pytest.raises(valkey.AuthenticationError):
        c.ping()
    c2 = srv.client(password="s3cret")
    assert c2.ping()
    with pytest.raises(valkey.AuthenticationError):
        srv.client(password="wrong").ping()
    out = raw(srv.port, b"GET a\r\nAUTH s3cret\r\nGET a\r\n")
    assert out == b"-NOAUTH Authentication required.\r\n+OK\r\n$-1\r\n"


def test_reset_and_quit(shared_server):
    out = raw(shared_server.port, b"SELECT 2\r\nRESET\r\nQUIT\r\nPING\r\n", expect_close=True)
    assert out == b"+OK\r\n+RESET\r\n+OK\r\n"


def test_time_lastsave(r):
    secs, usecs = r.time()
    assert secs > 1_700_000_000 and 0 <= usecs < 1_000_000
    assert r.lastsave()


def _s(x):
    return x.decode() if isinstance(x, bytes) else x


def test_swapdb_and_role(r):
    r.set("in0", "a")
    r.execute_command("SELECT", 1)
    r.set("in1", "b")
    r.execute_command("SELECT", 0)
    assert r.swapdb(0, 1)
    assert r.get("in1") == b"b" and r.get("in0") is None
    r.execute_command("SELECT", 1)
    assert r.get("in0") == b"a"
    r.execute_command("SELECT", 0)
    with pytest.raises(valkey.ResponseError, match="DB index is out of range"):
        r.swapdb(0, 99)
    with pytest.raises(valkey.ResponseError, match="invalid first DB index"):
        r.execute_command("SWAPDB", "x", "1")
    role = r.execute_command("ROLE")
    assert role[0] == b"master" and isinstance(role[1], int)


def test_swapdb_replays_from_the_journal(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        c.set("k", "db0")
        c.swapdb(0, 2)
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.get("k") is None
        c.execute_command("SELECT", 2)
        assert c.get("k") == b"db0"
