"""Nothing derived from an uncommitted write leaves a JetStream shard's primary before its commit: issue 16's
own reproduction (item 2), on a sync-mode local cluster (three NATS servers on 127.0.0.1, a primary and one
replica) whose commits stall because the NATS server holding the primary's journal connection is stopped
(SIGSTOP).

The primary has three NATS connections (coordination, journal, lease renewer), each on a server nats-py picked;
its INFO does not say which, so the servers' own /connz is asked for the connection named
`durakv-<node id>-journal`. With that server stopped, a writer sends `XADD s 2-1 f v`, `SET k v`, `SET k2 v2`
in one packet (one entry) and gets no reply; observers on the primary meanwhile ask for everything issue 16
saw leak: an XREAD BLOCK on s, a SUBSCRIBE to `__keyspace@0__:k`, a CLIENT TRACKING client re-reading k2, a
SYNC (its RDB), DEBUG DIGEST-VALUE k, INFO keyspace and CLUSTER COUNTKEYSINSLOT. Before the server is
continued every one of them is parked on the primary (INFO durability `held_replies_clients`), and whatever
an observer receives is checked the moment it arrives: a probe reads the commit index, which must already
cover the writes' entry. Tracking invalidations are the documented exception (durability/release.py,
docs/architecture.md): sent early, they carry the key's name and no value; the re-read they prompt waits.
MONITOR, the other documented exception, is not observed. The same rule with the local journal stalled:
test_no_uncommitted_leaks.py."""

import contextlib
import queue
import socket
import threading
import time

import pytest
import valkey

from conftest import DEBUG_ARGS, wait_until
from durakv.cluster.nats_procs import http_json
from helpers.leaks import next_message, subscribed, tracking_connection
from helpers.wire import _encode, _read_reply

# Keyspace events on, for the SUBSCRIBE observer.
SERVER_ARGS = ["--notify-keyspace-events", "KEA", *DEBUG_ARGS]   # DEBUG DIGEST-VALUE is an observer
WRITES = (("XADD", "s", "2-1", "f", "v"), ("SET", "k", "v"), ("SET", "k2", "v2"))
WRITE_REPLIES = [b"$3\r\n2-1\r\n", b"+OK\r\n", b"+OK\r\n"]
# The writer, and every observer parked on the primary: the XREAD wake-up, the keyspace event, the tracking
# client's re-read, the SYNC export, DEBUG DIGEST-VALUE, INFO keyspace, CLUSTER COUNTKEYSINSLOT.
HELD_CLIENTS = 8


def journal_nats_server(cluster, node):
    """The NATS server (manifest entry) that `node`'s journal connection is connected to, as the servers'
    /connz reports it."""
    name = f"durakv-{node.node_id}-journal"

    def find():
        for n in cluster.nats:
            status, body = http_json(n.ports["monitor"], "/connz?limit=4096", timeout_s=2.0)
            if status == 200 and any(c.get("name") == name for c in (body or {}).get("connections") or []):
                return n
        return None
    return wait_until(find, 10, what=f"the NATS server holding {name}")


def commit_index(probe):
    return probe.info("durability")["journal_commit_index"]


class Receipts:
    """What each observer received, with the commit index a probe read the moment it arrived (None when the
    probe got no answer: the primary was gone)."""

    def __init__(self, port):
        self.port = port
        self.got = queue.Queue()
        self.arrived = []       # (what, payload) in the order they came
        self.probe = valkey.Valkey(port=port, socket_timeout=10)

    def record(self, what, payload):
        try:
            committed = commit_index(self.probe)
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
            committed = None
        self.arrived.append((what, payload))
        self.got.put((what, payload, committed))

    def start(self, what, fn):
        """Runs fn() on its own thread and records its result (or the exception that ended it)."""
        def run():
            try:
                payload = fn()
            except Exception as exc:  # noqa: BLE001 - a closed connection is an outcome, recorded
                payload = exc
            self.record(what, payload)
        threading.Thread(target=run, daemon=True, name=what).start()

    def collect(self, count, timeout_s=20):
        out = {}
        deadline_s = time.monotonic() + timeout_s
        while len(out) < count:
            what, payload, committed = self.got.get(timeout=max(0.01, deadline_s - time.monotonic()))
            out[what] = (payload, committed)
        return out

    def close(self):
        self.probe.close()


