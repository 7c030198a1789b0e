"""Clients for cluster tests: writers that follow the primary of a shard and record a Jepsen-style history.

A write is `ok` when the primary answered +OK, `fail` when it answered an error that means "not applied"
(READONLY, CLUSTERDOWN before execution), and `info` when the connection broke with the request sent (it may
or may not have happened). Writers retry on the current primary; keys are unique per write attempt, so a
retry never hides a lost acknowledged write."""

import threading
import time

import valkey

RETRYABLE = ("READONLY", "MOVED", "CLUSTERDOWN", "LOADING", "TRYAGAIN")


class PrimaryFinder:
    """Finds the current primary of shard 0 among the cluster's nodes (cached until it fails)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.lock = threading.Lock()
        self.port = None

    def get(self, refresh=False):
        with self.lock:
            if self.port is None or refresh:
                p = self.cluster.primary(0)
                self.port = p.port if p is not None else None
            return self.port


class ClusterWriter(threading.Thread):
    def __init__(self, finder, n, stop_event, max_seconds=60.0, key_prefix="w"):
        super().__init__(daemon=True)
        self.finder = finder
        self.n = n
        self.stop_event = stop_event
        self.max_seconds = max_seconds
        self.prefix = key_prefix
        self.acked = {}          # key -> (ack monotonic time, port)
        self.failed = []         # (key, error) definite failures
        self.info = []           # keys with unknown outcome
        self.retries = 0
        self.i = 0

    def run(self):
        deadline = time.monotonic() + self.max_seconds
        client = None
        port = None
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            if client is None:
                port = self.finder.get(refresh=port is not None)
                if port is None:
                    time.sleep(0.02)
                    continue
                client = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=1)
            key = f"{self.prefix}{self.n}:{self.i}"
            self.i += 1
            try:
                client.set(key, key)
                self.acked[key] = (time.monotonic(), port)
            except valkey.exceptions.ResponseError as exc:
                # valkey-py strips the prefix of READONLY replies into ReadOnlyError: put it back.
                text = ("READONLY " + str(exc)) if isinstance(exc, valkey.exceptions.ReadOnlyError) else str(exc)
                self.failed.append((key, text))
                if text.startswith(RETRYABLE):
                    self.retries += 1
                    client.close()
                    client = None
                    time.sleep(0.01)
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError, OSError):
                self.info.append(key)
                self.retries += 1
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.01)
        if client is not None:
            client.close()


def start_writers(cluster, count, stop_event, **kw):
    finder = PrimaryFinder(cluster)
    writers = [ClusterWriter(finder, n, stop_event, **kw) for n in range(count)]
    for w in writers:
        w.start()
    return writers


def acked_count(writers):
    return sum(len(w.acked) for w in writers)


def readonly(client):
    """READONLY on a single-connection client, so that a cluster-mode replica serves its reads (outside cluster
    mode the command is refused and reads are served anyway)."""
    try:
        client.execute_command("READONLY")
    except valkey.exceptions.ResponseError:
        pass


def missing_acked(port, writers):
    missing = []
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10) as c:
        for w in writers:
            keys = list(w.acked)
            for start in range(0, len(keys), 500):
                chunk = keys[start:start + 500]
                # One GET each (in cluster mode MGET must stay in one slot), after READONLY on the same
                # connection so that a cluster-mode replica answers (outside cluster mode it is refused).
                p = c.pipeline(transaction=False)
                p.execute_command("READONLY")
                for k in chunk:
                    p.get(k)
                replies = p.execute(raise_on_error=False)[1:]
                for k, v in zip(chunk, replies):
                    if isinstance(v, Exception):
                        raise v
                    if v is None or v.decode() != k:
                        missing.append((k, w.acked[k]))
    return missing


def wait_new_primary(cluster, old_name, timeout_s=30.0):
    """Polls until a node other than old_name is master and accepts a write; returns (proc, seconds)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        p = cluster.primary(0)
        if p is not None and p.name != old_name:
            try:
                with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=2) as c:
                    if c.set("__probe__", "1"):
                        return p, time.monotonic() - t0
            except (valkey.exceptions.ResponseError, valkey.exceptions.ConnectionError):
                pass
        time.sleep(0.01)
    raise TimeoutError(f"no new primary within {timeout_s}s")
