"""The clients of a verification run: real clients (valkey-py's ValkeyCluster for a cluster, Valkey for a
standalone endpoint) that record every operation in a history (history.Recorder) while faults are injected.

Outcome of an operation (Jepsen's rule, tools/verify/history.py):
- ok: the reply says it happened.
- fail: it certainly did not: an error reply that refuses a command before it runs (READONLY, CLUSTERDOWN,
  TRYAGAIN, LOADING, OOM, MISCONF "writes are refused", an aborted EXEC, a CAS whose comparison failed), or a
  connection that could not even be opened.
- info: anything else (a timeout, a connection lost with the request sent, an unknown error): it may have
  happened, now or later.

Cluster clients are built with cluster_error_retry_attempts=0, so one call is one attempt (MOVED/ASK are
followed: a redirect is a refusal). After an error a client is built again with its bootstrap nodes rotated:
a node cut off in a minority keeps answering CLUSTER SLOTS with its stale view, and a client that always asks
it first would never learn the new primary.
"""

import random
import threading
import time
from collections import Counter
from typing import Optional

import valkey
from valkey.cluster import ClusterNode, ValkeyCluster

from .history import CAS, READ, WRITE, WRITE_KEY

OK, FAIL, INFO = "ok", "fail", "info"

# valkey-py strips the error code off these replies and raises a class for it: put the code back
_CODES = ((valkey.exceptions.ReadOnlyError, "READONLY"), (valkey.exceptions.MasterDownError, "MASTERDOWN"),
          (valkey.exceptions.ClusterDownError, "CLUSTERDOWN"), (valkey.exceptions.TryAgainError, "TRYAGAIN"),
          (valkey.exceptions.MovedError, "MOVED"), (valkey.exceptions.AskError, "ASK"),
          (valkey.exceptions.BusyLoadingError, "LOADING"), (valkey.exceptions.OutOfMemoryError, "OOM"),
          (valkey.exceptions.NoPermissionError, "NOPERM"), (valkey.exceptions.ExecAbortError, "EXECABORT"),
          (valkey.exceptions.NoScriptError, "NOSCRIPT"), (valkey.exceptions.ClusterCrossSlotError, "CROSSSLOT"))
# Replies that refuse a command before it runs.
REFUSALS = ("READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "LOADING", "OOM", "NOPERM",
            "EXECABORT", "CROSSSLOT", "NOAUTH", "WRONGPASS", "NOREPLICAS", "BUSY ")
BUFFER_FULL = "CLUSTERDOWN The durability buffer is full"


