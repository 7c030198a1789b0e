"""durakv's own metrics in Prometheus text format on --metrics-port (prometheus_client's HTTP server).

Which thread reads what: the event loop publishes, the HTTP thread reads what was published. At every cron tick
(`hz` times a second) the loop builds one `Snapshot` of the facts below (plain numbers, copied histogram
buckets) and puts it in `Metrics.snapshot`: one attribute store, atomic under the GIL. prometheus_client's
server thread answers a scrape by calling `Collector.collect()`, which only reads the snapshot it finds there.
So a scrape never touches the loop's structures while they change (no lock the loop could wait on, no
dict that changes size mid-iteration), and the loop never waits for a scrape; a scrape's figures are at most
one cron tick old. (Observing prometheus_client's own Histogram on the loop would take its lock on every
commit, a lock the scrape thread also holds while it reads.)

Locked like the node's RESP port: while the node asks clients for a password (requirepass, ACL users), a scrape
must present one of its users with HTTP basic authentication (Prometheus's `basic_auth`), a user allowed to run
INFO; the users are published with the snapshot (their password digests), so the HTTP thread never reads the
loop's ACL structures. Without a password (loopback only, protected mode) the endpoint asks for none, as the
RESP port does.

A fact that a node in its role does not have is left out, not published as 0: replica apply lag only on a
replica, lease remaining only on a primary of a shard, durability lag, journal errors and commit latency only
where writes are journaled here, slot migration only on a node that has migrated slots.
"""

import base64
import hashlib
import hmac
import logging
import socketserver
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

log = logging.getLogger("durakv.server")

MODES = ("none", "async", "sync")


class Snapshot:
    """The facts of one instant, built on the loop (`take`), read by the scrape thread."""

    __slots__ = ("mode", "effective", "lag_s", "held_replies", "held_bytes", "append_errors", "retries",
                 "commit_latency", "stall", "role", "epoch", "failovers", "lease_held", "lease_remaining_s",
                 "apply_lag_s", "apply_lag_entries", "migration", "journal_commit_index", "auth", "region_lag")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, None)


