"""Growing and shrinking a cluster-mode local cluster: start a new shard's nodes and add them (`durakv cluster
add-node` through cluster/admin.py), drain and remove a shard.

A LocalCluster holds one as `cluster.shard_membership` (cluster/local.py).
"""

import asyncio
import os

from .nodeargs import durakv_argv, layout_azs, node_config_text
from .manifest import ClusterError, Proc
from .processes import free_ports, stop_many
from .secrets import _write_private


class ShardMembership:
    """Adding and removing shards of a LocalCluster (cluster mode only): `cluster.shard_membership`.

    Owns no state: the shards are the manifest's nodes and the topology's shards. Handed the cluster (manifest,
    views, secrets, admin operations, save), the process launcher (starts and stops the shard's nodes), the
    Readiness (waits until they serve) and the partition proxy (the NATS servers a node of an AZ dials). Offers
    `add_shard` and `remove_shard`."""

    def __init__(self, cluster, launcher, readiness, partition):
        self.cluster = cluster
        self.launcher = launcher
        self.readiness = readiness
        self.partition = partition

    def add_shard(self, replicas=None, timeout_s=60.0, log=None):
        """Starts the nodes of a new shard (unassigned) and adds them as a shard owning no slot (then
        `rebalance` gives it its share). Returns the shard's name."""
        say = log or (lambda msg: None)
        cluster = self.cluster
        if not cluster.options.get("cluster_mode"):
            raise ClusterError("add-shard needs a cluster-mode cluster")
        opts = cluster.options
        replicas = opts["replicas"] if replicas is None else replicas
        shard = max(cluster.shards) + 1
        manifest = cluster.manifest
        certs = manifest.get("tls")
        ports = free_ports(2 * (1 + replicas), exclude={port for p in cluster.processes for port in p.ports.values()},
                           port_range=opts.get("port_range"))
        metrics_ports = ports[1 + replicas:]     # each node's --metrics-port
        procs = []
        secrets = cluster.secrets
        for i, az in enumerate(layout_azs(shard, 1 + replicas)):
            name = f"{shard}-{i}"
            node_dir = os.path.join(cluster.dir, "nodes", name)
            os.makedirs(node_dir, exist_ok=True)
            conf = os.path.join(node_dir, "durakv.conf")
            _write_private(conf, node_config_text(manifest.get("password") and secrets.resp_password))
            argv = durakv_argv(ports[i], node_dir, self.partition.node_nats_servers(az), az, opts["durability"],
                               opts["journal_backend"], cluster_mode=True, tls=certs, metrics_port=metrics_ports[i],
                               config_file=conf)
            entry = {"kind": "durakv", "name": name, "node_id": None, "shard": shard, "index": i, "az": az,
                     "ports": {"client": ports[i], "metrics": metrics_ports[i]}, "pid": None, "start_time": None,
                     "dir": node_dir, "log": os.path.join(cluster.dir, "logs", f"{name}.log"), "argv": argv,
                     "tls_ca": certs["ca"] if certs else None,
                     "password_file": (os.path.join(manifest["secrets"], "resp.pass")
                                       if manifest.get("password") else None)}
            manifest["processes"].append(entry)
            procs.append(Proc(entry))
        for p in procs:
            self.launcher.spawn(p)
        cluster.save()
        self.readiness.wait_ready(timeout_s, procs=procs, single_master=False)
        name = asyncio.run(cluster.admin(say=say).add_nodes(["127.0.0.1:%d" % p.port for p in procs],
                                                            timeout_s=timeout_s))
        if name != str(shard):
            raise ClusterError("the new shard was named %s, not %s" % (name, shard))
        for p in procs:
            p.entry["node_id"] = cluster.node_id_of(p)
        manifest["options"]["shards"] = len(cluster.shards)
        cluster.save()
        say(f"shard {shard} started: {', '.join(p.name for p in procs)}")
        return str(shard)

    def remove_shard(self, shard, timeout_s=600.0, log=None):
        """Moves every slot of `shard` to the other shards (online), removes it from the topology, revokes its
        nodes' identities and stops them."""
        say = log or (lambda msg: None)
        name = str(shard)
        cluster = self.cluster
        asyncio.run(cluster.admin(say=say).remove_shard(name, timeout_s=timeout_s))
        members = [p for p in cluster.nodes if str(p.shard) == name]
        stop_many({p.name: (p.pid, p.start_time) for p in members}, 10.0)
        cluster.manifest["processes"] = [e for e in cluster.manifest["processes"] if not (
            e["kind"] == "durakv" and str(e.get("shard")) == name)]
        cluster.manifest["options"]["shards"] = len(cluster.shards)
        cluster.save()
        say(f"shard {name} removed ({len(members)} node(s) stopped)")
