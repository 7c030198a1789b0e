"""Issue 29, items 1 and 3 and its config differences: every config bounded as Valkey 9.1.2 bounds its own (at
CONFIG SET and at start-up, with Valkey's texts and FATAL CONFIG FILE ERROR shape), CONFIG SET all or nothing,
the crashes and silences (REPLCONF, SHUTDOWN's illegal flags, disk-full messages that name no file), and
Valkey 9.1.2's configs that were missing: maxmemory-clients, replicaof, import-mode, the hidden debug configs,
CONFIG SET port, metrics-port. The sweep over every name is tests/test_config_fuzz.py."""

import os
import re
import socket
import subprocess
import sys

import pytest
import valkey

from conftest import free_port, wait_until
from helpers.wire import error_of

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/


def _cli(*argv, cwd=None, timeout=60, stdin=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, "-m", "durakv", "server", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=env, input=stdin)


# -- the lock-outs of issue 29: each refused, the server keeps serving ----------------------------------------

def test_proto_max_bulk_len_minus_one_is_refused_and_new_clients_still_get_pong(shared_server):
    c = shared_server.client()
    assert error_of(c, "CONFIG", "SET", "proto-max-bulk-len", "-1") == (
        "ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be a memory value")
    assert error_of(c, "CONFIG", "SET", "proto-max-bulk-len", "1048575") == (
        "ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between "
        "1048576 and 9223372036854775807 inclusive")
    assert c.config_get("proto-max-bulk-len") == {"proto-max-bulk-len": "536870912"}
    with shared_server.client() as fresh:
        assert fresh.ping() and fresh.set("pmbl", "v") and fresh.get("pmbl") == b"v"


def test_proto_max_bulk_len_applies_to_connected_clients_at_once(shared_server):
    """As Valkey reads server.proto_max_bulk_len for every request: a client connected before the change is
    held to the new limit too (its bulk header past it is refused at once), and not after it is restored."""
    header = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n" % (1024 * 1024 + 1)
    with shared_server.client() as c:
        before = socket.create_connection(("127.0.0.1", shared_server.port), timeout=10)
        try:
            before.sendall(b"PING\r\n")
            assert before.recv(100) == b"+PONG\r\n"              # connected before the change
            assert c.config_set("proto-max-bulk-len", "1mb")
            try:
                before.sendall(header)
                assert before.recv(200) == b"-ERR Protocol error: invalid bulk length\r\n"
            finally:
                assert c.config_set("proto-max-bulk-len", "512mb")
        finally:
            before.close()
        assert c.set("big", "x" * (1024 * 1024 + 1))


