"""MONITOR, CLIENT PAUSE/UNPAUSE, CLIENT TRACKING (+ CACHING, GETREDIR, TRACKINGINFO), NO-EVICT, NO-TOUCH."""

import re
import time

import pytest
import valkey

from conftest import wait_until
from test_blocking import Err, Push, raw_clients, wait_blocked

MONITOR_LINE = re.compile(r'^(\d+)\.(\d{6}) \[(\d+) 127\.0\.0\.1:(\d+)\] (.*)$')


@pytest.fixture
def raw(shared_server):
    yield from raw_clients(shared_server.port)


@pytest.fixture
def unpause(r):
    yield
    r.execute_command("CLIENT", "UNPAUSE")


def _port_of(client):
    return int(client.client_info()["addr"].rsplit(":", 1)[1])


# -- MONITOR -----------------------------------------------------------------------------------------

def test_monitor_streams_commands_in_valkey_format(r, raw):
    port = _port_of(r)
    m = raw()
    assert m.call("MONITOR") == "OK"
    before = time.time()
    r.set("k", 'a "quoted"\nvalue\x01')
    r.execute_command("SELECT", "2")
    try:
        r.get("other")
    finally:
        r.execute_command("SELECT", "0")
    r.config_get("maxmemory")  # admin commands are not shown
    r.incr("counter")
    lines = [m.read() for _ in range(5)]
    parsed = [MONITOR_LINE.match(x) for x in lines]
    assert all(parsed), lines
    assert all(int(p.group(4)) == port for p in parsed)
    assert float(parsed[0].group(1) + "." + parsed[0].group(2)) >= int(before)
    assert [(p.group(3), p.group(5)) for p in parsed] == [
        ("0", r'"SET" "k" "a \"quoted\"\nvalue\x01"'),
        ("2", '"SELECT" "2"'),
        ("2", '"GET" "other"'),
        ("0", '"SELECT" "0"'),
        ("0", '"INCRBY" "counter" "1"'),
    ]


def test_monitor_transactions_auth_redaction_and_limits(r, raw):
    m = raw()
    assert m.call("MONITOR") == "OK"
    c = raw()
    c.send_many(("MULTI",), ("SET", "a", "1"), ("GET", "a"), ("EXEC",), ("GET",), ("NOSUCHCMD",),
                ("AUTH", "user", "secret"), ("ECHO", "done"))
    replies = [c.read() for _ in range(8)]
    assert replies[:4] == ["OK", "QUEUED", "QUEUED", ["OK", b"1"]]
    assert all(isinstance(x, Err) for x in replies[4:7]) and replies[7] == b"done"
    lines = [MONITOR_LINE.match(m.read()).group(5) for _ in range(6)]
    # queued commands show when EXEC runs them; refused commands (arity, unknown) never show
    assert lines == ['"MULTI"', '"SET" "a" "1"', '"GET" "a"', '"EXEC"', '"AUTH" "(redacted)" "(redacted)"',
                     '"ECHO" "done"']
    # a monitoring client cannot touch the keyspace; other commands work
    err = m.call("GET", "a")
    assert isinstance(err, Err) and str(err) == "ERR Replica can't interact with the keyspace"
    assert m.call("PING") == "PONG"
    assert MONITOR_LINE.match(m.read()).group(5) == '"PING"'  # its own commands too, after their reply
    line = [x for x in r.client_list() if "O" in x["flags"]]
    assert len(line) == 1
    assert m.call("RESET") == "RESET"
    assert m.call("GET", "a") == b"1"
    with pytest.raises(valkey.ResponseError, match="MONITOR isn't allowed for DENY BLOCKING client"):
        pipe = r.pipeline(transaction=True)
        pipe.execute_command("MONITOR")
        pipe.execute()


# -- CLIENT PAUSE ------------------------------------------------------------------------------------

def test_client_pause_write_delays_writes_not_reads(r, raw, unpause):
    r.set("k", "old")
    assert r.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    w = raw()
    w.send_many(("SET", "k", "new"), ("GET", "k"))
    wait_blocked(r, 1)  # the write (and the read behind it) wait
    reader = raw()
    assert reader.call("GET", "k") == b"old"
    assert reader.call("EXISTS", "k") == 1
    assert r.execute_command("CLIENT", "UNPAUSE")
    assert w.read() == "OK"
    assert w.read() == b"new"
    assert r.get("k") == b"new"
    assert r.info("clients")["blocked_clients"] == 0


