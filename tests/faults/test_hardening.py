"""Faults and operator mistakes that must not hang the server, lose acknowledged data or grow memory without
bound (issue: hardening, items 4-7). Real server processes, raw sockets, a real tmpfs, a real RLIMIT_NOFILE."""

import socket
import subprocess
import sys
import threading
import time

import pytest
import valkey

from conftest import free_port, wait_until
from helpers.diskfull import server_on_full_disk


def _cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _rss(client) -> int:
    return client.info("memory")["used_memory_rss"]


class Flooder(threading.Thread):
    """Sends `count` copies of one request on a raw socket and never reads a reply (bounded in count and
    time: it stops when the server stops taking bytes for `stall_s`)."""

    def __init__(self, port, request, count, stall_s=3.0, max_s=60.0):
        super().__init__(daemon=True)
        self.port, self.request, self.count = port, request, count
        self.stall_s, self.max_s = stall_s, max_s
        self.sent = 0
        self.sock = None

    def run(self):
        s = self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.stall_s)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunk = self.request * 500
        deadline = time.monotonic() + self.max_s
        try:
            while self.sent < self.count and time.monotonic() < deadline:
                s.sendall(chunk)
                self.sent += 500
        except (socket.timeout, OSError):
            pass   # the server stopped reading us: what backpressure is for


def _pings(port) -> bool:
    """Another client is answered (within the socket timeout: liveness, not speed)."""
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=30) as c:
        return c.ping() is True


# -- item 5: sync mode, a stalled journal, a client pipelining without end ------------------------------------

def test_sync_held_replies_stop_reading_the_client(server_factory):
    srv = server_factory("--durability", "sync", "--client-held-replies-limit", "2mb")
    with srv.client() as c:
        rss_before = _rss(c)
        c.execute_command("DEBUG", "JOURNAL-STALL", "30000")
        flood = Flooder(srv.port, _cmd("SET", "k", "v" * 100), 1_000_000)
        flood.start()
        flood.join(40)
        held = [line for line in c.client_list() if int(line["oll"]) > 0]
        assert held, "the flooding client holds replies"
        omem = max(int(line["omem"]) for line in held)
        assert omem < 4 * 1024 * 1024, omem           # bounded by the held-replies limit (+ one read)
        assert flood.sent < 1_000_000                 # it could not send everything: reading stopped
        assert _rss(c) - rss_before < 150 * 1024 * 1024
        assert _pings(srv.port)                        # everyone else is served meanwhile
        c.execute_command("DEBUG", "JOURNAL-STALL", "0")
        flood.sock.close()


# -- item 6: replies bigger than the requests, from a client that never reads --------------------------------

def test_held_replies_count_the_bytes_of_the_writes_they_wait_for(server_factory):
    """A pipelined bulk load of 4 KB SETs with the journal stalled: each held reply is only +OK, but its write
    keeps 4 KB in the open batch until the commit. The held-replies limit counts those bytes, so the server
    stops reading the client after about limit / 4 KB writes, not limit / (size of +OK)."""
    srv = server_factory("--durability", "sync", "--client-held-replies-limit", "1mb")
    value = "v" * 4096
    with srv.client() as c:
        c.execute_command("DEBUG", "JOURNAL-STALL", "30000")
        flood = Flooder(srv.port, _cmd("SET", "k", value), 40_000, stall_s=2.0, max_s=40.0)
        flood.start()
        flood.join(45)
        ran = c.info("commandstats")["cmdstat_set"]["calls"]
        # 1 MB / 4 KB is 256 writes; the server reads up to one more buffer before it stops. Counting only the
        # replies' 261 bytes it ran about 4,000 (1 MB / 261) before it stopped reading.
        assert ran < 1000, ran
        assert flood.sent < 40_000
        c.execute_command("DEBUG", "JOURNAL-STALL", "0")
        flood.sock.close()


