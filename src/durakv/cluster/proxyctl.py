"""The partition proxy of a partitionable local cluster: its ports, start and stop, control lines.

The proxy itself is cluster/netproxy.py (a process of its own); this is how LocalCluster runs it and routes
each durakv node's NATS connections through it. Mixed into LocalCluster (cluster/local.py).
"""

import json
import os
import sys

from .manifest import ClusterError, Proc, manifest_path
from .nats_procs import AZS
from .processes import ProcessError, free_ports, stop_many, wait_for


def choose_proxy_ports(base_port):
    """Listeners of the partition proxy: a client and a route port per NATS node (free ports)."""
    ports = free_ports(2 * len(AZS), exclude=set(range(base_port, base_port + 40)) if base_port else ())
    return {f"nats-{az}": {"client": ports[2 * i], "cluster": ports[2 * i + 1]} for i, az in enumerate(AZS)}


class PartitionProxy:
    """The partition proxy's part of a LocalCluster."""

    @property
    def proxy(self):
        """The partition proxy's manifest entry, or None (the cluster is not partitionable)."""
        for p in self.processes:
            if p.kind == "proxy":
                return p
        return None

    def node_nats_servers(self, az) -> str:
        """The NATS servers a durakv node of `az` connects to: its own AZ's directly, the others' through the
        partition proxy when there is one."""
        urls = [u for u in self.nats_servers.split(",") if u]
        proxy = self.proxy
        if proxy is None:
            return ",".join(urls)
        own, others = [], []
        scheme = "tls" if self.manifest.get("tls") else "nats"
        for n in self.nats:
            if n.az == az:
                own.append(f"{scheme}://127.0.0.1:{n.ports['client']}")
            else:
                others.append(f"{scheme}://127.0.0.1:{proxy.entry['links'][n.name]['client']}")
        return ",".join(own + others)

    def _start_proxy(self, nats, proxy_ports, timeout_s=15.0):
        from .netproxy import CONFIG_NAME, send_control
        control = free_ports(1, exclude=set(nats.ports) | {p for v in proxy_ports.values() for p in v.values()})[0]
        links = []
        for n in nats.nodes:
            links.append({"name": f"{n.name}/client", "listen": proxy_ports[n.name]["client"],
                          "target": n.client_port, "az": n.az})
            links.append({"name": f"{n.name}/route", "listen": proxy_ports[n.name]["cluster"],
                          "target": n.cluster_port, "az": n.az})
        config_path = os.path.join(self.dir, CONFIG_NAME)
        with open(config_path + ".tmp", "w") as f:
            json.dump({"control_port": control, "links": links, "azs": list(AZS),
                       "manifest": manifest_path(self.dir)}, f, indent=2)
        os.replace(config_path + ".tmp", config_path)
        entry = {"kind": "proxy", "name": "netproxy", "az": None,
                 "ports": {"control": control, **{f"{l['name']}": l["listen"] for l in links}},
                 "links": proxy_ports, "pid": None, "start_time": None, "dir": self.dir, "config": config_path,
                 "log": os.path.join(self.dir, "logs", "netproxy.log"),
                 "argv": [sys.executable, "-m", "durakv.cluster.netproxy", config_path]}
        self.manifest["processes"] = [e for e in self.manifest["processes"] if e.get("kind") != "proxy"]
        self.manifest["processes"].insert(0, entry)
        p = Proc(entry)
        self._spawn(p)
        self.save()

        def ready():
            if not p.alive:
                raise ProcessError(f"the partition proxy exited:\n{p.log_tail()}")
            send_control(control, "STATE", timeout_s=1.0)
            return True
        wait_for(ready, timeout_s, "the partition proxy to listen")

    def _stop_proxy(self):
        p = self.proxy
        if p is not None and p.pid:
            stop_many({p.name: (p.pid, p.start_time)}, 5.0)

    def proxy_control(self, line) -> str:
        """Sends one control line (CUT az1 / HEAL / STATE) to the partition proxy."""
        from .netproxy import send_control
        p = self.reload().proxy
        if p is None:
            raise ClusterError(f"the cluster in {self.dir} is not partitionable: start it with "
                               f"`durakv cluster up --partitionable`")
        if not self.live_pid(p):
            raise ClusterError(f"the partition proxy of {self.dir} is not running")
        return send_control(p.ports["control"], line)
