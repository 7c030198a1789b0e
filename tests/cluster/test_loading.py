"""Loading never stops the loop (issue 29 item 2). A node that loads a dataset (a standalone restart: its snapshot
and the journal after it; a shard replica rejoining: the newest snapshot from the object store and the stream
after it) answers meanwhile: INFO with `loading:1` and Valkey's `loading_*` progress fields, -LOADING (Valkey's
text) to data commands, and the shard hears its heartbeats; a replica storing its snapshot keeps applying the
journal and answering. The loads work in slices of the event loop (recovery/loading.py), so a client sees the
progress move between two of its requests. No test asserts a duration: they assert what was answered while the
load or the store was under way (scripts/measure_stalls.py measures the stalls)."""

import select
import signal
import socket
import time

import hiredis
import pytest
import valkey

from conftest import DEBUG_ARGS, wait_until

LOADING_TEXT = "Valkey is loading the dataset in memory"
# Valkey's INFO persistence ends with these while it loads (server.c genValkeyInfoString), in this order
LOADING_FIELDS = ["loading_start_time", "loading_total_bytes", "loading_rdb_used_mem", "loading_loaded_bytes",
                  "loading_loaded_perc", "loading_eta_seconds"]
# key-load-delay / rdb-key-save-delay per entry: 3,000 entries take at least 3 s to load (or to save), long enough to
# watch the load move, and 5,000 outlast a 2 s repl-timeout with room, on any machine (a sleep is never shorter).
# Valkey's own replication tests slow their loads so; these tests loaded 300,000 keys instead.
LOAD_DELAY_US = 1000


class Raw:
    """One plain connection to a server that may not listen yet (it is starting): RESP requests and replies (by
    hiredis), errors returned as ('error', text) instead of raised (-LOADING is an answer here, not a failure)."""

    def __init__(self, port, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self.reader = hiredis.Reader()

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def read(self):
        while True:
            reply = self.reader.gets()
            if reply is not False:
                if isinstance(reply, hiredis.ReplyError):
                    return ("error", str(reply))
                return reply
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.reader.feed(data)

    def call(self, *args):
        self.send(*args)
        return self.read()

    def info(self, section):
        text = self.call("INFO", section)
        assert not isinstance(text, tuple), text
        fields = {}
        for line in text.decode().splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k] = v
        return fields

    def close(self):
        self.sock.close()


def watch_load(conn, until_s=120):
    """Polls INFO persistence on conn until the load ends: the loading:1 answers seen (each a dict of the
    section's fields), in order. Every other answer of the server meanwhile is checked by the caller."""
    seen = []
    deadline = time.monotonic() + until_s
    while time.monotonic() < deadline:
        fields = conn.info("persistence")
        if fields["loading"] == "0":
            return seen
        seen.append(fields)
        time.sleep(0.005)
    raise TimeoutError("still loading after %d s" % until_s)


def check_progress_fields(samples):
    """The loading_* fields Valkey shows, in its order at the section's end, and a load seen in its middle:
    two answers of loading:1 with different loaded byte counts, both short of the total."""
    for fields in samples:
        keys = list(fields)
        assert keys[-len(LOADING_FIELDS):] == LOADING_FIELDS, keys
        assert fields["async_loading"] == "0"
        total, loaded = int(fields["loading_total_bytes"]), int(fields["loading_loaded_bytes"])
        assert 0 <= loaded <= total
        # (a shard member knows the size once it has found the snapshot in the object store)
        assert fields["loading_loaded_perc"] == ("%.2f" % (loaded / total * 100) if total else "0.00")
        assert int(fields["loading_eta_seconds"]) >= 0 and int(fields["loading_start_time"]) > 1_600_000_000
    middle = {int(f["loading_loaded_bytes"]) for f in samples
              if 0 < int(f["loading_loaded_bytes"]) < int(f["loading_total_bytes"])}
    assert len(middle) >= 2, "the load was not seen in progress: %r" % samples[:3]


