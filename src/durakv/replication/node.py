"""A shard member on the JetStream journal: follows the journal as a replica, serves as primary while it
holds the lease, and moves between the two as the failover controller decides.

Replica: applies committed entries in order through the same code as recovery (expiry off: the primary's
DEL effects decide), serves reads, refuses writes (-MOVED to the shard's primary in cluster mode, from the
topology; -READONLY otherwise), periodically writes a snapshot to the object store and purges the stream below
the oldest snapshot still kept.
Primary: appends batches with its epoch, serves while its lease is valid by its own clock.
A primary that loses its lease unexpectedly re-executes itself: its memory may hold writes that never
committed, so it rejoins as a replica from snapshot + journal like any new node.
"""

import asyncio
import hashlib
import json
import logging
import os
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass, replace

from .. import messages
from ..protocol.resp import Deferred, ErrorReply
from ..cluster.controller import Controller
from ..cluster.renewer import LeaseRenewer
from ..cluster.settings import NONE_REFUSED, SettingsError, ShardSettings
from ..cluster.store import NatsStore, StaleRevision
from ..journal.base import EpochFilter, JournalTruncated
from ..journal.codec import PartAssembler
from ..journal.jetstream import JetStreamJournal, connect, is_transient
from ..logs import Recurring
from .migration import SlotMigrator

log = logging.getLogger("durakv.replication")

# A planned hand-over holds commands for at most this long, its drain and the wait for the topology included:
# Valkey's manual failover pauses writes on the old primary for CLUSTER_MF_TIMEOUT * CLUSTER_MF_PAUSE_MULT.
HANDOVER_HOLD_MAX_S = 10.0


def _monotonic_ms() -> int:
    """The lease clock: durations on this node's own clock (cluster/controller.py says why)."""
    return int(time.monotonic() * 1000)


