"""Nothing derived from an uncommitted write leaves the server before its commit (DESIGN: "Reads and
uncommitted writes"): a blocked client's wake-up, keyspace notifications, the SYNC feed and its RDB, DEBUG
digests and objects, INFO keyspace, DBSIZE, CLUSTER COUNTKEYSINSLOT / GETKEYSINSLOT.

Each test stalls the local journal's fsync (leak_util.StalledWrite: DEBUG JOURNAL-STALL), lets a writer's
command run (its effects are in memory, `journal_applied_index` > `journal_commit_index`), and lets an observer
on another connection receive what it asked for. The moment it has received it, a probe connection reads the
commit index: it must already cover the write. Had the observer been sent anything before the commit, the probe
would see the index still short of it (the fsync sleeps far longer than a probe's round trip). Real server
processes, real sockets, valkey-py. The same rule on a JetStream shard whose NATS server is stopped:
test_no_uncommitted_leaks_jetstream.py."""

import glob
import os
import queue
import shutil
import socket
import subprocess
import threading

import pytest
import valkey

from conftest import ServerProcess, wait_until
from helpers.leaks import STALL_MS, StalledWrite, indices, next_message, raw_reply, subscribed, tracking_connection
from helpers.wire import _encode, _read_reply, sync_stream


@pytest.fixture
def sync_server(server_factory):
    return server_factory("--durability", "sync", "--notify-keyspace-events", "KEA")


@pytest.fixture
def cluster_server(tmp_path):
    srv = ServerProcess(tmp_path / "cluster1", args=["--cluster-enabled", "yes", "--durability", "sync"])
    srv.start()
    yield srv
    srv.stop()


def test_xread_block_wakeup_waits_for_the_xadd_commit(sync_server):
    srv = sync_server
    with srv.client() as probe, srv.client() as reader:
        got = queue.Queue()
        t = threading.Thread(target=lambda: got.put(reader.xread({"s": "$"}, block=0)), daemon=True)
        t.start()
        wait_until(lambda: probe.info("clients")["blocked_clients"] == 1, 10, what="XREAD blocked")
        w = StalledWrite(srv, probe, "XADD", "s", "2-1", "f", "v")
        entries = got.get(timeout=30)
        w.assert_committed_now("the XREAD BLOCK wake-up")
        assert entries == [[b"s", [(b"2-1", {b"f": b"v"})]]]
        assert w.finish() == b"2-1"


def test_blpop_wakeup_waits_for_the_push_commit(sync_server):
    """BLPOP's wake-up is a write (the pop): it waits for the entry holding both effects."""
    srv = sync_server
    with srv.client() as probe, srv.client() as reader:
        got = queue.Queue()
        t = threading.Thread(target=lambda: got.put(reader.blpop(["l"], 0)), daemon=True)
        t.start()
        wait_until(lambda: probe.info("clients")["blocked_clients"] == 1, 10, what="BLPOP blocked")
        w = StalledWrite(srv, probe, "RPUSH", "l", "x")
        assert got.get(timeout=30) == (b"l", b"x")
        w.assert_committed_now("the BLPOP wake-up")
        assert w.finish() == 1


def test_keyspace_notification_waits_for_the_commit(sync_server):
    srv = sync_server
    with srv.client() as probe, srv.client() as sub_client:
        p = sub_client.pubsub()
        p.subscribe("__keyspace@0__:k")
        assert p.get_message(timeout=10)["type"] == "subscribe"
        w = StalledWrite(srv, probe, "SET", "k", "uncommitted")
        msg = None
        while msg is None:
            msg = p.get_message(timeout=30)
        w.assert_committed_now("the keyspace event")
        assert msg["channel"] == b"__keyspace@0__:k" and msg["data"] == b"set"
        assert w.finish() is True   # valkey-py: SET answered +OK
        p.close()