class Metrics:
    def __init__(self, server):
        self.server = server
        self.snapshot = Snapshot()
        self.http = None
        self.thread = None
        self._epoch_seen = None     # the first epoch this process saw: failovers count the terms after it
        self._failovers = 0
        self.failed = 0             # snapshots that raised (the previous one stays published)

    # -- the loop's side -----------------------------------------------------------------------------------
    def publish(self):
        """Called by the cron on the loop: replaces the published snapshot with one of now. A failure keeps
        the previous snapshot and never stops the cron's other work (logged once)."""
        try:
            self.snapshot = self._take()
        except Exception:  # noqa: BLE001
            if not self.failed:
                log.exception("the metrics snapshot failed; the metrics port serves the last good one")
            self.failed += 1

    def _take(self):
        srv = self.server
        s = Snapshot()
        s.auth = scrape_users(srv)
        durability = srv.durability
        t = durability.tracker
        node = srv.cluster_node
        replica = node is not None and node.role == "replica"
        mode = srv.config["durability"] if (t is None or replica) else t.mode
        s.mode = mode
        s.effective = "failed" if (t is not None and t.failed is not None) else mode
        if t is not None and not replica:
            s.lag_s = (t.lag_ms() if t.mode == "async" else 0) / 1000.0
            s.append_errors = t.failed_batches
            j = node.journal if node is not None and node.journal is not None else srv.journal
            s.retries = t.retries + (getattr(j, "retries", 0) if j is not None else 0)
            s.journal_commit_index = t.committed
            s.commit_latency = durability.commit_latency.copy()
        held = held_bytes = 0
        for box in durability.waiting:
            held += len(box.held)
            held_bytes += box.held_bytes
        s.held_replies, s.held_bytes = held, held_bytes
        s.stall = srv.loop_stats.stall.copy()
        if node is not None:
            s.role = node.role
            s.epoch = node.epoch
            if node.epoch:
                if self._epoch_seen is None:
                    self._epoch_seen = node.epoch
                self._failovers = node.epoch - self._epoch_seen   # each failover starts a new epoch
            s.failovers = self._failovers
            if node.role == "primary":
                from ..replication.clock import monotonic_ms
                remaining = max(0, node.lease.valid_until_ms - monotonic_ms())
                s.lease_held = 1 if remaining > 0 else 0
                s.lease_remaining_s = remaining / 1000.0
            else:
                s.lease_held = 0
            if replica:
                fields = node.info_fields()
                s.apply_lag_s = fields["replica_lag_ms"] / 1000.0
                s.apply_lag_entries = fields["replica_lag_entries"]
            role = getattr(node, "region_role", None)
            if role is not None and role.record is not None and role.record.follower:
                s.region_lag = (role.lag_entries(), role.lag_ms() / 1000.0)
            watcher = getattr(node, "topology_watcher", None)
            migrator = watcher.migrator if watcher is not None else None
            if migrator is not None:
                routing = srv.cluster_routing
                s.migration = (migrator.moved_keys, migrator.moved_slots, migrator.batches,
                               len(routing.moving) if routing is not None else 0)
        return s

    # -- the HTTP thread -----------------------------------------------------------------------------------
    def _serve(self, host, port):
        """A threaded HTTP server of the registry's text, behind basic authentication when the node asks for a
        password (the published snapshot's users)."""
        from prometheus_client import CollectorRegistry, make_wsgi_app
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector(self))
        app = make_wsgi_app(registry)
        metrics = self

        def guarded(environ, start_response):
            if not authorized(metrics.snapshot.auth, environ.get("HTTP_AUTHORIZATION", ""),
                              environ.get("REMOTE_ADDR", "")):
                if metrics.snapshot.auth == LOOPBACK_ONLY:
                    start_response("403 Forbidden", [("Content-Type", "text/plain")])
                    return [b"protected mode: the node has no password, so it serves loopback scrapes only\n"]
                start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="durakv"'),
                                                    ("Content-Type", "text/plain")])
                return [b"the node asks for a password: HTTP basic authentication with one of its users\n"]
            return app(environ, start_response)
        http = make_server(host, port, guarded, _ThreadingServer, handler_class=_QuietHandler)
        thread = threading.Thread(target=http.serve_forever, daemon=True, name="durakv-metrics")
        thread.start()
        return http, thread

    def start(self, host, port):
        self.publish()
        self.http, self.thread = self._serve(host, port)
        log.info("metrics on http://%s:%d/metrics", host, port)

    def move(self, host, port):
        """CONFIG SET metrics-port: serves on `port` (raises OSError, the old server kept, if it cannot be
        bound), then stops the server it had."""
        old = self.http
        if old is None:
            self.start(host, port)
            return
        self.http, self.thread = self._serve(host, port)
        log.info("metrics moved to http://%s:%d/metrics", host, port)

        def close():   # shutdown() waits for the serving thread's poll: not on the loop
            old.shutdown()
            old.server_close()
        threading.Thread(target=close, daemon=True, name="durakv-metrics-stop").start()

    def stop(self):
        http, self.http = self.http, None
        if http is not None:
            def close():   # shutdown() waits for the serving thread's poll: not on the loop
                http.shutdown()
                http.server_close()
            threading.Thread(target=close, daemon=True, name="durakv-metrics-stop").start()


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):   # noqa: A002 - the base class's name; scrapes are not logged
        pass


def scrape_users(server):
    """None when the node asks for no password; else {user name: password digests} of the enabled users allowed
    to run INFO (what a scrape may present). Built on the loop, read by the HTTP thread."""
    acl = server.acl
    if not acl.auth_required():
        # protected mode with a password-less default user serves loopback only, on this port as on RESP's
        return LOOPBACK_ONLY if server.config["protected-mode"] and acl.users.default.nopass else None
    from ..commands import registry
    info = registry.find(b"info")
    out = {}
    for user in acl.users.sorted_users():
        if user.enabled and not user.nopass and acl_allows(user, info):
            out[user.name] = tuple(user.passwords)
    return out


def acl_allows(user, cmd):
    from ..commands.acl import check as acl_check
    return user.unrestricted or acl_check.check(user, cmd, [b"INFO"]) is None


LOOPBACK_ONLY = "loopback-only"