def test_client_pause_write_holds_exec_with_writes_and_publish(r, raw, unpause):
    assert r.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
    w = raw()
    w.send_many(("MULTI",), ("INCR", "n"), ("EXEC",))
    wait_blocked(r, 1)  # INCR is a write: postponed before being queued
    p = raw()
    p.send("PUBLISH", "ch", "x")  # may-replicate: postponed too
    wait_blocked(r, 2)
    ro = raw()
    assert ro.call("MULTI") == "OK"
    assert ro.call("GET", "n") == "QUEUED"
    assert ro.call("EXEC") == [None]  # a read-only transaction runs
    r.execute_command("CLIENT", "UNPAUSE")
    assert [w.read(), w.read(), w.read()] == ["OK", "QUEUED", [1]]
    assert p.read() == 0


def test_client_pause_all_and_timeout_end(r, raw):
    c = raw()
    start = time.monotonic()
    assert r.execute_command("CLIENT", "PAUSE", "300", "ALL")
    c.send("PING")
    assert c.read() == "PONG"  # answered once the pause ran out
    assert time.monotonic() - start >= 0.25
    assert r.info("clients")["blocked_clients"] == 0


def test_client_pause_errors(r):
    with pytest.raises(valkey.ResponseError, match="^CLIENT PAUSE mode must be WRITE or ALL$"):
        r.execute_command("CLIENT", "PAUSE", "100", "READ")
    with pytest.raises(valkey.ResponseError, match="^timeout is not an integer or out of range$"):
        r.execute_command("CLIENT", "PAUSE", "1.5")
    with pytest.raises(valkey.ResponseError, match="^timeout is negative$"):
        r.execute_command("CLIENT", "PAUSE", "-1", "WRITE")
    with pytest.raises(valkey.ResponseError, match="unknown subcommand or wrong number of arguments for 'PAUSE'"):
        r.execute_command("CLIENT", "PAUSE", "1", "WRITE", "x")
    assert r.execute_command("CLIENT", "PAUSE", "0")  # already over
    assert r.set("k", "v")


# -- CLIENT TRACKING ---------------------------------------------------------------------------------

def test_tracking_invalidation_resp3(r, raw):
    c = raw(3)
    assert c.call("CLIENT", "TRACKING", "ON") == "OK"
    r.set("k", "v1")
    assert c.call("GET", "k") == b"v1"
    r.set("k", "v2")
    assert c.read() == Push([b"invalidate", [b"k"]])
    # once invalidated the key is forgotten until read again
    r.set("k", "v3")
    assert c.call("GET", "k") == b"v3"
    r.delete("k")
    assert c.read() == Push([b"invalidate", [b"k"]])
    # the client's own write: after its reply (no NOLOOP)
    assert c.call("GET", "mine") is None
    assert c.call("SET", "mine", "x") == "OK"
    assert c.read() == Push([b"invalidate", [b"mine"]])
    info = c.call("CLIENT", "TRACKINGINFO")
    assert info == {b"flags": [b"on"], b"redirect": 0, b"prefixes": []}
    assert c.call("CLIENT", "GETREDIR") == 0
    # FLUSHALL invalidates everything with a null
    r.flushall()
    assert c.read() == Push([b"invalidate", None])
    assert c.call("CLIENT", "TRACKING", "OFF") == "OK"
    assert c.call("CLIENT", "GETREDIR") == -1


