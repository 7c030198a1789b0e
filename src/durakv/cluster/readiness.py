"""Readiness of a local cluster: the roles its nodes report, waiting for one primary per shard, failover.

A LocalCluster holds one as `cluster.readiness` (cluster/local.py).
"""

import time

from .manifest import ClusterError
from .processes import ProcessError, wait_for
from .respclient import APPLIED_FIELDS, MASTER_ROLES, RespError, first_field


class ClusterNotReady(ClusterError):
    pass


class Readiness:
    """Roles, readiness and planned failover of a LocalCluster: `cluster.readiness`.

    Owns no state: the roles are what the nodes answer now. Handed the cluster (its manifest's views: nodes,
    shards, options, dir). Offers `masters`, `primary`, `replicas`, `wait_ready` and `failover`."""

    def __init__(self, cluster):
        self.cluster = cluster

    def masters(self, shard=0) -> list:
        return [p for p in self.cluster.shard_nodes(shard) if p.role() in MASTER_ROLES]

    def primary(self, shard=0):
        """The node of the shard that reports role:master (with the local journal backend every node is a
        standalone master: the first by index is returned); None if no node does."""
        masters = self.masters(shard)
        return masters[0] if masters else None

    def replicas(self, shard=0) -> list:
        return [p for p in self.cluster.shard_nodes(shard) if p.role() not in (None,) + MASTER_ROLES]

    def wait_ready(self, timeout_s=60.0, procs=None, single_master=None):
        """Poll until the given durakv nodes (default: all) answer PING and, for the jetstream backend,
        exactly one node per shard reports role:master. Raises ClusterNotReady with what is missing."""
        cluster = self.cluster
        procs = list(procs) if procs is not None else cluster.nodes
        if single_master is None:
            # (a follower region has no master: every node follows its shard's mirror)
            single_master = cluster.options.get("journal_backend") == "jetstream" and not cluster.options.get(
                "follow_region")
        state = {}

        def check():
            state.clear()
            for p in procs:
                if not p.alive:
                    raise ProcessError(f"durakv node {p.name} exited; log {p.log}:\n{p.log_tail()}")
            infos = {}
            for p in procs:
                try:
                    with p.client(1.0) as c:
                        if not c.ping():
                            return False
                        infos[p.name] = c.info("server", "replication", "durability")
                except (OSError, RespError) as exc:
                    state["waiting"] = f"{p.name}: {exc}"
                    state["node"] = p
                    return False
                # Ports are chosen free before the nodes bind them: another program (another cluster started at
                # the same moment) may have taken this one, and it answers while this node is still starting,
                # and will exit. Only the node's own process counts; its exit moves it to another port.
                answered_by = infos[p.name].get("server", {}).get("process_id")
                if p.pid and answered_by is not None and int(answered_by) != p.pid:
                    state["waiting"] = (f"{p.name}: port {p.port} is answered by another process (pid {answered_by}), "
                                        f"not this node's (pid {p.pid})")
                    state["node"] = p
                    return False
            state["infos"] = infos
            if not single_master:
                return True
            for shard in sorted({p.shard for p in procs}):
                members = [p for p in cluster.shard_nodes(shard)]
                roles = {p.name: infos[p.name]["replication"].get("role") if p.name in infos else p.role()
                         for p in members}
                masters = [n for n, r in roles.items() if r in MASTER_ROLES]
                if len(masters) != 1:
                    state["waiting"] = f"shard {shard}: roles {roles}"
                    return False
            return True

        try:
            wait_for(check, timeout_s, "durakv nodes to serve")
        except (TimeoutError, ProcessError) as exc:
            raise ClusterNotReady(self._not_ready_text(exc, state)) from None
        return cluster

    def _not_ready_text(self, exc, state) -> str:
        lines = [str(exc)]
        if state.get("waiting"):
            lines.append("still waiting on " + state["waiting"])
        if state.get("node") is not None:
            lines.append(f"last lines of {state['node'].log}:\n{state['node'].log_tail(10)}")
        wanted = self.cluster.options.get("journal_backend")
        for name, info in (state.get("infos") or {}).items():
            got = info.get("durability", {}).get("journal_backend")
            if wanted and got and got != wanted:
                lines.append(f"node {name} reports journal_backend:{got} although {wanted} was asked for: "
                             f"this server build may not implement the {wanted} backend yet")
        d = self.cluster.dir
        lines.append(f"processes are left running; inspect with `durakv cluster status --dir {d}`, "
                     f"stop with `durakv cluster down --dir {d}`")
        return "\n".join(lines)

    def failover(self, shard=0, to=None, timeout_s=30.0):
        """Send CLUSTER FAILOVER to a replica (default: the live replica with the highest applied index) and
        wait until it reports role:master and no other node of the shard does. Returns (node, seconds)."""
        cluster = self.cluster
        old = self.primary(shard)
        if to is not None:
            target = cluster.get(to)
            if target.shard != shard and target.kind == "durakv":
                shard = target.shard
        else:
            candidates = []
            for p in cluster.shard_nodes(shard):
                if (old is not None and p.name == old.name) or p.state != "running":
                    continue
                try:
                    info = p.info("replication", "durability", timeout_s=1.0)
                except (OSError, RespError):
                    continue
                both = {**info.get("durability", {}), **info.get("replication", {})}
                if both.get("role") in MASTER_ROLES:
                    continue
                applied = first_field(both, APPLIED_FIELDS, 0)
                candidates.append((-(applied if isinstance(applied, int) else 0), p.entry.get("index", 0), p))
            if not candidates:
                raise ClusterError(f"shard {shard}: no live replica to fail over to")
            target = min(candidates, key=lambda c: c[:2])[2]
        if target.kind != "durakv":
            raise ClusterError(f"{target.name} is not a durakv node")
        t0 = time.monotonic()
        with target.client(5.0) as c:
            c.execute("CLUSTER", "FAILOVER")

        def done():
            if target.role() not in MASTER_ROLES:
                return False
            others = [p.name for p in cluster.shard_nodes(shard) if p.name != target.name
                      and p.role() in MASTER_ROLES]
            return not others
        wait_for(done, timeout_s, f"{target.name} to become the primary of shard {shard}", interval_s=0.01)
        return target, time.monotonic() - t0