def error_text(exc) -> str:
    """The error as the server sent it (code included), or the client's exception text."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            text = str(exc)
            return text if text.startswith(code) else f"{code} {text}"
    if isinstance(exc, valkey.exceptions.ResponseError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def classify(exc):
    """(ok|fail|info, text) for an exception raised by one attempt."""
    text = error_text(exc)
    if isinstance(exc, valkey.exceptions.WatchError):
        return FAIL, "EXEC aborted: a WATCHed key changed"
    if isinstance(exc, valkey.exceptions.BusyLoadingError):
        return FAIL, text
    if isinstance(exc, (valkey.exceptions.ResponseError,)):
        if text.startswith(REFUSALS):
            return FAIL, text
        if text.startswith("MISCONF") and "are refused" in text and "This write" not in text:
            return FAIL, text   # refused before it ran (JOURNAL_FAILED_WRITES); "This write ..." ran: info
        if text.startswith("Transaction discarded"):
            return FAIL, text
        return INFO, text
    if isinstance(exc, (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError, OSError)):
        # Even "connecting to ..." proves nothing: a cluster client that lost a reply re-reads the topology and
        # raises what that reconnect met, after the command went out (found by the linearizability check: a
        # CAS answered "Timeout connecting to server" had taken effect). Callers that know nothing was sent
        # say so themselves.
        return INFO, text
    if isinstance(exc, valkey.exceptions.ValkeyClusterException) and "No targets" in text:
        return FAIL, text
    return INFO, text


class Target:
    """Where a workload goes: a cluster (any node bootstraps) or a standalone endpoint."""

    def __init__(self, host, port, tls=False, tls_ca=None, cluster_mode=True, nodes=(), password=None,
                 label=None):
        self.host, self.port = host, int(port)
        self.tls, self.tls_ca = bool(tls), tls_ca
        self.cluster_mode = cluster_mode
        self.nodes = list(nodes) or [(host, int(port))]
        self.password = password
        self.label = label or f"{host}:{port}"

    @classmethod
    def from_cluster(cls, cluster):
        """A local cluster from its manifest (TLS with its CA when it was started with --tls)."""
        ca = (cluster.manifest.get("tls") or {}).get("ca")
        nodes = [("127.0.0.1", p.port) for p in cluster.nodes]
        password = cluster.nodes[0].password if cluster.nodes else None   # the cluster's (DIR/secrets/resp.pass)
        return cls("127.0.0.1", nodes[0][1], tls=bool(ca), tls_ca=ca,
                   cluster_mode=bool(cluster.options.get("cluster_mode")), nodes=nodes, password=password,
                   label=f"local cluster {cluster.dir}")

    @classmethod
    def from_endpoint(cls, host, port, tls=False, tls_ca=None, password=None, cluster_mode=None):
        """Any RESP endpoint; cluster_mode None: asks it (INFO cluster's cluster_enabled)."""
        t = cls(host, port, tls, tls_ca, cluster_mode=False, password=password)
        if cluster_mode is None:
            with t.node_client(host, port, 5.0) as c:
                cluster_mode = bool(c.info("cluster").get("cluster_enabled"))
        t.cluster_mode = bool(cluster_mode)
        return t

    def _ssl(self):
        if not self.tls:
            return {}
        kw = {"ssl": True}
        if self.tls_ca:
            kw["ssl_ca_certs"] = self.tls_ca
        return kw

    def client(self, timeout_s=5.0, rotate=0):
        """A new client (cluster or plain); rotate: which known node to bootstrap from first."""
        if not self.cluster_mode:
            return valkey.Valkey(host=self.host, port=self.port, socket_timeout=timeout_s,
                                 socket_connect_timeout=min(timeout_s, 2.0), password=self.password,
                                 **self._ssl())
        nodes = self.nodes[rotate % len(self.nodes):] + self.nodes[:rotate % len(self.nodes)]
        return ValkeyCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], socket_timeout=timeout_s,
                             socket_connect_timeout=min(timeout_s, 2.0), cluster_error_retry_attempts=0,
                             password=self.password, **self._ssl())

    def node_client(self, host, port, timeout_s=5.0):
        """A plain single-connection client to one node (INFO, CONFIG, READONLY reads)."""
        return valkey.Valkey(host=host, port=int(port), socket_timeout=timeout_s,
                             socket_connect_timeout=min(timeout_s, 2.0), password=self.password,
                             single_connection_client=True, **self._ssl())

    def primaries(self, timeout_s=5.0) -> list:
        """(host, port) of every primary as a fresh client sees the cluster now (the endpoint when standalone)."""
        if not self.cluster_mode:
            return [(self.host, self.port)]
        c = self.client(timeout_s)
        try:
            return [(n.host, n.port) for n in c.get_primaries()]
        finally:
            c.close()

    def primary_of(self, key, timeout_s=5.0) -> tuple:
        """(host, port) of the primary serving `key`, as a fresh client sees the cluster now."""
        if not self.cluster_mode:
            return self.host, self.port
        c = self.client(timeout_s)
        try:
            n = c.get_node_from_key(key)
            return n.host, n.port
        finally:
            c.close()

    def learn_nodes(self, timeout_s=5.0):
        """Adds every node a cluster client discovers to the bootstrap list (a --target cluster names one)."""
        if not self.cluster_mode:
            return
        c = self.client(timeout_s)
        try:
            for n in c.get_nodes():
                if (n.host, n.port) not in self.nodes:
                    self.nodes.append((n.host, n.port))
        finally:
            c.close()


# The pause before a client is rebuilt after an error: REBUILD_PAUSE_MIN_S, doubled at each error that follows
# within REBUILD_CALM_S of the one before, up to REBUILD_PAUSE_MAX_S. A cluster client's construction is a
# CLUSTER SLOTS, a COMMAND parsed into its table, a walk over the 16384 slots and new connections: 20-50 ms of
# CPU. Rebuilt every 20 ms through a failover of a few seconds, each writer thread kept a core busy doing that
# (57% of a test process's samples with the GIL during four failover test files, py-spy --gil), the time the
# failover itself needed. The cap bounds how late a writer notices the cluster serving again: the
# unavailability windows (acked.py) are measured to within it, and with several writers usually closer.
REBUILD_PAUSE_MIN_S = 0.02
REBUILD_PAUSE_MAX_S = 0.2
REBUILD_CALM_S = 1.0


class _Client:
    """A client that is rebuilt (bootstrap rotated) after any error, with a back-off that grows while the errors
    keep coming (REBUILD_PAUSE_MIN_S .. REBUILD_PAUSE_MAX_S)."""

    def __init__(self, target, timeout_s, stop, clock=time.monotonic):
        self.target, self.timeout_s, self.stop = target, timeout_s, stop
        self.clock = clock
        self.c = None
        self.rotation = random.randrange(len(target.nodes))
        self.rebuilds = 0
        self._pause_s = REBUILD_PAUSE_MIN_S
        self._last_error_at = None

    def pause_s(self) -> float:
        """The pause after an error now: the minimum after a calm spell, else twice the last one (capped)."""
        now = self.clock()
        if self._last_error_at is None or now - self._last_error_at > REBUILD_CALM_S:
            self._pause_s = REBUILD_PAUSE_MIN_S
        else:
            self._pause_s = min(self._pause_s * 2, REBUILD_PAUSE_MAX_S)
        self._last_error_at = now
        return self._pause_s

    def get(self, deadline=None):
        while self.c is None and not self.stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                self.c = self.target.client(self.timeout_s, self.rotation)
            except Exception:  # noqa: BLE001 - no node reachable yet: try the next one
                self.rotation += 1
                self.stop.wait(max(0.05, self.pause_s()))
        return self.c

    def broken(self):
        self.close()
        self.rotation += 1
        self.rebuilds += 1
        self.stop.wait(self.pause_s())

    def close(self):
        if self.c is not None:
            try:
                self.c.close()
            except Exception:  # noqa: BLE001
                pass
            self.c = None