def test_keyspace_notification_waits_in_async_mode_too(server_factory):
    """In async mode the writer is answered at once, but the event still waits for the journal."""
    srv = server_factory("--durability", "async", "--notify-keyspace-events", "KEA")
    with srv.client() as probe, srv.client() as sub_client, srv.client() as writer:
        p = sub_client.pubsub()
        p.subscribe("__keyevent@0__:set")
        assert p.get_message(timeout=10)["type"] == "subscribe"
        probe.execute_command("DEBUG", "JOURNAL-STALL", str(STALL_MS))
        committed, _ = indices(probe)
        assert writer.set("k", "v")       # async: acknowledged before the commit
        _, index = indices(probe)
        assert index > committed
        msg = None
        while msg is None:
            msg = p.get_message(timeout=30)
        now_committed, _ = indices(probe)
        assert now_committed >= index, "the keyspace event left before its write committed"
        assert msg["data"] == b"k"
        probe.execute_command("DEBUG", "JOURNAL-STALL", "0")
        p.close()


def test_tracking_invalidation_is_early_and_the_reread_waits(sync_server):
    """Invalidations are sent early by decision (docs/architecture.md): they carry no value, and the client's
    re-read is what must not see the uncommitted value before its commit."""
    srv = sync_server
    t, f = tracking_connection(srv.port)
    with srv.client() as probe, t:
        probe.set("k2", "old")
        t.sendall(_encode(("GET", "k2")))
        assert _read_reply(f) == b"$3\r\nold\r\n"
        w = StalledWrite(srv, probe, "SET", "k2", "new")
        assert _read_reply(f) == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk2\r\n"
        t.sendall(_encode(("GET", "k2")))
        value = _read_reply(f)
        w.assert_committed_now("the re-read's value")
        assert value == b"$3\r\nnew\r\n"
        assert w.finish() is True   # valkey-py: SET answered +OK


def test_sync_feed_waits_for_the_commit(sync_server):
    srv = sync_server
    with srv.client() as probe:
        s, next_command = sync_stream(srv.port)
        try:
            w = StalledWrite(srv, probe, "SET", "fed", "uncommitted")
            first = next_command()
            w.assert_committed_now("the SYNC stream's command")
            argv = next_command() if first[0] == b"select" else first
            assert argv[:3] == [b"set", b"fed", b"uncommitted"]
            assert w.finish() is True   # valkey-py: SET answered +OK
        finally:
            s.close()


def test_sync_rdb_waits_for_the_commit(sync_server):
    srv = sync_server
    with srv.client() as probe:
        w = StalledWrite(srv, probe, "SET", "inrdb", "uncommitted")
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        try:
            f = s.makefile("rb")
            s.sendall(b"SYNC\r\n")
            header = f.readline()
            while header == b"\n":
                header = f.readline()
            w.assert_committed_now("the SYNC RDB")
            rdb = f.read(int(header[1:]))
            assert b"inrdb" in rdb and b"uncommitted" in rdb
        finally:
            s.close()
        assert w.finish() is True   # valkey-py: SET answered +OK


def test_redis_cli_rdb_waits_for_the_commit(sync_server, tmp_path):
    cli = subprocess.run(["which", "redis-cli"], capture_output=True, text=True).stdout.strip()
    if not cli:
        pytest.skip("redis-cli is not installed")
    srv = sync_server
    with srv.client() as probe:
        w = StalledWrite(srv, probe, "SET", "backup", "uncommitted")
        out = tmp_path / "dump.rdb"
        proc = subprocess.run([cli, "-p", str(srv.port), "--rdb", str(out)], capture_output=True, timeout=60)
        w.assert_committed_now("redis-cli --rdb's file")
        assert proc.returncode == 0, proc.stderr
        assert b"backup" in out.read_bytes()
        assert w.finish() is True   # valkey-py: SET answered +OK



@pytest.mark.parametrize("command", [
    ("DEBUG", "DIGEST"),
    ("DEBUG", "DIGEST-VALUE", "dk"),
    ("DEBUG", "OBJECT", "dk"),
    ("INFO", "keyspace"),
    ("INFO",),
    ("DBSIZE",),
], ids=lambda c: " ".join(c))
def test_counts_and_digests_wait_for_the_commit(sync_server, command):
    srv = sync_server
    with srv.client() as probe:
        probe.set("dk", "committed")
        before = raw_reply(srv.port, *command)
        w = StalledWrite(srv, probe, "SET", "dk", "a longer uncommitted value")
        after = raw_reply(srv.port, *command)
        w.assert_committed_now(" ".join(command))
        if command[0] != "INFO":
            assert after != before or command == ("DBSIZE",)
        assert w.finish() is True   # valkey-py: SET answered +OK