def test_a_restart_answers_while_it_loads_in_slices(server_factory):
    """A standalone server restarted on a dataset of 3,000 keys (a snapshot, plus 300 keys journaled after it:
    a large entry, replayed one command at a time), each load step slowed by key-load-delay (Valkey's tests slow
    their loads so, rather than load a large dataset), listens at once and answers while it loads: -LOADING to
    PING and GET, INFO showing the progress move, CONFIG SET durability and DEBUG POPULATE refused (a write
    before the journal is open would be lost). Then every key is there. Before, the server listened only after
    the whole load, so nothing was answered during it."""
    srv = server_factory("--durability", "sync", "--key-load-delay", str(LOAD_DELAY_US))
    c = srv.client(socket_timeout=120)
    c.execute_command("DEBUG", "POPULATE", 3000, "key", 20)
    c.bgsave()
    wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0 and
               c.info("persistence")["rdb_last_bgsave_status"] == "ok", 120, what="the snapshot")
    c.execute_command("DEBUG", "POPULATE", 300, "late", 20)
    c.close()
    srv.stop()
    srv.start(wait=False)
    conn = Raw(srv.port)
    try:
        first = conn.info("persistence")
        assert first["loading"] == "1", "the first answer came after the load"
        assert conn.call("PING") == ("error", "LOADING " + LOADING_TEXT)
        assert conn.call("GET", "key:1") == ("error", "LOADING " + LOADING_TEXT)
        refused = conn.call("CONFIG", "SET", "durability", "async")
        assert refused[0] == "error" and "durability cannot change while the dataset is loading" in refused[1]
        assert conn.call("DEBUG", "POPULATE", 10, "more") == ("error", "LOADING " + LOADING_TEXT)
        samples = [first] + watch_load(conn)
        check_progress_fields(samples)
        assert "loading_total_bytes" not in conn.info("persistence")     # the fields end with the load
        assert conn.call("PING") == b"PONG"
        assert conn.call("DBSIZE") == 3300
        assert conn.call("GET", "key:2999") == b"value:2999" + bytes(10)
        assert conn.call("GET", "late:299") == b"value:299" + bytes(11)
        assert conn.call("CONFIG", "GET", "durability") == [b"durability", b"sync"]
    finally:
        conn.close()


def test_shutdown_while_loading_stops_the_load(server_factory):
    """SHUTDOWN during the load is answered (its connection closes) and the process exits without finishing the
    load, as Valkey exits when asked during a load; the data is loaded in full by the next start."""
    srv = server_factory("--durability", "sync", "--key-load-delay", str(LOAD_DELAY_US))
    c = srv.client(socket_timeout=120)
    c.execute_command("DEBUG", "POPULATE", 3000, "key", 20)
    c.close()
    srv.stop()
    srv.start(wait=False)
    conn = Raw(srv.port)
    try:
        assert conn.info("persistence")["loading"] == "1"
        conn.send("SHUTDOWN", "NOSAVE")
        assert srv.proc.wait(timeout=60) == 0
    finally:
        conn.close()
    assert "shutdown requested while loading" in srv.read_log()
    srv.start(wait=False)
    srv.wait_ready(timeout_s=120)   # the whole load, on a machine that may be busy (PING is -LOADING until then)
    with srv.client() as c:
        assert c.dbsize() == 3000


def test_pfselftest_leaves_the_loop_to_other_clients(server_factory):
    """PFSELFTEST runs on a worker thread: while one client waits for it, another's PINGs are answered. Before,
    it ran on the loop, and a PING sent meanwhile was answered only after it."""
    srv = server_factory()
    a, b = Raw(srv.port), Raw(srv.port)
    try:
        a.send("PFSELFTEST")
        pongs_while_pending = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert b.call("PING") == b"PONG"
            if select.select([a.sock], [], [], 0)[0]:
                break
            pongs_while_pending += 1
        assert a.read() == b"OK"
        assert pongs_while_pending >= 3, pongs_while_pending
    finally:
        a.close()
        b.close()


