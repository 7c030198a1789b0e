"""A shard's members as each hears the others: heartbeats with applied offsets (INFO replication, ROLE, WAIT)
and every node's liveness beat (the failure detector of CLUSTER SLOTS/NODES)."""

import asyncio
import json
import logging
from dataclasses import dataclass

from ..cluster import natsnames as nn
from .clock import monotonic_ms

log = logging.getLogger("durakv.replication")


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
    loading: bool = False  # still loading its snapshot and the journal (it answers -LOADING)


class Members:
    """A shard member's view of the others: `node.members`. Heartbeats sent and heard, the replicas' applied
    offsets and WAIT on them, and every node's liveness (the failure detector of CLUSTER SLOTS/NODES).

    Owns `peers` (node id -> PeerStatus of the shard's other nodes), `heard_ms` (node id -> mono ms of its last
    liveness beat, every shard's nodes), the WAIT waiters and the beats sent while loading. Interface:
    `subscribe()`, `beat()` (the control loop's tick), `beat_while_loading()` / `loading_done()`,
    `send_status_soon()`, `replica_statuses()`, `replicas_heard_within()`, `when_replicas()`,
    `silent_nodes()`. It reads the node's id, AZ, role, applied index, epoch, NATS connection and bus."""

    PEER_FRESH_MS = 3000     # a node not heard from for this long is not listed as connected
    HEARTBEAT_S = 0.5        # how often a node tells the shard its applied index, and every node it is alive
    _ALIVE = nn.ALIVE        # every node's beat, heard by every node: the failure detector of CLUSTER SLOTS/NODES

    def __init__(self, node):
        self.node = node
        self.server = node.server
        self.peers = {}
        self.heard_ms = {}
        self.started_ms = monotonic_ms()
        self._replica_waiters = []      # [index, numreplicas, fn]: WAIT on the primary
        self._status_handle = None
        self._loading_beats = None      # the heartbeats sent while loading, before the control loop runs

    async def subscribe(self, cluster_mode: bool):
        node = self.node
        await node.bus.subscribe(nn.STATUS % node.shard, self._on_status)
        if cluster_mode:
            await node.bus.subscribe(self._ALIVE, self._on_alive)

    def beat(self):
        """The shard hears this node's applied index, and every node that it is alive."""
        self._send_status()
        self._send_alive()

    def beat_while_loading(self):
        self._loading_beats = self.server.loop.create_task(self._beat_while_loading())

    def loading_done(self):
        """The control loop sends the beats from now on."""
        if self._loading_beats is not None:
            self._loading_beats.cancel()
            self._loading_beats = None

    def _send_alive(self):
        node = self.node
        if node.nc is not None and not node.nc.is_closed and node.routing is not None:
            node.bus.send(self._ALIVE, node.node_id.encode())

    async def _on_alive(self, msg):
        self.heard_ms[msg.data.decode("utf-8", "replace")] = monotonic_ms()

    def silent_nodes(self, node_ids, timeout_ms) -> set:
        """The nodes (of node_ids, never this one) not heard from for longer than timeout_ms (Valkey's
        cluster-node-timeout): down, or cut off from the coordination store's majority. A node never heard from
        counts from this node's start, so that a node just started does not call every other node failed."""
        now = monotonic_ms()
        return {n for n in node_ids
                if n != self.node.node_id and now - self.heard_ms.get(n, self.started_ms) > timeout_ms}

    async def _beat_while_loading(self):
        """Start-up: the heartbeats go out while the node loads (the control loop, which sends them once it runs,
        starts after the load), so the shard hears a restarted node at once: its failure detector does not call
        it failed, and a replica storing a snapshot keeps the entries it still has to apply."""
        while True:
            try:
                self._send_status()
                self._send_alive()
            except Exception as exc:  # noqa: BLE001 - a beat that failed is sent again next time
                log.debug("heartbeat while loading failed: %r", exc)
            await asyncio.sleep(self.HEARTBEAT_S)

    def send_status_soon(self):
        """A replica tells the shard its applied index, at most every 5 ms while entries arrive (WAIT on the
        primary is answered from these), and every control tick anyway."""
        if self._status_handle is None and self.node.nc is not None:
            self._status_handle = self.server.loop.call_later(0.005, self._send_status)

    def _send_status(self):
        self._status_handle = None
        node = self.node
        if node.nc is None or node.nc.is_closed:
            return
        cfg = self.server.config
        ip, port, tls_port = cfg.announced()
        doc = {"id": node.node_id, "ip": ip, "port": port or tls_port, "az": node.az, "role": node.role,
               "applied": node.applied_index, "epoch": node.epoch}
        if self.server.loading:
            doc["loading"] = 1
        body = json.dumps(doc).encode()
        node.bus.send(nn.STATUS % node.shard, body)

    async def _on_status(self, msg):
        try:
            doc = json.loads(msg.data)
            peer_id = str(doc["id"])
            status = PeerStatus(peer_id, str(doc["ip"]), int(doc["port"]), str(doc.get("az", "")),
                                str(doc["role"]), int(doc["applied"]), int(doc.get("epoch", 0)), monotonic_ms(),
                                bool(doc.get("loading", 0)))
        except (ValueError, KeyError, TypeError):
            return
        node = self.node
        if peer_id == node.node_id:
            return
        self.peers[peer_id] = status
        if status.role == "primary" and node.role != "primary" and status.epoch >= node.epoch:
            node.follower.note_known(status.applied)
        if self._replica_waiters:
            self._check_replica_waiters()

    def replica_statuses(self):
        """The shard's replicas heard from recently, as (PeerStatus, ...) sorted by node id."""
        now = monotonic_ms()
        return tuple(sorted((p for p in self.peers.values()
                             if p.role == "replica" and now - p.seen_ms <= self.PEER_FRESH_MS),
                            key=lambda p: p.node_id))

    def replicas_heard_within(self, max_lag_ms) -> int:
        """Replicas for min-replicas-to-write: heard from within max_lag_ms and not loading (as Valkey counts a
        replica only once its sync is done)."""
        now = monotonic_ms()
        return sum(1 for p in self.peers.values()
                   if p.role == "replica" and not p.loading and now - p.seen_ms <= max_lag_ms)

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