def _wait_turn(stop, next_at, interval):
    """Waits (or until stop) for the slot at next_at of a paced loop; returns the slot after it, never more than
    a second behind now, so that a stall is not made up for with a burst."""
    delay = next_at - time.monotonic()
    if delay > 0:
        stop.wait(delay)
    return max(next_at + interval, time.monotonic() - 1.0)


class _Worker(threading.Thread):
    """A workload thread: _run() does the work; what it raises is kept in .error for the scenario to report
    (a thread's exception would otherwise only be printed)."""

    def run(self):
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the scenario
            self.error = exc


class KeyWriter(_Worker):
    """Writes unique keys (`write-key` ops: SET key value), one at a time, until stopped. rate_per_s: at most
    that many writes a second (None: as fast as acknowledgements come). retry_refused: write the same key again
    after a CLUSTERDOWN durability-buffer rejection (the async writers of the seed's Test 2)."""

    def __init__(self, target, rec, process, stop, prefix="acked", value_bytes=0, timeout_s=5.0,
                 rate_per_s=None, retry_refused=False, max_s=3600.0):
        super().__init__(daemon=True, name=f"verify-writer-{process}")
        self.target, self.rec, self.process, self.stop = target, rec, process, stop
        self.prefix, self.pad = prefix, "x" * max(0, value_bytes)
        self.timeout_s, self.rate_per_s = timeout_s, rate_per_s
        self.retry_refused = retry_refused
        self.max_s = max_s
        self.errors = Counter()
        self.rejections = 0
        self.acked = 0
        self.error = None

    def _run(self):
        client = _Client(self.target, self.timeout_s, self.stop)
        deadline = time.monotonic() + self.max_s
        interval = 1.0 / self.rate_per_s if self.rate_per_s else 0.0
        next_at = time.monotonic()
        i = 0
        retry_key = None
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                if interval:
                    next_at = _wait_turn(self.stop, next_at, interval)
                c = client.get()
                if c is None:
                    break
                if retry_key is not None:
                    key, value = retry_key
                else:
                    key = f"{self.prefix}:{self.process}:{i}"
                    value = f"{self.process}:{i}:{self.pad}"
                    i += 1
                retry_key = None
                self.rec.invoke(self.process, WRITE_KEY, key, value)
                try:
                    reply = c.set(key, value)
                except Exception as exc:  # noqa: BLE001 - every outcome is recorded
                    outcome, text = classify(exc)
                    (self.rec.fail if outcome == FAIL else self.rec.info)(self.process, text)
                    self.errors[text.split(" ", 1)[0] if outcome == FAIL else text[:60]] += 1
                    if text.startswith(BUFFER_FULL):
                        self.rejections += 1
                        if self.retry_refused:
                            retry_key = (key, value)
                            self.stop.wait(0.01)
                            continue
                    client.broken()
                    continue
                if reply:
                    self.rec.ok(self.process)
                    self.acked += 1
                else:
                    self.rec.fail(self.process, f"SET replied {reply!r}")
        finally:
            client.close()


def start_writers(target, rec, count, stop, **kw) -> list:
    writers = [KeyWriter(target, rec, n, stop, **kw) for n in range(count)]
    for w in writers:
        w.start()
    return writers


def stop_all(threads, stop, timeout_s=30.0):
    stop.set()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    errors = [t.error for t in threads if getattr(t, "error", None) is not None]
    if errors:
        raise RuntimeError(f"a workload client crashed: {errors[0]!r}") from errors[0]
    return alive


# -- the register workload (linearizable) ----------------------------------------------------------------------

CAS_LUA = ("local cur = redis.call('GET', KEYS[1]) "
           "if (ARGV[1] == '0' and cur == false) or (ARGV[1] == '1' and cur == ARGV[2]) then "
           "redis.call('SET', KEYS[1], ARGV[3]) return 1 end return 0")


