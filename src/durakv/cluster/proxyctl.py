"""The partition proxy of a partitionable local cluster: its ports, start and stop, control lines.

The proxy itself is cluster/netproxy.py (a process of its own); this is how LocalCluster runs it and routes
each durakv node's NATS connections through it. A LocalCluster holds one as `cluster.partition`
(cluster/local.py).
"""

import json
import os
import sys

from .manifest import ClusterError, Proc, manifest_path
from .nats_procs import AZS
from .processes import ProcessError, free_ports, stop_many, wait_for


def choose_proxy_ports(base_port, port_range=None, exclude=()):
    """Listeners of the partition proxy: a client and a route port per NATS node (free ports not in exclude, from
    port_range when given)."""
    ports = free_ports(2 * len(AZS), exclude=set(exclude) | (set(range(base_port, base_port + 40)) if base_port
                                                              else set()),
                       port_range=port_range)
    return {f"nats-{az}": {"client": ports[2 * i], "cluster": ports[2 * i + 1]} for i, az in enumerate(AZS)}


class PartitionProxy:
    """The partition proxy's part of a LocalCluster: `cluster.partition`.

    Owns the proxy's configuration file (DIR/netproxy.json); its process entry (ports, links, pid) is in the
    cluster's manifest. Handed the cluster (manifest, views, save, reload) and the process launcher (it spawns
    and stops the proxy like any process). Offers `entry()` (the proxy's manifest entry, or None),
    `node_nats_servers(az)`, `start(nats, ports)`, `stop()` and `control(line)`."""

    def __init__(self, cluster, launcher):
        self.cluster = cluster
        self.launcher = launcher

    def entry(self):
        """The partition proxy's manifest entry, or None (the cluster is not partitionable)."""
        for p in self.cluster.processes:
            if p.kind == "proxy":
                return p
        return None

    def node_nats_servers(self, az) -> str:
        """The NATS servers a durakv node of `az` connects to: its own AZ's directly, the others' through the
        partition proxy when there is one."""
        cluster = self.cluster
        urls = [u for u in cluster.nats_servers.split(",") if u]
        proxy = self.entry()
        if proxy is None:
            return ",".join(urls)
        own, others = [], []
        scheme = "tls" if cluster.manifest.get("tls") else "nats"
        for n in cluster.nats:
            if n.az == az:
                own.append(f"{scheme}://127.0.0.1:{n.ports['client']}")
            else:
                others.append(f"{scheme}://127.0.0.1:{proxy.entry['links'][n.name]['client']}")
        return ",".join(own + others)

    def start(self, nats, proxy_ports, timeout_s=15.0, exclude=()):
        """Starts the proxy in front of the NATS servers `nats` (nats_procs.NatsCluster) on `proxy_ports`
        (choose_proxy_ports) and records it first in the manifest; returns once it listens. Its control port is
        none of `exclude` (ports chosen for processes not started yet)."""
        from .netproxy import CONFIG_NAME, send_control
        cluster = self.cluster
        control = free_ports(1, exclude=set(exclude) | set(nats.ports)
                             | {p for v in proxy_ports.values() for p in v.values()},
                             port_range=cluster.options.get("port_range"))[0]
        links = []
        for n in nats.nodes:
            links.append({"name": f"{n.name}/client", "listen": proxy_ports[n.name]["client"],
                          "target": n.client_port, "az": n.az})
            links.append({"name": f"{n.name}/route", "listen": proxy_ports[n.name]["cluster"],
                          "target": n.cluster_port, "az": n.az})
        config_path = os.path.join(cluster.dir, CONFIG_NAME)
        with open(config_path + ".tmp", "w") as f:
            json.dump({"control_port": control, "links": links, "azs": list(AZS),
                       "manifest": manifest_path(cluster.dir)}, f, indent=2)
        os.replace(config_path + ".tmp", config_path)
        entry = {"kind": "proxy", "name": "netproxy", "az": None,
                 "ports": {"control": control, **{f"{l['name']}": l["listen"] for l in links}},
                 "links": proxy_ports, "pid": None, "start_time": None, "dir": cluster.dir, "config": config_path,
                 "log": os.path.join(cluster.dir, "logs", "netproxy.log"),
                 "argv": [sys.executable, "-m", "durakv.cluster.netproxy", config_path]}
        cluster.manifest["processes"] = [e for e in cluster.manifest["processes"] if e.get("kind") != "proxy"]
        cluster.manifest["processes"].insert(0, entry)
        p = Proc(entry)
        self.launcher.spawn(p)
        cluster.save()

        def ready():
            if not p.alive:
                raise ProcessError(f"the partition proxy exited:\n{p.log_tail()}")
            send_control(control, "STATE", timeout_s=1.0)
            return True
        wait_for(ready, timeout_s, "the partition proxy to listen")

    def stop(self):
        p = self.entry()
        if p is not None and p.pid:
            stop_many({p.name: (p.pid, p.start_time)}, 5.0)

    def control(self, line) -> str:
        """Sends one control line (CUT az1 / HEAL / STATE) to the partition proxy."""
        from .netproxy import send_control
        cluster = self.cluster.reload()
        p = self.entry()
        if p is None:
            raise ClusterError(f"the cluster in {cluster.dir} is not partitionable: start it with "
                               f"`durakv cluster up --partitionable`")
        if not self.launcher.live_pid(p):
            raise ClusterError(f"the partition proxy of {cluster.dir} is not running")
        return send_control(p.ports["control"], line)
