"""Cluster mode in the server: the pipeline's slot check and what CLUSTER commands read.

`ClusterRouting` is the pipeline's `router`: it holds the current routing.Router, built from one immutable
Topology snapshot and swapped whole whenever a new topology arrives (from the coordination store's watch on a
JetStream shard, or built once for a one-node cluster on the local journal). Admission calls `check()` for
every keyed command, EXEC (with every queued key) and every command a script runs; the reply is None (serve)
or Valkey's redirection text (-MOVED, -ASK, -CROSSSLOT, -TRYAGAIN, -CLUSTERDOWN).
"""

import logging
import time

from .. import messages
from ..routing import Node, Router, Shard, Topology, key_slot
from ..routing.migrations import MigrationLog
from ..routing.topology import bus_port_of, node_id_for
from ..routing.slots import SLOTS
from ..scripting.runner import ALLOW_CROSS_SLOT

log = logging.getLogger("durakv.cluster")

# Sharded pub/sub commands: their "keys" are channels (routed by slot, servable on replicas, never counted).


def single_node_topology(node_id: str, ip: str, port: int, tls_port: int, shard_name: str = "0") -> Topology:
    """A cluster of one shard with one primary owning all 16384 slots."""
    me = Node(id=node_id, ip=ip, port=port, tls_port=tls_port, bus_port=bus_port_of(port or tls_port), repl_offset=1)
    shard = Shard(id=node_id_for("shard:" + shard_name), name=shard_name, config_epoch=1,
                  slots=((0, SLOTS - 1),), primary=me, replicas=())
    return Topology([shard], current_epoch=1)


def unassigned_topology(node_id: str, ip: str, port: int, tls_port: int) -> Topology:
    """What a node that has not joined a cluster yet serves: itself, owning no slot (a fresh Valkey cluster node:
    cluster_state:fail, cluster_slots_assigned:0, cluster_known_nodes:1)."""
    me = Node(id=node_id, ip=ip, port=port, tls_port=tls_port, bus_port=bus_port_of(port or tls_port))
    return Topology([Shard(id=node_id_for("unassigned:" + node_id), name="unassigned", config_epoch=0, slots=(),
                           primary=me, replicas=())], current_epoch=0)


class ClusterRouting:
    """The pipeline's router in cluster mode. `topology`/`revision` are what CLUSTER commands answer from."""

    def __init__(self, server, myself_id: str):
        self.server = server
        self.myself_id = myself_id
        self.topology = None
        self.revision = 0
        self.router = None
        self.moving = set()             # keys being moved to another shard right now: writes get -TRYAGAIN
        self.migrator_session = None    # ... except the mover's own (replication/migration.py)
        self.migrations = MigrationLog()  # what CLUSTER GETSLOTMIGRATIONS lists, fed by every install
        self._waiters = []              # [(test, fn)]: fn() once test(installed topology) holds

    def install(self, topology, revision=0):
        """Use a new topology from now on (one atomic swap: requests in flight finish with the old one)."""
        cfg = self.server.config
        self.router = Router(topology, self.myself_id,
                             require_full_coverage=cfg["cluster-require-full-coverage"],
                             allow_reads_when_down=cfg["cluster-allow-reads-when-down"],
                             allow_pubsubshard_when_down=cfg["cluster-allow-pubsubshard-when-down"],
                             endpoint=cfg["cluster-preferred-endpoint-type"])
        self.topology = topology
        self.revision = revision
        if self.server.pipeline.router is self:     # the compiled core's slot codes are this router's now
            self.server.pipeline.routing_changed()
        mine = self.router.my_shard
        self.migrations.observe(topology, revision, int(time.time()), mine.id if mine is not None else None)
        if self._waiters:
            waiting = self._waiters
            self._waiters = []
            for test, fn in waiting:
                self.when(test, fn)

    def when(self, test, fn):
        """fn() once test(topology) holds for the installed topology (at once if it does now)."""
        if self.topology is not None and test(self.topology):
            fn()
        else:
            self._waiters.append((test, fn))

    def when_installed(self, revision, fn):
        """fn() once a topology of `revision` or later is installed here (at once if one is)."""
        self.when(lambda _t: self.revision >= revision, fn)

    def _exists_in(self, db):
        ks = self.server.keyspace
        data = db.data

        def exists(key):
            return key in data and not ks.is_expired(db, key)
        return exists

    def check(self, session, cmd, args, queue, run):
        router = self.router
        if router is None:
            return messages.CLUSTERDOWN_STATE
        db = self.server.keyspace.dbs[session.db_id]
        if run is not None:
            return self._check_script(router, run, cmd, args, db)
        if queue is not None:
            keys = [a[i] for c, a in queue for i in c.key_indexes(a)]
            write = session.multi_write
        else:
            keys = cmd.keys(args)
            write = cmd.write
        if not keys:
            return None
        if self.moving and write and session is not self.migrator_session and any(k in self.moving for k in keys):
            return messages.TRYAGAIN   # the key is on its way to another shard: retry once it has arrived
        refusal = router.route(keys, write, session.readonly_mode, session.asking or "asking" in cmd.flags,
                               self._exists_in(db), session.tls, cmd.sharded_pubsub)
        return None if refusal is None else refusal.text

    def _check_script(self, router, run, cmd, args, db):
        keys = cmd.keys(args)
        if run.cluster_slot is None:
            declared = run.declared_keys
            run.cluster_slot = key_slot(declared[0]) if declared else -1
        caller = run.caller
        if self.moving and cmd.write and caller is not self.migrator_session and any(k in self.moving for k in keys):
            return messages.TRYAGAIN   # a script's write to a key on its way to another shard, as check() above
        text, run.cluster_slot = router.route_script_call(
            keys, cmd.fullname, run.cluster_slot, cmd.write,
            caller.readonly_mode if caller is not None else False,
            caller.asking if caller is not None else False, self._exists_in(db),
            caller.tls if caller is not None else False, cmd.sharded_pubsub,
            allow_cross_slot=bool(run.flags & ALLOW_CROSS_SLOT))
        return text

    # -- what CLUSTER commands and INFO read ----------------------------------------------------------
    def myself(self):
        return self.topology.nodes.get(self.myself_id) if self.topology is not None else None

    def view(self):
        """The topology as CLUSTER SLOTS/SHARDS/NODES/REPLICAS show it: the stored one, with the nodes this node
        has not heard from for cluster-node-timeout ms marked failed (clients are not sent to them)."""
        topology = self.topology
        node = self.server.cluster_node
        if topology is None or node is None:
            return topology
        for node_id in node.members.silent_nodes(topology.nodes, self.server.config["cluster-node-timeout"]):
            if topology.nodes[node_id].health != "fail":
                topology = topology.with_node(node_id, health="fail")
        return topology

    def offsets(self) -> dict:
        """This node's live replication offset (the journal index it has applied; at least 1 once serving),
        which CLUSTER SLOTS/SHARDS show instead of the topology's stored one."""
        srv = self.server
        node = srv.cluster_node
        if node is not None:
            offset = node.applied_index
        else:
            offset = srv.durability.committed
        return {self.myself_id: max(1, offset)}