class RegisterClient(_Worker):
    """Reads, writes and compare-and-sets (WATCH/MULTI/EXEC, and a Lua script) on a few keys, recording each.
    Every written value is unique. A CAS expects the last value this client saw on that key."""

    MIX = ((READ, 0.40), (WRITE, 0.30), ("cas-watch", 0.15), ("cas-lua", 0.15))

    def __init__(self, target, rec, process, stop, keys, timeout_s=1.0, rate_per_s=100.0, seed=None,
                 max_s=3600.0):
        super().__init__(daemon=True, name=f"verify-register-{process}")
        self.target, self.rec, self.process, self.stop = target, rec, process, stop
        self.keys = list(keys)
        self.timeout_s, self.rate_per_s = timeout_s, rate_per_s
        self.rng = random.Random(seed)
        self.seen = {}
        self.counter = 0
        self.counts = Counter()
        self.max_s = max_s
        self.error = None

    def _pick(self):
        r = self.rng.random()
        for f, p in self.MIX:
            if r < p:
                return f
            r -= p
        return READ

    def _run(self):
        client = _Client(self.target, self.timeout_s, self.stop)
        deadline = time.monotonic() + self.max_s
        interval = 1.0 / self.rate_per_s if self.rate_per_s else 0.0
        next_at = time.monotonic() + self.rng.random() * interval
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                if interval:
                    next_at = _wait_turn(self.stop, next_at, interval)
                c = client.get()
                if c is None:
                    break
                key = self.rng.choice(self.keys)
                f = self._pick()
                self.counts[f] += 1
                if not self._one(c, f, key):
                    client.broken()
        finally:
            client.close()

    def _value(self):
        self.counter += 1
        return f"{self.process}.{self.counter}"

    def _one(self, c, f, key) -> bool:
        """One operation; False when the client should be rebuilt."""
        rec, p = self.rec, self.process
        if f == READ:
            rec.invoke(p, READ, key)
            try:
                v = c.get(key)
            except Exception as exc:  # noqa: BLE001
                return self._error(exc)
            v = v.decode() if isinstance(v, bytes) else v
            rec.ok(p, v)
            self.seen[key] = v
            return True
        if f == WRITE:
            v = self._value()
            rec.invoke(p, WRITE, key, v)
            try:
                reply = c.set(key, v)
            except Exception as exc:  # noqa: BLE001
                return self._error(exc)
            if reply:
                rec.ok(p)
                self.seen[key] = v
            else:
                rec.fail(p, f"SET replied {reply!r}")
            return True
        expected, new = self.seen.get(key), self._value()
        rec.invoke(p, CAS, key, [expected, new])
        if f == "cas-lua":
            try:
                done = c.eval(CAS_LUA, 1, key, "0" if expected is None else "1", expected or "", new)
            except Exception as exc:  # noqa: BLE001
                return self._error(exc)
            if done == 1:
                rec.ok(p)
                self.seen[key] = new
            else:
                rec.fail(p, "comparison failed")
            return True
        return self._cas_watch(c, key, expected, new)

    def _cas_watch(self, c, key, expected, new) -> bool:
        rec, p = self.rec, self.process
        node = c
        if isinstance(c, ValkeyCluster):
            try:
                node = c.get_valkey_connection(c.get_node_from_key(key))
            except Exception as exc:  # noqa: BLE001 - nothing was sent
                rec.fail(p, error_text(exc))
                return False
        sent_exec = False
        pipe = node.pipeline(transaction=True)
        try:
            pipe.watch(key)
            cur = pipe.get(key)
            cur = cur.decode() if isinstance(cur, bytes) else cur
            if cur != expected:
                pipe.unwatch()
                rec.fail(p, "comparison failed")
                self.seen[key] = cur   # what it read is a value it saw (the read is not recorded: no op)
                return True
            pipe.multi()
            pipe.set(key, new)
            sent_exec = True
            result = pipe.execute()
        except valkey.exceptions.WatchError as exc:
            if sent_exec and "ConnectionError" in str(exc):
                # valkey-py turns a connection error while watching into WatchError: EXEC may have run
                rec.info(p, str(exc))
                return False
            rec.fail(p, "EXEC aborted: a WATCHed key changed")
            return True
        except Exception as exc:  # noqa: BLE001
            outcome, text = classify(exc)
            if not sent_exec and outcome == INFO:
                # Lost before EXEC went out: WATCH/GET/MULTI change nothing, so the CAS cannot have happened.
                outcome = FAIL
            (rec.fail if outcome == FAIL else rec.info)(p, text)
            return False
        finally:
            try:
                pipe.reset()
            except Exception:  # noqa: BLE001
                pass
        if result and result[0]:
            rec.ok(p)
            self.seen[key] = new
        else:
            rec.fail(p, f"EXEC replied {result!r}")
        return True

    def _error(self, exc) -> bool:
        outcome, text = classify(exc)
        (self.rec.fail if outcome == FAIL else self.rec.info)(self.process, text)
        return False


# -- reading back --------------------------------------------------------------------------------------------

