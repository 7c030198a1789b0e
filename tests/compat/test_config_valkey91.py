"""Valkey 9.1.2's configs durakv was missing (issue 29's config differences), each with its effect:
maxmemory-clients (client eviction, its percent form), replicaof as a config, import-mode (with CLIENT
IMPORT-SOURCE, side by side with Valkey 9.1.2), and the hidden debug configs tests lean on (watchdog-period,
debug-context, key-load-delay, rdb-key-save-delay)."""

import socket
import time

import pytest
import valkey

from conftest import wait_until
from helpers.wire import error_of


# -- maxmemory-clients ---------------------------------------------------------------------------------------

def _half_sent_request(port, nbytes):
    """A connection holding `nbytes` of a request it never finishes (a query buffer that only grows)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (nbytes * 4))
    chunk = b"x" * 65536
    sent = 0
    try:
        while sent < nbytes:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass         # evicted while still sending: what the test waits for anyway
    return s


def _closed_by_server(s, timeout_s):
    s.settimeout(timeout_s)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_maxmemory_clients_evicts_the_client_over_the_limit_and_spares_no_evict_ones(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as admin:
        assert admin.execute_command("CLIENT", "NO-EVICT", "on") == b"OK"
        assert admin.config_set("maxmemory-clients", "1mb")
        assert admin.config_get("maxmemory-clients") == {"maxmemory-clients": "1048576"}
        big = _half_sent_request(srv.port, 3 * 1024 * 1024)
        try:
            assert _closed_by_server(big, 20), "the client over maxmemory-clients was not evicted"
        finally:
            big.close()
        assert admin.info("stats")["evicted_clients"] >= 1
        assert admin.ping()                                   # the no-evict client stays
        with srv.client() as other:
            assert other.set("after", "1") and other.get("after") == b"1"
        # CLIENT NO-EVICT ON spares a client that holds as much
        pinger = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        pinger.sendall(b"CLIENT NO-EVICT on\r\n")
        assert pinger.recv(100) == b"+OK\r\n"
        pinger.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (8 * 1024 * 1024) + b"y" * (2 * 1024 * 1024))
        wait_until(lambda: "Over client maxmemory after evicting all evictable clients" in srv.read_log(), 20,
                   what="the sweep to find only unevictable clients over the limit")
        assert not _closed_by_server(pinger, 0.5)
        pinger.close()
        assert "Evicting client: id=" in srv.read_log()
        assert admin.config_set("maxmemory-clients", "0")


def test_maxmemory_clients_percent_of_maxmemory(server_factory):
    srv = server_factory("--durability", "none", "--maxmemory", "10mb", "--maxmemory-clients", "10%")
    with srv.client() as admin:
        assert admin.config_get("maxmemory-clients") == {"maxmemory-clients": "10%"}
        big = _half_sent_request(srv.port, 2 * 1024 * 1024)    # 10% of 10 MiB is 1 MiB
        try:
            assert _closed_by_server(big, 20)
        finally:
            big.close()
        assert admin.info("stats")["evicted_clients"] >= 1
        assert error_of(admin, "CONFIG", "SET", "maxmemory-clients", "101%") == (
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be "
            "less or equal to 100")


# -- replicaof as a config -------------------------------------------------------------------------------------

def test_replicaof_in_the_config_follows_the_primary_from_start_up(server_factory, redis_server):
    port, primary = redis_server("--repl-diskless-sync-delay", "0")
    primary.set("from-primary", "1")
    srv = server_factory("--durability", "sync", "--replicaof", "127.0.0.1", str(port))
    c = srv.client()
    wait_until(lambda: c.execute_command("ROLE")[3] == b"connected", 30, what="the link to the primary")
    assert c.get("from-primary") == b"1"
    assert c.config_get("replicaof") == {"replicaof": "127.0.0.1 %d" % port}
    assert c.config_get("slaveof") == {"slaveof": "127.0.0.1 %d" % port}
    assert error_of(c, "CONFIG", "SET", "replicaof", "no one") == (
        "ERR CONFIG SET failed (possibly related to argument 'replicaof') - can't set immutable config")
    assert c.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    assert c.config_get("replicaof") == {"replicaof": ""}
    assert c.set("mine", "1")


# -- import-mode -------------------------------------------------------------------------------------------------

def _import_mode_script(port):
    """The same steps on a server: what each answers (a key whose TTL passed, seen by an ordinary client and by
    an import source, with import-mode on and then off)."""
    out = []
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10) as c, \
            valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10) as source:
        c.delete("imp:k", "imp:other")

        def call(client, *args):
            try:
                out.append((args, client.execute_command(*args)))
            except valkey.ResponseError as exc:
                out.append((args, "ERR " + str(exc)))
        call(source, "CLIENT", "IMPORT-SOURCE", "ON")           # refused outside import-mode
        call(source, "CLIENT", "IMPORT-SOURCE", "OFF")
        call(c, "CONFIG", "SET", "import-mode", "yes")
        call(source, "CLIENT", "IMPORT-SOURCE", "ON")
        call(c, "SET", "imp:k", "v", "PX", "50")
        call(c, "SET", "imp:other", "w")
        wait_until(lambda: c.get("imp:k") is None, 10, what="imp:k past its TTL")
        for _ in range(3):                                      # not deleted by lazy or active expiry
            call(c, "GET", "imp:k")
            call(c, "EXISTS", "imp:k")
            call(c, "DBSIZE")
            call(source, "GET", "imp:k")                       # an import source sees it live
            call(source, "EXISTS", "imp:k")
            time.sleep(0.12)                                    # a few active-expiry cycles (hz 10) go by
        call(source, "SET", "imp:k", "v2", "PX", "1")          # the source writes it, already expired too
        time.sleep(0.01)
        call(source, "GET", "imp:k")
        call(c, "GET", "imp:k")
        call(source, "DEL", "imp:k")                           # the source's own DEL expires it
        call(c, "DBSIZE")
        call(c, "SET", "imp:k", "v3", "PX", "50")
        wait_until(lambda: c.get("imp:k") is None, 10, what="imp:k past its TTL again")
        call(c, "CONFIG", "SET", "import-mode", "no")
        call(c, "GET", "imp:k")
        call(source, "GET", "imp:k")                           # import-mode off: expired for everyone
        call(c, "DBSIZE")
        call(c, "DEL", "imp:other")
    return out


def test_import_mode_and_import_source_answer_as_valkey_9_1_2(server_factory, valkey91):
    srv = server_factory("--durability", "sync")
    with valkey91.client() as v:
        v.flushall()
    mine = _import_mode_script(srv.port)
    theirs = _import_mode_script(valkey91.port)
    assert mine == theirs
    assert mine[0][1] == "ERR Server is not in import mode"
    assert (("GET", "imp:k"), b"v") in mine          # the import source read the expired key


def test_import_mode_does_not_evict(server_factory):
    srv = server_factory("--durability", "none", "--maxmemory-policy", "allkeys-random")
    with srv.client() as c:
        for i in range(200):
            c.set("fill:%d" % i, "x" * 1000)
        used = c.info("memory")["used_memory"]
        assert c.config_set("maxmemory", str(used + 20000))
        assert c.config_set("import-mode", "yes")
        with pytest.raises(valkey.ResponseError, match="^command not allowed when used memory > 'maxmemory'"):
            for i in range(100):
                c.set("more:%d" % i, "y" * 1000)
        assert c.info("stats")["evicted_keys"] == 0
        assert c.config_set("import-mode", "no")
        assert c.set("after", "y" * 1000)                 # import-mode off: eviction makes room again
        assert c.info("stats")["evicted_keys"] > 0


# -- the hidden debug configs ----------------------------------------------------------------------------------

def test_watchdog_period_logs_the_stuck_loops_stack_with_debug_context(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        assert c.config_set("debug-context", "test-context-42")
        assert c.config_set("watchdog-period", "200")
        assert c.execute_command("DEBUG", "SLEEP", "1") == b"OK"
        wait_until(lambda: "--- WATCHDOG TIMER EXPIRED ---" in srv.read_log(), 10, what="the watchdog report")
        log = srv.read_log()
        report = log[log.index("--- WATCHDOG TIMER EXPIRED ---"):]
        assert "debugging.py" in report          # the stack of the loop's thread, inside DEBUG SLEEP
        assert "debug-context: test-context-42" in report
        assert c.config_set("watchdog-period", "0")
        assert c.ping()


def test_key_load_delay_slows_loading_at_start_up(server_factory, tmp_path):
    data = tmp_path / "kld"
    srv = server_factory("--durability", "sync", data_dir=data)
    with srv.client() as c:
        for i in range(20):
            c.set("kld:%d" % i, i)
    srv.stop()
    slow = server_factory("--durability", "sync", "--key-load-delay", "100000", data_dir=data, start=False)
    started = time.monotonic()
    slow.start()
    # 20 entries at 100 ms each: loading alone waits 2 s (a lower bound the delay guarantees; no speed is measured)
    assert time.monotonic() - started >= 2.0
    with slow.client() as c:
        assert c.config_get("key-load-delay") == {"key-load-delay": "100000"}
        assert c.get("kld:19") == b"19"


def test_rdb_key_save_delay_keeps_a_bgsave_in_progress_while_clients_are_served(server_factory):
    """Valkey's "CLIENT KILL close the client connection during bgsave": a slow BGSAVE (rdb-key-save-delay, waited
    in the snapshot builder before each key) is still in progress after a client is killed and another PINGs;
    it took at least the delays it waited (INFO's rdb_last_bgsave_time_sec)."""
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        c.set("k", "v")
        c.set("k2", "v")
        assert c.config_set("rdb-key-save-delay", "3000000")      # 3 s a key
        assert c.bgsave()
        wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 1, 10, what="bgsave running")
        with srv.client() as victim:
            assert victim.ping()
            assert c.execute_command("CLIENT", "KILL", "SKIPME", "yes") >= 1
        assert c.ping()
        assert c.info("persistence")["rdb_bgsave_in_progress"] == 1
        wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, 60, what="bgsave done")
        persistence = c.info("persistence")
        assert persistence["rdb_last_bgsave_status"] == "ok"
        assert persistence["rdb_last_bgsave_time_sec"] >= 6
        assert c.config_set("rdb-key-save-delay", "0")


def test_rdb_key_save_delay_slows_the_rdb_export_of_a_sync_in_its_child(server_factory):
    """The RDB a SYNC client gets is built in a forked child when rdb-key-save-delay is set (never on the loop,
    whatever the dataset's size): the payload comes after the delays, and the server answers meanwhile."""
    from helpers.wire import sync_stream
    import threading
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        for i in range(4):
            c.set("sync:%d" % i, i)
        assert c.config_set("rdb-key-save-delay", "500000")        # 0.5 s a key
        result = {}

        def attach():
            started = time.monotonic()
            s, _next = sync_stream(srv.port)
            result["took"] = time.monotonic() - started
            s.close()
        t = threading.Thread(target=attach)
        t.start()
        try:
            wait_until(lambda: c.info("stats")["total_forks"] >= 1, 10, what="the export's fork")
            assert c.ping()                                       # the loop is free while the child waits
        finally:
            t.join(60)
        assert result["took"] >= 2.0                              # 4 keys at 0.5 s: a lower bound, not a speed
        assert c.config_set("rdb-key-save-delay", "0")