# -- a shard member ----------------------------------------------------------------------------------------

def _info(port, section):
    with valkey.Valkey(port=port, socket_timeout=30) as c:
        return c.info(section)


def _stored(port):
    return int(_info(port, "replication")["snapshots_stored"])


def test_a_replica_stores_its_snapshot_while_it_follows_and_answers(local_cluster):
    """A shard replica writes its snapshot in a forked child and stores it while the loop goes on: during the
    store (INFO rdb_bgsave_in_progress:1, as Valkey's BGSAVE) it applies a write the primary made meanwhile and
    serves it. Before, the image was written on the loop: nothing was applied or answered until it was done."""
    cluster = local_cluster(durability="sync",
                            extra_server_args=("--replica-snapshot-interval-ms", "0",
                                               "--rdb-key-save-delay", str(LOAD_DELAY_US), *DEBUG_ARGS))
    primary = cluster.primary(0)
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(port=primary.port, socket_timeout=120) as p:
        p.execute_command("DEBUG", "POPULATE", 5000, "key", 20)
        target = int(p.info("replication")["master_repl_offset"])
        with valkey.Valkey(port=replica.port, socket_timeout=120) as r:
            wait_until(lambda: int(r.info("replication")["slave_repl_offset"]) >= target, 120,
                       what="the replica caught up")
            stored = _stored(replica.port)
            r.execute_command("BGSAVE")
            assert r.info("persistence")["rdb_bgsave_in_progress"] == 1
            p.set("during-the-store", "yes")
            r.execute_command("READONLY")
            wait_until(lambda: r.get("during-the-store") == b"yes", 60, what="the write applied on the replica")
            assert r.info("persistence")["rdb_bgsave_in_progress"] == 1, "the store ended before the read"
            wait_until(lambda: _stored(replica.port) > stored, 120, what="the snapshot stored")
            # (then the store is pruned and the stream purged below it, and the flag drops)
            wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, 60, what="the store's end")


@pytest.mark.long_pole(25)     # seconds on the 2-core machine: xdist starts it first
def test_a_rejoining_replica_answers_and_is_heard_while_it_loads(local_cluster):
    """A replica killed and restarted loads the newest snapshot (5,000 keys, key-load-delay) and the journal after
    it in slices:
    it answers INFO with the load moving (loading:1, Valkey's loading_* fields), GET with -LOADING, and the
    primary hears its heartbeats (it lists it again) while it is still loading the snapshot; then it serves every
    key. Before, the snapshot was applied in one go: no answer, no heartbeat until it was done."""
    cluster = local_cluster(durability="sync",
                            extra_server_args=("--replica-snapshot-interval-ms", "0",
                                               "--key-load-delay", str(LOAD_DELAY_US), *DEBUG_ARGS))
    primary = cluster.primary(0)
    keeper, victim = cluster.replicas(0)[:2]
    with valkey.Valkey(port=primary.port, socket_timeout=120) as p:
        p.execute_command("DEBUG", "POPULATE", 5000, "key", 20)
        target = int(p.info("replication")["master_repl_offset"])
        wait_until(lambda: int(_info(keeper.port, "replication")["slave_repl_offset"]) >= target, 120,
                   what="the replica caught up")
        stored = _stored(keeper.port)
        with valkey.Valkey(port=keeper.port, socket_timeout=30) as k:
            k.execute_command("BGSAVE")
        wait_until(lambda: _stored(keeper.port) > stored, 120, what="the snapshot stored")
        for i in range(200):
            p.set("after:%d" % i, i)
        cluster.kill(victim.name, signal.SIGKILL)
        wait_until(lambda: p.info("replication")["connected_slaves"] == 1, 30, what="the killed replica unlisted")
        cluster.restart(victim.name, wait=False)
        conn = Raw(victim.port)
        try:
            assert conn.call("READONLY") == b"OK"
            samples, refusals, heard_while_loading_snapshot = [], set(), False
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                fields = conn.info("persistence")
                if fields["loading"] == "0":
                    break
                phase = conn.info("replication")["durakv_phase"]
                samples.append(fields)
                if (phase == "loading snapshot" and int(fields["loading_loaded_bytes"]) > 0
                        and p.info("replication")["connected_slaves"] == 2):
                    heard_while_loading_snapshot = True
                # The slot and role checks come first (Valkey's order: MASTERDOWN before LOADING): CLUSTERDOWN
                # until the topology is installed, MASTERDOWN once the node knows how far behind the journal it is
                # (replica-max-lag-ms), else LOADING
                reply = conn.call("GET", "key:1")
                if not isinstance(reply, tuple):
                    # served: the load ended between the INFO and the GET (never before it ended)
                    assert conn.info("persistence")["loading"] == "0", reply
                    break
                refusals.add(reply)
                time.sleep(0.005)
            check_progress_fields(samples)
            assert ("error", "LOADING " + LOADING_TEXT) in refusals
            others = {text.split(" ", 1)[0] for kind, text in refusals if text != "LOADING " + LOADING_TEXT}
            assert others <= {"CLUSTERDOWN", "MASTERDOWN"}, refusals
            assert heard_while_loading_snapshot, "the primary did not list the replica while it loaded"
            wait_until(lambda: conn.info("replication")["durakv_phase"] == "following", 60, what="following")
            assert conn.call("DBSIZE") == 5200
            assert conn.call("GET", "key:4999") == b"value:4999" + bytes(10)
            assert conn.call("GET", "after:199") == b"199"
        finally:
            conn.close()


