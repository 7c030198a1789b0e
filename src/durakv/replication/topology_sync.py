"""A shard member and the cluster's stored topology: installs what the store publishes, publishes its own
promotion and recovery from a failure mark, and starts slot migrations its shard owes."""

import asyncio
import logging

from .migration import SlotMigrator
from .retry import retry_transient

log = logging.getLogger("durakv.replication")

WATCH_CHECK_S = 10.0    # how often the topology watch is compared with the store (one KV read per document)


class TopologyWatcher:
    """The stored topology, read and written for one node's role: `node.topology_watcher`.

    Owns the watch on the store, the task publishing a promotion, the task clearing a failure mark and the slot
    migrator (`migrator`, None until the node's shard has moved a slot). Interface: `start(store)`,
    `on_topology(topology, revision)`, `promoted()` (after the node became primary), `migrate_if_needed()`,
    `clear_own_failure()`. It reads the node's role, epoch, phase, link and `old_primary_failed`, and installs into
    `routing` (server/cluster.py)."""

    def __init__(self, node, routing):
        self.node = node
        self.routing = routing
        self.server = node.server
        self.node_id = node.node_id
        self.shard = node.shard
        self.watch = None
        self.migrator = None
        self._promotion_task = None
        self._health_task = None
        self._check_task = None
        self._last_check = 0.0
        self._undelivered = {}      # document -> stored revision the watch had not delivered at the last check

    async def start(self, store):
        self.store = store
        self.watch = await retry_transient("watching the topology", lambda: store.watch_topology(self.on_topology))

    def check_watch(self, now):
        """Every WATCH_CHECK_S (called from the node's control loop): compares what the watch delivered with what
        the store holds, and watches again when a stored revision stayed undelivered for a whole check period.
        A watch is a NATS consumer on one server; after that server is lost the client is meant to recreate it,
        and a watch that silently stopped delivering the operator's topology left a shard's primary deaf to a
        reshard's migration marks: the rebalance waited for it forever (seen once after a machine's power cut,
        tests/faults/test_multi_az_netns.py)."""
        if (self.watch is None or not hasattr(self.watch, "revisions") or now - self._last_check < WATCH_CHECK_S
                or (self._check_task is not None and not self._check_task.done())):
            return
        self._last_check = now
        self._check_task = self.server.loop.create_task(self._check_watch())

    async def _check_watch(self):
        try:
            base, base_revision = await self.store.get_base_topology()
            # (a document that does not validate is left out here, as the watch skips it: never "undelivered")
            states = await self.store.get_states(base, log_invalid=False) if base is not None else {}
        except Exception as exc:  # noqa: BLE001 - the store is unreachable: the next check
            log.debug("checking the topology watch: %r", exc)
            return
        watch = self.watch
        have_base, have_states = watch.revisions()
        stored = {"topology": base_revision}
        stored.update(("state of shard %s" % name, rev) for name, (_st, rev) in states.items())
        have = {"topology": have_base}
        have.update(("state of shard %s" % name, rev) for name, rev in have_states.items())
        undelivered = {doc: rev for doc, rev in stored.items() if rev > have.get(doc, 0)}
        stale = sorted(doc for doc, rev in self._undelivered.items() if have.get(doc, 0) < rev)
        self._undelivered = undelivered
        if not stale or watch is not self.watch:
            return
        log.warning("the topology watch did not deliver the stored %s for %.0f s (%s): watching again",
                    " and ".join(stale), WATCH_CHECK_S,
                    ", ".join("%s revision %d, delivered %d" % (doc, stored[doc], have.get(doc, 0)) for doc in stale
                              if doc in stored))
        self._undelivered = {}
        self.watch = await retry_transient("watching the topology", lambda: self.store.watch_topology(self.on_topology))
        try:
            await asyncio.wait_for(watch.stop(), 5.0)
        except Exception as exc:  # noqa: BLE001 - the old watch's consumer may be gone with its server
            log.debug("stopping the old topology watch: %r", exc)

    def promoted(self):
        """The node became primary: the topology names it (now, locally; in the store, by a task), and a
        migration the previous primary did not finish goes on."""
        topology = self.routing.topology
        if topology is not None and self.node_id in topology.nodes:
            self.routing.install(topology.promote(self.node_id, self.node.promotion.old_primary_failed), self.routing.revision)
        self._publish_promotion_soon()
        self.migrate_if_needed()

    def _publish_promotion_soon(self):
        if self._promotion_task is None:
            self._promotion_task = self.server.loop.create_task(self._publish_promotion())

    def on_topology(self, topology, revision):
        """A topology from the coordination store: installed whole (one routing snapshot), unless this node's
        own promotion has not reached it yet (then the promotion rewrites it)."""
        me = topology.nodes.get(self.node_id)
        if self.node.role == "primary" and me is not None and me.role != "primary":
            # The store has not caught up with this node's promotion: serve by what the lease says.
            self.routing.install(topology.promote(self.node_id, self.node.promotion.old_primary_failed), revision)
            self._publish_promotion_soon()
            return
        previous = self.routing.topology
        self.routing.install(topology, revision)
        self.migrate_if_needed()
        self._reclaim_stranded(previous, topology)

    def _reclaim_stranded(self, previous, topology):
        """A cancelled move (replication/migration.py's cancel) leaves a slot with its source only if the target
        held none of its keys when the source counted; a client sent here with -ASK may have written one after
        that count and before this node installed the topology without the mark. Such keys are sent back to the
        slot's owner (the source), as the source's migrator sends keys: this node may change only its own
        shard's state (cluster/natsauth.py), so it cannot mark the other shard's slot as moving here again."""
        if self.node.role != "primary" or previous is None or not previous.migrating:
            return
        me = topology.nodes.get(self.node_id)
        if me is None:
            return
        dbs = [db for db in self.server.keyspace.dbs if db.slots is not None]
        stranded = {}
        for slot, (src, dst) in previous.migrating.items():
            owner = topology.shard_by_slot[slot]
            if (dst == me.shard_id and slot not in topology.migrating and owner is not None and owner.id == src
                    and any(db.slots.count(slot) for db in dbs)):
                stranded.setdefault(src, []).append(slot)
        if stranded:
            if self.migrator is None:
                self.migrator = SlotMigrator(self.node)
            for src, slots in stranded.items():
                log.warning("slot(s) %s held keys here after their move was cancelled: sending them back to shard %s",
                            sorted(slots), topology.shard_by_id[src].name)
                self.migrator.return_keys(slots, src)

    def migrate_if_needed(self):
        """A primary whose shard has slots migrating out moves their keys (replication/migration.py)."""
        topology = self.routing.topology
        if self.node.role != "primary" or topology is None or not topology.migrating:
            return
        me = topology.nodes.get(self.node_id)
        if me is not None and any(src == me.shard_id for src, _dst in topology.migrating.values()):
            if self.migrator is None:
                self.migrator = SlotMigrator(self.node)
            self.migrator.start()

    async def _publish_promotion(self):
        """Makes this shard's state name this node its primary (compare-and-set, retried): what lets cluster
        clients (CLUSTER SLOTS, MOVED) follow a failover. The old primary is marked failed when its lease had
        expired (Valkey's failover finds it failed)."""
        from dataclasses import replace as _replace
        delay_s = 0.05
        try:
            node = self.node
            while node.role == "primary":
                try:
                    topology = self.routing.topology
                    shard = topology.shard_of_node(self.node_id) if topology is not None else None
                    if shard is None:
                        log.warning("the topology does not list node %s; clients will not be sent here",
                                    self.node_id)
                        return
                    old = shard.primary.id if shard.primary.id != self.node_id else None
                    failed = node.promotion.old_primary_failed
                    epoch = node.epoch

                    def promote(st):
                        health = dict(st.health)
                        health[self.node_id] = "online"
                        if old is not None and failed:
                            health[old] = "fail"
                        if st.primary == self.node_id and st.epoch >= epoch and health == st.health:
                            return None
                        return _replace(st, primary=self.node_id, epoch=max(st.epoch, epoch), health=health)
                    await self.store.update_state(self.shard, promote)
                    log.info("topology: node %s is now the primary of shard %s", self.node_id, self.shard)
                    return
                except Exception as exc:  # noqa: BLE001 - an election: read again and retry
                    log.debug("publishing the promotion in the shard's state: %r", exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)
        finally:
            self._promotion_task = None

    def clear_own_failure(self):
        """A node the topology marks failed (its lease expired and another node took over) clears the mark once
        it serves again, following the journal (Valkey clears FAIL when a replica is reachable again)."""
        topology = self.routing.topology
        me = topology.nodes.get(self.node_id) if topology is not None else None
        node = self.node
        if (me is None or me.health == "online" or self._health_task is not None
                or (node.role != "primary" and (node.phase != "following" or not node.follower.link_up()))):
            return
        self._health_task = self.server.loop.create_task(self._publish_health())

    async def _publish_health(self):
        from dataclasses import replace as _replace
        try:
            for _ in range(20):
                try:
                    def online(st):
                        if st.health.get(self.node_id, "online") == "online":
                            return None
                        return _replace(st, health={**st.health, self.node_id: "online"})
                    await self.store.update_state(self.shard, online)
                    log.info("topology: node %s is reachable again (no longer marked failed)", self.node_id)
                    return
                except Exception as exc:  # noqa: BLE001 - an election: read again and retry
                    log.debug("clearing this node's failure mark in the shard's state: %r", exc)
                await asyncio.sleep(0.2)
        finally:
            self._health_task = None