def test_debug_object_of_a_new_key_waits_for_the_commit(sync_server):
    """A key that exists only through an uncommitted write is not described before the commit."""
    srv = sync_server
    with srv.client() as probe:
        w = StalledWrite(srv, probe, "SET", "newkey", "v")
        reply = raw_reply(srv.port, "DEBUG", "OBJECT", "newkey")
        w.assert_committed_now("DEBUG OBJECT")
        assert reply.startswith(b"+Value at:")
        assert w.finish() is True   # valkey-py: SET answered +OK


@pytest.mark.parametrize("command", ["COUNTKEYSINSLOT", "GETKEYSINSLOT"])
def test_cluster_slot_counts_wait_for_the_commit(cluster_server, command):
    srv = cluster_server
    with srv.client() as probe:
        slot = probe.execute_command("CLUSTER", "KEYSLOT", "slotted")
        args = ("CLUSTER", command, str(slot)) + (("10",) if command == "GETKEYSINSLOT" else ())
        w = StalledWrite(srv, probe, "SET", "slotted", "v")
        reply = raw_reply(srv.port, *args)
        w.assert_committed_now("CLUSTER " + command)
        assert reply == (b":1\r\n" if command == "COUNTKEYSINSLOT" else b"*1\r\n$7\r\nslotted\r\n")
        assert w.finish() is True   # valkey-py: SET answered +OK


def test_xread_block_never_sees_the_entry_before_the_xadd_commits(sync_server):
    """Without any fault: 50 XADDs, each woken XREAD BLOCK answered only once the entry is committed."""
    srv = sync_server
    with srv.client() as probe, srv.client() as reader:
        early = 0
        for i in range(50):
            got = queue.Queue()
            t = threading.Thread(target=lambda: got.put(reader.xread({"s50": "$"}, block=0)), daemon=True)
            t.start()
            wait_until(lambda: probe.info("clients")["blocked_clients"] == 1, 10, interval_s=0.001,
                       what="XREAD blocked")
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as w:
                f = w.makefile("rb")
                w.sendall(_encode(("XADD", "s50", f"{i + 1}-1", "f", "v")))
                entries = got.get(timeout=30)
                committed, _ = indices(probe)
                assert _read_reply(f) == b"$%d\r\n%d-1\r\n" % (len(str(i + 1)) + 2, i + 1)
            _, index = indices(probe)
            early += committed < index
            assert entries[0][1][0][0] == b"%d-1" % (i + 1)
            t.join(10)
        assert early == 0, f"{early} of 50 XREAD BLOCK wake-ups arrived before the XADD committed"


def test_pushes_held_behind_a_reply_count_toward_output_limits(server_factory):
    """A RESP3 subscriber blocked in BLPOP: its pushes queue behind the held reply. They count toward
    client-output-buffer-limit pubsub like Valkey's reply list, so the client is closed at the hard limit
    instead of the server holding them without bound."""
    srv = server_factory("--client-output-buffer-limit", "pubsub 1mb 0 0")
    with srv.client() as publisher, srv.client() as probe:
        sub = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        try:
            f = sub.makefile("rb")
            sub.sendall(_encode(("HELLO", "3")))
            _read_reply(f)
            sub.sendall(_encode(("SUBSCRIBE", "ch")))
            _read_reply(f)
            sub.sendall(_encode(("BLPOP", "nolist", "0")))
            wait_until(lambda: probe.info("clients")["blocked_clients"] == 1, 10, what="BLPOP blocked")
            payload = b"x" * 65536
            for _ in range(40):       # 2.5 MB of messages queued behind the blocked BLPOP
                publisher.publish("ch", payload)
            wait_until(lambda: probe.info("clients")["connected_clients"] == 2, 10,
                       what="the subscriber closed at its output limit")
        finally:
            sub.close()
    assert "overcoming of output buffer limits" in srv.read_log()


