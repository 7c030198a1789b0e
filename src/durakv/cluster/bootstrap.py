"""Bringing a local cluster up: ports, each node's command line, the first topology, `LocalCluster.up`.

`up` starts everything detached (own sessions, logs in dir/logs) and writes dir/manifest.json (see
cluster/manifest.py); a port another program takes between choosing and binding it moves that process to
another free port. Every wait is a poll with a deadline. Mixed into LocalCluster (cluster/local.py).
"""

import asyncio
import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from ..journal.jetstream import connect
from ..routing import Node, Shard, Topology
from ..routing.topology import bus_port_of, node_id_for
from .manifest import MANIFEST_VERSION, ClusterError, manifest_path
from .nats_procs import AZS, NatsCluster, ProcessError, free_ports, port_is_free
from .proxyctl import choose_proxy_ports
from .roles import ClusterNotReady
from .settings import NONE_REFUSED
from .store import NatsStore
from .tls import client_context, make_certs

if TYPE_CHECKING:
    from .local import LocalCluster

log = logging.getLogger("durakv.cluster")


def durakv_argv(port, node_dir, nats_servers, shard, az, node_id, durability, journal_backend, extra=(),
                cluster_mode=True, tls=None, metrics_port=0):
    """The command line of one node. tls ({"cert", "key", "ca"}): clients only over TLS (on `port`), NATS too;
    metrics_port: its own Prometheus metrics (server/metrics.py), 0 for none."""
    if tls:
        ports = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", tls["cert"], "--tls-key-file",
                 tls["key"], "--tls-ca-cert-file", tls["ca"], "--tls-auth-clients", "no",
                 "--journal-nats-tls-ca-file", tls["ca"]]
    else:
        ports = ["--port", str(port)]
    return [sys.executable, "-m", "durakv", "server"] + ports + [
        "--bind", "127.0.0.1", "--dir", node_dir, "--journal-backend", journal_backend,
        "--journal-nats-servers", nats_servers, "--shard", str(shard), "--availability-zone", az,
        "--node-id", node_id, "--durability", durability,
        "--cluster-enabled", "yes" if cluster_mode else "no"] + (
        ["--metrics-port", str(metrics_port)] if metrics_port else []) + list(extra)


PORT_ATTEMPTS = 3


def _port_clash(log_text: str) -> bool:
    """Whether a process's log says it could not bind its port (taken after it was chosen as free)."""
    text = log_text.lower()
    return "address already in use" in text or "errno 98" in text or "already in use" in text


def slot_ranges(shards: int):
    """16384 slots split into `shards` contiguous ranges, as `redis-cli --cluster create` splits them."""
    per = 16384 / shards
    return [(int(round(i * per)), int(round((i + 1) * per)) - 1) for i in range(shards)]


def initial_topology(shard_nodes, tls=False):
    """The topology `cluster up` stores before any node starts: per shard its slot range, its node 0 as
    primary (the node that normally wins the first lease; the winner rewrites it when it promotes) and the
    others as replicas. shard_nodes: [[(node_id, port), ...] per shard]."""
    shards = []
    for n, ((a, b), nodes) in enumerate(zip(slot_ranges(len(shard_nodes)), shard_nodes)):
        # repl_offset 1: a replica is listed by CLUSTER SLOTS (Valkey hides those at offset 0 as not in sync)
        members = [Node(id=node_id, ip="127.0.0.1", port=0 if tls else port, tls_port=port if tls else 0,
                        bus_port=bus_port_of(port), az=AZS[i % len(AZS)], repl_offset=1)
                   for i, (node_id, port) in enumerate(nodes)]
        shards.append(Shard(id=node_id_for("shard:%d" % n), name=str(n), config_epoch=1, slots=((a, b),),
                            primary=members[0], replicas=tuple(members[1:])))
    return Topology(shards, current_epoch=1)


def store_topology(nats_servers, topology, timeout_s=30.0, tls_ca=None):
    """Writes the cluster's first topology into the coordination store (only if none is there yet)."""
    async def put():
        nc = await connect([u for u in nats_servers.split(",") if u], name="durakv-cluster-up",
                           tls=client_context(tls_ca) if tls_ca else None)
        try:
            delay_s = 0.05
            while True:
                # Right after NATS starts, JetStream may still be electing the bucket's leader ("no responders",
                # timeouts): retried until the deadline. A compare-and-set lost to another writer is read again.
                try:
                    store = await NatsStore(nc).open()
                    current, revision = await store.get_topology()
                    if current is None:
                        await store.put_topology(topology, revision)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - retried; the deadline bounds it
                    log.debug("storing the first topology failed (%r); retrying", exc)
                    await asyncio.sleep(delay_s)
                    delay_s = min(delay_s * 2, 1.0)
        finally:
            await nc.close()
    asyncio.run(asyncio.wait_for(put(), timeout_s))