@pytest.mark.parametrize("durability", ["none"])
def test_a_server_without_journal_loads_its_snapshot_in_slices(server_factory, durability):
    """durability none: the snapshot alone (written by SAVE from memory), loaded in slices as well."""
    srv = server_factory("--durability", durability, "--key-load-delay", str(LOAD_DELAY_US))
    c = srv.client(socket_timeout=120)
    c.execute_command("DEBUG", "POPULATE", 3000, "key", 20)
    c.save()
    c.close()
    srv.stop()
    srv.start(wait=False)
    conn = Raw(srv.port)
    try:
        first = conn.info("persistence")
        assert first["loading"] == "1"
        check_progress_fields([first] + watch_load(conn))
        assert conn.call("DBSIZE") == 3000
    finally:
        conn.close()


@pytest.mark.long_pole(30)     # seconds on the 2-core machine: xdist starts it first
def test_a_long_replicaof_load_keeps_the_link(redis_server, server_factory):
    """REPLICAOF from a redis-server with repl-timeout 2: the primary counts the replica online once the RDB is sent
    and drops one it heard nothing from for that long; the load (5,000 keys, key-load-delay) takes longer. The
    replica sends a newline every second while it loads, as Valkey's replica does, so one full sync is enough and
    the link comes up. Before, the primary dropped it after every load and it synced again and again."""
    port, src = redis_server("--repl-diskless-sync", "no", "--repl-timeout", "2", "--enable-debug-command", "local")
    src.execute_command("DEBUG", "POPULATE", 5000, "key", 20)
    srv = server_factory("--durability", "sync", "--key-load-delay", str(LOAD_DELAY_US))
    with srv.client(socket_timeout=60) as c:
        c.execute_command("REPLICAOF", "127.0.0.1", port)
        wait_until(lambda: c.execute_command("ROLE")[3] == b"connected", 120, what="the link up")
        src.set("after", "the load")
        wait_until(lambda: c.get("after") == b"the load", 30, what="the stream")
        assert c.dbsize() == 5001
        assert src.info("stats")["sync_full"] == 1
        c.execute_command("REPLICAOF", "NO", "ONE")