class Shard:
    """The observers and the writer of one test on a primary, and every socket they opened (closed by close)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.primary = cluster.primary(0)
        self.replica = cluster.replicas(0)[0]
        self.port = self.primary.port
        self.probe = valkey.Valkey(port=self.port, socket_timeout=10)
        self.receipts = Receipts(self.port)
        self.closers = [self.probe.close, self.receipts.close]
        self.slot = self.probe.execute_command("CLUSTER", "KEYSLOT", "k")
        self.digest_before = self.probe.execute_command("DEBUG", "DIGEST-VALUE", "k")
        self.invalidations = []

    def _socket(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        self.closers.append(s.close)
        return s

    def watch_before_the_writes(self):
        """The observers that wait for the writes: XREAD BLOCK on s, a keyspace subscriber of k, and a
        tracking client that has read k2."""
        reader = valkey.Valkey(port=self.port, socket_timeout=20)
        self.closers.append(reader.close)
        self.receipts.start("XREAD BLOCK", lambda: reader.xread({"s": "$"}, block=0))
        wait_until(lambda: self.probe.info("clients")["blocked_clients"] == 1, 10, what="XREAD blocked")
        sub_client = valkey.Valkey(port=self.port, socket_timeout=20)
        self.closers.append(sub_client.close)
        p = subscribed(sub_client, "__keyspace@0__:k")
        self.closers.append(p.close)
        self.receipts.start("keyspace event", lambda: next_message(p, timeout_s=20))
        self.tracking, self.tracking_file = tracking_connection(self.port)
        self.closers.append(self.tracking.close)
        self.tracking.sendall(_encode(("GET", "k2")))
        assert _read_reply(self.tracking_file) == b"_\r\n"

    def send_writes(self):
        """The three writes in one packet (so in one loop iteration, one journal entry); their replies are read
        on a thread: each frame into self.writer_frames as it comes, then one result into self.writer_done (the
        replies, or (the replies so far, the error that ended the connection))."""
        self.writer_frames = []
        self.writer_done = queue.Queue()
        w = self._socket()
        f = w.makefile("rb")

        def read():
            try:
                for _ in WRITES:
                    frame = _read_reply(f)
                    if not frame:
                        raise ConnectionError("connection closed by the primary")
                    self.writer_frames.append(frame)
            except OSError as exc:
                self.writer_done.put((list(self.writer_frames), exc))
                return
            self.writer_done.put(list(self.writer_frames))
        w.sendall(b"".join(_encode(c) for c in WRITES))
        threading.Thread(target=read, daemon=True).start()

        def ran():
            calls = {k: v["calls"] for k, v in self.probe.info("commandstats").items()}
            return calls.get("cmdstat_xadd") == 1 and calls.get("cmdstat_set") == 2
        wait_until(ran, 10, interval_s=0.002, what="the writes ran")

    def watch_after_the_writes(self):
        """The observers that read what the writes changed."""
        def reread():
            self.tracking.sendall(_encode(("GET", "k2")))
            while True:
                frame = _read_reply(self.tracking_file)
                if not frame.startswith(b">"):
                    return frame
                self.invalidations.append(frame)

        def sync_rdb():
            s = self._socket()
            f = s.makefile("rb")
            s.sendall(b"SYNC\r\n")
            header = f.readline()
            while header == b"\n":          # keep-alives while the export waits
                header = f.readline()
            if not header.startswith(b"$"):
                return header
            return f.read(int(header[1:]))

        def one(*command):
            def ask():
                s = self._socket()
                s.sendall(_encode(command))
                return _read_reply(s.makefile("rb"))
            return ask
        self.receipts.start("tracking re-read", reread)
        self.receipts.start("SYNC RDB", sync_rdb)
        self.receipts.start("DEBUG DIGEST-VALUE", one("DEBUG", "DIGEST-VALUE", "k"))
        self.receipts.start("INFO keyspace", one("INFO", "keyspace"))
        self.receipts.start("CLUSTER COUNTKEYSINSLOT", one("CLUSTER", "COUNTKEYSINSLOT", str(self.slot)))

    def writer_result(self, timeout_s):
        """The writer's replies, or (replies so far, error); None if it has not ended within timeout_s."""
        try:
            return self.writer_done.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self):
        for close in reversed(self.closers):
            try:
                close()
            except OSError:
                pass


