"""A shard member on the JetStream journal: follows the journal as a replica, serves as primary while it
holds the lease, and moves between the two as the failover controller decides.

Replica: applies committed entries in order through the same code as recovery (expiry off: the primary's
DEL effects decide), serves reads, refuses writes with -READONLY, periodically writes a snapshot to the
object store and purges the stream below the oldest snapshot still kept.
Primary: appends batches with its epoch, serves while its lease is valid by its own clock.
A primary that loses its lease unexpectedly re-executes itself: its memory may hold writes that never
committed, so it rejoins as a replica from snapshot + journal like any new node.
"""

import asyncio
import logging
import os
import ssl
import sys
import tempfile
import time

from .. import messages
from ..cluster.controller import Controller
from ..cluster.store import NatsStore
from ..journal.base import EpochFilter
from ..journal.codec import decode_payload
from ..journal.jetstream import JetStreamJournal, connect
from .migration import SlotMigrator

log = logging.getLogger("durakv.replication")


class ClusterNode:
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
        self.nc = None
        self.journal = None
        self.store = None
        self.controller = None
        self.subscription = None
        self.snapshot_index = 0
        self.promotions = 0
        self._task = None
        self._snap_task = None
        self._apply_errors = 0
        self._last_probe = 0.0
        self._progress_index = -1
        self._progress_at = 0.0
        self.writes_paused = False      # a planned hand-over is draining: writes answer -READONLY
        self.topology_watch = None
        self.migrator = None
        self._topology_task = None
        self._pubsub_subs = []

    # -- start-up -------------------------------------------------------------------------------
    async def start(self):
        srv = self.server
        ca = srv.config["journal-nats-tls-ca-file"]
        self.nc = await connect(self.servers, name="durakv-%s" % self.node_id,
                                tls=ssl.create_default_context(cafile=ca) if ca else None)
        self.store = await NatsStore(self.nc).open()
        # Short requests: during a stream leader election a retry every 2 s beats one 5 s wait.
        self.journal = JetStreamJournal(self.nc, self.shard, request_timeout_s=2.0,
                                        max_appends_in_flight=srv.config["journal-max-appends-in-flight"])
        await self.journal.ensure_stream()
        if self.routing is not None:
            self.topology_watch = await self.store.watch_topology(self._on_topology)
            await self._subscribe_pubsub()
        await self._load_snapshot()
        srv.keyspace.expire_enabled = False
        srv.keyspace.hide_expired = True
        await self._follow_from(self.applied_index)
        await self.catch_up(timeout_s=120)
        self.controller = Controller(self.store, self, self.shard, srv.config["lease-ttl-ms"], srv.clock_ms)
        self._task = srv.loop.create_task(self._control_loop())
        self._snap_task = srv.loop.create_task(self._snapshot_loop())
        log.info("node %s (az %s) following shard %s from index %d", self.node_id, self.az, self.shard,
                 self.applied_index)

    async def _load_snapshot(self):
        snap = await self.store.latest_snapshot(self.shard)
        if snap is None:
            return
        index, epoch, data = snap
        from ..snapshot.format import load_snapshot
        fd, path = tempfile.mkstemp(prefix="snap-", suffix=".dks", dir=self.server.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            ks = self.server.keyspace
            saved = ks.expire_enabled
            ks.expire_enabled = False
            try:
                load_snapshot(path, ks, self.server.apply_effect)
            finally:
                ks.expire_enabled = saved
        finally:
            os.unlink(path)
        self.applied_index = self.snapshot_index = index
        self.filter = EpochFilter(epoch)
        self.epoch = max(self.epoch, epoch)
        log.info("loaded snapshot of shard %s at index %d (epoch %d)", self.shard, index, epoch)

    # -- cluster mode: the topology and the pub/sub bus ---------------------------------------------
    def _on_topology(self, topology, revision):
        """A topology from the coordination store: installed whole (one routing snapshot), unless this node's
        own promotion has not reached it yet (then the promotion rewrites it)."""
        me = topology.nodes.get(self.node_id)
        if self.role == "primary" and me is not None and me.role != "primary":
            # The store has not caught up with this node's promotion: serve by what the lease says.
            self.routing.install(topology.promote(self.node_id), revision)
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
                    await self.store.put_topology(topology.promote(self.node_id), revision)
                    log.info("topology: node %s is now the primary of shard %s", self.node_id, self.shard)
                    return
                except Exception as exc:  # noqa: BLE001 - a CAS race or an election: read again and retry
                    log.debug("publishing the promotion in the topology: %r", exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)
        finally:
            self._topology_task = None

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
        self.subscription = await self.journal.follow(after, self._on_entry)

    def _on_entry(self, entry):
        if entry.index <= self.applied_index:
            return  # an ordered consumer restart may resend what we have
        if self.role == "primary":
            return
        ks = self.server.keyspace
        if self.filter.accept(entry):
            ks.hide_expired = False  # effects see every stored key, expired or not, as on the primary
            try:
                for db_id, argv in decode_payload(entry.payload):
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
        if entry.index > self.stream_last:
            self.stream_last = entry.index
        self.applied_at_ms = self.server.clock_ms()

    async def catch_up(self, timeout_s=30.0):
        """Waits until everything committed in the stream (as of now) is applied."""
        last = await self.journal.last_index()
        self.stream_last = last
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
        now = time.monotonic()
        if self.applied_index != self._progress_index:
            self._progress_index, self._progress_at = self.applied_index, now
            return
        if self.stream_last <= self.applied_index or now - self._progress_at < stall_s:
            return
        log.warning("following stalled at index %d of %d; subscribing again", self.applied_index, self.stream_last)
        old, self.subscription = self.subscription, None
        if old is not None:
            try:
                await old.unsubscribe()
            except Exception:  # noqa: BLE001 - its connection may be the broken part
                pass
        self._progress_at = now
        try:
            await self._follow_from(self.applied_index)
        except Exception as exc:  # noqa: BLE001 - retried on the next stall check
            log.warning("subscribing again failed: %r", exc)

    # -- controller loop ------------------------------------------------------------------------
    async def _control_loop(self):
        previous = None
        while True:
            reason = await self.controller.tick()
            if reason != previous and not reason.startswith("renewed lease") and not reason.startswith(
                    "replica of"):
                log.info("controller: %s", reason)
            previous = reason
            if self.role == "replica":
                now = time.monotonic()
                if now - self._last_probe > 1.0:
                    self._last_probe = now
                    try:
                        self.stream_last = await self.journal.last_index()
                    except Exception:  # noqa: BLE001 - reported as lag below
                        pass
                await self.resubscribe_if_stalled()
            await asyncio.sleep(self.controller.interval_s)

    # -- the pipeline's gate: checked in admission for every command path ---------------------------
    def is_replica(self) -> bool:
        return self.role != "primary"

    def serving_error(self, write):
        """Error text if this node must not serve a command touching data now: a primary whose lease is
        past due by its own clock, or writes during a planned hand-over."""
        if self.role != "primary":
            return None
        if write and self.writes_paused:
            return messages.READONLY
        if self.server.clock_ms() > self.lease_valid_until_ms:
            return messages.LEASE_EXPIRED
        return None

    # -- role changes (called by the controller) ------------------------------------------------
    async def promote(self, epoch):
        srv = self.server
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
        self.applied_index = marker_index
        srv.keyspace.expire_enabled = True
        srv.keyspace.hide_expired = False
        mode = srv.config["durability"]
        srv.durability.attach(self.journal, mode if mode != "none" else "sync", srv.config["durability-buffer-ms"])
        self.role = "primary"
        self.promotions += 1
        log.info("promoted to primary of shard %s at epoch %d (marker %d) in %.3fs", self.shard, epoch,
                 marker_index, time.monotonic() - started)
        if self.routing is not None:
            topology = self.routing.topology
            if topology is not None and self.node_id in topology.nodes:
                self.routing.install(topology.promote(self.node_id), self.routing.revision)
            if self._topology_task is None:
                self._topology_task = srv.loop.create_task(self._publish_promotion())
            self._migrate_if_needed()   # a migration the previous primary did not finish

    async def step_down(self, reason):
        if self.role != "primary":
            return
        log.warning("stepping down: %s; restarting as a replica", reason)
        self.reexec()

    async def hand_over(self):
        """Planned failover: hold new writes, finish the journal, so the new primary loses nothing."""
        srv = self.server
        self.writes_paused = True
        await srv.durability.drain(timeout_s=10)
        await self.journal.drain(timeout_s=10)

    async def become_replica(self):
        srv = self.server
        self.role = "replica"
        srv.keyspace.expire_enabled = False
        srv.keyspace.hide_expired = True
        self.journal.stop_writer()
        srv.durability.detach()
        self.applied_index = self.journal.commit_index
        await self._follow_from(self.applied_index)
        self.writes_paused = False
        log.info("now a replica of shard %s after handing over at index %d", self.shard, self.applied_index)

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
        """Writes this replica's state at its applied index to the object store, then drops stream
        entries that no kept snapshot needs (the two newest snapshots are kept)."""
        from ..snapshot.format import write_snapshot
        index = self.applied_index
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
        kept = await self.store.snapshot_indexes(self.shard)
        for old in kept[:-2]:
            await self.store.delete_snapshot(self.shard, old)
        kept = kept[-2:]
        if kept:
            await self.journal.truncate_before(kept[0] + 1)
        log.info("snapshot of shard %s at index %d stored (%d bytes)", self.shard, index, len(data))
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
                  max(0, self.lease_valid_until_ms - now) if self.role == "primary" else 0,
                  "controller_reason": c.last_reason if c else "starting", "promotions": self.promotions}
        if self.role == "replica":
            host, _, port = (c.primary_addr or ":0").rpartition(":") if c else ("", "", "0")
            fields.update({"master_host": host, "master_port": port or 0,
                           "master_link_status": "up" if self.subscription is not None else "down",
                           "replica_lag_entries": max(0, self.stream_last - self.applied_index),
                           "replica_lag_ms": (max(0, now - self.applied_at_ms)
                                              if self.applied_at_ms and self.stream_last > self.applied_index
                                              else 0),
                           "slave_read_repl_offset": self.applied_index,
                           "slave_repl_offset": self.applied_index})
        return fields