def test_errorstats_keeps_at_most_128_error_codes(server_factory):
    srv = server_factory()
    with srv.client() as c:
        # (the start-up's readiness probe may have met -LOADING, an error reply of its own: counted from here)
        before = c.info("stats")["total_error_replies"]
        for j in range(200):
            with pytest.raises(valkey.ResponseError):
                c.eval("return redis.error_reply(string.format('CODE%d my error', ARGV[1]))", 0, j)
        stats = c.info("errorstats")
        assert {k: v for k, v in stats.items() if k != "errorstat_LOADING"} == {
            "errorstat_ERRORSTATS_DISABLED": {"count": 1}}
        assert c.info("stats")["total_error_replies"] - before == 200
        assert srv.read_log().count("Errorstats stopped adding new errors") == 1
        c.config_resetstat()
        with pytest.raises(valkey.ResponseError):
            c.eval("return redis.error_reply('AGAIN counted')", 0)
        assert c.info("errorstats") == {"errorstat_AGAIN": {"count": 1}}



def test_publish_after_a_write_in_a_transaction_waits_for_it(sync_server):
    srv = sync_server
    sub_client = srv.client()
    p = subscribed(sub_client, "news")
    with srv.client() as probe:
        w = StalledWrite(srv, probe, "EVAL",
                         "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('PUBLISH', 'news', ARGV[1])",
                         1, "headline", "uncommitted")
        msg = next_message(p)
        w.assert_committed_now("a message published after the script's write")
        assert msg["data"] == b"uncommitted"
        assert w.finish() == 1
    p.close()
    sub_client.close()



def test_sort_get_pattern_waits_for_the_key_it_reads(sync_server):
    """SORT_RO ... GET reads keys its key specs do not name: it waits like a read of the whole keyspace."""
    srv = sync_server
    with srv.client() as probe:
        probe.rpush("ids", "1")
        probe.set("obj_1", "committed")
        w = StalledWrite(srv, probe, "SET", "obj_1", "uncommitted")
        reply = raw_reply(srv.port, "SORT_RO", "ids", "GET", "obj_*")
        w.assert_committed_now("SORT_RO's GET value")
        assert reply == b"*1\r\n$11\r\nuncommitted\r\n"
        assert w.finish() is True   # valkey-py: SET answered +OK


def test_forked_rdb_export_holds_uncommitted_writes_until_their_commit(sync_server, redis_server, tmp_path):
    """From FORK_MIN_KEYS keys on, SYNC's file is built in a forked child (the loop goes on serving); it is
    memory at the fork, so it leaves only once everything issued by then commits, and Redis loads it."""
    srv = sync_server
    with srv.client() as probe:
        probe.execute_command("DEBUG", "POPULATE", "20000")
        w = StalledWrite(srv, probe, "SET", "forked", "uncommitted")
        out = tmp_path / "forked.rdb"
        proc = subprocess.run(["redis-cli", "-p", str(srv.port), "--rdb", str(out)], capture_output=True,
                              timeout=120)
        w.assert_committed_now("the forked RDB export")
        assert proc.returncode == 0, proc.stderr
        assert w.finish() is True   # valkey-py: SET answered +OK
        assert probe.ping()
    log = srv.read_log()
    assert "Background RDB transfer started by pid" in log
    assert "Background RDB transfer terminated with success" in log
    _port, redis = redis_server("--dbfilename", "forked.rdb", data_dir=tmp_path)
    assert redis.dbsize() == 20001
    assert redis.get("forked") == b"uncommitted" and redis.get("key:19999") == b"value:19999"


