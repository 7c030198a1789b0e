"""Differences from Valkey 8.0 found by running Valkey's own TCL suite (scripts/valkey_suite.py), each
checked here against Valkey's literal replies: COMMAND LIST / INFO / GETKEYS(ANDFLAGS), CLIENT SETINFO /
KILL / REPLY, INFO cluster, used_memory's baseline, CONFIG RESETSTAT, the dirty counter, SMOVE
and WATCH, QUIT, LOLWUT and `durakv server --help`. Real servers, valkey-py."""

import socket
import subprocess
import sys

import pytest
import valkey

from conftest import ROOT, wait_until
from durakv.commands.specs import MODULES
from helpers.wire import _encode, _read_reply, error_of, raw, sync_stream, wire


# -- COMMAND -------------------------------------------------------------------------------------------

def test_command_list_has_subcommands_and_filters(r):
    names = raw(r, "COMMAND", "LIST")
    assert b"client|list" in names and b"config|get" in names and b"get" in names
    assert b"client" in names
    assert sorted(raw(r, "COMMAND", "LIST", "FILTERBY", "PATTERN", "xgroup|c*")) == [
        b"xgroup|create", b"xgroup|createconsumer"]
    hll = raw(r, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "hyperloglog")
    assert sorted(hll) == [b"pfadd", b"pfcount", b"pfdebug", b"pfmerge", b"pfselftest"]
    assert raw(r, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuchcategory") == []
    assert raw(r, "COMMAND", "LIST", "FILTERBY", "MODULE", "none") == []
    assert error_of(r, "COMMAND", "LIST", "FILTERBY", "BADTYPE", "x") == "ERR syntax error"
    assert error_of(r, "COMMAND", "LIST", "FILTERBY", "PATTERN") == "ERR syntax error"


def test_command_info_flags_movablekeys_and_subcommands(r):
    get, sort, zunion, clist, evalc, xread = raw(
        r, "COMMAND", "INFO", "get", "sort", "zunionstore", "client|list", "eval", "xread")
    assert get[0] == b"get" and get[2] == [b"readonly", b"fast"] and get[3:6] == [1, 1, 1]
    assert b"movablekeys" in sort[2] and sort[3:6] == [1, 1, 1]
    assert zunion[2] == [b"write", b"denyoom", b"movablekeys"] and zunion[3:6] == [1, 1, 1]
    assert clist[0] == b"client|list" and clist[1] == -2
    assert b"may_replicate" not in evalc[2] and b"movablekeys" in evalc[2] and evalc[3:6] == [0, 0, 0]
    assert xread[3:6] == [0, 0, 0] and b"movablekeys" in xread[2]
    # key spec flags: the access kind upper-case, the rest lower-case
    spec = dict(zip(*[iter(get[8][0])] * 2))
    assert sorted(spec[b"flags"]) == [b"RO", b"access"]
    assert raw(r, "COMMAND", "INFO", "get|key", "config|get|key", "nosuch") == [None, None, None]
    (client,) = raw(r, "COMMAND", "INFO", "client")
    assert b"client|list" in [sub[0] for sub in client[9]]


def test_command_docs_tokens_are_upper_case(r):
    docs = raw(r, "COMMAND", "DOCS", "georadius")
    args = dict(zip(*[iter(docs[1])] * 2))[b"arguments"]
    unit = [dict(zip(*[iter(a)] * 2)) for a in args if dict(zip(*[iter(a)] * 2))[b"name"] == b"unit"][0]
    tokens = [dict(zip(*[iter(a)] * 2))[b"token"] for a in unit[b"arguments"]]
    assert tokens == [b"M", b"KM", b"FT", b"MI"]  # valkey-cli's hints show them so


def test_command_getkeys_and_flags(r):
    gkf = lambda *a: raw(r, "COMMAND", "GETKEYSANDFLAGS", *a)  # noqa: E731
    assert gkf("set", "k1", "v1") == [[b"k1", [b"OW", b"update"]]]
    assert gkf("set", "k1", "v1", "GET") == [[b"k1", [b"RW", b"access", b"update"]]]
    assert gkf("mset", "k1", "v1", "k2", "v2") == [[b"k1", [b"OW", b"update"]], [b"k2", [b"OW", b"update"]]]
    assert gkf("LMOVE", "k1", "k2", "left", "right") == [[b"k1", [b"RW", b"access", b"delete"]],
                                                         [b"k2", [b"RW", b"insert"]]]
    assert gkf("sort", "k1", "store", "k2") == [[b"k1", [b"RO", b"access"]], [b"k2", [b"OW", b"update"]]]
    assert gkf("bitfield", "b", "get", "u8", "0") == [[b"b", [b"RO", b"access"]]]
    gk = lambda *a: raw(r, "COMMAND", "GETKEYS", *a)  # noqa: E731
    assert gk("sort", "abc", "store", "def") == [b"abc", b"def"]
    assert gk("sort", "abc", "store", "invalid", "store", "stillbad", "store", "def") == [b"abc", b"def"]
    assert gk("sort", "abc", "by", "store", "limit", "0", "1") == [b"abc"]  # BY's pattern is not STORE
    assert gk("sort_ro", "abc") == [b"abc"]
    assert gk("eval", "return 1", "0") == []
    assert gk("eval", "return 1", "1", "key") == [b"key"]
    assert gk("xgroup", "create", "key", "groupname", "$") == [b"key"]
    assert gk("memory", "usage", "key") == [b"key"]
    assert gk("zunionstore", "t", "2", "a", "b") == [b"t", b"a", b"b"]
    assert error_of(r, "COMMAND", "GETKEYS", "nosuch") == "ERR Invalid command specified"
    assert error_of(r, "COMMAND", "GETKEYS", "config", "nosub") == "ERR Invalid command specified"
    assert error_of(r, "COMMAND", "GETKEYS", "ping") == "ERR The command has no key arguments"
    assert error_of(r, "COMMAND", "GETKEYS", "get") == "ERR Invalid number of arguments specified for command"
    assert error_of(r, "COMMAND", "GETKEYS", "zunionstore", "t", "x", "a") == (
        "ERR Invalid arguments specified for command")


# -- CLIENT ---------------------------------------------------------------------------------------------

def test_client_setinfo_validation(r):
    assert r.execute_command("CLIENT", "SETINFO", "lib-name", "redis.py") == b"OK"
    assert error_of(r, "CLIENT", "SETINFO", "lib-name", "valkey py") == (
        "ERR lib-name cannot contain spaces, newlines or special characters.")
    assert error_of(r, "CLIENT", "SETINFO", "LIB-VER", "1\n2") == (
        "ERR LIB-VER cannot contain spaces, newlines or special characters.")
    assert error_of(r, "CLIENT", "SETINFO", "badger", "hamster") == "ERR Unrecognized option 'badger'"
    assert error_of(r, "CLIENT", "SETINFO", "lib-name") == (
        "ERR wrong number of arguments for 'client|setinfo' command")


def test_client_kill_argument_errors(r):
    assert error_of(r, "CLIENT", "KILL", "MAXAGE", "0") == "ERR maxage should be greater than 0"
    assert error_of(r, "CLIENT", "KILL", "MAXAGE", "x") == "ERR maxage is not an integer or out of range"
    assert error_of(r, "CLIENT", "KILL", "ID", "0") == "ERR client-id should be greater than 0"
    assert error_of(r, "CLIENT", "KILL", "USER", "wrong_user") == "ERR No such user 'wrong_user'"
    assert error_of(r, "CLIENT", "KILL", "ID") == "ERR No such client"  # three arguments: the old form
    assert error_of(r, "CLIENT", "KILL", "ID", "1", "MAXAGE") == "ERR syntax error"
    assert error_of(r, "CLIENT", "KILL", "SKIPME", "maybe") == "ERR syntax error"
    assert error_of(r, "CLIENT", "KILL", "1.2.3.4:5") == "ERR No such client"
    assert r.execute_command("CLIENT", "KILL", "USER", "default", "MAXAGE", "100000") == 0


def test_client_kill_self_gets_its_reply_first(shared_server):
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) as s:
        f = s.makefile("rb")
        s.sendall(_encode(["CLIENT", "ID"]))
        my_id = int(_read_reply(f)[1:-2])
        s.sendall(_encode(["CLIENT", "KILL", "ID", str(my_id), "SKIPME", "no"]))
        assert _read_reply(f) == b":1\r\n"
        assert f.read() == b""  # then the connection is closed