def test_client_held_replies_limit_minus_one_is_refused_and_a_pipeline_of_sync_sets_completes(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        assert error_of(c, "CONFIG", "SET", "client-held-replies-limit", "-1") == (
            "ERR CONFIG SET failed (possibly related to argument 'client-held-replies-limit') - argument must be a "
            "memory value")
        assert c.config_get("client-held-replies-limit") == {"client-held-replies-limit": str(32 * 1024 * 1024)}
        pipe = c.pipeline(transaction=False)
        for i in range(20000):
            pipe.set("held:%d" % i, "v")
        assert pipe.execute() == [True] * 20000


@pytest.mark.parametrize("value", ["-1", "1e23", "100000000000000000000000", "18446744073709551616"])
def test_maxmemory_values_that_lock_out_writes_are_refused(shared_server, value):
    c = shared_server.client()
    assert error_of(c, "CONFIG", "SET", "maxmemory", value) == (
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value")
    assert c.config_get("maxmemory") == {"maxmemory": "0"}
    assert c.set("mm", "v") and c.get("mm") == b"v"


def test_maxmemory_takes_the_whole_unsigned_range_as_valkey(shared_server):
    c = shared_server.client()
    assert c.config_set("maxmemory", "18446744073709551615")
    try:
        assert c.config_get("maxmemory") == {"maxmemory": "18446744073709551615"}
        assert c.set("mm2", "v")
    finally:
        assert c.config_set("maxmemory", "0")


def test_client_query_buffer_limit_under_one_megabyte_is_refused(shared_server):
    c = shared_server.client()
    assert error_of(c, "CONFIG", "SET", "client-query-buffer-limit", "1") == (
        "ERR CONFIG SET failed (possibly related to argument 'client-query-buffer-limit') - argument must be "
        "between 1048576 and 9223372036854775807 inclusive")
    with shared_server.client() as fresh:
        assert fresh.set("cqbl", "v" * 1000) and fresh.ping()


@pytest.mark.parametrize("value", ["1e23", "100000000000000000000000", "-1", "100"])
def test_lua_memory_limit_values_that_break_every_script_are_refused(shared_server, value):
    c = shared_server.client()
    text = error_of(c, "CONFIG", "SET", "lua-memory-limit", value)
    assert text.startswith("ERR CONFIG SET failed (possibly related to argument 'lua-memory-limit') - argument must "
                           "be ")
    assert c.config_get("lua-memory-limit") == {"lua-memory-limit": str(1024 * 1024 * 1024)}
    assert c.eval("return redis.call('set', KEYS[1], 'x')", 1, "luamem") == b"OK"


def test_auto_snapshot_journal_bytes_minus_one_is_refused(shared_server):
    c = shared_server.client()
    assert error_of(c, "CONFIG", "SET", "auto-snapshot-journal-bytes", "-1") == (
        "ERR CONFIG SET failed (possibly related to argument 'auto-snapshot-journal-bytes') - argument must be a "
        "memory value")
    assert c.config_get("auto-snapshot-journal-bytes") == {"auto-snapshot-journal-bytes": str(256 * 1024 * 1024)}


def test_integers_go_through_valkeys_one_rule(shared_server):
    """Python's int() took ' 5' and '1_0'; string2ll does not."""
    c = shared_server.client()
    for value in (" 5", "1_0", "+5", "05", "5 "):
        assert error_of(c, "CONFIG", "SET", "timeout", value) == (
            "ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an "
            "integer")
    for value in ("1", "true", "0", "no "):
        assert error_of(c, "CONFIG", "SET", "appendonly", value) == (
            "ERR CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'")
    assert c.config_get("timeout") == {"timeout": "0"}


# -- CONFIG SET is all or nothing ----------------------------------------------------------------------------

def test_config_set_rolls_back_on_a_set_error(shared_server):
    """Valkey's "CONFIG SET rollback on set error": the first bad value answers, nothing of the command holds."""
    c = shared_server.client()
    assert c.config_set("maxmemory", "10000002")
    try:
        assert error_of(c, "CONFIG", "SET", "maxmemory", "10000001", "maxmemory-clients", "200%",
                        "client-query-buffer-limit", "invalid") == (
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be "
            "less or equal to 100")
        assert c.config_get("maxmemory") == {"maxmemory": "10000002"}
        assert c.config_get("maxmemory-clients") == {"maxmemory-clients": "0"}
        assert c.config_get("client-query-buffer-limit") == {"client-query-buffer-limit": "1073741824"}
    finally:
        assert c.config_set("maxmemory", "0")


def test_config_set_rolls_back_on_an_apply_error(server_factory):
    """Valkey's "CONFIG SET rollback on apply error": a port that cannot be bound fails the whole command after
    maxmemory was applied; maxmemory is put back and the server still answers on its old port."""
    srv = server_factory("--durability", "none")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    used_port = busy.getsockname()[1]
    try:
        with srv.client() as c:
            assert error_of(c, "CONFIG", "SET", "maxmemory", "10000001", "port", str(used_port),
                            "client-query-buffer-limit", "10m") == (
                "ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check "
                "server logs.")
            assert c.config_get("maxmemory") == {"maxmemory": "0"}
            assert c.config_get("port") == {"port": str(srv.port)}
            assert c.config_get("client-query-buffer-limit") == {"client-query-buffer-limit": "1073741824"}
        with srv.client() as fresh:
            assert fresh.ping()
    finally:
        busy.close()
    assert "could not listen on 127.0.0.1:%d" % used_port in srv.read_log()


def test_config_set_argument_errors_as_valkey(shared_server):
    c = shared_server.client()
    assert error_of(c, "CONFIG", "SET", "maxmemory", "1", "x") == "ERR syntax error"
    assert error_of(c, "CONFIG", "SET", "maxmemory", "5", "nosuch", "1", "daemonize", "no") == (
        "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'")
    assert error_of(c, "CONFIG", "SET", "maxmemory", "5", "daemonize", "no") == (
        "ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config")
    assert error_of(c, "CONFIG", "SET", "lua-time-limit", "-1") == (
        "ERR CONFIG SET failed (possibly related to argument 'lua-time-limit') - argument must be between 0 and "
        "9223372036854775807 inclusive")
    assert c.config_get("maxmemory") == {"maxmemory": "0"}


def test_hz_out_of_its_range_is_clamped_as_valkey(shared_server):
    c = shared_server.client()
    try:
        assert c.config_set("hz", "100000") and c.config_get("hz") == {"hz": "500"}
        assert c.config_set("hz", "0") and c.config_get("hz") == {"hz": "1"}
        assert error_of(c, "CONFIG", "SET", "hz", "-1") == (
            "ERR CONFIG SET failed (possibly related to argument 'hz') - argument must be between 0 and 2147483647 "
            "inclusive")
    finally:
        c.config_set("hz", "10")


# -- CONFIG GET: hidden debug configs, several arguments, the name as asked ----------------------------------

def test_config_get_hidden_configs_only_by_exact_name(shared_server):
    c = shared_server.client()
    everything = c.config_get("*")
    for hidden in ("key-load-delay", "rdb-key-save-delay", "watchdog-period", "debug-context"):
        assert hidden not in everything
        assert hidden in c.config_get(hidden)
    assert c.config_get("key-load-delay") == {"key-load-delay": "0"}


def test_config_get_multiple_args_and_the_replicaof_alias(shared_server):
    c = shared_server.client()
    res = c.execute_command("CONFIG", "GET", "maxmemory", "maxmemory*", "bind", "*of")
    keys = res[0::2] if isinstance(res, list) else list(res)
    names = [k.decode() if isinstance(k, bytes) else k for k in keys]
    assert len(names) == len(set(names))
    assert {"slaveof", "replicaof", "maxmemory", "maxmemory-samples", "maxmemory-clients", "bind"} <= set(names)
    assert c.execute_command("CONFIG", "GET", "MAXMEMORY") in ([b"MAXMEMORY", b"0"], {b"MAXMEMORY": b"0"})


def test_metrics_port_is_settable_and_config_get_and_set_agree(shared_server):
    """CONFIG GET * listed metrics-port, which CONFIG SET refused: now it starts, moves and stops the server."""
    import urllib.request
    c = shared_server.client()

    def scrape(port):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
            return resp.read().decode()
    first, second = free_port(), free_port()
    assert c.config_set("metrics-port", str(first))
    try:
        assert "durakv_durability_mode" in scrape(first)
        assert c.config_set("metrics-port", str(second))
        assert c.config_get("metrics-port") == {"metrics-port": str(second)}
        assert "durakv_durability_mode" in scrape(second)

        def first_closed():
            try:
                scrape(first)
                return False
            except OSError:
                return True
        wait_until(first_closed, 10, what="the old metrics port closed")
    finally:
        assert c.config_set("metrics-port", "0")
    every = c.config_get("*")
    for name, value in every.items():   # CONFIG sanity: every listed name takes back the value it shows
        if name in ("requirepass",) or c.config_get(name) != {name: value}:
            continue
        try:
            c.execute_command("CONFIG", "SET", name, value)
        except valkey.ResponseError as exc:
            assert "can't set immutable config" in str(exc), (name, value, str(exc))


# -- CONFIG SET port ------------------------------------------------------------------------------------------

def test_config_set_port_listens_on_the_new_port_and_keeps_connected_clients(server_factory):
    srv = server_factory("--durability", "none", "--cluster-enabled", "yes")
    new_port = free_port()
    with srv.client() as c:
        assert c.set("{a}k", "v")
        assert c.config_set("port", str(new_port))
        assert c.config_get("port") == {"port": str(new_port)}
        assert c.get("{a}k") == b"v"                       # this connection stays
        slots = c.execute_command("CLUSTER", "SLOTS")
        assert slots[0][2][1] == new_port                  # the topology names the new port
    with valkey.Valkey(host="127.0.0.1", port=new_port, socket_timeout=10) as moved:
        assert moved.get("{a}k") == b"v"

    def old_refused():
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
            return False
        except OSError:
            return True
    wait_until(old_refused, 10, what="the old port closed")
    with valkey.Valkey(host="127.0.0.1", port=new_port, socket_timeout=10) as moved:
        assert moved.config_set("port", str(srv.port))     # and back
    with srv.client() as back:
        assert back.get("{a}k") == b"v"


# -- start-up: Valkey's FATAL CONFIG FILE ERROR, exit 1 ------------------------------------------------------

FATAL = re.compile(r"\n\*\*\* FATAL CONFIG FILE ERROR \(Version [^)]+\) \*\*\*\n"
                   r"Reading the configuration file, at line (\d+)\n>>> '(.*)'\n(.*)\n\Z")


@pytest.mark.parametrize("argv,line,reason", [
    (["--maxmemory", "-1"], 'maxmemory "-1"', "argument must be a memory value"),
    (["--proto-max-bulk-len", "1"], 'proto-max-bulk-len "1"',
     "argument must be between 1048576 and 9223372036854775807 inclusive"),
    (["--invalid"], "invalid", "Bad directive or wrong number of arguments"),
    (["--port"], "port", "wrong number of arguments"),
    (["--port", "6379", "6380"], 'port "6379" "6380"', "wrong number of arguments"),
    (["--port", "--loglevel", "verbose"], 'port "--loglevel" "verbose"', "wrong number of arguments"),
    (["--port", "--bla", "--loglevel", "verbose"], 'port "--bla"', "argument couldn't be parsed into an integer"),
    (["--replicaof", "127.0.0.1", "abc"], 'replicaof "127.0.0.1" "abc"', "Invalid primary port"),
    (["--shard", "a.b"], 'shard "a.b"',
     "a shard name is 1 to 64 letters, digits, '-' or '_' (it names the shard's NATS stream)"),
    (["--key-load-delay", "2147483648"], 'key-load-delay "2147483648"',
     "argument must be between -2147483648 and 2147483647 inclusive"),
    (["--loading-process-events-interval-bytes", "1024"], 'loading-process-events-interval-bytes "1024"',
     "durakv does not pace its loading by bytes read (a snapshot loads as the loader decides; see "
     "docs/compatibility.md)"),
])
def test_a_bad_value_at_start_up_exits_1_with_valkeys_fatal_config_file_error(tmp_path, argv, line, reason):
    out = _cli("--dir", str(tmp_path), *argv)
    assert out.returncode == 1
    m = FATAL.search(out.stderr)
    assert m, out.stderr
    assert m.group(1) == "3" and m.group(2) == line and m.group(3) == reason


def test_a_bad_line_of_a_config_file_is_named_by_its_number(tmp_path):
    conf = tmp_path / "d.conf"
    conf.write_text("# comment\nport 0\n\nmaxmemory 1e23\n")
    out = _cli(str(conf), "--dir", str(tmp_path))
    assert out.returncode == 1
    m = FATAL.search(out.stderr)
    assert m and m.groups() == ("4", "maxmemory 1e23", "argument must be a memory value"), out.stderr


def test_replicaof_with_cluster_mode_is_refused_at_start_up(tmp_path):
    out = _cli("--dir", str(tmp_path), "--cluster-enabled", "yes", "--replicaof", "127.0.0.1", "7000")
    assert out.returncode == 1
    assert out.stderr.endswith("***\nreplicaof directive not allowed in cluster mode\n"), out.stderr


def test_an_included_file_is_read_and_rewrite_still_writes_the_main_file(tmp_path):
    from durakv.config import Config
    (tmp_path / "inc.conf").write_text("maxmemory 5mb\n")
    main = tmp_path / "main.conf"
    main.write_text("include %s\nhz 20\n" % (tmp_path / "inc.conf"))
    c = Config()
    c.load_file(str(main))
    assert c["maxmemory"] == 5 * 1024 * 1024 and c["hz"] == 20
    c.set("timeout", "7")
    c.rewrite()
    assert "timeout 7" in main.read_text() and (tmp_path / "inc.conf").read_text() == "maxmemory 5mb\n"
