"""Growing and shrinking a cluster-mode local cluster: start a new shard's nodes, drain and remove a shard.

Mixed into LocalCluster (cluster/local.py); the slots move through cluster/reshard.py.
"""

import asyncio
import os

from ..routing import Node, Shard
from ..routing.topology import bus_port_of, node_id_for
from .bootstrap import durakv_argv
from .manifest import ClusterError, Proc
from .nats_procs import AZS, free_ports, stop_many
from .reshard import ReshardError, mark_migrations, wait_moved


class ShardMembership:
    """Adding and removing shards of a LocalCluster (cluster mode only)."""

    def add_shard(self, replicas=None, timeout_s=60.0, log=None):
        """Starts the nodes of a new shard and adds it to the topology owning no slot (then `rebalance`
        gives it its share). Returns the shard's name."""
        say = log or (lambda msg: None)
        if not self.options.get("cluster_mode"):
            raise ClusterError("add-shard needs a cluster-mode cluster")
        opts = self.options
        replicas = opts["replicas"] if replicas is None else replicas
        shard = max(self.shards) + 1
        certs = self.manifest.get("tls")
        ports = free_ports(2 * (1 + replicas), exclude={port for p in self.processes for port in p.ports.values()})
        metrics_ports = ports[1 + replicas:]     # each node's --metrics-port
        procs, members = [], []
        for i in range(1 + replicas):
            az = AZS[i % len(AZS)]
            name = f"{shard}-{i}"
            node_id = node_id_for(f"{os.path.basename(self.dir)}:{name}")
            node_dir = os.path.join(self.dir, "nodes", name)
            os.makedirs(node_dir, exist_ok=True)
            argv = durakv_argv(ports[i], node_dir, self.node_nats_servers(az), shard, az, node_id,
                               opts["durability"], opts["journal_backend"], cluster_mode=True, tls=certs,
                               metrics_port=metrics_ports[i])
            entry = {"kind": "durakv", "name": name, "node_id": node_id, "shard": shard, "index": i, "az": az,
                     "ports": {"client": ports[i], "metrics": metrics_ports[i]}, "pid": None, "start_time": None, "dir": node_dir,
                     "log": os.path.join(self.dir, "logs", f"{name}.log"), "argv": argv,
                     "tls_ca": certs["ca"] if certs else None}
            self.manifest["processes"].append(entry)
            procs.append(Proc(entry))
            members.append(Node(id=node_id, ip="127.0.0.1", port=0 if certs else ports[i],
                                tls_port=ports[i] if certs else 0, bus_port=bus_port_of(ports[i]), az=az,
                                repl_offset=1))
        new = Shard(id=node_id_for("shard:%d" % shard), name=str(shard), config_epoch=0, slots=(),
                    primary=members[0], replicas=tuple(members[1:]))

        async def add(store):
            for _ in range(50):
                topology, revision = await store.get_topology()
                try:
                    return await store.put_topology(topology.with_shard(new), revision)
                except Exception:  # noqa: BLE001 - a concurrent change: read again
                    await asyncio.sleep(0.05)
            raise ClusterError("could not add the shard to the topology")
        self._store_call(add)
        self.manifest["options"]["shards"] = len(self.shards) + 1
        for p in procs:
            self._spawn(p)
        self.save()
        self.wait_ready(timeout_s, procs=procs)
        say(f"shard {shard} started: {', '.join(p.name for p in procs)}")
        return str(shard)

    def remove_shard(self, shard, timeout_s=600.0, log=None):
        """Moves every slot of `shard` to the other shards (online), removes it from the topology and stops its
        nodes."""
        say = log or (lambda msg: None)
        name = str(shard)

        async def drain(store):
            topology, _rev = await store.get_topology()
            victim = next((sh for sh in topology.shards if sh.name == name), None)
            if victim is None:
                raise ReshardError("no shard %s" % name)
            others = sorted((sh for sh in topology.shards if sh.id != victim.id), key=lambda sh: sh.name)
            if not others:
                raise ReshardError("cannot remove the last shard")
            slots = [s for a, b in victim.slots for s in range(a, b + 1)]
            moves = []
            for i, other in enumerate(others):
                part = slots[i::len(others)]
                if part:
                    moves.append((part, victim.id, other.id))
            if moves:
                await mark_migrations(store, moves)
                await wait_moved(store, moves, timeout_s)
            for _ in range(50):
                topology, revision = await store.get_topology()
                try:
                    await store.put_topology(topology.without_shard(victim.id), revision)
                    return
                except Exception:  # noqa: BLE001
                    await asyncio.sleep(0.05)
            raise ReshardError("could not remove the shard from the topology")
        self._store_call(drain, timeout_s + 60)
        members = [p for p in self.nodes if str(p.shard) == name]
        stop_many({p.name: (p.pid, p.start_time) for p in members}, 10.0)
        self.manifest["processes"] = [e for e in self.manifest["processes"] if not (
            e["kind"] == "durakv" and str(e.get("shard")) == name)]
        self.manifest["options"]["shards"] = len(self.shards)
        self.save()
        say(f"shard {name} removed ({len(members)} node(s) stopped)")