def _conn(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return s, s.makefile("rb")


def test_client_reply_off_on_skip(shared_server):
    s, f = _conn(shared_server)
    with s:
        s.sendall(_encode(["CLIENT", "REPLY", "OFF"]) + _encode(["SET", "a", "1"]) + _encode(["INCR", "a"])
                  + _encode(["CLIENT", "REPLY", "ON"]) + _encode(["GET", "a"]))
        assert _read_reply(f) == b"+OK\r\n"  # CLIENT REPLY ON's own reply is the first one sent
        assert _read_reply(f) == b"$1\r\n2\r\n"
        s.sendall(_encode(["CLIENT", "REPLY", "SKIP"]) + _encode(["INCR", "a"]) + _encode(["INCR", "a"]))
        assert _read_reply(f) == b":4\r\n"  # SKIP has no reply and the first INCR's is dropped
        s.sendall(_encode(["CLIENT", "REPLY", "SKIP"]) + _encode(["CLIENT", "REPLY", "ON"])
                  + _encode(["PING"]))
        assert _read_reply(f) == b"+OK\r\n"  # ON clears a pending SKIP
        assert _read_reply(f) == b"+PONG\r\n"
        s.sendall(_encode(["CLIENT", "REPLY", "wrongInput"]))
        assert _read_reply(f) == b"-ERR syntax error\r\n"


# -- INFO, memory, stats -------------------------------------------------------------------------------

def test_info_cluster_section(r):
    assert r.info("cluster") == {"cluster_enabled": 0}
    default = raw(r, "INFO").decode()
    assert "# Cluster\r\ncluster_enabled:0\r\n" in default
    assert default.index("# Errorstats") < default.index("# Cluster") < default.index("# Keyspace")


def test_used_memory_counts_a_baseline_so_maxmemory_1_is_oom(r):
    r.flushall()
    mem = r.info("memory")
    assert mem["used_memory"] >= 1024 * 1024 and mem["used_memory_startup"] == 1024 * 1024
    assert mem["used_memory_dataset"] == mem["used_memory"] - mem["used_memory_startup"]
    r.config_set("maxmemory", 1)
    try:
        assert wire(r, "SET", "k", "v") == b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
        assert r.get("k") is None  # reads still work
    finally:
        r.config_set("maxmemory", 0)


def test_config_resetstat_resets_total_commands(r):
    for _ in range(5):
        r.ping()
    assert r.info("stats")["total_commands_processed"] > 5
    r.config_resetstat()
    assert r.info("stats")["total_commands_processed"] <= 2  # the INFO itself may count


def test_dirty_counts_changes_not_noops(r):
    dirty = lambda: r.info("persistence")["rdb_changes_since_last_save"]  # noqa: E731
    before = dirty()
    r.setbit("foo", 0, 0)
    r.execute_command("BITFIELD", "foo2", "SET", "i5", "0", "0")
    assert dirty() == before + 2  # new keys always count
    r.setbit("foo", 0, 0)
    r.execute_command("BITFIELD", "foo2", "SET", "i5", "0", "0")
    assert dirty() == before + 2  # no change, no dirt
    r.setbit("foo", 0, 1)
    r.execute_command("BITFIELD", "foo2", "SET", "i5", "0", "1")
    assert dirty() == before + 4


def test_smove_to_a_destination_that_has_the_member_leaves_its_watch(shared_server):
    c = shared_server.client()
    c.flushall()
    c.sadd("src", "a", "b")
    c.sadd("dst", "a")
    with c.pipeline() as p:
        p.watch("dst")
        other = shared_server.client()
        assert other.smove("src", "dst", "a") is True
        assert set(other.smembers("src")) == {b"b"}
        p.multi()
        p.ping()
        assert p.execute() == [True]  # dst did not change: the transaction runs
    with c.pipeline() as p:
        p.watch("src")
        other.smove("src", "dst", "b")
        p.multi()
        p.ping()
        with pytest.raises(valkey.WatchError):
            p.execute()
    other.close()
    c.close()


# -- connection life ------------------------------------------------------------------------------------

def test_quit_closes_before_a_reused_connection_sends_again(shared_server):
    """After +OK the server's FIN is already on its way: the next command on the same socket reads EOF
    (a connection closed late answers it with a reset instead)."""
    resets = 0
    for _ in range(40):
        s, f = _conn(shared_server)
        with s:
            s.sendall(_encode(["QUIT"]))
            assert _read_reply(f) == b"+OK\r\n"
            try:
                s.sendall(_encode(["PING"]))
                assert s.recv(16) == b""
            except (ConnectionResetError, BrokenPipeError):
                resets += 1
    assert resets == 0


def test_server_help_prints_a_usage():
    out = subprocess.run([sys.executable, "-m", "durakv", "server", "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 1  # as valkey-server's usage()
    assert out.stderr.startswith("Usage: durakv server [/path/to/valkey.conf] [options] [-]\n")
    assert "FATAL" not in out.stderr
    version = subprocess.run([sys.executable, "-m", "durakv", "server", "--version"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    assert version.returncode == 0 and version.stdout.startswith("durakv server v=")


def test_server_reads_config_from_stdin(tmp_path):
    from conftest import free_port
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--dir", str(tmp_path), "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=ROOT)
    try:
        proc.stdin.write(f"port {port}\nbind 127.0.0.1\ndurability none\nmaxmemory 128mb\n".encode())
        proc.stdin.close()
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5)
        wait_until(lambda: c.ping(), 20, what="durakv reading its config from stdin")
        assert c.config_get("maxmemory") == {"maxmemory": str(128 * 1024 * 1024)}
        c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_lolwut(rr):
    # Valkey 9.1.2's texts (its Julia set and art are compared with the binary in test_valkey91_commands.py)
    assert rr.execute_command("LOLWUT", "10", "5", "0.3", "0.5").endswith(
        b"Ascii representation of Julia set with constant 0.30 + 0.50i\nDon't forget to have fun! Valkey ver. 9.1.2\n")
    art = rr.execute_command("LOLWUT", "VERSION", "5", "20", "4", "3")
    text = art.decode()
    assert text.endswith("\nGeorg Nees - schotter, plotter on paper, 1968. Valkey ver. 9.1.2\n")
    rows = text.split("\n")[:8]
    assert all(len(row) == 20 and all(0x2800 <= ord(ch) <= 0x28FF for ch in row) for row in rows)
    sky = rr.execute_command("LOLWUT", "VERSION", "6", "10", "4").decode()
    assert sky.count("\n") == 6 and sky.endswith("Valkey ver. 9.1.2\n") and sky.count("\033[0m") == 40
    assert error_of(rr, "LOLWUT", "VERSION", "x") == "ERR value is not an integer or out of range"
    assert rr.execute_command("LOLWUT", "VERSION", "7") == b"Valkey ver.9.1.2\n"
    # Out-of-range sizes are clamped as Valkey does (cols 1..1000, squares 1..200).
    tiny = rr.execute_command("LOLWUT", "VERSION", "5", "-5", "0", "0").decode()
    assert tiny == "\u280b\n\nGeorg Nees - schotter, plotter on paper, 1968. Valkey ver. 9.1.2\n"  # as Valkey
    rr.config_set("extended-redis-compatibility", "yes")
    try:
        assert rr.execute_command("LOLWUT", "VERSION", "7") == b"Redis ver.7.2.4\n"
        assert rr.execute_command("LOLWUT", "1", "1", "0", "0").endswith(b"fun! Redis ver. 7.2.4\n")
    finally:
        rr.config_set("extended-redis-compatibility", "no")


def test_keyspace_notifications_for_stream_events(shared_server, r):
    r.config_set("notify-keyspace-events", "Kt")
    s, f = _conn(shared_server)
    try:
        s.sendall(_encode(["PSUBSCRIBE", "*"]))
        assert _read_reply(f) == b"*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n"
        wait_until(lambda: r.execute_command("PUBSUB", "NUMPAT") == 1, 10, what="the pattern subscriber")
        r.delete("mystream")
        r.xgroup_create("mystream", "mygroup", "$", mkstream=True)
        r.xgroup_createconsumer("mystream", "mygroup", "Bob")
        entry = r.xadd("mystream", {"field1": "A"}, id="1-0")
        r.xreadgroup("mygroup", "Alice", {"mystream": ">"})
        r.xclaim("mystream", "mygroup", "Mike", 0, [entry], force=True)
        r.xgroup_delconsumer("mystream", "mygroup", "Lee")    # no such consumer: no event
        r.xautoclaim("mystream", "mygroup", "Bob", 0, entry)   # Bob exists: no event
        r.xgroup_delconsumer("mystream", "mygroup", "Bob")
        r.xadd("mystream", {"f": "v"}, id="2-0", maxlen=1, approximate=False)  # trims: xadd, xtrim
        r.xdel("mystream", "2-0")
        r.xgroup_setid("mystream", "mygroup", "0")
        r.xgroup_destroy("mystream", "mygroup")
        events = [_read_reply(f).split(b"\r\n")[-2].decode() for _ in range(11)]
        assert events == ["xgroup-create", "xgroup-createconsumer", "xadd", "xgroup-createconsumer",
                          "xgroup-createconsumer", "xgroup-delconsumer", "xadd", "xtrim", "xdel",
                          "xgroup-setid", "xgroup-destroy"]
    finally:
        s.close()
        r.config_set("notify-keyspace-events", "")


def test_pubsub_pushes_are_not_silenced_by_client_reply_off(shared_server, r):
    s, f = _conn(shared_server)
    with s:
        s.sendall(_encode(["HELLO", "3"]))
        _read_reply(f)
        s.sendall(_encode(["CLIENT", "REPLY", "OFF"]) + _encode(["SUBSCRIBE", "channel"])
                  + _encode(["PSUBSCRIBE", "ch*"]))
        assert _read_reply(f) == b">3\r\n$9\r\nsubscribe\r\n$7\r\nchannel\r\n:1\r\n"
        assert _read_reply(f) == b">3\r\n$10\r\npsubscribe\r\n$3\r\nch*\r\n:2\r\n"
        assert r.publish("channel", "hello") == 2
        assert _read_reply(f) == b">3\r\n$7\r\nmessage\r\n$7\r\nchannel\r\n$5\r\nhello\r\n"
        assert _read_reply(f) == b">4\r\n$8\r\npmessage\r\n$3\r\nch*\r\n$7\r\nchannel\r\n$5\r\nhello\r\n"
        s.sendall(_encode(["UNSUBSCRIBE", "channel"]) + _encode(["PUNSUBSCRIBE", "ch*"]))
        assert _read_reply(f) == b">3\r\n$11\r\nunsubscribe\r\n$7\r\nchannel\r\n:1\r\n"
        assert _read_reply(f) == b">3\r\n$12\r\npunsubscribe\r\n$3\r\nch*\r\n:0\r\n"
        s.sendall(_encode(["CLIENT", "REPLY", "ON"]))
        assert _read_reply(f) == b"+OK\r\n"


def test_config_set_maxmemory_evicts_at_once_and_notifies(shared_server, r):
    r.config_set("notify-keyspace-events", "Ee")
    r.config_set("maxmemory-policy", "allkeys-lru")
    s, f = _conn(shared_server)
    try:
        s.sendall(_encode(["PSUBSCRIBE", "*"]))
        _read_reply(f)
        wait_until(lambda: r.execute_command("PUBSUB", "NUMPAT") == 1, 10, what="the pattern subscriber")
        r.set("foo", "bar")
        r.config_set("maxmemory", 1)
        assert _read_reply(f) == b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$22\r\n__keyevent@0__:evicted\r\n$3\r\nfoo\r\n"
        assert r.exists("foo") == 0
    finally:
        s.close()
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("notify-keyspace-events", "")


def test_latency_histogram(r):
    r.config_resetstat()
    histo = raw(r, "LATENCY", "HISTOGRAM")
    assert list(dict(zip(*[iter(histo)] * 2))) == [b"config|resetstat"]  # resetstat itself is recorded
    r.set("a", "b")
    r.set("c", "d")
    r.execute_command("CLIENT", "ID")
    got = dict(zip(*[iter(raw(r, "LATENCY", "HISTOGRAM", "set", "client", "blabla", "get"))] * 2))
    assert set(got) == {b"set", b"client|id"}
    calls, n, label, buckets = got[b"set"]
    assert (calls, n, label) == (b"calls", 2, b"histogram_usec")
    counts = list(dict(zip(*[iter(buckets)] * 2)).items())
    assert counts[-1][1] == 2 and all(b > a for (_x, a), (_y, b) in zip(counts, counts[1:]))
    assert all(bound & (bound - 1) == 0 for bound, _c in counts)  # power-of-two microsecond bounds
    assert raw(r, "LATENCY", "HISTOGRAM", "blabla") == []


def test_module_commands_without_modules(server_factory):
    # MODULE LOAD / UNLOAD need enable-module-command (off by default, as in Valkey: test_safe_defaults.py)
    r = server_factory("--enable-module-command", "yes").client()
    # MODULE LIST shows only the valkey-bundle modules durakv serves natively (commands/specs.py), no loaded one
    assert [m[1] for m in raw(r, "MODULE", "LIST")] == [m["name"].encode() for m in MODULES]
    assert raw(r, "MODULE", "HELP")[0] == b"MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert error_of(r, "MODULE", "LOAD", "/tmp/x.so") == (
        "ERR Error loading the extension. Please check the server logs.")
    assert error_of(r, "MODULE", "UNLOAD", "x") == "ERR Error unloading module: no such module with that name"


def test_accepted_knobs_without_effect(r):
    assert r.execute_command("DEBUG", "REPLYBUFFER", "PEAK-RESET-TIME", "100") == b"OK"
    assert r.execute_command("DEBUG", "REPLYBUFFER", "RESIZING", "0") == b"OK"
    assert r.config_get("lazyfree-lazy-expire") == {"lazyfree-lazy-expire": "yes"}  # Valkey 8.0's default
    assert r.config_set("lazyfree-lazy-expire", "no")
    r.config_set("lazyfree-lazy-expire", "yes")


def test_command_docs_display_text(r):
    docs = raw(r, "COMMAND", "DOCS", "georadius")
    args = [dict(zip(*[iter(a)] * 2)) for a in dict(zip(*[iter(docs[1])] * 2))[b"arguments"]]
    by_name = {a[b"name"]: a for a in args}
    assert by_name[b"key"][b"display_text"] == b"key"            # the name when the spec gives none
    assert b"display_text" not in by_name[b"unit"]                # not for oneof / block
    store = [dict(zip(*[iter(a)] * 2)) for a in by_name[b"store"][b"arguments"]]
    assert [(a[b"name"], a[b"display_text"]) for a in store] == [(b"storekey", b"key"), (b"storedistkey", b"key")]


def test_sync_streams_each_writes_effects_as_valkeys_replication_stream(r):
    """SYNC (what Valkey's test suite attaches with): an RDB payload, then every write's effects as commands,
    SELECT when the database changes, MULTI/EXEC around one command's several effects."""
    r.config_set("repl-ping-replica-period", 3600)      # the suite sets it around SYNC
    kw = r.connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"]), timeout=10) as s:
        f = s.makefile("rb")
        s.sendall(b"SYNC\r\n")
        header = f.readline()
        assert header.startswith(b"$")
        payload = f.read(int(header[1:]))
        assert payload.startswith(b"REDIS")
        c = valkey.Valkey(host=kw["host"], port=kw["port"], db=9)
        try:
            c.set("sync:foo", "bar", ex=100)
            c.eval("redis.call('set', KEYS[1], '1'); redis.call('del', KEYS[2])", 2, "sync:x", "sync:foo")
        finally:
            c.close()

        def command():
            line = f.readline()
            assert line.startswith(b"*"), line
            argv = []
            for _ in range(int(line[1:])):
                n = int(f.readline()[1:])
                argv.append(f.read(n + 2)[:-2])
            return [argv[0].lower()] + argv[1:]
        assert command() == [b"select", b"9"]
        first = command()
        assert first[:4] == [b"set", b"sync:foo", b"bar", b"PXAT"]
        assert [command() for _ in range(4)] == [[b"multi"], [b"set", b"sync:x", b"1"], [b"del", b"sync:foo"],
                                                 [b"exec"]]
        # A key expiring lazily under a write: its UNLINK (lazyfree-lazy-expire yes) goes out first and apart
        c = valkey.Valkey(host=kw["host"], port=kw["port"], db=9)
        try:
            c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
            c.set("sync:gone", "v", px=1)
            command()
            wait_until(lambda: c.pttl("sync:gone") == -2, 5, what="the key's expiry")
            c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        finally:
            c.close()
        assert command() == [b"unlink", b"sync:gone"]
    r.config_set("repl-ping-replica-period", 10)


def test_tracking_noloop_still_gets_invalidations_of_keys_that_expire_in_its_own_transaction(r):
    """tracking.tcl 'Tracking gets notification of lazy expired keys' (it hung: the lazy expiry inside the
    client's EXEC was filtered by NOLOOP as if the client had deleted the key). Expiry is the server's change."""
    kw = r.connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"]), timeout=10) as rd, \
            socket.create_connection((kw["host"], kw["port"]), timeout=10) as c:
        rf, cf = rd.makefile("rb"), c.makefile("rb")

        def call(s, f, *args):
            s.sendall(_encode(list(args)))
            return _read_reply(f)
        redir = int(call(rd, rf, "CLIENT", "ID")[1:-2])
        call(rd, rf, "SUBSCRIBE", "__redis__:invalidate")
        assert call(c, cf, "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", str(redir), "NOLOOP") == b"+OK\r\n"
        for args in (["MULTI"], ["SET", "lazy:mykey{t}", "myval", "px", "1"], ["SET", "lazy:other{t}", "myval"],
                     ["DEBUG", "SLEEP", "0.1"], ["GET", "lazy:mykey{t}"]):
            call(c, cf, *args)
        call(c, cf, "EXEC")
        message = _read_reply(rf)
        assert b"lazy:mykey{t}" in message and b"lazy:other{t}" not in message
        call(c, cf, "CLIENT", "TRACKING", "off")


def test_no_expiry_while_clients_are_paused(r):
    """pause.tcl 'Test both active and passive expires are skipped during client pause': an expired key reads
    as gone but is not deleted (no DEL to journal or propagate) until the pause ends."""
    for _attempt in range(5):
        # the key must still be there when the pause starts: on a loaded machine 50 ms can pass before it does
        r.set("pause:exp", "v", px=200)
        before = r.info("stats")["expired_keys"]
        r.execute_command("CLIENT", "PAUSE", "100000", "WRITE")
        if r.info("stats")["expired_keys"] == before:
            break
        r.execute_command("CLIENT", "UNPAUSE")
    try:
        wait_until(lambda: r.pttl("pause:exp") == -2 or r.get("pause:exp") is None, 5, what="the key's expiry")
        assert r.get("pause:exp") is None and r.exists("pause:exp") == 0
        assert r.info("stats")["expired_keys"] == before
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    r.get("pause:exp")
    wait_until(lambda: r.info("stats")["expired_keys"] == before + 1, 5, what="the expiry after the pause")


def test_extended_redis_compatibility(r):
    """other.tcl 'Extended Redis Compatibility config' (Valkey 8.0): HELLO and INFO name the server as Redis
    7.2 while it is on, as Valkey otherwise."""
    hello = wire(r, "HELLO", "3")
    assert b"$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n9.1.2" in hello
    info = raw(r, "INFO", "server")
    assert b"server_mode:" in info and b"redis_mode:" not in info
    r.config_set("extended-redis-compatibility", "yes")
    try:
        hello = wire(r, "HELLO", "3")
        assert b"$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2." in hello
        info = raw(r, "INFO", "server")
        assert b"redis_mode:" in info and b"server_mode:" not in info
    finally:
        r.config_set("extended-redis-compatibility", "no")


def test_tracking_table_max_keys_and_debug_pause_cron(r):
    """tracking.tcl: past tracking-table-max-keys the server forgets keys and tells their readers they are
    invalid; DEBUG PAUSE-CRON stops the periodic housekeeping (active expiry) until it is resumed."""
    kw = r.connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"]), timeout=10) as c:
        f = c.makefile("rb")

        def call(*args):
            c.sendall(_encode(list(args)))
            return _read_reply(f)
        call("HELLO", "3")
        call("CLIENT", "TRACKING", "on")
        call("MGET", "ttmk:1", "ttmk:2")
        assert r.info("stats")["tracking_total_keys"] >= 2
        r.config_set("tracking-table-max-keys", 1)
        try:
            push = _read_reply(f)
            assert push.startswith(b">2\r\n") and b"invalidate" in push
            assert r.info("stats")["tracking_total_keys"] <= 1
        finally:
            r.config_set("tracking-table-max-keys", 1_000_000)
            call("CLIENT", "TRACKING", "off")
    assert r.execute_command("DEBUG", "PAUSE-CRON", "1") in (b"OK", "OK", True)
    try:
        before = r.info("stats")["expired_keys"]
        r.set("pausecron:k", "v", px=1)
        r.execute_command("DEBUG", "SLEEP", "0.3")   # the cron would have expired it (hz 10) by now
        assert r.info("stats")["expired_keys"] == before   # (the key is not touched, so no lazy expiry)
    finally:
        r.execute_command("DEBUG", "PAUSE-CRON", "0")
    wait_until(lambda: r.info("stats")["expired_keys"] > before, 5, what="active expiry back")
    for name, value in (("appendfsync", "always"), ("repl-diskless-sync", "no"), ("repl-diskless-sync-delay", "0")):
        assert r.config_set(name, value)


def test_incr_family_is_propagated_as_it_came(r):
    # Valkey's multi unit "MULTI / EXEC is propagated correctly (write command, no effect)" expects `incr foo`
    # in the replication stream; durakv sent SET foo 1 KEEPTTL (INCRBYFLOAT stays a SET, as in Valkey)
    r.config_set("repl-ping-replica-period", 3600)
    s, command = sync_stream(r.connection_pool.connection_kwargs["port"])
    with s:
        for cmd in (["INCR", "foo"], ["DECR", "foo"], ["INCRBY", "foo", 5], ["DECRBY", "foo", 2],
                    ["INCRBYFLOAT", "foo", 1.5], ["set", "foo1", "bar", "pxat", "4102444800000"],
                    ["SET", "foo2", "bar", "EXAT", "4102444800"]):
            r.execute_command(*cmd)
        assert command()[0] == b"select"
        assert [command() for _ in range(5)] == [[b"incr", b"foo"], [b"decr", b"foo"], [b"incrby", b"foo", b"5"],
                                                 [b"decrby", b"foo", b"2"], [b"set", b"foo", b"4.5", b"KEEPTTL"]]
        # an absolute PXAT comes through as it was spelled (expire.tcl's "All TTL in commands are propagated
        # as absolute timestamp"); EXAT is rewritten to PXAT
        assert command() == [b"set", b"foo1", b"bar", b"pxat", b"4102444800000"]
        assert command() == [b"set", b"foo2", b"bar", b"PXAT", b"4102444800000"]


def test_pops_and_moves_are_propagated_as_valkey_rewrites_them(r):
    # Valkey's zset unit "ZMPOP propagate as pop with count command to replica" and list's "Command being
    # unblocked cause another command to get unblocked execution order test" (LMOVE keeps the client's case)
    r.config_set("repl-ping-replica-period", 3600)
    s, command = sync_stream(r.connection_pool.connection_kwargs["port"])
    with s:
        for cmd in (["ZADD", "z{t}", 1, "one", 2, "two", 3, "three"], ["ZMPOP", 1, "z{t}", "MIN"],
                    ["ZMPOP", 1, "z{t}", "MAX", "COUNT", 1], ["ZMPOP", 2, "z{t}", "z2{t}", "MIN", "COUNT", 10],
                    ["ZADD", "z{t}", 1, "a", 2, "b"], ["ZPOPMAX", "z{t}", 5], ["RPUSH", "src{t}", "x"],
                    ["LMOVE", "src{t}", "dst{t}", "left", "right"]):
            r.execute_command(*cmd)
        assert command()[0] == b"select"
        assert [command() for _ in range(8)] == [
            [b"zadd", b"z{t}", b"1", b"one", b"2", b"two", b"3", b"three"], [b"zpopmin", b"z{t}", b"1"],
            [b"zpopmax", b"z{t}", b"1"], [b"zpopmin", b"z{t}", b"1"], [b"zadd", b"z{t}", b"1", b"a", b"2", b"b"],
            [b"zpopmax", b"z{t}", b"5"], [b"rpush", b"src{t}", b"x"], [b"lmove", b"src{t}", b"dst{t}", b"left", b"right"]]


def test_cluster_help_in_cluster_mode_and_command_list(server_factory, r):
    # README listed CLUSTER HELP, but it answered "unknown subcommand"; COMMAND LIST lacked cluster|help
    # (Valkey's introspection-2 "COMMAND LIST FILTERBY PATTERN - list all commands/subcommands")
    assert set(r.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", "cl*help")) == {b"client|help",
                                                                                        b"cluster|help"}
    with pytest.raises(valkey.ResponseError) as e:
        r.execute_command("CLUSTER", "HELP")
    assert str(e.value) == "This instance has cluster support disabled"
    c = server_factory("--cluster-enabled", "yes").client()
    text = c.execute_command("CLUSTER", "HELP")
    assert text[0] == b"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert b"SHARDS" in text and text[-2:] == [b"HELP", b"    Print this help."]