def read_back(target, keys, timeout_s=60.0, chunk=500) -> dict:
    """GET every key from the primaries (as a cluster client routes it) -> {key: value or None}. Retries a
    chunk that errs until the deadline, then raises: a partial read-back would count as loss."""
    keys = list(dict.fromkeys(keys))
    out = {}
    deadline = time.monotonic() + timeout_s
    stop = threading.Event()
    client = _Client(target, 10.0, stop)
    last = None
    try:
        i = 0
        while i < len(keys):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read-back incomplete after {timeout_s:g}s ({i} of {len(keys)} keys): {last}")
            part = keys[i:i + chunk]
            c = client.get(deadline)
            if c is None:
                continue
            try:
                pipe = c.pipeline(transaction=False)
                for k in part:
                    pipe.get(k)
                values = pipe.execute(raise_on_error=False)
            except Exception as exc:  # noqa: BLE001 - try again
                last = error_text(exc)
                client.broken()
                time.sleep(0.1)
                continue
            bad = [v for v in values if isinstance(v, Exception)]
            if bad:
                last = error_text(bad[0])
                client.broken()
                time.sleep(0.1)
                continue
            for k, v in zip(part, values):
                out[k] = v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
            i += chunk
    finally:
        client.close()
    return out


def replicas_missing(target, expected: dict, timeout_s=30.0, skip=()) -> dict:
    """Polls every replica (READONLY reads) until it holds every expected key with its value, or the deadline.
    Returns {replica host:port: keys missing or different at the end} (0 everywhere: converged; None: it never
    answered). skip: "host:port" of replicas known to be down. A standalone target has no replicas: {}."""
    if not target.cluster_mode or not expected:
        return {}
    for attempt in range(5):
        try:
            # ValkeyCluster sends COMMAND to a random node while it starts: one just killed may still be listed
            c = target.client(10.0, rotate=attempt)
            break
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
            if attempt == 4:
                raise
            time.sleep(0.5)
    try:
        by_replica = {}
        cache = c.nodes_manager.slots_cache
        for k in expected:
            for n in cache.get(c.keyslot(k), [])[1:]:
                by_replica.setdefault((n.host, n.port), []).append(k)
    finally:
        c.close()
    result = {}
    for (host, port), keys in by_replica.items():
        if f"{host}:{port}" in skip:
            continue
        deadline = time.monotonic() + timeout_s
        missing = keys
        answered = False
        while True:
            try:
                with target.node_client(host, port, 10.0) as r:
                    still = []
                    for start in range(0, len(missing), 500):
                        part = missing[start:start + 500]
                        # READONLY on the pipeline's own connection: a cluster replica then serves the reads
                        pipe = r.pipeline(transaction=False)
                        pipe.execute_command("READONLY")
                        for k in part:
                            pipe.get(k)
                        for k, v in zip(part, pipe.execute(raise_on_error=False)[1:]):
                            v = v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
                            if v != expected[k]:
                                still.append(k)
                    missing = still
                    answered = True
            except Exception:  # noqa: BLE001 - the replica may be restarting: poll again
                pass
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        result[f"{host}:{port}"] = len(missing) if answered else None
    return result


# -- watching the servers ----------------------------------------------------------------------------------------

class InfoSampler(threading.Thread):
    """Polls INFO <sections> of the given nodes every interval_s: samples [(monotonic_ns, "host:port", fields)].
    A node that does not answer is skipped for that round."""

    def __init__(self, target, nodes, sections=("durability",), interval_s=0.05, stop=None):
        super().__init__(daemon=True, name="verify-info-sampler")
        self.target, self.nodes = target, list(nodes)
        self.sections, self.interval_s = sections, interval_s
        self.stop = stop or threading.Event()
        self.samples = []
        self._clients = {}

    def run(self):
        while not self.stop.is_set():
            for host, port in list(self.nodes):
                try:
                    c = self._clients.get((host, port))
                    if c is None:
                        c = self._clients[(host, port)] = self.target.node_client(host, port, 1.0)
                    info = c.info(*self.sections) if len(self.sections) > 1 else c.info(self.sections[0])
                    self.samples.append((time.monotonic_ns(), f"{host}:{port}", info))
                except Exception:  # noqa: BLE001
                    old = self._clients.pop((host, port), None)
                    if old is not None:
                        try:
                            old.close()
                        except Exception:  # noqa: BLE001
                            pass
            self.stop.wait(self.interval_s)
        for c in self._clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    def last_before(self, t_ns, field) -> Optional[tuple]:
        """(node, value) of the newest sample taken before t_ns that has the field (max over nodes of the
        last round)."""
        best = {}
        for ts, node, info in self.samples:
            if ts > t_ns:
                break
            if field in info:
                best[node] = info[field]
        if not best:
            return None
        node = max(best, key=lambda n: best[n] if isinstance(best[n], (int, float)) else 0)
        return node, best[node]


# -- the dirty-reads workload ------------------------------------------------------------------------------------

