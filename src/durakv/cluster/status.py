"""The status of a local cluster: every process's state and, for durakv nodes, role, epoch, applied index, lag.

What `durakv cluster status` prints. Mixed into LocalCluster (cluster/local.py).
"""

import json

from .processes import pid_state
from .respclient import APPLIED_FIELDS, EPOCH_FIELDS, LAG_FIELDS, RespError, first_field


class Status:
    """A LocalCluster's status report."""

    def status(self) -> dict:
        """Every process with its state; for durakv nodes also role, epoch, applied index, lag and the INFO
        replication and durability sections as they are."""
        meta = self.nats_view.meta_leader()
        nats_rows = []
        for p in self.nats:
            pid, state, adopted = self._live_view(p)
            nats_rows.append({"kind": "nats", "name": p.name, "az": p.az, "ports": p.ports, "pid": pid,
                              "state": state, "alive": state != "dead", "meta_leader": p.name == meta,
                              "not_in_manifest": adopted, "log": p.log})
        rows = []
        for p in self.nodes:
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
        if self.proxy is not None:
            p = self.proxy
            pid, state, adopted = self._live_view(p)
            proxy = {"kind": "proxy", "name": p.name, "pid": pid, "state": state, "alive": state != "dead",
                     "control_port": p.ports["control"], "groups": None, "log": p.log}
            if state == "running":
                try:
                    from .netproxy import send_control
                    proxy.update(json.loads(send_control(p.ports["control"], "STATE", timeout_s=1.0)))
                except (OSError, RuntimeError, ValueError) as exc:
                    proxy["error"] = str(exc)
        return {"dir": self.dir, "options": self.options, "nats_servers": self.nats_servers,
                "nats_meta_leader": meta, "streams": self.nats_view.streams() if meta else {},
                "nats": nats_rows, "nodes": rows, "proxy": proxy}

    def _live_view(self, p):
        """(pid, state, not in manifest) of the process that is p, by manifest pid or by port owner."""
        live = self.live_pid(p)
        if live is None:
            return p.pid, "dead", False
        return live[0], pid_state(live[0], live[1]), live[2]