def test_tracking_noloop_optin_bcast(r, raw):
    c = raw(3)
    assert c.call("CLIENT", "TRACKING", "ON", "NOLOOP", "OPTIN") == "OK"
    assert c.call("GET", "a") is None          # not cached: OPTIN without CACHING YES
    assert c.call("CLIENT", "CACHING", "YES") == "OK"
    assert c.call("GET", "b") is None          # cached
    assert c.call("SET", "b", "self") == "OK"  # NOLOOP: own write does not invalidate
    r.set("a", "1")
    r.set("b", "2")
    # only b was tracked, and c's own write was skipped, so the next message is b from r (b was
    # forgotten after c's write, so re-read it first)
    assert c.call("CLIENT", "CACHING", "YES") == "OK"
    assert c.call("GET", "b") == b"2"
    r.set("b", "3")
    assert c.read() == Push([b"invalidate", [b"b"]])
    info = c.call("CLIENT", "TRACKINGINFO")
    assert set(info[b"flags"]) == {b"on", b"optin", b"noloop"}
    bc = raw(3)
    assert bc.call("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "cfg:") == "OK"
    r.set("user:1", "x")
    r.set("other", "x")
    assert bc.read() == Push([b"invalidate", [b"user:1"]])
    r.mset({"cfg:a": "1", "cfg:b": "2"})
    assert bc.read() == Push([b"invalidate", [b"cfg:a", b"cfg:b"]])
    info = bc.call("CLIENT", "TRACKINGINFO")
    assert info[b"prefixes"] == [b"cfg:", b"user:"] and b"bcast" in info[b"flags"]
    line = [x for x in r.client_list() if "B" in x["flags"]]
    assert len(line) == 1 and "t" in line[0]["flags"]


def test_tracking_redirect_to_resp2_subscriber(r, raw):
    sub = raw()
    sub_id = sub.call("CLIENT", "ID")
    sub.send("SUBSCRIBE", "__redis__:invalidate")
    assert sub.read() == [b"subscribe", b"__redis__:invalidate", 1]
    c = raw()
    assert c.call("CLIENT", "TRACKING", "ON", "REDIRECT", sub_id) == "OK"
    assert c.call("CLIENT", "GETREDIR") == sub_id
    assert c.call("GET", "rk") is None
    r.set("rk", "v")
    assert sub.read() == [b"message", b"__redis__:invalidate", [b"rk"]]
    wait_until(lambda: r.info("clients")["tracking_clients"] == 1, 10, what="one tracking client")
    line = [x for x in r.client_list() if int(x["id"]) == c.call("CLIENT", "ID")][0]
    assert line["redir"] == str(sub_id)
    # the redirect target goes away: the redirect is broken
    sub.close()
    wait_until(lambda: sub_id not in [int(x["id"]) for x in r.client_list()], 10, what="disconnect")
    assert c.call("GET", "rk") == b"v"
    r.set("rk", "w")
    wait_until(lambda: b"broken_redirect" in c.call("CLIENT", "TRACKINGINFO")[1], 10, what="broken redirect")


def test_tracking_errors(r, raw):
    c = raw(3)
    own = c.call("CLIENT", "ID")
    cases = [
        (("CLIENT", "TRACKING", "ON", "PREFIX", "a"), "ERR PREFIX option requires BCAST mode to be enabled"),
        (("CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"), "ERR You can't specify both OPTIN mode and OPTOUT mode"),
        (("CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"), "ERR OPTIN and OPTOUT are not compatible with BCAST"),
        (("CLIENT", "TRACKING", "ON", "REDIRECT", "999999"),
         "ERR The client ID you want redirect to does not exist"),
        (("CLIENT", "TRACKING", "ON", "REDIRECT", str(own), "REDIRECT", str(own)),
         "ERR A client can only redirect to a single other client"),
        (("CLIENT", "TRACKING", "MAYBE"), "ERR syntax error"),
        (("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "a"),
         "ERR Prefix 'ab' overlaps with another provided prefix 'a'. Prefixes for a single client must not "
         "overlap."),
        (("CLIENT", "CACHING", "YES"), "ERR CLIENT CACHING can be called only when the client is in tracking "
                                       "mode with OPTIN or OPTOUT mode enabled"),
    ]
    for cmd, text in cases:
        err = c.call(*cmd)
        assert isinstance(err, Err) and str(err) == text, (cmd, err)
    assert c.call("CLIENT", "TRACKING", "ON", "OPTOUT") == "OK"
    err = c.call("CLIENT", "CACHING", "YES")
    assert str(err) == "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
    assert c.call("CLIENT", "CACHING", "NO") == "OK"
    err = c.call("CLIENT", "TRACKING", "ON", "OPTIN")
    assert str(err) == ("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and "
                        "then re-enabling it with a different mode.")
    err = c.call("CLIENT", "TRACKING", "ON", "BCAST")
    assert str(err) == ("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and "
                        "then re-enabling it with a different mode.")


# -- NO-EVICT / NO-TOUCH -------------------------------------------------------------------------------

def test_no_evict_and_no_touch_flags(r, raw):
    c = raw()
    cid = c.call("CLIENT", "ID")
    assert c.call("CLIENT", "NO-EVICT", "on") == "OK"
    assert c.call("CLIENT", "NO-TOUCH", "ON") == "OK"
    line = [x for x in r.client_list() if int(x["id"]) == cid][0]
    assert "e" in line["flags"] and "T" in line["flags"]
    err = c.call("CLIENT", "NO-TOUCH", "maybe")
    assert isinstance(err, Err) and str(err) == "ERR syntax error"
    assert c.call("CLIENT", "NO-EVICT", "off") == "OK"
    assert c.call("RESET") == "RESET"
    line = [x for x in r.client_list() if int(x["id"]) == cid][0]
    assert line["flags"] == "N"


def test_no_touch_leaves_lfu_counter_alone(server_factory):
    # lfu-log-factor 0: every access increments the counter, so the counts are exact
    srv = server_factory("--maxmemory-policy", "allkeys-lfu", "--lfu-log-factor", "0", "--durability", "none")
    with srv.client() as c, srv.client() as quiet:
        c.set("k", "v")
        assert c.get("k") == b"v"  # first access records the key at LFU_INIT_VAL
        base = c.object("freq", "k")
        quiet.execute_command("CLIENT", "NO-TOUCH", "ON")
        for _ in range(5):
            assert quiet.get("k") == b"v"
        assert c.object("freq", "k") == base
        quiet.execute_command("TOUCH", "k")  # TOUCH still touches
        assert c.object("freq", "k") == base + 1
        assert c.get("k") == b"v"
        assert c.object("freq", "k") == base + 2


def _field(line, name):
    return int(re.search(r"(?:^| )%s=(\d+)" % re.escape(name), line).group(1))


def test_client_traffic_and_command_counts(r, raw, shared_server):
    # Valkey 8.0's tot-net-in / tot-net-out / tot-cmds (introspection's "client input output and command
    # process statistics"): bytes read and written on the socket, commands run (a script's own too, a blocked
    # one once served); INFO total_net_input_bytes / total_net_output_bytes are the server's sums.
    c = valkey.Valkey(port=shared_server.port, single_connection_client=True)
    a = c.execute_command("CLIENT", "INFO").decode()
    b = c.execute_command("CLIENT", "INFO").decode()
    assert _field(b, "tot-net-in") - _field(a, "tot-net-in") == len(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n")
    assert _field(b, "tot-net-out") - _field(a, "tot-net-out") > 300
    assert _field(b, "tot-cmds") - _field(a, "tot-cmds") == 1
    assert b.rstrip("\n").endswith(" tot-net-in=%d tot-net-out=%d tot-cmds=%d" % (
        _field(b, "tot-net-in"), _field(b, "tot-net-out"), _field(b, "tot-cmds")))
    c.eval("server.call('ping')", 0)
    e = c.execute_command("CLIENT", "INFO").decode()
    assert _field(e, "tot-cmds") - _field(b, "tot-cmds") == 3
    blocked = raw()
    cid = blocked.call("CLIENT", "ID")

    def counts():
        line = next(l for l in r.execute_command("CLIENT", "LIST").decode().splitlines() if f"id={cid} " in l)
        return _field(line, "tot-net-in"), _field(line, "tot-net-out"), _field(line, "tot-cmds")
    n_in, n_out, n_cmds = counts()
    blocked.send("BLPOP", "mylist", "0")
    wait_until(lambda: counts() == (n_in + 34, n_out, n_cmds), 5, what="the blocked BLPOP read, not counted")
    r.lpush("mylist", "a")
    assert blocked.read() == [b"mylist", b"a"]
    wait_until(lambda: counts() == (n_in + 34, n_out + 23, n_cmds + 1), 5, what="the served BLPOP counted")
    stats = r.info("stats")
    assert stats["total_net_input_bytes"] > 0 and stats["total_net_output_bytes"] > 0
    assert stats["total_reads_processed"] > 0 and stats["total_writes_processed"] > 0
    c.close()


def test_config_set_of_a_start_up_option_to_its_value(r, shared_server):
    # Valkey changes tls-port at runtime; durakv fixes it at start-up: setting the value it has is the no-op it is
    # (Valkey's introspection test sets every config to its own value), another value is refused. (port itself
    # rebinds: tests/test_config_bounds.py)
    assert r.config_set("tls-port", 0)
    with pytest.raises(valkey.ResponseError) as e:
        r.config_set("tls-port", shared_server.port + 1)
    assert str(e.value) == "CONFIG SET failed (possibly related to argument 'tls-port') - can't set immutable config"
    with pytest.raises(valkey.ResponseError) as e:
        r.config_set("daemonize", "no")
    assert str(e.value) == "CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config"


def test_blocked_command_is_accounted_once_and_scripts_log_as_their_caller(r, raw):
    # Valkey's list unit "Blocking command accounted only once in commandstats (after timeout)" and slowlog's
    # "blocking command is reported only after unblocked" / "the commands in script are recorded normally"
    r.config_set("slowlog-log-slower-than", 0)
    try:
        r.config_resetstat()
        r.slowlog_reset()
        c = raw()
        cid = c.call("CLIENT", "ID")
        c.send("BLPOP", "mylist", "0")
        wait_blocked(r, 1)
        assert not [e for e in r.slowlog_get(128) if e["command"].startswith(b"BLPOP")]
        assert "cmdstat_blpop" not in r.info("commandstats")
        r.lpush("mylist", "1")
        assert c.read() == [b"mylist", b"1"]
        wait_blocked(r, 0)
        assert len([e for e in r.slowlog_get(128) if e["command"].startswith(b"BLPOP")]) == 1
        assert r.info("commandstats")["cmdstat_blpop"]["calls"] == 1
        r.config_resetstat()
        c.send("BLPOP", "mylist", "0")
        wait_blocked(r, 1)
        assert r.execute_command("CLIENT", "UNBLOCK", cid, "TIMEOUT") == 1
        assert c.read() is None
        stats = r.info("commandstats")["cmdstat_blpop"]
        assert stats["calls"] == 1 and stats["failed_calls"] == 0 and stats["rejected_calls"] == 0
        r.client_setname("test-client")
        r.slowlog_reset()
        r.eval("server.call('ping')", 0)
        script, ping = r.execute_command("SLOWLOG", "GET", "2")
        assert script[3] == [b"EVAL", b"server.call('ping')", b"0"] and ping[3] == [b"ping"]
        assert script[4] == ping[4] and script[5] == ping[5] == b"test-client"
        r.slowlog_reset()
        r.config_set("primaryuser", "")
        entry = [e for e in r.execute_command("SLOWLOG", "GET", "10") if e[3][0].lower() == b"config"][0]
        assert entry[3][2:] == [b"primaryuser", b"(redacted)"]
    finally:
        r.config_set("slowlog-log-slower-than", 10000)
        r.client_setname("")


def test_a_read_that_expires_a_key_invalidates_only_that_key(r, raw):
    # Valkey's tracking unit "Tracking invalidation message is not interleaved with multiple keys response":
    # MGET of a live key and a lazily expired one invalidates the expired one only, after the MGET's reply
    c = raw(resp=3)
    assert c.call("CLIENT", "TRACKING", "on") == "OK"
    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        for cmd in (["MULTI"], ["MSET", "x{t}", "1", "y{t}", "2"], ["PEXPIRE", "y{t}", "100"], ["GET", "y{t}"]):
            c.send(*cmd)
        assert [c.read() for _ in range(4)] == ["OK", "QUEUED", "QUEUED", "QUEUED"]
        assert c.call("EXEC") == ["OK", 1, b"2"]
        at = r.execute_command("PEXPIRETIME", "y{t}")
        wait_until(lambda: (lambda t: t[0] * 1000 + t[1] // 1000)(r.time()) > at, 5, what="y{t} to expire")
        assert c.call("MGET", "x{t}", "y{t}") == [b"1", None]
        assert c.read() == Push([b"invalidate", [b"y{t}"]])
        assert not c.pending()
    finally:
        r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")


def test_flushall_empties_a_tracking_table_nobody_tracks_any_more(r, raw):
    # Valkey's tracking unit ("Tracking info is correct" after its clean_all): FLUSHALL frees the tracking
    # table even when no client tracks any more; durakv kept the stale keys (tracking_total_items 3, not 2)
    c = raw(resp=3)
    assert c.call("CLIENT", "TRACKING", "on") == "OK"
    r.set("key1", "1")
    assert c.call("GET", "key1") == b"1"
    assert c.call("GET", "key2") is None
    assert r.info("stats")["tracking_total_items"] == 2
    assert c.call("CLIENT", "TRACKING", "off") == "OK"
    assert r.info("stats")["tracking_total_items"] == 2
    r.flushall()
    assert r.info("stats")["tracking_total_items"] == 0