def reveals_the_writes(what, payload, shard):
    """Whether an observer's payload shows the uncommitted writes (what each one shows once they commit)."""
    if isinstance(payload, Exception) or payload is None:
        return False
    if what == "XREAD BLOCK":
        return payload == [[b"s", [(b"2-1", {b"f": b"v"})]]]
    if what == "keyspace event":
        return payload["channel"] == b"__keyspace@0__:k" and payload["data"] == b"set"
    if what == "tracking re-read":
        return payload == b"$2\r\nv2\r\n"
    if what == "SYNC RDB":
        return b"k2" in payload and b"v2" in payload
    if what == "DEBUG DIGEST-VALUE":
        return payload.startswith(b"*1\r\n+") and payload != b"*1\r\n+%s\r\n" % shard.digest_before[0]
    if what == "INFO keyspace":
        return b"db0:keys=3," in payload
    if what == "CLUSTER COUNTKEYSINSLOT":
        return payload == b":1\r\n"
    raise AssertionError(what)


OBSERVERS = ("XREAD BLOCK", "keyspace event", "tracking re-read", "SYNC RDB", "DEBUG DIGEST-VALUE",
             "INFO keyspace", "CLUSTER COUNTKEYSINSLOT")


@pytest.fixture
def shard(local_cluster):
    cluster = local_cluster(durability="sync", replicas=1, extra_server_args=SERVER_ARGS)
    s = Shard(cluster)
    yield s
    s.close()


