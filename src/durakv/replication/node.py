"""A shard member on the JetStream journal: its shared state, start-up and control loop, composed of parts.

It follows the journal as a replica, serves as primary while it holds the lease, and moves between the two as
the failover controller decides. The node itself holds only what every part reads: its identity (`node_id`,
`shard`, `az`, `addr`, `membership`), its connections (`nc`, `journal`, `store`, `routing`), the failover
`controller` and lease `renewer`, and its position: `role` ("primary" | "replica"), `epoch`, `applied_index`,
`whole_index` (newest applied index with no command half applied: snapshots go by it) and `phase`. It offers the
controller's interface (cluster/controller.py: `promote`, `step_down`, `hand_over`, `hold_data`, `end_hold`,
`become_replica`, `lease_valid_until_ms`, `ineligible`), forwarding each to the part that owns it.

Each part is an object the node holds as an attribute, owns its state, and is handed what it needs at
construction (each class's docstring states its interface):

- follow.py: `node.follower`, the Follower (a replica applies committed entries in order through the same code as
  recovery, expiry off: the primary's DEL effects decide; it notices gaps and stalls and how far behind it is);
- lease.py: `node.lease`, the LeaseGate (the pipeline's gate: a primary serves while its lease is valid by its own
  clock, a replica while close enough to the journal; the renewer's hooks);
- promotion.py: `node.promotion`, the Promotion (promotion to primary with an epoch marker, stepping down; a
  primary that loses its lease unexpectedly re-executes itself: its memory may hold writes that never
  committed, so it rejoins as a replica from snapshot + journal like any new node);
- bus.py: `node.bus`, the NodeBus (PUBLISH/SPUBLISH between nodes, the heartbeats' transport);
- handover.py: `node.handover`, the Handover (the planned failover's hold, drain and switch to replica; the
  controller's calls reach it through the node, the pipeline reads its hold through the gate);
- members.py: `node.members`, the Members (heartbeats sent and heard, the replicas' applied offsets and WAIT,
  every node's liveness);
- snapshots.py: `node.snapshotter`, the Snapshotter (the newest snapshot loaded at start-up; a replica
  periodically writes one to the object store and purges the stream below the oldest snapshot still kept);
- shard_settings.py: `node.shard_settings`, the ShardSettingsWatcher (the shard's settings and the cluster's
  users: read or seeded at start-up, applied, changed by compare-and-set, watched);
- topology_sync.py: `node.topology_watcher`, the TopologyWatcher (cluster mode: installs the stored topology,
  publishes this node's promotion and recovery, owns the slot migrator).
"""

import asyncio
import hashlib
import logging
import ssl
import time

from ..cluster.controller import Controller
from ..cluster.renewer import LeaseRenewer
from ..cluster.store import NatsStore
from ..journal.base import JournalTruncated
from ..journal.jetstream import JetStreamJournal, connect
from ..keyspace.search import get_search
from ..logs import Recurring
from ..recovery.loading import Slicer
from .bus import NodeBus
from .clock import monotonic_ms
from .follow import ApplyStopped, Follower
from .handover import Handover
from .lease import LeaseGate
from .members import Members
from .retry import retry_transient
from .promotion import Promotion
from .region_role import RegionRole
from .shard_settings import ShardSettingsWatcher
from .snapshots import Snapshotter
from .topology_sync import TopologyWatcher

log = logging.getLogger("durakv.replication")