class DirtyWriter(_Worker):
    """Writes unique values, one at a time, alternating SET of a key written once (`write-key`) and XADD of a
    unique field value to one stream (`xadd`). `pending` is the write in flight (key, value), for the GET
    reader to read."""

    def __init__(self, target, rec, process, stop, prefix, stream, timeout_s=15.0, rate_per_s=50.0, max_s=3600.0):
        super().__init__(daemon=True, name=f"verify-dirty-writer-{process}")
        self.target, self.rec, self.process, self.stop = target, rec, process, stop
        self.prefix, self.stream = prefix, stream
        self.timeout_s, self.rate_per_s, self.max_s = timeout_s, rate_per_s, max_s
        self.pending = None
        self.acked = 0
        self.errors = Counter()
        self.error = None

    def _run(self):
        from .dirty import XADD
        client = _Client(self.target, self.timeout_s, self.stop)
        deadline = time.monotonic() + self.max_s
        interval = 1.0 / self.rate_per_s
        i = 0
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                c = client.get()
                if c is None:
                    break
                value = f"{self.prefix}:{self.process}:{i}"
                if i % 2 == 0:
                    f, key = WRITE_KEY, f"{self.prefix}:k:{self.process}:{i}"
                else:
                    f, key = XADD, self.stream
                i += 1
                self.pending = (key, value) if f == WRITE_KEY else None
                self.rec.invoke(self.process, f, key, value)
                try:
                    reply = c.set(key, value) if f == WRITE_KEY else c.xadd(key, {"v": value})
                except Exception as exc:  # noqa: BLE001 - every outcome is recorded
                    outcome, text = classify(exc)
                    (self.rec.fail if outcome == FAIL else self.rec.info)(self.process, text)
                    self.errors[text[:60]] += 1
                    self.pending = None
                    client.broken()
                    continue
                self.pending = None
                if reply:
                    self.rec.ok(self.process)
                    self.acked += 1
                else:
                    self.rec.fail(self.process, f"{f} replied {reply!r}")
                self.stop.wait(interval)
        finally:
            client.close()


def _decoded(v):
    return v.decode("utf-8", "surrogateescape") if isinstance(v, (bytes, bytearray)) else v


class _Observer(threading.Thread):
    """A reader attached to the current primary (pub/sub, blocking reads and the SYNC feed are node-local):
    re-attached to whichever node is primary when its connection ends. Records each value it sees as an
    `observe` operation through `via`."""

    via = None
    pause_s = 0.05     # between one attachment's end and the next

    def __init__(self, target, rec, process, stop, prefix, stream, timeout_s=5.0):
        super().__init__(daemon=True, name=f"verify-observer-{process}")
        self.target, self.rec, self.process, self.stop = target, rec, process, stop
        self.prefix, self.stream = prefix, stream
        self.timeout_s = timeout_s
        self.attached = []          # (monotonic ns, host:port) of every attachment
        self.seen = 0
        self.last_error = None      # why the last attachment ended (for the report)
        self.error = None

    def observe(self, key, value, via=None):
        from .dirty import OBSERVE
        self.rec.invoke(self.process, OBSERVE, _decoded(key), via or self.via)
        self.rec.ok(self.process, _decoded(value))
        self.seen += 1

    def run(self):
        try:
            while not self.stop.is_set():
                try:
                    host, port = self.target.primary_of(self.stream, self.timeout_s)
                except Exception as exc:  # noqa: BLE001 - no primary known yet: ask again
                    self.last_error = error_text(exc)
                    self.stop.wait(0.1)
                    continue
                self.attached.append((time.monotonic_ns(), f"{host}:{port}"))
                try:
                    self.follow(host, port)
                except Exception as exc:  # noqa: BLE001 - the node went away (failover, re-execution): re-attach
                    self.last_error = error_text(exc)
                self.stop.wait(self.pause_s)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc

    def follow(self, host, port):
        raise NotImplementedError