def _stalled_and_parked(shard, committed_before, timeout_s=10):
    """Called with the journal's NATS server stopped, once writes and observers were sent: every observer is
    parked on the primary (counted in held_replies_clients with the writer) while nothing committed, and none
    has received anything meanwhile."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        assert shard.receipts.arrived == [], (
            f"{shard.receipts.arrived} reached their clients with the journal's NATS server stopped")
        held = shard.probe.info("durability")["held_replies_clients"]
        if held == HELD_CLIENTS:
            break
        assert time.monotonic() < deadline_s, f"{held} of {HELD_CLIENTS} clients held on the primary"
        time.sleep(0.005)   # polling the server's count, bounded by the deadline above
    assert commit_index(shard.probe) == committed_before, "the writes committed with the journal's NATS stopped"
    assert shard.writer_frames == [], "the writer was answered with the journal's NATS stopped"
    assert shard.receipts.arrived == [], f"{shard.receipts.arrived} reached their clients before the commit"


@contextlib.contextmanager
def journal_nats_stopped(shard):
    """The first observers attached, the NATS server of the primary's journal connection SIGSTOPped, the writes
    and the other observers sent and seen parked; yields the commit index from before the writes. SIGCONT on
    the way out, whatever happened inside."""
    cluster = shard.cluster
    nats = journal_nats_server(cluster, shard.primary)
    shard.watch_before_the_writes()
    committed_before = commit_index(shard.probe)
    assert cluster.pause(nats.name)
    try:
        shard.send_writes()
        shard.watch_after_the_writes()
        _stalled_and_parked(shard, committed_before)
        yield committed_before
    finally:
        cluster.resume(nats.name)


def test_nothing_leaves_while_the_journals_nats_server_is_stopped(shard):
    """SIGSTOP the journal's NATS server, park the writes and every observer, SIGCONT: the writes are
    acknowledged, and every observer gets them only once they committed."""
    with journal_nats_stopped(shard) as committed_before:
        pass    # every observer parked, nothing committed: SIGCONT on leaving
    assert shard.writer_result(20) == WRITE_REPLIES
    check_acknowledged_then_observed(shard, committed_before)


def check_acknowledged_then_observed(shard, committed_before):
    """The writes were acknowledged: every observer got them, and only once they had committed."""
    acked_index = commit_index(shard.probe)
    assert acked_index == committed_before + 1, "the three writes were expected in one journal entry"
    got = shard.receipts.collect(len(OBSERVERS))
    for what in OBSERVERS:
        payload, committed = got[what]
        assert reveals_the_writes(what, payload, shard), f"{what} answered {payload!r}"
        assert committed is not None and committed >= acked_index, (
            f"{what} reached its client before the writes committed (commit index {committed} when it arrived, "
            f"the writes' entry {acked_index})")
    # Early by decision, and only the key's name: the tracking client's invalidation of k2.
    assert shard.invalidations in ([], [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk2\r\n"]), shard.invalidations
    with valkey.Valkey(port=shard.replica.port, socket_timeout=10, single_connection_client=True) as r:
        r.execute_command("READONLY")
        wait_until(lambda: r.get("k2") == b"v2" and r.get("k") == b"v" and r.xlen("s") == 1, 20,
                   what="the replica applied the acknowledged writes")


def _serving_primary(cluster):
    """A node of the shard that answers as its primary (after a failover: the promoted one, or the old one
    again if it won the lease back after re-executing)."""
    def serving():
        p = cluster.primary(0)
        if p is None:
            return None
        with valkey.Valkey(port=p.port, socket_timeout=5) as c:
            c.get("k")          # -CLUSTERDOWN while it waits for its lease, -LOADING while it loads: not yet
        return p
    return wait_until(serving, 30, what="a primary serving the shard again")


def test_unacknowledged_writes_are_never_observed_when_the_primary_steps_down(local_cluster):
    """The journal's NATS server stays stopped past journal-append-stall-ms (shortened to 1.5 s): the primary
    steps down without acknowledging (it re-executes, its connections close), the lease (1 s) passes to another
    node; then SIGCONT. Whatever the writer was not acknowledged no observer ever saw; had the writer been
    acknowledged (nats-py reconnected to another server first), the first test's rules hold. Afterwards the
    shard holds all three writes or none: they were one entry (its append may still have landed: an unknown
    outcome, which the writer's closed connection tells it)."""
    cluster = local_cluster(durability="sync", replicas=1, extra_server_args=SERVER_ARGS + [
        "--journal-append-stall-ms", "1500", "--lease-ttl-ms", "1000"])
    shard = Shard(cluster)
    try:
        with journal_nats_stopped(shard) as committed_before:
            result = shard.writer_result(20)
            assert result is not None, "the primary neither committed nor stepped down with its journal stalled"
        if result == WRITE_REPLIES:
            print("the writes were acknowledged before the primary stepped down")
            check_acknowledged_then_observed(shard, committed_before)
            return
        acked, error = result
        assert acked == [], f"the writer got part of its replies ({acked}) before {error!r}"
        got = shard.receipts.collect(len(OBSERVERS))
        seen = [what for what in OBSERVERS if reveals_the_writes(what, got[what][0], shard)]
        assert seen == [], f"{seen} showed writes that were never acknowledged"
        assert "stepping down" in open(shard.primary.log, errors="replace").read()
        new = _serving_primary(cluster)
        with valkey.Valkey(port=new.port, socket_timeout=10) as c:
            state = (c.get("k"), c.get("k2"), c.xlen("s"))
        print(f"stepped down unacknowledged ({error!r}); {new.name} serves; the writes "
              f"{'landed' if state[2] else 'are gone'}")
        assert state in ((None, None, 0), (b"v", b"v2", 1)), f"part of one entry survived: {state}"
    finally:
        shard.close()