class Bootstrap:
    """Starting a LocalCluster: `up` and the port clashes it survives."""

    @classmethod
    def up(cls, dir, shards=1, replicas=2, durability="sync", base_port=None, journal_backend="jetstream",
           timeout_s=60.0, extra_server_args=(), log=None, cluster_mode=True, tls=False,
           partitionable=False, env=None) -> "LocalCluster":
        """Start NATS (az1..az3) and shards x (1 + replicas) durakv nodes; return once the cluster serves.

        Ports with base_port P: NATS on P..P+8 (clients, routes, monitoring), durakv nodes from P+10;
        else free ports. A directory whose previous cluster is fully stopped is reused with its data.
        On a readiness timeout the processes stay up (manifest written) and ClusterNotReady is raised.
        partitionable: every connection into a NATS node from another AZ goes through the partition proxy
        (cluster/netproxy.py), so `durakv chaos partition` can cut an AZ off. env: extra environment variables
        of the durakv nodes (kept in the manifest, so restarts get them too)."""
        dir = os.path.abspath(str(dir))
        say = log or (lambda msg: None)
        if durability == "none" and journal_backend == "jetstream":
            raise ClusterError("--durability none: " + NONE_REFUSED)
        if shards < 1 or replicas < 0:
            raise ClusterError("need --shards >= 1 and --replicas >= 0")
        if os.path.exists(manifest_path(dir)):
            old = cls.load(dir)
            running = [p.name for p in old.processes if old.live_pid(p)]
            if running:
                raise ClusterError(f"a cluster is already running in {dir} ({', '.join(running)}); "
                                   f"stop it with `durakv cluster down --dir {dir}`")
        os.makedirs(os.path.join(dir, "logs"), exist_ok=True)
        nodes_per_shard = 1 + replicas
        n_durakv = shards * nodes_per_shard
        certs = make_certs(dir) if tls else None
        proxy_ports = choose_proxy_ports(base_port) if partitionable else None
        nats = NatsCluster(dir, base_port=base_port, tls=certs, proxy=proxy_ports)
        nats.check_ports()
        if base_port:
            durakv_ports = [base_port + 10 + k for k in range(n_durakv)]
            busy = [p for p in durakv_ports if not port_is_free(p)]
            if busy:
                raise ClusterError(f"port(s) {busy} already in use")
        else:
            durakv_ports = free_ports(n_durakv, exclude=set(nats.ports))
        # each node's --metrics-port (free ones; a clash at bind time moves it as it moves the client port)
        metrics_ports = free_ports(n_durakv, exclude=set(nats.ports) | set(durakv_ports))
        manifest = {"version": MANIFEST_VERSION, "dir": dir, "created": time.time(),
                    "options": {"shards": shards, "replicas": replicas, "durability": durability,
                                "base_port": base_port, "journal_backend": journal_backend,
                                "cluster_mode": bool(cluster_mode and journal_backend == "jetstream"),
                                "tls": bool(tls), "partitionable": bool(partitionable)},
                    "env": dict(env or {}),
                    "tls": certs,
                    "nats_servers": "", "processes": []}
        cluster = cls(dir, manifest)
        for attempt in range(PORT_ATTEMPTS):
            say(f"starting NATS: {', '.join(f'{n.name} ({n.az}) {n.url}' for n in nats.nodes)}")
            try:
                if proxy_ports:
                    cluster._start_proxy(nats, proxy_ports)
                    say(f"partition proxy on 127.0.0.1:{cluster.proxy.ports['control']} (control): NATS routes and "
                        f"durakv-to-NATS connections between AZs go through it")
                for n in nats.nodes:
                    n.start()
                    manifest["processes"].append({
                        "kind": "nats", "name": n.name, "az": n.az, "ports": n.ports, "pid": n.pid,
                        "start_time": n.start_time, "dir": n.store_dir, "log": n.log_path, "argv": n.argv,
                        "config": n.config_path})
                manifest["nats_servers"] = nats.servers
                cluster.save()
                t0 = time.monotonic()
                nats.wait_ready(timeout_s)
                say(f"NATS ready in {time.monotonic() - t0:.2f}s, JetStream meta leader {nats.meta_leader()}")
                break
            except ProcessError as exc:
                nats.stop()
                cluster._stop_proxy()
                # Free ports are chosen before the processes bind them; another program may take one in between.
                clash = any(_port_clash(n.read_log()) for n in nats.nodes)
                if base_port or not clash or attempt == PORT_ATTEMPTS - 1:
                    raise
                say(f"a NATS port was taken meanwhile ({exc}); choosing other ports")
                manifest["processes"] = []
                proxy_ports = choose_proxy_ports(None) if partitionable else None
                nats = NatsCluster(dir, base_port=None, tls=certs, proxy=proxy_ports)
            except BaseException:
                nats.stop()
                cluster._stop_proxy()
                raise

        cluster_mode = manifest["options"]["cluster_mode"]
        k = 0
        shard_nodes = []
        for shard in range(shards):
            shard_nodes.append([])
            for i in range(nodes_per_shard):
                az = AZS[i % len(AZS)]
                name = f"{shard}-{i}"
                node_id = node_id_for(f"{os.path.basename(dir)}:{name}")   # 40 hex, stable across restarts
                node_dir = os.path.join(dir, "nodes", name)
                os.makedirs(node_dir, exist_ok=True)
                argv = durakv_argv(durakv_ports[k], node_dir, cluster.node_nats_servers(az), shard, az, node_id,
                                   durability, journal_backend, extra_server_args, cluster_mode=cluster_mode,
                                   tls=certs, metrics_port=metrics_ports[k])
                manifest["processes"].append({
                    "kind": "durakv", "name": name, "node_id": node_id, "shard": shard, "index": i, "az": az,
                    "ports": {"client": durakv_ports[k], "metrics": metrics_ports[k]}, "pid": None,
                    "start_time": None, "dir": node_dir,
                    "log": os.path.join(dir, "logs", f"{name}.log"), "argv": argv,
                    "tls_ca": certs["ca"] if certs else None})
                shard_nodes[-1].append((node_id, durakv_ports[k]))
                k += 1
        if cluster_mode:
            store_topology(nats.servers, initial_topology(shard_nodes, tls=bool(certs)),
                           tls_ca=certs["ca"] if certs else None)
            say(f"topology stored: {shards} shard(s) over 16384 slots")
        # Each shard's node 0 (az1) starts first so that it normally wins the first lease: a predictable layout.
        first = [p for p in cluster.nodes if p.entry["index"] == 0]
        rest = [p for p in cluster.nodes if p.entry["index"] != 0]
        for p in first:
            cluster._spawn(p)
        cluster.save()
        t0 = time.monotonic()
        cluster._wait_ready_moving_clashes(timeout_s, first, single_master=False)
        for p in rest:
            cluster._spawn(p)
        cluster.save()
        cluster._wait_ready_moving_clashes(max(1.0, timeout_s - (time.monotonic() - t0)), cluster.nodes)
        say(f"durakv nodes ready in {time.monotonic() - t0:.2f}s")
        return cluster

    def _wait_ready_moving_clashes(self, timeout_s, procs, single_master=None):
        """wait_ready, but a node that exited because its port was taken meanwhile is started again on another
        free port (its argv, the manifest and, in cluster mode, the topology follow)."""
        for _attempt in range(PORT_ATTEMPTS):
            try:
                return self.wait_ready(timeout_s, procs=procs, single_master=single_master)
            except ClusterNotReady:
                clashed = [p for p in procs if not p.alive and _port_clash(p.log_tail(40))]
                if not clashed:
                    raise
                for p in clashed:
                    self._move_port(p)
        return self.wait_ready(timeout_s, procs=procs, single_master=single_master)

    def _move_port(self, p):
        taken = {port for q in self.processes for port in q.ports.values()}
        new, new_metrics = free_ports(2, exclude=taken)
        old = p.port
        argv = p.entry["argv"]
        flag = "--tls-port" if "--tls-port" in argv else "--port"
        argv[argv.index(flag) + 1] = str(new)
        p.entry["ports"]["client"] = new
        if "metrics" in p.ports and "--metrics-port" in argv:   # it may have been the port that clashed
            argv[argv.index("--metrics-port") + 1] = str(new_metrics)
            p.entry["ports"]["metrics"] = new_metrics
        if self.options.get("cluster_mode"):
            tls = flag == "--tls-port"

            async def repoint(store):
                for _ in range(50):
                    topology, revision = await store.get_topology()
                    moved = topology.with_node(p.node_id, port=0 if tls else new, tls_port=new if tls else 0,
                                               bus_port=bus_port_of(new))
                    try:
                        return await store.put_topology(moved, revision)
                    except Exception:  # noqa: BLE001 - a concurrent change: read again
                        await asyncio.sleep(0.05)
            self._store_call(repoint)
        self._spawn(p)
        self.save()