def authorized(users, header, remote_addr="127.0.0.1") -> bool:
    """Whether a scrape from `remote_addr` whose Authorization header is `header` may read the metrics: `users`
    None needs nothing, LOOPBACK_ONLY needs a loopback peer, else one of `users` with its password."""
    if users is None:
        return True
    if users == LOOPBACK_ONLY:
        from .connection import _is_loopback
        return _is_loopback((remote_addr, 0))
    if not header.startswith("Basic "):
        return False
    try:
        name, _, password = base64.b64decode(header[6:].strip(), validate=True).partition(b":")
    except (ValueError, TypeError):
        return False
    stored = users.get(name)
    if stored is None:
        return False
    digest = hashlib.sha256(password).hexdigest()
    ok = False
    for candidate in stored:
        ok |= hmac.compare_digest(digest, candidate)
    return ok


class Collector:
    """prometheus_client's custom collector: each scrape reads the snapshot the loop published last."""

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        s = self.metrics.snapshot

        def gauge(name, doc, value):
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)

        def counter(name, doc, value):
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)

        def histogram(name, doc, data):
            bounds, counts, total, _count = data
            buckets, cum = [], 0
            for bound, n in zip(bounds + (float("inf"),), counts):
                cum += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cum))
            return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)

        mode = GaugeMetricFamily("durakv_durability_mode", "The shard's durability mode (1 for the one in force)",
                                 labels=["mode"])
        for m in MODES:
            mode.add_metric([m], 1 if s.mode == m else 0)
        yield mode
        yield from gauge("durakv_journal_failed", "1 while the journal cannot persist (writes are refused)",
                         None if s.effective is None else int(s.effective == "failed"))
        yield from gauge("durakv_durability_lag_seconds", "How far acknowledged writes run ahead of the journal "
                         "(async: age of the oldest uncommitted batch; sync: 0 by definition)", s.lag_s)
        yield from gauge("durakv_held_replies", "Replies held until their journal entry commits", s.held_replies)
        yield from gauge("durakv_held_reply_bytes", "Bytes of replies held until their journal entry commits",
                         s.held_bytes)
        yield from counter("durakv_journal_append_errors", "Journal batches that failed to persist",
                           s.append_errors)
        yield from counter("durakv_journal_append_retries", "Journal appends sent again (a failed journal's "
                           "probes, JetStream sends after a rejection or an unknown outcome)", s.retries)
        yield from gauge("durakv_journal_commit_index", "The highest journal entry known durable",
                         s.journal_commit_index)
        if s.commit_latency is not None:
            yield histogram("durakv_commit_latency_seconds", "A journal entry's time from append to commit",
                            s.commit_latency)
        if s.stall is not None:
            yield histogram("durakv_event_loop_stall_seconds", "How late the event loop's 100 ms heartbeat "
                            "fired (a long command, script or callback holds the loop)", s.stall)
        if s.role is not None:
            role = GaugeMetricFamily("durakv_role", "This node's role in its shard", labels=["role"])
            for r in ("primary", "replica"):
                role.add_metric([r], 1 if s.role == r else 0)
            yield role
        yield from gauge("durakv_epoch", "The shard's epoch as this node knows it (a failover starts the next)",
                         s.epoch)
        yield from counter("durakv_failovers_seen", "Failovers (epochs begun after the first one this node knew) "
                           "this node has seen since it started",
                           s.failovers)
        yield from gauge("durakv_lease_held", "1 while this node holds its shard's lease", s.lease_held)
        yield from gauge("durakv_lease_remaining_seconds", "Time left on this primary's lease by its own clock",
                         s.lease_remaining_s)
        yield from gauge("durakv_replica_apply_lag_seconds", "Since this replica last applied an entry, while "
                         "the stream holds newer ones (0 when caught up)", s.apply_lag_s)
        yield from gauge("durakv_replica_apply_lag_entries", "Journal entries this replica has not applied yet",
                         s.apply_lag_entries)
        if s.region_lag is not None:
            entries, seconds = s.region_lag
            yield from gauge("durakv_region_lag_entries", "Entries of the source region's journal this follower "
                             "region's node has not applied (the mirror's lag as last measured, plus its own)",
                             entries)
            yield from gauge("durakv_region_lag_seconds", "How long this follower region's node has been behind "
                             "the source region (0 when caught up)", seconds)
        if s.migration is not None:
            keys, slots, batches, moving = s.migration
            yield from counter("durakv_slot_migration_keys", "Keys this node moved to other shards", keys)
            yield from counter("durakv_slot_migration_slots", "Slots this node finished moving", slots)
            yield from counter("durakv_slot_migration_batches", "Batches of keys sent while moving slots", batches)
            yield from gauge("durakv_slot_migration_keys_moving", "Keys of slots being moved now", moving)
