"""A shard member and the cluster's stored topology: installs what the store publishes, publishes its own
promotion and recovery from a failure mark, and starts slot migrations its shard owes."""

import asyncio
import logging

from .migration import SlotMigrator

log = logging.getLogger("durakv.replication")


class TopologySyncMixin:
    """The stored topology, read and written for this node's role.

    Mixed into ClusterNode (replication/node.py), whose __init__ holds the state these methods share."""

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
        previous = self.routing.topology
        self.routing.install(topology, revision)
        self._migrate_if_needed()
        self._reclaim_stranded(previous, topology)

    def _reclaim_stranded(self, previous, topology):
        """A cancelled move (replication/migration.py's cancel) leaves a slot with its source only if the target
        held none of its keys when the source counted; a client sent here with -ASK may have written one after
        that count and before this node installed the topology without the mark. Such a slot is marked as
        migrating here again (compare-and-set), so it completes its move and its keys have one owner again."""
        if self.role != "primary" or previous is None or not previous.migrating:
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
            self.server.loop.create_task(self._mark_again(stranded, me.shard_id))

    async def _mark_again(self, stranded, mine):
        from ..cluster.reshard import mark_migrations
        moves = [(slots, src, mine) for src, slots in stranded.items()]
        try:
            await mark_migrations(self.store, moves, fresh_only=True)
            log.warning("slot(s) %s held keys here after their move was cancelled: moving them here after all",
                        sorted(s for slots, _src, _dst in moves for s in slots))
        except Exception as exc:  # noqa: BLE001 - owned elsewhere meanwhile, or marked again already
            log.warning("re-marking slot(s) with keys here after a cancelled move failed: %r", exc)

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