async def retry_transient(what, fn, timeout_s=120.0, sleep=asyncio.sleep):
    """await fn(), again (backing off to 2 s) while NATS only cannot answer yet (is_transient), until
    timeout_s; any other error, or the last transient one, is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    delay_s = 0.1
    failures = 0
    while True:
        try:
            result = await fn()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted by is_transient
            if not is_transient(exc) or loop.time() + delay_s > deadline:
                raise
            failures += 1
            if failures == 1:
                log.warning("%s: %s; retrying while NATS elects", what, type(exc).__name__)
            await sleep(delay_s)
            delay_s = min(delay_s * 2, 2.0)
            continue
        if failures:
            log.info("%s: done after %d retries", what, failures)
        return result


@dataclass(frozen=True)
class PeerStatus:
    node_id: str
    ip: str
    port: int
    az: str
    role: str
    applied: int          # journal index it has applied (its replication offset)
    epoch: int
    seen_ms: int          # monotonic, when its heartbeat arrived


class ClusterNode:
    checks_stale = False    # the pipeline gate checks only commands touching data against serving_error

    def __init__(self, server):
        self.server = server
        cfg = server.config
        self.shard = cfg["shard"]
        self.az = cfg["availability-zone"]
        self.routing = server.cluster_routing      # cluster mode: where topologies are installed (else None)
        if self.routing is not None:
            self.node_id = self.routing.myself_id
        else:
            self.node_id = cfg["node-id"] or "%s-%s-%d" % (self.shard, self.az, cfg["port"])
        self.addr = "%s:%d" % (cfg["announce-ip"], cfg["port"])
        self.servers = [s.strip() for s in cfg["journal-nats-servers"].split(",") if s.strip()]
        self.role = "replica"
        self.epoch = 0
        self.lease_valid_until_ms = 0
        self.applied_index = 0
        self.applied_at_ms = 0
        self.stream_last = 0
        self.filter = EpochFilter(0)
        self.parts = PartAssembler()    # commands carried in continuation parts apply once whole
        self.whole_index = 0            # newest applied index with no command half applied (snapshots go by it)
        self.nc = None
        self.journal = None
        self.store = None
        self.controller = None
        self.subscription = None
        self.snapshot_index = 0
        self.snapshots_stored = 0
        self.snapshot_store = {"kept": [], "bytes": 0, "messages": 0, "objects": 0}
        self.promotions = 0
        self._task = None
        self._snap_task = None
        self._apply_errors = 0
        self._last_probe = 0.0
        self._last_heartbeat = 0.0
        self._stall_log = Recurring(log)
        self._progress_index = -1
        self._progress_at = 0.0
        # A planned hand-over holds commands (the pipeline postpones them, as CLIENT PAUSE does): None, "writes"
        # while it drains, "data" (every command touching data) once the lease is being handed over.
        self.holding = None
        self._hold_deadline = 0.0       # monotonic s: the hold ends by then whatever happens
        self.topology_watch = None
        self.migrator = None
        self._topology_task = None
        self._pubsub_subs = []
        self.known_index = 0            # newest journal index this replica knows exists (probes, heartbeats)
        self._behind_since_ms = 0       # mono: since when it has known of entries it has not applied (0: not)
        self.follow_stall_ms = 0        # fault injection (DEBUG JOURNAL-FOLLOW-STALL): hold entries this long
        self._held_entries = None
        self._gap = None                # (first missing, first received) when the journal skipped entries
        self.phase = "starting"         # starting, loading snapshot, replaying journal, following, primary
        self.peers = {}                 # node id -> PeerStatus of the shard's other nodes (their heartbeats)
        self._replica_waiters = []      # [index, numreplicas, fn]: WAIT on the primary
        self._status_handle = None
        self.heard_ms = {}              # node id -> mono ms of its last liveness beat (every shard's nodes)
        self.started_ms = _monotonic_ms()
        self._old_primary_failed = False  # promoted over an expired lease: the topology marks the old one "fail"
        self._health_task = None
        self.settings = None            # the shard's settings as last read from the store (cluster/settings.py)
        self.settings_revision = 0
        self.settings_watch = None
        self.renewer = None             # the lease renewal thread (cluster/renewer.py), from start()
        self.lease_lapses = 0           # times this primary began refusing commands because its lease lapsed
        self.lease_refusals = 0         # commands refused for that reason
        self._lease_lapsed = False
        self._lapse_log = Recurring(log)

    # -- start-up -------------------------------------------------------------------------------
    async def start(self):
        srv = self.server
        ca = srv.config["journal-nats-tls-ca-file"]
        self.nc = await connect(self.servers, name="durakv-%s" % self.node_id,
                                tls=ssl.create_default_context(cafile=ca) if ca else None)
        # Start-up often meets NATS electing (a cluster starting, an AZ back, a node re-executed after it was
        # replaced): every request is retried while NATS cannot answer yet, instead of exiting.
        self.store = await retry_transient("opening the coordination store", NatsStore(self.nc).open)
        await self._load_settings()
        self._pubsub_subs.append(await self.nc.subscribe(self._status_subject(), cb=self._on_status))
        # The journal has a connection of its own: its entries (up to a MB each, several in flight, and the
        # replica's deliveries) would otherwise queue the lease renewals, heartbeats and watches behind them on
        # one socket (measured: under a pipelined bulk load the lease lapsed while the journal kept committing).
        journal_nc = await connect(self.servers, name="durakv-%s-journal" % self.node_id,
                                   tls=ssl.create_default_context(cafile=ca) if ca else None)
        # Short requests: during a stream leader election a retry every 2 s beats one 5 s wait.
        self.journal = JetStreamJournal(journal_nc, self.shard, request_timeout_s=2.0,
                                        max_appends_in_flight=srv.config["journal-max-appends-in-flight"])
        await self.journal.ensure_stream()
        if self.routing is not None:
            self.topology_watch = await retry_transient(
                "watching the topology", lambda: self.store.watch_topology(self._on_topology))
            await self._subscribe_pubsub()
            self._pubsub_subs.append(await self.nc.subscribe(self._ALIVE, cb=self._on_alive))
        t0 = time.monotonic()
        self.phase = "loading snapshot"
        await retry_transient("fetching the newest snapshot", self._load_snapshot)
        t1 = time.monotonic()
        self.phase = "replaying journal"
        srv.keyspace.expire_enabled = False
        srv.keyspace.hide_expired = True
        from_index = self.applied_index
        keys_before = sum(len(db) for db in srv.keyspace.dbs)
        for attempt in range(5):
            try:
                await retry_transient("following the journal", lambda: self._follow_from(self.applied_index))
                await self.catch_up(timeout_s=120)
                break
            except JournalTruncated as exc:
                # A replica stored a newer snapshot and purged what this node still needed: start from it.
                if attempt == 4:
                    raise
                log.warning("catching up from index %d: %s; loading the newest snapshot again", self.applied_index,
                            exc)
                await self._unfollow()
                self._clear_dataset()
                self.phase = "loading snapshot"
                await self._load_snapshot()
                self.phase = "replaying journal"
                from_index = self.applied_index
                keys_before = sum(len(db) for db in srv.keyspace.dbs)
        t2 = time.monotonic()
        ttl_ms = srv.config["lease-ttl-ms"]
        self.renewer = LeaseRenewer(self._open_renewer_store, self.shard, ttl_ms, self._publish_lease,
                                    loop_alive_ms=lambda: srv.loop_stats.beat_ms,
                                    stall_limit_ms=self._renew_stall_limit_ms, clock_ms=srv.clock_ms,
                                    mono_ms=_monotonic_ms, name="durakv-lease-%s" % self.shard).start()
        self.controller = Controller(self.store, self, self.shard, ttl_ms, srv.clock_ms, _monotonic_ms,
                                     renewer=self.renewer)
        self._task = srv.loop.create_task(self._control_loop())
        self._snap_task = srv.loop.create_task(self._snapshot_loop())
        self.phase = "following"
        keys = sum(len(db) for db in srv.keyspace.dbs)
        log.info("node %s (az %s) following shard %s at index %d: snapshot %.2fs (%d keys), journal %d..%d in %.2fs "
                 "(%d entries, +%d keys, %.0f entries/s)", self.node_id, self.az, self.shard, self.applied_index,
                 t1 - t0, keys_before, from_index + 1, self.applied_index, t2 - t1, self.applied_index - from_index,
                 keys - keys_before, (self.applied_index - from_index) / max(t2 - t1, 1e-6))

    async def _open_renewer_store(self):
        """The lease renewer's own NATS connection and lease bucket (run on its thread's loop): a connection
        served by the event loop would wait for the loop, which is what the thread is there to avoid."""
        ca = self.server.config["journal-nats-tls-ca-file"]
        nc = await connect(self.servers, name="durakv-%s-lease" % self.node_id,
                           tls=ssl.create_default_context(cafile=ca) if ca else None)
        try:
            return await NatsStore(nc).open_leases()
        except BaseException:
            await nc.close()
            raise

    def _publish_lease(self, valid_until_ms):
        """Called on the renewer's thread when a renewal landed: the gate (serving_error) serves until then."""
        self.lease_valid_until_ms = valid_until_ms

    def _renew_stall_limit_ms(self):
        """How long the event loop may show no sign of life while the renewer still renews: the configured bound,
        but never less than a script may hold the loop by design (busy-reply-threshold) plus one lease."""
        cfg = self.server.config
        return max(cfg["lease-renew-max-loop-stall-ms"], cfg["busy-reply-threshold"] + cfg["lease-ttl-ms"])

    async def _load_snapshot(self):
        """The shard's newest snapshot from the object store, streamed into a file (not into memory) and loaded."""
        from ..snapshot.format import load_snapshot
        fd, path = tempfile.mkstemp(prefix="snap-", suffix=".dks", dir=self.server.dir)
        try:
            started = time.monotonic()
            with os.fdopen(fd, "wb") as f:
                snap = await self.store.latest_snapshot(self.shard, into=f)
            if snap is None:
                return
            index, epoch, _ = snap
            fetched = time.monotonic()
            ks = self.server.keyspace
            saved = ks.expire_enabled
            ks.expire_enabled = False
            try:
                load_snapshot(path, ks, self.server.apply_effect)
            finally:
                ks.expire_enabled = saved
            size = os.path.getsize(path)
        finally:
            os.unlink(path)
        self.applied_index = self.snapshot_index = self.whole_index = index
        self.filter = EpochFilter(epoch)
        self.parts = PartAssembler()
        self.epoch = max(self.epoch, epoch)
        keys = sum(len(db) for db in self.server.keyspace.dbs)
        loaded = time.monotonic()
        log.info("loaded snapshot of shard %s at index %d (epoch %d): %d bytes fetched in %.2fs, %d keys loaded in "
                 "%.2fs (%.0f keys/s)", self.shard, index, epoch, size, fetched - started, keys, loaded - fetched,
                 keys / max(loaded - fetched, 1e-6))

    # -- the shard's settings (durability mode, async buffer) -------------------------------------------
    async def _load_settings(self):
        """Reads the shard's settings, storing this node's own flags as them if the shard has none yet (its
        first node), then applies them and watches for changes."""
        cfg = self.server.config
        if cfg["durability"] == "none":
            raise ValueError("durability none on the jetstream journal: " + NONE_REFUSED)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60.0
        while True:
            # Right after a cluster starts, or during an election, the bucket may not answer yet: retry.
            try:
                settings, revision = await self.store.get_shard_settings(self.shard)
                if settings is None:
                    mine = ShardSettings(durability=cfg["durability"],
                                         durability_buffer_ms=cfg["durability-buffer-ms"],
                                         acl=self.server.acl.settings(), lease_ttl_ms=cfg["lease-ttl-ms"])
                    try:
                        revision = await self.store.put_shard_settings(self.shard, mine, revision)
                        settings = mine
                        log.info("shard %s settings stored from this node's flags: durability %s", self.shard,
                                 mine.durability)
                    except StaleRevision:
                        continue
                break
            except (StaleRevision, SettingsError):
                raise
            except Exception as exc:  # noqa: BLE001 - no responders, timeouts while JetStream elects
                if loop.time() > deadline:
                    raise
                log.debug("reading the shard's settings: %r; retrying", exc)
                await asyncio.sleep(0.2)
        if settings.acl is None:   # stored before users were shard settings: this node's users become them
            settings = await self.update_settings(lambda current: replace(current, acl=self.server.acl.settings()))
            revision = self.settings_revision
        if settings.lease_ttl_ms is None:   # stored before the TTL was a shard setting: this node's flag becomes it
            settings = await self.update_settings(
                lambda current: current if current.lease_ttl_ms is not None
                else replace(current, lease_ttl_ms=cfg["lease-ttl-ms"]))
            revision = self.settings_revision
        self._apply_settings(settings, revision)
        self.server.acl.share = self.share_acl
        self.settings_watch = await retry_transient(
            "watching the shard's settings", lambda: self.store.watch_shard_settings(self.shard, self._apply_settings))

    def _apply_settings(self, settings, revision):
        """Makes this node run by the shard's settings (a primary switches its journal's mode at once)."""
        if revision < self.settings_revision:
            return
        self.settings, self.settings_revision = settings, revision
        cfg = self.server.config
        for name, value in settings.config_values().items():
            if cfg[name] != value:
                log.info("shard %s setting %s: %s -> %s (revision %d)", self.shard, name, cfg[name], value,
                         revision)
                cfg.set(name, str(value))
        if settings.lease_ttl_ms is not None:
            # The controller's timing and the renewer's leases follow the shard's TTL from their next lease on.
            if self.controller is not None:
                self.controller.set_ttl(settings.lease_ttl_ms)
            if self.renewer is not None:
                self.renewer.set_ttl(settings.lease_ttl_ms)
        acl = self.server.acl
        if settings.acl is not None and settings.acl != acl.settings():
            try:
                acl.apply_settings(settings.acl)
                log.info("shard %s ACL users applied (revision %d): %d users", self.shard, revision,
                         len(settings.acl["users"]))
            except ValueError as exc:
                log.error("the shard's ACL users (revision %d) do not apply here, kept the previous ones: %s",
                          revision, exc)

    async def change_settings(self, name, value):
        """CONFIG SET of a shard setting on any node of the shard: compare-and-set in the store (retried on
        a concurrent change), then applied here at once, so on the primary the new mode holds for every write
        after the reply; the other nodes apply it from their watch."""
        return await self.update_settings(lambda current: current.with_config(name, value))

    async def update_settings(self, change, attempts=50):
        """Stores change(current settings) by compare-and-set, retried on a concurrent change; applies it here."""
        delay_s = 0.01
        for _ in range(attempts):
            settings, revision = await self.store.get_shard_settings(self.shard)
            wanted = change(settings or ShardSettings())
            try:
                if wanted != settings:
                    revision = await self.store.put_shard_settings(self.shard, wanted, revision)
            except StaleRevision:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.2)
                continue
            self._apply_settings(wanted, revision)
            return wanted
        raise RuntimeError("the shard's settings kept changing; try again")

    def share_acl(self, users):
        """ServerAcl.share: the shard's users stored in its settings; a Deferred resolved with None or an
        ErrorReply."""
        d = Deferred()

        async def store():
            try:
                await self.update_settings(lambda current: replace(current, acl=users))
            except Exception as exc:  # noqa: BLE001 - the client is told; its change holds on this node only
                log.warning("the shard's ACL users could not be stored: %r", exc)
                d.resolve(ErrorReply("ERR the shard's ACL users could not be stored: %s" % (exc or type(exc).__name__)))
                return
            d.resolve(None)
        self.server.loop.create_task(store())
        return d

    async def _refresh_settings(self):
        """Before serving as primary: the newest settings, in case the watch has not delivered them yet."""
        try:
            settings, revision = await asyncio.wait_for(self.store.get_shard_settings(self.shard), 2.0)
        except Exception as exc:  # noqa: BLE001 - the store may be electing: the watched settings stand
            log.warning("could not re-read the shard's settings before promotion (%r); using revision %d",
                        exc, self.settings_revision)
            return
        if settings is not None:
            self._apply_settings(settings, revision)

    # -- the shard's members: heartbeats with applied offsets (INFO replication, ROLE, WAIT) -----------------
    _STATUS = "durakv.status"
    PEER_FRESH_MS = 3000     # a node not heard from for this long is not listed as connected

    def _status_subject(self):
        return "%s.%s" % (self._STATUS, self.shard)

    _ALIVE = "durakv.alive"  # every node's beat, heard by every node: the failure detector of CLUSTER SLOTS/NODES

    def _send_alive(self):
        if self.nc is not None and not self.nc.is_closed and self.routing is not None:
            self.server.loop.create_task(self._publish_bus(self._ALIVE, self.node_id.encode()))

    async def _on_alive(self, msg):
        self.heard_ms[msg.data.decode("utf-8", "replace")] = _monotonic_ms()

    def silent_nodes(self, node_ids, timeout_ms) -> set:
        """The nodes (of node_ids, never this one) not heard from for longer than timeout_ms (Valkey's
        cluster-node-timeout): down, or cut off from the coordination store's majority. A node never heard from
        counts from this node's start, so that a node just started does not call every other node failed."""
        now = _monotonic_ms()
        return {n for n in node_ids
                if n != self.node_id and now - self.heard_ms.get(n, self.started_ms) > timeout_ms}

    def send_status_soon(self):
        """A replica tells the shard its applied index, at most every 5 ms while entries arrive (WAIT on the
        primary is answered from these), and every control tick anyway."""
        if self._status_handle is None and self.nc is not None:
            self._status_handle = self.server.loop.call_later(0.005, self._send_status)

    def _send_status(self):
        self._status_handle = None
        if self.nc is None or self.nc.is_closed:
            return
        cfg = self.server.config
        body = json.dumps({"id": self.node_id, "ip": cfg["announce-ip"], "port": cfg["port"] or cfg["tls-port"],
                           "az": self.az, "role": self.role, "applied": self.applied_index,
                           "epoch": self.epoch}).encode()
        self.server.loop.create_task(self._publish_bus(self._status_subject(), body))

    async def _on_status(self, msg):
        try:
            doc = json.loads(msg.data)
            peer_id = str(doc["id"])
            status = PeerStatus(peer_id, str(doc["ip"]), int(doc["port"]), str(doc.get("az", "")),
                                str(doc["role"]), int(doc["applied"]), int(doc.get("epoch", 0)), _monotonic_ms())
        except (ValueError, KeyError, TypeError):
            return
        if peer_id == self.node_id:
            return
        self.peers[peer_id] = status
        if status.role == "primary" and self.role != "primary" and status.epoch >= self.epoch:
            self.note_known(status.applied)
        if self._replica_waiters:
            self._check_replica_waiters()

    def note_known(self, index):
        """The journal holds `index` (a probe of the stream, the primary's heartbeat): track being behind it."""
        if index > self.known_index:
            self.known_index = index
        if self.known_index > self.applied_index:
            if not self._behind_since_ms:
                self._behind_since_ms = _monotonic_ms()
        else:
            self._behind_since_ms = 0

    def behind_ms(self) -> int:
        return _monotonic_ms() - self._behind_since_ms if self._behind_since_ms else 0

    def link_up(self) -> bool:
        """Whether this replica follows the journal now (a subscription that is delivering or has nothing to)."""
        return (self.subscription is not None and self.nc is not None and self.nc.is_connected
                and not self._stall_log.active("stalled"))

    def replica_statuses(self):
        """The shard's replicas heard from recently, as (PeerStatus, ...) sorted by node id."""
        now = _monotonic_ms()
        return tuple(sorted((p for p in self.peers.values()
                             if p.role == "replica" and now - p.seen_ms <= self.PEER_FRESH_MS),
                            key=lambda p: p.node_id))

    def replicas_heard_within(self, max_lag_ms) -> int:
        now = _monotonic_ms()
        return sum(1 for p in self.peers.values() if p.role == "replica" and now - p.seen_ms <= max_lag_ms)

    def replicas_at(self, index) -> int:
        return sum(1 for p in self.replica_statuses() if p.applied >= index)

    def when_replicas(self, index, numreplicas, fn):
        """fn() once numreplicas replicas reported applying `index` (WAIT); at once if they have."""
        if self.replicas_at(index) >= numreplicas:
            fn()
            return lambda: None
        waiter = [index, numreplicas, fn]
        self._replica_waiters.append(waiter)

        def cancel():
            if waiter in self._replica_waiters:
                self._replica_waiters.remove(waiter)
        return cancel

    def _check_replica_waiters(self):
        ready = [w for w in self._replica_waiters if self.replicas_at(w[0]) >= w[1]]
        for w in ready:
            self._replica_waiters.remove(w)
            w[2]()

    @property
    def replication_id(self) -> str:
        """One id per shard and epoch (Valkey's replid changes when a new primary takes over): every node
        following the same primary reports the same one."""
        return hashlib.sha1(("%s:%d" % (self.journal.stream if self.journal else self.shard, self.epoch))
                            .encode()).hexdigest()

    # -- cluster mode: the topology and the pub/sub bus ---------------------------------------------
    def _on_topology(self, topology, revision):
        """A topology from the coordination store: installed whole (one routing snapshot), unless this node's
        own promotion has not reached it yet (then the promotion rewrites it)."""
        me = topology.nodes.get(self.node_id)
        if self.role == "primary" and me is not None and me.role != "primary":
            # The store has not caught up with this node's promotion: serve by what the lease says.
            self.routing.install(topology.promote(self.node_id, self._old_primary_failed), revision)
            if self._topology_task is None:
                self._topology_task = self.server.loop.create_task(self._publish_promotion())
            return
        self.routing.install(topology, revision)
        self._migrate_if_needed()

    def _migrate_if_needed(self):
        """A primary whose shard has slots migrating out moves their keys (replication/migration.py)."""
        topology = self.routing.topology
        if self.role != "primary" or topology is None or not topology.migrating:
            return
        me = topology.nodes.get(self.node_id)
        if me is not None and any(src == me.shard_id for src, _dst in topology.migrating.values()):
            if self.migrator is None:
                self.migrator = SlotMigrator(self)
            self.migrator.start()

    async def _publish_promotion(self):
        """Makes the stored topology name this node its shard's primary (compare-and-set, retried): what lets
        cluster clients (CLUSTER SLOTS, MOVED) follow a failover."""
        delay_s = 0.05
        try:
            while self.role == "primary":
                try:
                    topology, revision = await self.store.get_topology()
                    if topology is None or self.node_id not in topology.nodes:
                        log.warning("the topology does not list node %s; clients will not be sent here",
                                    self.node_id)
                        return
                    if topology.nodes[self.node_id].role == "primary":
                        return
                    await self.store.put_topology(topology.promote(self.node_id, self._old_primary_failed), revision)
                    log.info("topology: node %s is now the primary of shard %s", self.node_id, self.shard)
                    return
                except Exception as exc:  # noqa: BLE001 - a CAS race or an election: read again and retry
                    log.debug("publishing the promotion in the topology: %r", exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)
        finally:
            self._topology_task = None

    def _clear_own_failure(self):
        """A node the topology marks failed (its lease expired and another node took over) clears the mark once
        it serves again, following the journal (Valkey clears FAIL when a replica is reachable again)."""
        topology = self.routing.topology if self.routing is not None else None
        me = topology.nodes.get(self.node_id) if topology is not None else None
        if (me is None or me.health == "online" or self._health_task is not None
                or (self.role != "primary" and (self.phase != "following" or not self.link_up()))):
            return
        self._health_task = self.server.loop.create_task(self._publish_health())

    async def _publish_health(self):
        try:
            for _ in range(20):
                try:
                    topology, revision = await self.store.get_topology()
                    me = topology.nodes.get(self.node_id) if topology is not None else None
                    if me is None or me.health == "online":
                        return
                    await self.store.put_topology(topology.with_node(self.node_id, health="online"), revision)
                    log.info("topology: node %s is reachable again (no longer marked failed)", self.node_id)
                    return
                except Exception as exc:  # noqa: BLE001 - a CAS race or an election: read again and retry
                    log.debug("clearing this node's failure mark in the topology: %r", exc)
                await asyncio.sleep(0.2)
        finally:
            self._health_task = None

    _PUBSUB = "durakv.pubsub"        # PUBLISH reaches every node; SPUBLISH the nodes of the channel's shard

    async def _subscribe_pubsub(self):
        self._pubsub_subs.append(await self.nc.subscribe(self._PUBSUB, cb=self._on_bus_message))
        self._pubsub_subs.append(await self.nc.subscribe("%s.%s" % (self._PUBSUB, self.shard),
                                                         cb=self._on_bus_message))

    def publish_remote(self, channel: bytes, message: bytes, shard: bool):
        """Hands a PUBLISH/SPUBLISH to the other nodes (NATS core: at most once, as Valkey's cluster bus)."""
        if self.nc is None or self.nc.is_closed:
            return
        subject = "%s.%s" % (self._PUBSUB, self.shard) if shard else self._PUBSUB
        header = b"%s %d %d\n" % (self.node_id.encode(), 1 if shard else 0, len(channel))
        self.server.loop.create_task(self._publish_bus(subject, header + channel + message))

    async def _publish_bus(self, subject, payload):
        try:
            await self.nc.publish(subject, payload)
        except Exception as exc:  # noqa: BLE001 - pub/sub is at most once: a lost message is not an error
            log.debug("pub/sub message to %s not sent: %r", subject, exc)

    async def _on_bus_message(self, msg):
        data = msg.data
        nl = data.find(b"\n")
        try:
            origin, shard, length = data[:nl].split(b" ")
            length = int(length)
        except ValueError:
            return
        if origin.decode() == self.node_id:
            return
        body = data[nl + 1:]
        self.server.pubsub.publish(body[:length], body[length:], shard=shard == b"1")

    # -- following ------------------------------------------------------------------------------
    async def _follow_from(self, after):
        """Follows the journal from entry after+1. Raises JournalTruncated when that entry has been purged (a
        snapshot newer than this node's state let the stream drop it): an ordered consumer would silently
        start at the first entry still there, a gap."""
        info = await self.journal.refresh()
        if info.state.first_seq > after + 1:
            raise JournalTruncated("entry %d was purged (the stream starts at %d)" % (after + 1, info.state.first_seq))
        self.subscription = await self.journal.follow(after, self._on_entry)

    def _clear_dataset(self):
        """Forgets everything loaded (start-up only: nobody is served data yet), to load a newer snapshot."""
        ks = self.server.keyspace
        for db in ks.dbs:
            db.clear()
        ks.used_bytes = ks.baseline_bytes
        self.applied_index = self.snapshot_index = self.whole_index = 0
        self.filter = EpochFilter(0)
        self.parts = PartAssembler()

    def _on_entry(self, entry):
        if entry.index <= self.applied_index:
            return  # an ordered consumer restart may resend what we have
        if self.role == "primary":
            return
        if self._held_entries is not None:
            self._held_entries.append(entry)
            self.note_known(entry.index)
            return
        if entry.index != self.applied_index + 1:
            # Entries in between were purged (a consumer that re-created itself starts at the first one left):
            # applying this one would leave a silent gap. Stop here; the stall check reloads from a snapshot.
            if self._gap is None:
                self._gap = (self.applied_index + 1, entry.index)
                log.warning("journal entries %d..%d are gone (purged); not applying past them", self.applied_index + 1,
                            entry.index - 1)
            self.note_known(entry.index)
            return
        ks = self.server.keyspace
        if not entry.payload:
            self.parts.reset()       # an epoch marker: a deposed writer's unfinished parts never complete
        if self.filter.accept(entry):
            ks.hide_expired = False  # effects see every stored key, expired or not, as on the primary
            try:
                for db_id, argv in self.parts.feed(entry.payload, entry.index):
                    self.server.apply_effect(db_id, argv)
            except Exception as exc:  # noqa: BLE001 - a replica that cannot apply must not serve
                self._apply_errors += 1
                log.critical("replica cannot apply entry %d: %s; restarting to resync", entry.index, exc)
                self.reexec()
                return
            finally:
                ks.hide_expired = True
        else:
            self.epoch = max(self.epoch, self.filter.epoch)
        self.applied_index = entry.index
        if not self.parts.pending:
            self.whole_index = entry.index
        if entry.index > self.stream_last:
            self.stream_last = entry.index
        self.applied_at_ms = self.server.clock_ms()
        if self._behind_since_ms and self.applied_index >= self.known_index:
            self._behind_since_ms = 0
        if self._status_handle is None:
            self.send_status_soon()

    def stall_following(self, stall_ms):
        """Fault injection: hold every journal entry that arrives for stall_ms, then apply them in order (a
        replica behind its journal, as after a NATS disruption, without disturbing anything else)."""
        if self.role == "primary":
            return False
        if self._held_entries is None:
            self._held_entries = []
        self.server.loop.call_later(stall_ms / 1000.0, self._release_held_entries)
        return True

    def _release_held_entries(self):
        held, self._held_entries = self._held_entries or [], None
        for entry in held:
            self._on_entry(entry)

    async def catch_up(self, timeout_s=30.0):
        """Waits until everything committed in the stream (as of now) is applied."""
        last = await self.journal.last_index()
        self.stream_last = last
        self.note_known(last)
        deadline = time.monotonic() + timeout_s
        while self.applied_index < last:
            if time.monotonic() > deadline:
                raise TimeoutError("catch-up stalled at %d of %d" % (self.applied_index, last))
            await self.resubscribe_if_stalled()
            await asyncio.sleep(0.002)
        return last

    async def resubscribe_if_stalled(self, stall_s=3.0):
        """An ordered consumer whose NATS server died may stop delivering without an error (seen when a
        whole AZ goes down): if entries are pending and nothing was applied for stall_s, follow again
        from the applied index."""
        if self._gap is not None:
            gap, self._gap = self._gap, None
            await self._unfollow()
            if self.phase != "following":
                raise JournalTruncated("entries %d..%d were purged" % (gap[0], gap[1] - 1))
            log.warning("entries after index %d were purged while this replica was behind; restarting to load the "
                        "newest snapshot", self.applied_index)
            self.reexec()
        now = time.monotonic()
        if self.applied_index != self._progress_index:
            self._progress_index, self._progress_at = self.applied_index, now
            if self._stall_log.active("stalled"):
                self._stall_log.clear("stalled", "following again at index %d", self.applied_index)
            return
        if self.stream_last <= self.applied_index or now - self._progress_at < stall_s:
            return
        self._stall_log("stalled", "following stalled at index %d of %d; subscribing again", self.applied_index,
                        self.stream_last)
        await self._unfollow()
        self._progress_at = now
        try:
            await self._follow_from(self.applied_index)
        except JournalTruncated:
            if self.phase != "following":
                raise           # start-up loads the newest snapshot instead
            log.warning("entries after index %d were purged while this replica was behind; restarting to load the "
                        "newest snapshot", self.applied_index)
            self.reexec()
        except Exception as exc:  # noqa: BLE001 - retried on the next stall check
            log.warning("subscribing again failed: %r", exc)

    async def _unfollow(self):
        old, self.subscription = self.subscription, None
        if old is not None:
            try:
                await old.unsubscribe()
            except Exception:  # noqa: BLE001 - its connection may be the broken part
                pass

    # -- controller loop ------------------------------------------------------------------------
    async def _control_loop(self):
        previous = None
        while True:
            reason = await self.controller.tick()
            if reason != previous and not reason.startswith("renewed lease") and not reason.startswith(
                    "replica of"):
                log.info("controller: %s", reason)
            previous = reason
            now = time.monotonic()
            if now - self._last_heartbeat >= 0.5:
                self._last_heartbeat = now
                self._send_status()
                self._send_alive()
                self._clear_own_failure()
            if self.role == "replica":
                now = time.monotonic()
                if now - self._last_probe > 1.0:
                    self._last_probe = now
                    try:
                        self.stream_last = await self.journal.last_index()
                        self.note_known(self.stream_last)
                    except Exception:  # noqa: BLE001 - reported as lag below
                        pass
                await self.resubscribe_if_stalled()
            await asyncio.sleep(self.controller.interval_s)

    # -- the pipeline's gate: checked in admission for every command path ---------------------------
    def is_replica(self) -> bool:
        return self.role != "primary"

    def serving_error(self, write):
        """Error text if this node must not serve a command touching data now: a primary whose lease is
        past due by its own clock, or writes during a planned hand-over; a replica too far behind the journal
        (replica-max-lag-ms), or cut off from it with replica-serve-stale-data no."""
        if self.role != "primary":
            since = self._behind_since_ms
            if since:
                behind_ms = _monotonic_ms() - since
                bound = self.server.config["replica-max-lag-ms"]
                if bound and behind_ms > bound:
                    return messages.REPLICA_BEHIND.format(behind_ms)
            if not self.server.config["replica-serve-stale-data"] and not self.link_up():
                return messages.MASTERDOWN_STALE
            return None
        now_ms = _monotonic_ms()
        if now_ms > self.lease_valid_until_ms:
            self._refuse_for_lease(now_ms)
            return messages.LEASE_EXPIRED
        if self._lease_lapsed:
            self._lease_lapsed = False
            self._lapse_log.clear("lapsed", "primary of shard %s (epoch %d): lease renewed, serving again",
                                  self.shard, self.epoch)
        return None

    def _refuse_for_lease(self, now_ms):
        """A primary refuses a command because its lease lapsed: counted, and logged when it starts (with why, as
        far as this node knows), then as a count every 10 s, and once more when it serves again."""
        self.lease_refusals += 1
        if not self._lease_lapsed:
            self._lease_lapsed = True
            self.lease_lapses += 1
        r = self.renewer
        if r is None or not r.granted:
            cause = "its renewals are not running"
        elif r.stalled_ms:
            cause = "renewals paused: the event loop showed no sign of life for %d ms" % r.stalled_ms
        elif r.failures:
            cause = "%d renewals in a row failed, the last with %s" % (r.failures, r.last_error)
        else:
            cause = "its last renewal landed too late"
        self._lapse_log("lapsed", "primary of shard %s (epoch %d): lease lapsed %d ms ago by this node's clock (%s); "
                        "refusing commands that touch data until it is renewed", self.shard, self.epoch,
                        now_ms - self.lease_valid_until_ms, cause)

    # -- role changes (called by the controller) ------------------------------------------------
    async def promote(self, epoch, old_primary_failed=False):
        """old_primary_failed: taken over from an expired lease (not handed over): the topology marks the old
        primary failed."""
        srv = self.server
        self._old_primary_failed = old_primary_failed
        started = time.monotonic()
        await self.catch_up(timeout_s=60)
        if self.subscription is not None:
            try:
                await self.subscription.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
            self.subscription = None
        # Entries may have landed between catch_up and the unsubscribe: read them too.
        async for entry in self.journal.read(self.applied_index):
            self._on_entry(entry)
        self.journal.set_last(self.applied_index)
        self.journal.epoch = epoch
        await self.journal.open_writer()
        self.journal.on_fenced = lambda exc: srv.loop.create_task(self.step_down(str(exc)))
        marker_index = await self.journal.append_marker(epoch)
        if marker_index > self.applied_index + 1:
            # The deposed primary's appends landed after our read and before our marker (the marker was sent
            # again after them): every replica applies them, and they may have been acknowledged, so must we.
            async for entry in self.journal.read(self.applied_index):
                if entry.index >= marker_index:
                    break
                self._on_entry(entry)
        self.epoch = epoch
        self.filter = EpochFilter(epoch)
        self.parts.reset()       # our marker ends any unfinished parts of the deposed primary
        self.applied_index = self.whole_index = marker_index
        srv.keyspace.expire_enabled = True
        srv.keyspace.hide_expired = False
        await self._refresh_settings()
        srv.durability.attach(self.journal, srv.config["durability"], srv.config["durability-buffer-ms"])
        tracker = srv.durability.tracker
        tracker.stall_ms = srv.config["journal-append-stall-ms"]
        tracker.on_stall = self._journal_stalled
        if self._journal_failed not in srv.durability.failure_listeners:
            srv.durability.failure_listeners.append(self._journal_failed)
        self.role = "primary"
        self.phase = "primary"
        self._behind_since_ms = 0
        self.promotions += 1
        log.info("promoted to primary of shard %s at epoch %d (marker %d) in %.3fs", self.shard, epoch,
                 marker_index, time.monotonic() - started)
        if self.routing is not None:
            topology = self.routing.topology
            if topology is not None and self.node_id in topology.nodes:
                self.routing.install(topology.promote(self.node_id, self._old_primary_failed), self.routing.revision)
            if self._topology_task is None:
                self._topology_task = srv.loop.create_task(self._publish_promotion())
            self._migrate_if_needed()   # a migration the previous primary did not finish

    def _journal_failed(self, first, exc):
        """The journal failed from entry `first` on (a definite refusal, the writer fenced or stopped): the
        held replies were answered with an error, and memory holds those writes' effects, which no journal
        has. Serving from it would show values never committed (the tracker has dropped their dirty marks), so
        the primary steps down at once: it stops renewing its lease (a replica takes over, or this node again
        after it re-executed) and re-executes, rebuilding its state from snapshot + journal."""
        if self.role != "primary":
            return
        log.error("the journal failed from entry %d (%s); stepping down and restarting as a replica", first, exc)
        self.lease_valid_until_ms = 0
        self.reexec()

    def _journal_stalled(self, age_ms):
        """Nothing committed for journal-append-stall-ms (a NATS outage longer than any election, a writer
        stuck): a primary keeping its lease would block the shard for ever, so it steps down. The held replies
        get no answer (their appends may still land: the outcome is unknown, the connection closes)."""
        if self.role != "primary":
            return
        log.error("journal appends unacknowledged for %d ms (journal-append-stall-ms %d); stepping down", age_ms,
                  self.server.config["journal-append-stall-ms"])
        self.lease_valid_until_ms = 0
        self.reexec()

    async def step_down(self, reason):
        if self.role != "primary":
            return
        if self.renewer is not None:
            self.renewer.revoke()
        log.warning("stepping down: %s; restarting as a replica", reason)
        self.reexec()

    # -- planned failover: the hold ----------------------------------------------------------------
    def holds(self, may_replicate, touches_data) -> bool:
        """Whether the hand-over's hold postpones a command (the pipeline asks only while `holding`)."""
        return may_replicate or (touches_data and self.holding == "data")

    async def hand_over(self, keep_lease=None) -> bool:
        """Planned failover, first half: hold writes (Valkey's manual failover pauses them on the old primary:
        the client waits, unanswered), then wait until everything issued is committed. True if it all is:
        only then may this node become a replica in place; otherwise its memory may hold writes whose appends
        are still in flight (a replica following from the commit index would apply them twice) or never land
        (phantom writes), and it must re-execute instead. keep_lease(): renews the lease (the controller's),
        called between slices of the wait so that a long drain does not let a replica take the lease."""
        srv = self.server
        self.holding = "writes"
        started = time.monotonic()
        self._hold_deadline = started + HANDOVER_HOLD_MAX_S
        # No expiry while holding (Valkey's PAUSE_ACTION_EXPIRE): an expired key's DEL is a write, and one
        # issued after the drain would be in memory and never in the journal.
        srv.keyspace.expire_enabled, srv.keyspace.hide_expired = False, True
        slice_s = self.controller.interval_s if self.controller is not None else 0.2

        async def wait(done):
            """await done(timeout_s) -> bool in slices until True or the hold's deadline, renewing between."""
            while True:
                left_s = self._hold_deadline - time.monotonic()
                if await done(max(0.0, min(left_s, slice_s))):
                    return True
                if time.monotonic() >= self._hold_deadline:
                    return False
                if keep_lease is not None:
                    await keep_lease()

        async def script_ended(timeout_s):
            deadline = time.monotonic() + timeout_s
            while srv.pipeline.busy is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            return srv.pipeline.busy is None

        dur = srv.durability
        # A script past busy-reply-threshold runs on while the loop serves, and its effects are submitted only when
        # it ends: drained before it ends, they would be in this node's memory only (and acknowledged).
        script_done = await wait(script_ended)
        committed = script_done and await wait(lambda timeout_s: dur.drain(timeout_s=timeout_s))
        appended = committed and await wait(lambda timeout_s: self.journal.drain(timeout_s=timeout_s))
        # A failed append leaves its writes in memory and nowhere else, even once the tracker has given those
        # indices up (it then counts as drained) or persists again: this term's memory is not the journal's.
        tracker = dur.tracker
        failed = tracker is not None and (tracker.failed is not None or tracker.failed_batches > 0)
        if failed or not appended:
            log.warning("hand-over: not drained after %.3fs (%s): this node will not become a replica in place",
                        time.monotonic() - started,
                        "an append failed this term: %s" % (tracker.failed,) if failed else
                        "a script is still running" if not script_done else
                        "%d of %d committed" % (dur.committed, dur.assigned) if not committed else
                        "journal appends still queued")
            return False
        return True

    def hold_data(self):
        """The lease is about to be handed over: the new primary may serve any moment from now, so reads wait
        too (answered afterwards by the replica this node becomes, or its -MOVED)."""
        if self.holding is not None:
            self.holding = "data"

    def end_hold(self):
        """Ends the hand-over's hold: every postponed command runs again from scratch (served, if this node kept
        its lease; -MOVED to the new primary from the replica it became)."""
        if self.holding is None:
            return
        self.holding = None
        if self.role == "primary":
            self.server.keyspace.expire_enabled, self.server.keyspace.hide_expired = True, False
        self.server.blocking.resume_postponed()

    async def become_replica(self):
        """Planned failover, second half (after a complete drain): follow the journal from this node's own last
        entry, then let the held commands go once the topology names the new primary."""
        srv = self.server
        try:
            self.role = "replica"
            srv.keyspace.expire_enabled = False
            srv.keyspace.hide_expired = True
            self.journal.stop_writer()
            srv.durability.detach()
            self.applied_index = self.journal.commit_index
            await self._follow_from(self.applied_index)
            self.phase = "following"
            log.info("now a replica of shard %s after handing over at index %d", self.shard, self.applied_index)
            await self._await_other_primary(self._hold_deadline)
        finally:
            self.end_hold()

    async def _await_other_primary(self, deadline_s):
        """Until this node's topology names another primary of its shard (the new primary publishes its
        promotion once it serves), or the deadline: a held write released earlier would pass the slot check
        (the topology still routes it here) and meet -READONLY, which cluster clients do not retry."""
        if self.routing is None:
            return True     # not cluster mode: a replica answers -READONLY, as a standalone Valkey replica
        while True:
            topology = self.routing.topology
            me = topology.nodes.get(self.node_id) if topology is not None else None
            if me is None or me.role != "primary":
                return True
            if time.monotonic() >= deadline_s:
                log.warning("hand-over: the topology still names this node the primary of shard %s; releasing the "
                            "held commands anyway", self.shard)
                return False
            await asyncio.sleep(0.005)

    def reexec(self):
        """Re-executes this process with the same arguments: it restarts as a replica."""
        logging.shutdown()
        # `-m durakv` whichever way it was started (console script or python -m): same arguments.
        os.execv(sys.executable, [sys.executable, "-m", "durakv"] + sys.argv[1:])

    # -- snapshots off the primary --------------------------------------------------------------
    async def _snapshot_loop(self):
        interval_ms = self.server.config["replica-snapshot-interval-ms"]
        if not interval_ms:
            return
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            if self.role != "replica" or self.applied_index <= self.snapshot_index:
                continue
            try:
                await self.snapshot_now()
            except Exception as exc:  # noqa: BLE001
                log.warning("replica snapshot failed: %r", exc)

    async def snapshot_now(self):
        """Writes this replica's state at its applied index to the object store, then prunes the store (the
        SNAPSHOTS_KEPT newest of this shard stay; older ones, tombstones and chunks a crash left behind go) and
        drops stream entries that no kept snapshot needs."""
        from ..snapshot.format import write_snapshot
        index = self.whole_index   # never inside a command carried in parts: its first parts are not applied
        fd, path = tempfile.mkstemp(prefix="snap-", suffix=".dks", dir=self.server.dir)
        os.close(fd)
        try:
            write_snapshot(path, self.server.keyspace, index)
            with open(path, "rb") as f:
                data = f.read()
        finally:
            os.unlink(path)
        await self.store.put_snapshot(self.shard, index, self.filter.epoch, data)
        self.snapshot_index = index
        self.snapshots_stored += 1
        pruned = await self.store.prune_snapshots(self.shard)
        self.snapshot_store = pruned
        kept = pruned["kept"]
        if kept:
            # Entries a kept snapshot needs stay, and so do those a replica heard from recently still has to
            # apply (a restarted node catching up from an older point would otherwise lose them mid-way).
            floor = kept[0] + 1
            for peer in self.replica_statuses():
                floor = min(floor, peer.applied + 1)
            await self.journal.truncate_before(floor)
        log.info("snapshot of shard %s at index %d stored (%d bytes); journal kept from index %d; snapshot store "
                 "%d bytes in %d messages", self.shard, index, len(data), self.journal.first_index,
                 pruned["bytes"], pruned["messages"])
        return index

    # -- INFO -----------------------------------------------------------------------------------
    def info_fields(self):
        now = self.server.clock_ms()
        c = self.controller
        if self.role == "primary" and self.journal is not None:
            self.applied_index = max(self.applied_index, self.journal.commit_index)
        fields = {"durakv_node_id": self.node_id, "durakv_shard": self.shard, "availability_zone": self.az,
                  "durakv_epoch": self.epoch, "journal_applied_index": self.applied_index,
                  "journal_stream_last_index": self.stream_last, "lease_valid_ms":
                  max(0, self.lease_valid_until_ms - _monotonic_ms()) if self.role == "primary" else 0,
                  "controller_reason": c.last_reason if c else "starting", "promotions": self.promotions,
                  "durakv_phase": self.phase, "lease_ttl_ms": c.ttl_ms if c else self.server.config["lease-ttl-ms"],
                  "lease_renewals": self.renewer.renewals if self.renewer else 0,
                  "lease_renewal_failures": self.renewer.failures if self.renewer else 0,
                  "lease_lapses": self.lease_lapses, "lease_refused_commands": self.lease_refusals,
                  # the snapshot object store as this node saw it after its last snapshot (replicas store them)
                  "snapshots_stored": self.snapshots_stored,
                  "snapshot_store_count": self.snapshot_store["objects"],
                  "snapshot_store_shard_count": len(self.snapshot_store["kept"]),
                  "snapshot_store_bytes": self.snapshot_store["bytes"],
                  "snapshot_store_messages": self.snapshot_store["messages"]}
        if self.role == "replica":
            host, _, port = (c.primary_addr or ":0").rpartition(":") if c else ("", "", "0")
            fields.update({"master_host": host, "master_port": port or 0,
                           "master_link_status": "up" if self.subscription is not None else "down",
                           "replica_lag_entries": max(0, self.stream_last - self.applied_index),
                           "replica_lag_ms": (max(0, now - self.applied_at_ms)
                                              if self.applied_at_ms and self.stream_last > self.applied_index
                                              else 0),
                           "slave_read_repl_offset": self.applied_index,
                           "slave_repl_offset": self.applied_index,
                           "replica_known_index": max(self.known_index, self.stream_last),
                           "replica_behind_ms": self.behind_ms(),
                           "replica_serving_reads": int(self.serving_error(False) is None)})
        return fields