def test_reply_amplification_is_bounded_and_others_are_served(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        c.set("big", "x" * 100_000)
        rss_before = _rss(c)
        flood = Flooder(srv.port, _cmd("GET", "big"), 200_000, stall_s=2.0)
        flood.start()
        wait_until(lambda: flood.sent >= 500, 10, what="the flood to start")
        assert all(_pings(srv.port) for _ in range(5))    # others are answered while it floods
        flood.join(40)
        assert _rss(c) - rss_before < 150 * 1024 * 1024   # was 359 MB: 3000 replies of 100 KB per read
        flood.sock.close()


def test_client_output_buffer_limit_disconnects_with_valkeys_log_line(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        c.set("big", "x" * 100_000)
        c.config_set("client-output-buffer-limit", "normal 256kb 0 0")
        assert c.config_get("client-output-buffer-limit")["client-output-buffer-limit"] == \
            "normal 262144 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        flood = Flooder(srv.port, _cmd("GET", "big"), 20_000, stall_s=2.0)
        flood.start()
        flood.join(30)
        wait_until(lambda: "for overcoming of output buffer limits" in srv.read_log(), 10,
                   what="the log line")
        assert "Client id=" in srv.read_log() and "scheduled to be closed ASAP" in srv.read_log()
        wait_until(lambda: len(c.client_list()) == 1, 10, what="the client to be disconnected")
        flood.sock.close()
        with pytest.raises(valkey.exceptions.ResponseError) as e:
            c.config_set("client-output-buffer-limit", "master 1 1 1")
        assert "Invalid client class specified in buffer limit configuration." in str(e.value)


def test_pubsub_output_buffer_limit_disconnects_a_slow_subscriber(server_factory):
    srv = server_factory("--durability", "none", "--client-output-buffer-limit", "pubsub 1mb 256kb 60")
    sub = socket.create_connection(("127.0.0.1", srv.port))
    sub.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sub.sendall(_cmd("SUBSCRIBE", "ch"))
    with srv.client() as c:
        wait_until(lambda: c.pubsub_numsub("ch") == [(b"ch", 1)], 10, what="subscribed")
        payload = "m" * 50_000
        for _ in range(200):   # 10 MB to a subscriber that reads nothing
            c.publish("ch", payload)
            if c.pubsub_numsub("ch") == [(b"ch", 0)]:
                break
        wait_until(lambda: c.pubsub_numsub("ch") == [(b"ch", 0)], 10, what="the subscriber to be dropped")
    sub.close()
    assert "for overcoming of output buffer limits" in srv.read_log()


# -- item 7: maxclients within the descriptor limit -----------------------------------------------------------

def test_maxclients_is_lowered_to_the_descriptor_limit(tmp_path):
    port = free_port()
    log_path = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
           str(tmp_path / "data"), "--maxclients", "10000", "--journal-segment-bytes", "64kb"]
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=low_limit,
                                start_new_session=True)
    clients = []
    try:
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10)
        wait_until(lambda: c.ping(), 20, what="server up")
        assert c.config_get("maxclients")["maxclients"] == "64"
        text = log_path.read_text()
        assert "You requested maxclients of 10000 requiring at least 10032 max file descriptors." in text
        assert ("Current maximum open files is 96. maxclients has been reduced to 64 to compensate for low "
                "ulimit. If you need higher maxclients increase 'ulimit -n'.") in text
        refused = 0
        for _ in range(80):   # more clients than allowed: each extra one gets the error, none a reset
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            clients.append(s)
            s.sendall(_cmd("PING"))
            reply = s.recv(100)
            if reply.startswith(b"-ERR max number of clients reached"):
                refused += 1
            else:
                assert reply == b"+PONG\r\n", reply
        assert refused >= 80 - 63
        # the journal still rotates segments (it needs descriptors) while clients use all they may
        for i in range(300):
            assert c.set("k%d" % i, "v" * 500)
        assert len(list((tmp_path / "data" / "journal").iterdir())) > 2
    finally:
        for s in clients:
            s.close()
        proc.kill()
        proc.wait(10)


# -- item 4: the disk fills up, then space is freed ------------------------------------------------------------

def test_disk_full_errors_instead_of_hanging_then_resumes_by_itself(tmp_path):
    # a 3 MiB tmpfs, 2 MiB of it taken by a filler file the test deletes later
    with server_on_full_disk(tmp_path) as disk:
        c = disk.client
        acked, failed = [], []
        for i in range(20000):    # until the disk is full: every write answers, none hangs
            key = "k%05d" % i
            try:
                c.set(key, "v" * 200)
                acked.append(key)
            except valkey.exceptions.ResponseError as exc:
                failed.append((key, str(exc)))
                break
        assert failed, "the disk never filled"
        assert "Errors writing to the journal" in failed[0][1]
        # reads and whole-keyspace reads answer (from what is on disk), writes are refused with MISCONF. The server
        # retries the journal by itself, and a small write fits in what the failed batch left: the rest of the disk
        # is taken first (seen with four workers), though a few bytes remain in the journal's last page (below)
        disk.fill_rest()
        assert c.get(failed[0][0]) is None
        assert c.dbsize() == len(acked)
        # A write that fails again (a retry ran before the disk was filled) is not a refusal, so each look is one turn
        # of the server: a write too large for the page the failed batch was cut back to, and INFO, pipelined, until
        # the write is refused. (A fresh clone's CI once read INFO alone after a retry's bare PING had committed into
        # that page: journal_failed 0. The retry's entry is as large as what failed now: below.)
        refusals = []
        for _attempt in range(20):
            p = c.pipeline(transaction=False)
            p.set("more", "x" * 16384)
            p.info("durability")
            reply, info = p.execute(raise_on_error=False)
            assert isinstance(reply, valkey.exceptions.ResponseError), reply
            refusals.append(str(reply))
            if "Writes are refused" in refusals[-1]:
                break
        assert "Errors writing to the journal" in refusals[-1] and "Writes are refused" in refusals[-1], refusals
        assert info["journal_failed"] == 1 and info["journal_failed_batches"] >= 1 and info["journal_reloads"] >= 1
        # While the disk stays full the retries keep failing: the retry's entry is as large as what failed. A bare
        # PING fitted in those few bytes of the last page, the journal "persisted again", and the next write failed
        # and reloaded the dataset from disk again, round after round.
        persisted = disk.log_path.read_text().count("the journal persists again")

        def three_more_retries_or_persisted():
            now = c.info("durability")
            return (now["journal_retries"] >= info["journal_retries"] + 3
                    or disk.log_path.read_text().count("the journal persists again") > persisted)
        wait_until(three_more_retries_or_persisted, 30, what="three more retries of the journal")
        after = c.info("durability")
        assert disk.log_path.read_text().count("the journal persists again") == persisted
        assert after["journal_failed"] == 1 and after["journal_reloads"] == info["journal_reloads"], after
        # space comes back: the server retries the journal by itself and takes writes again
        disk.free_space()
        disk.wait_writable(20)
        assert c.info("durability")["journal_failed"] == 0
        missing = [k for k, v in zip(acked, c.mget(acked)) if v is None]
        assert missing == [], "%d acknowledged writes lost" % len(missing)
        text = disk.log_path.read_text()
        assert "writes are refused until the journal can persist again" in text
        assert "the journal persists again" in text
