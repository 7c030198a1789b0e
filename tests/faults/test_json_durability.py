"""JSON documents on a real three-node NATS cluster in sync mode: the primary is killed (SIGKILL) while
writers create documents and append to a shared one, and the new primary has every acknowledged write (and
its replicas converge to it)."""

import json
import signal
import threading
import time

import valkey

from conftest import wait_new_primary, wait_until


class JsonWriter(threading.Thread):
    """Writes doc:<n> (JSON.SET at the root) and appends n to the shared "log" array, one node at a time:
    a node that refuses (a replica, a deposed or dead primary) is left for the next. Records what was
    acknowledged; a write whose reply never came is neither acknowledged nor failed (it may have happened)."""

    def __init__(self, ports, prefix, stop, max_s=120.0):
        super().__init__(daemon=True)
        self.ports = ports
        self.prefix = prefix
        self.stop_event = stop
        self.max_s = max_s
        self.docs = {}          # key -> the text acknowledged for it
        self.appended = []      # values JSON.ARRAPPEND acknowledged
        self.errors = []

    def run(self):
        deadline = time.monotonic() + self.max_s
        n = 0
        at = 0
        client = None
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            if client is None:
                client = valkey.Valkey(host="127.0.0.1", port=self.ports[at % len(self.ports)], socket_timeout=5,
                                       socket_connect_timeout=2)
            key = "%s:doc:%d" % (self.prefix, n)
            text = json.dumps({"id": n, "v": [n, n + 0.5, "x" * (n % 7)], "nested": {"k": self.prefix}},
                              separators=(",", ":"))
            try:
                if client.execute_command("JSON.SET", key, ".", text) != b"OK":
                    raise AssertionError("JSON.SET answered something else than OK")
                self.docs[key] = text
                client.execute_command("JSON.ARRAPPEND", "log", ".", str(n))
                self.appended.append(n)
                n += 1
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError,
                    valkey.exceptions.ResponseError) as exc:
                self.errors.append(str(exc))
                client.close()
                client = None
                at += 1
                time.sleep(0.01)
        if client is not None:
            client.close()


def test_acknowledged_json_writes_survive_primary_kill(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    with valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=10) as c:
        assert c.execute_command("JSON.SET", "log", ".", "[]") == b"OK"
    ports = [primary.port] + [p.port for p in cluster.nodes if p.port != primary.port]
    stop = threading.Event()
    writers = [JsonWriter(ports, "w%d" % i, stop) for i in range(4)]
    for w in writers:
        w.start()
    try:
        wait_until(lambda: sum(len(w.docs) for w in writers) >= 400, 60, what="400 acknowledged documents")
        cluster.kill(primary.name, signal.SIGKILL)
        new, seconds = wait_new_primary(cluster, primary.name)
        print(f"JSON writers: {primary.name} -> {new.name} in {seconds:.2f}s")
        before = sum(len(w.docs) for w in writers)
        wait_until(lambda: sum(len(w.docs) for w in writers) >= before + 200, 60,
                   what="200 more acknowledged documents on the new primary")
    finally:
        stop.set()
        for w in writers:
            w.join(30)
    docs = {k: v for w in writers for k, v in w.docs.items()}
    appended = [n for w in writers for n in w.appended]
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=30) as c:
        keys = sorted(docs)
        pipe = c.pipeline(transaction=False)     # one key per command: the cluster's slots differ
        for k in keys:
            pipe.execute_command("JSON.GET", k)
        got = pipe.execute()
        lost = [k for k, text in zip(keys, got) if text != docs[k].encode()]
        assert lost == [], f"{len(lost)} of {len(docs)} acknowledged documents lost or changed: {lost[:5]}"
        log = json.loads(c.execute_command("JSON.GET", "log"))
        missing = sorted(set(appended) - set(log))
        # every acknowledged append is there; an unacknowledged one may be too (its reply never came)
        assert missing == [], f"{len(missing)} acknowledged appends lost: {missing[:10]}"
        assert c.type("log") == b"ReJSON-RL"
        expected_log = c.execute_command("JSON.GET", "log")
    # the surviving replica follows the new primary to the same documents
    replicas = [p for p in cluster.nodes if p.name not in (primary.name, new.name)]
    for rep in replicas:
        with valkey.Valkey(host="127.0.0.1", port=rep.port, socket_timeout=10) as c:
            try:
                c.execute_command("READONLY")
            except valkey.exceptions.ResponseError:
                pass
            wait_until(lambda: c.execute_command("JSON.GET", "log") == expected_log, 30,
                       what=f"replica {rep.name} to hold the new primary's log")


# -- nothing derived from an uncommitted JSON write leaves before its commit (a stalled local journal) -------

import pytest  # noqa: E402

from helpers.leaks import StalledWrite, raw_reply  # noqa: E402


@pytest.mark.parametrize("read", [("JSON.GET", "jd"), ("JSON.GET", "jd", "$.n"), ("JSON.MGET", "jd", "other", "$"),
                                  ("JSON.TYPE", "jd", "$.n"), ("JSON.DEBUG", "MEMORY", "jd"),
                                  ("JSON.DEBUG", "MAX-SIZE-KEY"), ("JSON.RESP", "jd"), ("INFO", "json"),
                                  ("DUMP", "jd")])
def test_json_reads_wait_for_the_commit_of_a_json_write(server_factory, read):
    srv = server_factory("--durability", "sync")
    with srv.client() as probe:
        probe.execute_command("JSON.SET", "jd", ".", '{"n":1}')
        before = raw_reply(srv.port, *read)
        w = StalledWrite(srv, probe, "JSON.SET", "jd", "$.n", '{"a much larger value":[1,2,3,4,5,6,7,8]}')
        after = raw_reply(srv.port, *read)
        w.assert_committed_now(" ".join(read))
        assert after != before
        assert w.finish() == b"OK"


def test_json_event_waits_for_the_commit(server_factory):
    srv = server_factory("--durability", "sync", "--notify-keyspace-events", "KEA")
    with srv.client() as probe, srv.client() as sub_client:
        p = sub_client.pubsub()
        p.subscribe("__keyspace@0__:jd")
        assert p.get_message(timeout=10)["type"] == "subscribe"
        w = StalledWrite(srv, probe, "JSON.SET", "jd", ".", "[1]")
        msg = None
        while msg is None:
            msg = p.get_message(timeout=30)
        w.assert_committed_now("the json.set event")
        assert msg["data"] == b"json.set"
        assert w.finish() == b"OK"
        p.close()