class XreadObserver(_Observer):
    """XREAD BLOCK on the stream the writers XADD to: every entry delivered to the blocked client."""

    via = "XREAD BLOCK"

    def follow(self, host, port):
        c = self.target.node_client(host, port, self.timeout_s + 2.0)
        last = "$" if not getattr(self, "last_id", None) else self.last_id
        try:
            while not self.stop.is_set():
                reply = c.xread({self.stream: last}, block=int(self.timeout_s * 1000) // 2)
                for _name, entries in reply or ():
                    for entry_id, fields in entries:
                        last = self.last_id = _decoded(entry_id)
                        self.observe(self.stream, fields.get(b"v", fields.get("v")))
        finally:
            c.close()


NOTIFY_EVENTS = "KA"   # keyspace events of every class (Valkey's notify-keyspace-events)


class NotifyObserver(_Observer):
    """PSUBSCRIBE to the keyspace notifications of the run's keys (notify-keyspace-events is switched on on the
    node it attaches to): a `set` of a key written once names its write."""

    via = "keyspace notification"

    def follow(self, host, port):
        c = self.target.node_client(host, port, self.timeout_s)
        c.config_set("notify-keyspace-events", NOTIFY_EVENTS)
        ps = c.pubsub(ignore_subscribe_messages=True)
        prefix = f"__keyspace@0__:{self.prefix}:k:"
        try:
            ps.psubscribe(prefix + "*")
            while not self.stop.is_set():
                msg = ps.get_message(timeout=0.5)
                if msg is None or msg.get("type") != "pmessage":
                    continue
                channel, event = _decoded(msg["channel"]), _decoded(msg["data"])
                if event == "set":
                    self.observe(channel[len("__keyspace@0__:"):], event)
        finally:
            ps.close()
            c.close()


class FeedObserver(_Observer):
    """A replica's view: SYNC, then the RDB file of the dataset (each of the run's values in it) and the
    stream of propagated commands (SET / XADD of the run's keys)."""

    via = "SYNC feed"
    RDB = "SYNC RDB"
    rdb_only = False

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._rdb_seen = set()     # (key, value) already recorded from an export

    def _connect(self, host, port):
        from ...protocol.client import RespClient, RespError
        ssl_context = None
        if self.target.tls:
            from ...cluster.tls import client_context
            ssl_context = client_context(self.target.tls_ca)
        c = RespClient(host, port, self.timeout_s, ssl_context=ssl_context)
        if self.target.password:
            try:
                c.execute("AUTH", self.target.password)
            except RespError as exc:
                c.close()
                raise ConnectionError(f"AUTH: {exc}") from None
        return c

    def _patiently(self, read):
        """read() again after each socket timeout (the client keeps what it has read) until it answers; None
        once the run stops. The short timeout is only there to notice the stop."""
        while not self.stop.is_set():
            try:
                return read()
            except (TimeoutError, OSError) as exc:
                if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                    continue
                raise
        return None

    def follow(self, host, port):
        from ...keyspace.rdbvalue import load_rdb_file
        c = self._connect(host, port)
        try:
            c.settimeout(0.5)
            c.send("SYNC")
            # The RDB payload may itself wait for a commit, so it is read with the same patience as the stream
            # after it.
            rdb = self._patiently(c.read_payload)
            if rdb is None:
                return
            self._observe_rdb(load_rdb_file(rdb))
            if self.rdb_only:
                return
            while True:
                cmd = self._patiently(c.read)
                if cmd is None:
                    return
                if isinstance(cmd, list) and len(cmd) >= 3:
                    name = cmd[0].lower()
                    if name == b"set":
                        self._maybe(cmd[1], cmd[2])
                    elif name == b"xadd" and _decoded(cmd[1]) == self.stream:
                        args = cmd[2:]
                        if b"v" in args[:-1]:
                            self.observe(self.stream, args[args.index(b"v") + 1])
        finally:
            c.close()

    def _maybe(self, key, value, via=None):
        if _decoded(key).startswith(f"{self.prefix}:k:"):
            self.observe(key, value, via)

    def _observe_rdb(self, parsed):
        # Only the first time a value shows up in an export counts (the earliest sighting is what a checker
        # needs); recording every value of every export would grow the history with the square of the run.
        seen = self._rdb_seen
        databases, _libraries = parsed
        for key, value, _expire in databases.get(0, ()):
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value)
                if (key, value) not in seen:
                    seen.add((key, value))
                    self._maybe(key, value, self.RDB)
            elif _decoded(key) == self.stream and hasattr(value, "entries"):
                for fields in value.entries.values():
                    fields = list(fields)
                    if b"v" in fields[:-1]:
                        v = fields[fields.index(b"v") + 1]
                        if (key, v) not in seen:
                            seen.add((key, v))
                            self.observe(self.stream, v, self.RDB)


class RdbObserver(FeedObserver):
    """`redis-cli --rdb` over and over: SYNC, the RDB file, close; again half a second later. An export taken
    while a write is uncommitted must wait for its commit (the feed's own RDB is taken only once per attachment,
    before the run's writes)."""

    via = FeedObserver.RDB
    rdb_only = True
    pause_s = 0.5


class GetObserver(threading.Thread):
    """GETs the key each writer has in flight, through a cluster client (a read of a key with an uncommitted
    write must wait for its commit)."""

    def __init__(self, target, rec, process, stop, writers, timeout_s=15.0, interval_s=0.005):
        super().__init__(daemon=True, name=f"verify-get-observer-{process}")
        self.target, self.rec, self.process, self.stop = target, rec, process, stop
        self.writers, self.timeout_s, self.interval_s = writers, timeout_s, interval_s
        self.seen = 0
        self.error = None

    def run(self):
        from .dirty import OBSERVE, VIA_GET
        client = _Client(self.target, self.timeout_s, self.stop)
        try:
            while not self.stop.is_set():
                pending = [w.pending for w in self.writers if w.pending is not None]
                if not pending:
                    self.stop.wait(self.interval_s)
                    continue
                c = client.get()
                if c is None:
                    break
                for key, _value in pending:
                    self.rec.invoke(self.process, OBSERVE, key, VIA_GET)
                    try:
                        v = c.get(key)
                    except Exception as exc:  # noqa: BLE001
                        self.rec.info(self.process, error_text(exc))
                        client.broken()
                        break
                    self.rec.ok(self.process, _decoded(v))
                    self.seen += v is not None
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
        finally:
            client.close()


