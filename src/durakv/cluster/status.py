"""The status of a local cluster: every process's state and, for durakv nodes, role, epoch, applied index, lag.

What `durakv cluster status` prints. A LocalCluster holds one as `cluster.status_report` (cluster/local.py).
"""

import json

from .processes import pid_state
from .respclient import APPLIED_FIELDS, EPOCH_FIELDS, LAG_FIELDS, RespError, first_field


class StatusReport:
    """A LocalCluster's status report: `cluster.status_report`.

    Owns no state: every call asks the processes afresh. Handed the cluster (its manifest's views), the process
    launcher (which process is p, by pid or port), the partition proxy (its entry) and the NATS view (meta leader,
    streams). Offers `status()`."""

    def __init__(self, cluster, launcher, partition, nats_view):
        self.cluster = cluster
        self.launcher = launcher
        self.partition = partition
        self.nats_view = nats_view

    def status(self) -> dict:
        """Every process with its state; for durakv nodes also role, epoch, applied index, lag and the INFO
        replication and durability sections as they are."""
        cluster = self.cluster
        meta = self.nats_view.meta_leader()
        nats_rows = []
        for p in cluster.nats:
            pid, state, adopted = self._live_view(p)
            nats_rows.append({"kind": "nats", "name": p.name, "az": p.az, "ports": p.ports, "pid": pid,
                              "state": state, "alive": state != "dead", "meta_leader": p.name == meta,
                              "not_in_manifest": adopted, "log": p.log})
        rows = []
        for p in cluster.nodes:
            pid, state, adopted = self._live_view(p)
            row = {"kind": "durakv", "name": p.name, "shard": p.shard, "az": p.az, "port": p.port, "pid": pid,
                   "state": state, "alive": state != "dead", "not_in_manifest": adopted, "role": None,
                   "epoch": None, "applied_index": None,
                   "lag_ms": None, "replication": {}, "durability": {}, "log": p.log}
            if row["state"] == "running":
                try:
                    info = p.info("replication", "durability", timeout_s=1.0)
                    repl = info.get("replication", {})
                    dur = info.get("durability", {})
                    both = {**dur, **repl}
                    row.update(role=repl.get("role"), replication=repl, durability=dur,
                               epoch=first_field(both, EPOCH_FIELDS),
                               applied_index=first_field(both, APPLIED_FIELDS),
                               lag_ms=first_field(both, LAG_FIELDS))
                except (OSError, RespError) as exc:
                    row["error"] = str(exc) or type(exc).__name__
            rows.append(row)
        proxy = None
        p = self.partition.entry()
        if p is not None:
            pid, state, adopted = self._live_view(p)
            proxy = {"kind": "proxy", "name": p.name, "pid": pid, "state": state, "alive": state != "dead",
                     "control_port": p.ports["control"], "groups": None, "log": p.log}
            if state == "running":
                try:
                    from .netproxy import send_control
                    proxy.update(json.loads(send_control(p.ports["control"], "STATE", timeout_s=1.0)))
                except (OSError, RuntimeError, ValueError) as exc:
                    proxy["error"] = str(exc)
        return {"dir": cluster.dir, "options": cluster.options, "nats_servers": cluster.nats_servers,
                "nats_meta_leader": meta, "streams": self.nats_view.streams() if meta else {},
                "nats": nats_rows, "nodes": rows, "proxy": proxy}

    def _live_view(self, p):
        """(pid, state, not in manifest) of the process that is p, by manifest pid or by port owner."""
        live = self.launcher.live_pid(p)
        if live is None:
            return p.pid, "dead", False
        return live[0], pid_state(live[0], live[1]), live[2]