def _read_until_eof(sock):
    chunks = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def test_a_failed_batch_sends_no_event_no_stream_chunk_and_no_rdb(server_factory):
    """The journal fails to persist a batch (its file size limit, RLIMIT_FSIZE, is reached): the keyspace event
    held for it is dropped, the SYNC stream that would have carried it ends, and a SYNC whose RDB held it gets
    the journal's error instead of the file; events of committed writes before and after still arrive."""
    if not shutil.which("prlimit"):
        pytest.skip("prlimit (util-linux) is not installed")
    srv = server_factory("--durability", "sync", "--notify-keyspace-events", "KEA")
    pid = str(srv.proc.pid)
    sub_client = srv.client()
    p = sub_client.pubsub()
    p.psubscribe("__keyspace@0__:*")
    assert p.get_message(timeout=10)["type"] == "psubscribe"
    feed, next_command = sync_stream(srv.port)
    with srv.client() as probe:
        probe.set("first", "1")
        assert next_message(p)["channel"] == b"__keyspace@0__:first"
        segment = max(glob.glob(os.path.join(srv.data_dir, "journal", "*.seg")), key=os.path.getsize)
        limit = os.path.getsize(segment) + 2000         # room for a small entry, not for a 50 KB one
        probe.execute_command("DEBUG", "JOURNAL-STALL", str(STALL_MS))
        subprocess.run(["prlimit", "--pid", pid, "--fsize=%d:" % limit], check=True)
        try:
            small = StalledWrite(srv, probe, "SET", "small", "v")
            big = queue.Queue()

            def write_big():
                with srv.client() as c:
                    try:
                        big.put(c.set("big", "x" * 50000))
                    except valkey.ResponseError as exc:
                        big.put(str(exc))
            threading.Thread(target=write_big, daemon=True).start()
            wait_until(lambda: indices(probe)[1] > small.index, 10, interval_s=0.001, what="the big write ran")
            rdb_client = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            rdb_client.sendall(b"SYNC\r\n")
            assert small.finish() is True   # valkey-py: SET answered +OK
            assert big.get(timeout=30).startswith("MISCONF Errors writing to the journal: File too large")
            rdb_reply = _read_until_eof(rdb_client).lstrip(b"\n")
            rdb_client.close()
            assert rdb_reply.startswith(b"-MISCONF Errors writing to the journal"), rdb_reply[:200]
        finally:
            subprocess.run(["prlimit", "--pid", pid, "--fsize=unlimited:"], check=True)
            probe.execute_command("DEBUG", "JOURNAL-STALL", "0")

        def healed():
            try:
                return probe.set("healed", "1")
            except valkey.ResponseError:
                return False
        wait_until(healed, 30, what="the journal to persist again")
        events = []
        while not events or events[-1] != b"__keyspace@0__:healed":
            events.append(next_message(p)["channel"])
        # (the rebuild after the failure replays the journal, whose effects notify again: small, first)
        assert b"__keyspace@0__:small" in events and b"__keyspace@0__:big" not in events, events
    stream = []
    try:
        while True:
            stream.append(next_command())
    except (ValueError, OSError):
        pass   # the stream ended: a chunk of it never committed
    assert [c[1] for c in stream if c[0] == b"set"] == [b"first", b"small"]
    feed.close()
    p.close()
    sub_client.close()


def test_an_event_of_a_write_that_filled_its_batch_waits_for_the_next_one(sync_server):
    """A keyspace event is raised while its command runs and is promised the batch open then; a command whose
    effects do not fit in that batch (the local journal closes one at 16 MiB) lands in the next one, and its
    event must wait for that one, not leave when the earlier batch commits."""
    srv = sync_server
    with srv.client() as probe, srv.client() as sub_client, srv.client() as bulk:
        p = sub_client.pubsub()
        p.subscribe("__keyspace@0__:b")
        assert p.get_message(timeout=10)["type"] == "subscribe"
        first = StalledWrite(srv, probe, "SET", "x", "1")      # in flight: what follows gathers behind it
        done = queue.Queue()

        def fill():
            pipe = bulk.pipeline(transaction=False)
            pipe.set("a", b"a" * 10_000_000)
            pipe.set("b", b"b" * 10_000_000)    # does not fit beside a: sealed into the batch after a's
            done.put(pipe.execute())
        threading.Thread(target=fill, daemon=True).start()
        index_b = wait_until(lambda: (lambda c, a: a if a >= first.index + 2 else None)(*indices(probe)), 20,
                             interval_s=0.001, what="both SETs ran")
        event = None
        deadline_s = 60
        while event is None or event["type"] != "message":
            event = p.get_message(timeout=deadline_s)
            assert event is not None, "no keyspace event for b"
        committed, _applied = indices(probe)
        assert committed >= index_b, (f"the event of b left at commit index {committed}, before b's entry "
                                      f"{index_b} committed")
        assert event["data"] == b"set"
        assert done.get(timeout=30) == [True, True]
        first.finish()