def read_stream_values(target, stream, timeout_s=60.0) -> list:
    """XRANGE - + of a stream from its primary -> the `v` field of every entry (retried until the deadline)."""
    deadline = time.monotonic() + timeout_s
    stop = threading.Event()
    client = _Client(target, 10.0, stop)
    last = None
    try:
        while time.monotonic() < deadline:
            c = client.get(deadline)
            if c is None:
                break
            try:
                entries = c.xrange(stream, "-", "+")
            except Exception as exc:  # noqa: BLE001 - try again
                last = error_text(exc)
                client.broken()
                time.sleep(0.1)
                continue
            return [_decoded(fields.get(b"v", fields.get("v"))) for _id, fields in entries]
    finally:
        client.close()
    raise TimeoutError(f"XRANGE {stream} failed for {timeout_s:g}s: {last}")


# -- the bulk load step of acked-writes ---------------------------------------------------------------------------

class BulkWriter(_Worker):
    """Pipelines `batches` batches of `batch` SETs of `value_bytes` values to unique keys, then (and between
    batches) `large` SETs of `large_bytes` values, each recorded as a `write-key` operation. A pipeline's
    commands are concurrent operations, so each slot of a batch is its own process ("bulk<n>.<slot>")."""

    def __init__(self, target, rec, n, stop, prefix, batches=3, batch=1000, value_bytes=4096, large=0,
                 large_bytes=2 << 20, timeout_s=120.0):
        super().__init__(daemon=True, name=f"verify-bulk-{n}")
        self.target, self.rec, self.n, self.stop = target, rec, n, stop
        self.prefix = prefix
        self.batches, self.batch, self.value_bytes = batches, batch, value_bytes
        self.large, self.large_bytes = large, large_bytes
        self.timeout_s = timeout_s
        self.sent = self.acked = self.large_sent = self.large_acked = 0
        self.bytes_acked = 0
        self.errors = Counter()
        self.started_ns = self.ended_ns = None
        self.error = None

    def run(self):
        try:
            super().run()
        finally:
            self.ended_ns = time.monotonic_ns()

    def _value(self, key, size):
        head = f"{key}:"
        return head + "x" * max(0, size - len(head))

    def _run(self):
        client = _Client(self.target, self.timeout_s, self.stop)
        self.started_ns = time.monotonic_ns()
        large_left = self.large
        try:
            for b in range(self.batches):
                if self.stop.is_set():
                    break
                self._batch(client, b)
                if large_left and not self.stop.is_set():
                    self._large(client, self.large - large_left)
                    large_left -= 1
            while large_left and not self.stop.is_set():
                self._large(client, self.large - large_left)
                large_left -= 1
        finally:
            client.close()

    def _complete(self, process, reply, size):
        if isinstance(reply, Exception):
            outcome, text = classify(reply)
            (self.rec.fail if outcome == FAIL else self.rec.info)(process, text)
            self.errors[text[:60]] += 1
            return False
        if reply:
            self.rec.ok(process)
            self.bytes_acked += size
            return True
        self.rec.fail(process, f"SET replied {reply!r}")
        return False

    def _batch(self, client, b):
        c = client.get()
        if c is None:
            return
        items = []
        for j in range(self.batch):
            key = f"{self.prefix}:bulk:{self.n}:{b}:{j}"
            items.append((f"bulk{self.n}.{j}", key, self._value(key, self.value_bytes)))
        pipe = c.pipeline(transaction=False)
        for process, key, value in items:
            self.rec.invoke(process, WRITE_KEY, key, value)
            pipe.set(key, value)
        self.sent += len(items)
        try:
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - the whole batch: each may or may not have happened
            replies = [exc] * len(items)
            client.broken()
        for (process, _key, value), reply in zip(items, replies):
            self.acked += self._complete(process, reply, len(value))

    def _large(self, client, i):
        c = client.get()
        if c is None:
            return
        process = f"bulk{self.n}.large"
        key = f"{self.prefix}:large:{self.n}:{i}"
        value = self._value(key, self.large_bytes)
        self.rec.invoke(process, WRITE_KEY, key, value)
        self.large_sent += 1
        try:
            reply = c.set(key, value)
        except Exception as exc:  # noqa: BLE001
            reply = exc
            client.broken()
        self.large_acked += self._complete(process, reply, len(value))