class ClusterNode:
    def __init__(self, server, membership):
        """membership (cluster/membership.py): the node's identity and what it was told when it joined."""
        self.server = server
        cfg = server.config
        self.membership = membership
        self.shard = membership.shard
        self.az = cfg["availability-zone"]
        self.routing = server.cluster_routing      # cluster mode: where topologies are installed (else None)
        self.node_id = membership.node_id
        self.bus = NodeBus(server, self.node_id, self.shard)   # messages to and from the other nodes
        ip, port, tls_port = cfg.announced()
        self.addr = "%s:%d" % (ip, port or tls_port)
        configured = [s.strip() for s in cfg["journal-nats-servers"].split(",") if s.strip()]
        self.servers = configured or membership.nats_servers
        self.role = "replica"
        self.epoch = 0
        self.applied_index = 0
        self.whole_index = 0            # newest applied index with no command half applied (snapshots go by it)
        self.phase = "starting"         # starting, loading snapshot, replaying journal, following, primary
        self.nc = None
        self.journal = None
        self.store = None
        self.controller = None
        self.renewer = None             # the lease renewal thread (cluster/renewer.py), from start()
        self._task = None
        self._last_probe = 0.0
        # The shard stream's copies as its leader last reported them (INFO journal_copies / journal_copies_ok): a
        # NATS server that lost its copy (a full disk turns JetStream off) shows here, not only in cluster status.
        self.journal_copies = {"copies": 0, "copies_ok": 0}
        self._copies_task = None
        self._last_copies_check = 0.0
        self._copies_log = Recurring(log)
        self._last_heartbeat = 0.0
        # The parts, built before any of them runs (start()): each is handed the others it needs.
        self.snapshotter = Snapshotter(self)   # snapshots in the object store: loading, storing, pruning
        self.members = Members(self)    # the shard's other members as their heartbeats tell, every node's beat
        # a second region (cluster/region.py): this region's record, the peer's, the fence, a follower's lag
        self.region_role = RegionRole(self)
        self.shard_settings = ShardSettingsWatcher(self)   # the shard's settings and the cluster's users
        # the stored topology (cluster mode only): its watch, promotion publishing, slot migrator
        self.topology_watcher = TopologyWatcher(self, self.routing) if self.routing is not None else None
        # A planned hand-over holds commands (the pipeline postpones them, as CLIENT PAUSE does)
        self.handover = Handover(self)
        self.follower = Follower(self, self.members, self.snapshotter)   # the journal, applied as a replica
        self.lease = LeaseGate(self, self.follower, self.handover, self.region_role)   # the pipeline's gate
        self.promotion = Promotion(self, self.follower, self.lease, self.shard_settings)

    # -- the controller's hand-over calls (cluster/controller.py's contract), made by node.handover -------------
    async def hand_over(self, keep_lease=None) -> bool:
        return await self.handover.hand_over(keep_lease)

    def hold_data(self):
        self.handover.hold_data()

    def end_hold(self):
        self.handover.end_hold()

    async def become_replica(self):
        await self.handover.become_replica()

    # -- the rest of the controller's contract, forwarded to the part that owns it ------------------------------
    async def promote(self, epoch, old_primary_failed=False):
        await self.promotion.promote(epoch, old_primary_failed)

    async def step_down(self, reason):
        await self.promotion.step_down(reason)

    @property
    def lease_valid_until_ms(self):
        """The lease's end on the monotonic clock (the LeaseGate owns it; the controller sets it)."""
        return self.lease.valid_until_ms

    @lease_valid_until_ms.setter
    def lease_valid_until_ms(self, value):
        self.lease.valid_until_ms = value

    @property
    def ineligible(self):
        """Why this node must not take the lease (None: it may)."""
        if self.follower.apply_stopped is not None:
            return "it stopped applying the journal at " + self.follower.apply_stopped
        return self.region_role.ineligible()     # a follower region, a fenced one (region_role.py)

    @property
    def replication_id(self) -> str:
        """One id per shard and epoch (Valkey's replid changes when a new primary takes over): every node
        following the same primary reports the same one."""
        return hashlib.sha1(("%s:%d" % (self.journal.stream if self.journal else self.shard, self.epoch))
                            .encode()).hexdigest()

    # -- start-up -------------------------------------------------------------------------------
    def nats_tls(self):
        """The TLS context of this node's NATS connections (None: plain), with its client certificate when it
        has one (NATS servers of a TLS cluster verify every client's)."""
        cfg = self.server.config
        ca = cfg["journal-nats-tls-ca-file"]
        if not ca and not cfg["journal-nats-tls-cert-file"]:
            return None
        ctx = ssl.create_default_context(cafile=ca or None)
        if cfg["journal-nats-tls-cert-file"]:
            ctx.load_cert_chain(cfg["journal-nats-tls-cert-file"], cfg["journal-nats-tls-key-file"] or None)
        return ctx

    async def nats_connect(self, purpose=""):
        """A NATS connection of this node's identity: its credentials, its own inbox prefix (the only reply
        subjects it may subscribe to), its TLS."""
        from ..cluster.natsnames import inbox_prefix
        return await connect(self.servers, name="durakv-%s%s" % (self.node_id, purpose), tls=self.nats_tls(),
                             creds=self.membership.creds(), inbox_prefix=inbox_prefix(self.node_id))

    async def start(self):
        srv = self.server
        # The snapshot and the journal load in slices of the loop (recovery/loading.py): clients are answered
        # (-LOADING, INFO with the progress) and the heartbeats go out meanwhile.
        follower = self.follower
        follower.slicer = Slicer(stop=srv.shutdown_event.is_set if srv.shutdown_event is not None else None)
        self.snapshotter.remove_stale_temps()
        self.nc = await self.nats_connect()
        self.bus.start(self.nc)
        # Start-up often meets NATS electing (a cluster starting, an AZ back, a node re-executed after it was
        # replaced): every request is retried while NATS cannot answer yet, instead of exiting.
        self.store = await retry_transient("opening the coordination store",
                                           NatsStore(self.nc, shard=self.shard).open)
        await self._check_cluster()
        await self.region_role.start(self.store, retry_transient)
        await self.shard_settings.start(self.store)
        # The journal has a connection of its own: its entries (up to a MB each, several in flight, and the
        # replica's deliveries) would otherwise queue the lease renewals, heartbeats and watches behind them on
        # one socket (measured: under a pipelined bulk load the lease lapsed while the journal kept committing).
        journal_nc = await self.nats_connect("-journal")
        # Short requests: during a stream leader election a retry every 2 s beats one 5 s wait.
        self.journal = JetStreamJournal(journal_nc, self.shard, request_timeout_s=2.0,
                                        max_appends_in_flight=srv.config["journal-max-appends-in-flight"])
        await retry_transient("finding the shard's journal", self.journal.wait_stream)
        if self.routing is not None:
            await self.topology_watcher.start(self.store)
            await self.bus.subscribe_pubsub()
        await self.members.subscribe(cluster_mode=self.routing is not None)
        self.members.beat_while_loading()
        t0 = time.monotonic()
        # search indexes are built once the snapshot and the journal are in, in slices while serving
        search = get_search(srv.keyspace)
        search.pause()
        self.phase = "loading snapshot"
        await retry_transient("fetching the newest snapshot", self.snapshotter.load)
        t1 = time.monotonic()
        self.phase = "replaying journal"
        srv.keyspace.expire_enabled = False
        srv.keyspace.hide_expired = True
        from_index = self.applied_index
        keys_before = sum(len(db) for db in srv.keyspace.dbs)
        for attempt in range(5):
            try:
                await follower.count_journal_to_load()
                await retry_transient("following the journal", lambda: follower.follow_from(self.applied_index))
                await follower.catch_up(timeout_s=120)
                break
            except ApplyStopped:
                break           # up, serving nothing, saying why (Follower._stop_applying)
            except JournalTruncated as exc:
                # A replica stored a newer snapshot and purged what this node still needed: start from it.
                if attempt == 4:
                    raise
                log.warning("catching up from index %d: %s; loading the newest snapshot again", self.applied_index,
                            exc)
                await follower.stop()
                follower.clear_dataset()
                if srv.load_progress is not None:
                    srv.load_progress.start_over()
                self.phase = "loading snapshot"
                await self.snapshotter.load()
                self.phase = "replaying journal"
                from_index = self.applied_index
                keys_before = sum(len(db) for db in srv.keyspace.dbs)
        search.resume()
        # Loaded: from here on entries apply whole as they arrive (one still being applied in slices finishes
        # first, and the next waits for it: follow.py _deliver)
        slicer, follower.slicer = follower.slicer, None
        t2 = time.monotonic()
        ttl_ms = srv.config["lease-ttl-ms"]
        lease = self.lease
        self.renewer = LeaseRenewer(lease.open_renewer_store, self.shard, ttl_ms, lease.publish,
                                    loop_alive_ms=lambda: srv.loop_stats.beat_ms,
                                    stall_limit_ms=lease.renew_stall_limit_ms, clock_ms=srv.clock_ms,
                                    mono_ms=monotonic_ms, name="durakv-lease-%s" % self.shard).start()
        self.controller = Controller(self.store, self, self.shard, ttl_ms, srv.clock_ms, monotonic_ms,
                                     renewer=self.renewer)
        self.members.loading_done()     # the control loop sends the beats from now on
        self._task = srv.loop.create_task(self._control_loop())
        self.snapshotter.start()
        if follower.apply_stopped is None:
            self.phase = "following"
        keys = sum(len(db) for db in srv.keyspace.dbs)
        log.info("node %s (az %s) following shard %s at index %d: snapshot %.2fs (%d keys), journal %d..%d in %.2fs "
                 "(%d entries, +%d keys, %.0f entries/s); %s", self.node_id, self.az, self.shard, self.applied_index,
                 t1 - t0, keys_before, from_index + 1, self.applied_index, t2 - t1, self.applied_index - from_index,
                 keys - keys_before, (self.applied_index - from_index) / max(t2 - t1, 1e-6), slicer.summary())

    async def _check_cluster(self):
        """Refuses to run on a coordination store of another cluster or format (the cluster document, written
        by `durakv cluster create`): a node of format 2 meeting a format-1 cluster, or a data directory joined
        to another cluster, stops with both named instead of reading documents it would misread."""
        from ..cluster.secrets import FORMAT
        from ..errors import DurakvError
        doc, _rev = await retry_transient("reading the cluster document", self.store.get_cluster)
        if doc is None:
            raise DurakvError("the coordination store holds no cluster document: the cluster was made by an older "
                              "durakv (format 1) or not created yet; this node (format %d) runs only in a cluster "
                              "made by `durakv cluster create`" % FORMAT)
        if doc.format != FORMAT:
            raise DurakvError("the cluster is of format %d and this node of format %d: it cannot join (see the "
                              "upgrade notes in docs/operations.md)" % (doc.format, FORMAT))
        mine = self.membership.cluster_id
        if mine and doc.cluster_id != mine:
            raise DurakvError("this node joined cluster %s but the coordination store holds cluster %s"
                              % (mine, doc.cluster_id))

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
            if now - self._last_heartbeat >= Members.HEARTBEAT_S:
                self._last_heartbeat = now
                self.members.beat()
                if self.topology_watcher is not None:
                    self.topology_watcher.clear_own_failure()
                    self.topology_watcher.check_watch(now)
            if now - self._last_copies_check >= self.COPIES_CHECK_S and self.journal is not None and (
                    self._copies_task is None or self._copies_task.done()):
                self._last_copies_check = now
                self._copies_task = self.server.loop.create_task(self._check_copies())
            self.region_role.tick(now)
            if self.role == "replica":
                now = time.monotonic()
                if now - self._last_probe > 1.0:
                    self._last_probe = now
                    try:
                        # (in a follower region, also what the shard's mirror lacks)
                        self.region_role.note_mirror(await self.follower.probe())
                    except Exception:  # noqa: BLE001 - reported as lag below
                        pass
                await self.follower.resubscribe_if_stalled()
            await asyncio.sleep(self.controller.interval_s)

    COPIES_CHECK_S = 2.0     # how often a node asks its shard stream's leader for the stream's copies

    async def _check_copies(self):
        try:
            copies = await self.journal.copies()
        except Exception:  # noqa: BLE001 - no leader right now: the last answer stands, the election shows elsewhere
            return
        self.journal_copies = copies
        if copies["copies_ok"] < copies["copies"]:
            gone = ", ".join(r["name"] for r in copies["replicas"] if not r["current"] or r["offline"])
            self._copies_log("copies", "shard %s's journal runs on %d of %d copies (not current: %s)",
                             self.shard, copies["copies_ok"], copies["copies"], gone)
        else:
            self._copies_log.clear("copies", "shard %s's journal is on all its %d copies again", self.shard,
                                   copies["copies"])

    # -- INFO -----------------------------------------------------------------------------------
    def info_fields(self):
        now = self.server.clock_ms()
        c = self.controller
        follower, lease = self.follower, self.lease
        if self.role == "primary" and self.journal is not None:
            self.applied_index = max(self.applied_index, self.journal.commit_index)
        fields = {"durakv_node_id": self.node_id, "durakv_shard": self.shard, "availability_zone": self.az,
                  "durakv_epoch": self.epoch, "journal_applied_index": self.applied_index,
                  "journal_stream_last_index": follower.stream_last, "lease_valid_ms":
                  max(0, lease.valid_until_ms - monotonic_ms()) if self.role == "primary" else 0,
                  "controller_reason": c.last_reason if c else "starting", "promotions": self.promotion.promotions,
                  "durakv_phase": self.phase, "lease_ttl_ms": c.ttl_ms if c else self.server.config["lease-ttl-ms"],
                  "lease_renewals": self.renewer.renewals if self.renewer else 0,
                  "lease_renewal_failures": self.renewer.failures if self.renewer else 0,
                  "lease_lapses": lease.lapses, "lease_refused_commands": lease.refusals,
                  # the snapshot object store as this node saw it after its last snapshot (replicas store them)
                  "snapshots_stored": self.snapshotter.stored,
                  "snapshot_store_count": self.snapshotter.store_view["objects"],
                  "snapshot_store_shard_count": len(self.snapshotter.store_view["kept"]),
                  "snapshot_store_bytes": self.snapshotter.store_view["bytes"],
                  "snapshot_store_messages": self.snapshotter.store_view["messages"],
                  "journal_copies": self.journal_copies["copies"],
                  "journal_copies_ok": self.journal_copies["copies_ok"]}
        if self.role == "replica":
            host, _, port = (c.primary_addr or ":0").rpartition(":") if c else ("", "", "0")
            fields.update({"master_host": host, "master_port": port or 0,
                           "master_link_status": "up" if follower.subscription is not None else "down",
                           "replica_lag_entries": max(0, follower.stream_last - self.applied_index),
                           "replica_lag_ms": (max(0, now - follower.applied_at_ms)
                                              if follower.applied_at_ms and follower.stream_last > self.applied_index
                                              else 0),
                           "slave_read_repl_offset": self.applied_index,
                           "slave_repl_offset": self.applied_index,
                           "replica_known_index": max(follower.known_index, follower.stream_last),
                           "replica_behind_ms": follower.behind_ms(),
                           "replica_serving_reads": int(lease.serving_error(False) is None),
                           "replica_apply_stopped": follower.apply_stopped or ""})
            if follower.apply_stopped is not None:
                fields["master_link_status"] = "down"
        fields.update(self.region_role.info_fields())
        return fields
