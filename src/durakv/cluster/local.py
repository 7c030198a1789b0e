"""A local multi-AZ cluster on 127.0.0.1: three NATS nodes (az1..az3) and, per shard, 1 + replicas durakv nodes.

`LocalCluster.up(dir, ...)` starts everything detached (own sessions, logs in dir/logs) and writes
dir/manifest.json: every process with its kind, name, AZ, ports, pid (+ the kernel's start time of that pid),
directory, log and exact argv, so that any later command or test can inspect, signal, restart or stop it by pid.
`LocalCluster.load(dir)` reads it back. Every wait is a poll with a deadline.
"""

import asyncio
import json
import logging
import os
import signal
import sys
import time

from ..journal.jetstream import connect
from ..protocol import client as protocol_client
from ..protocol.client import RespError
from ..routing import Node, Shard, Topology
from ..routing.topology import bus_port_of, node_id_for
from .reshard import ReshardError, mark_migrations, wait_moved
from .store import NatsStore
from .tls import client_context, make_certs
from .settings import NONE_REFUSED
from .nats_procs import (AZS, NatsCluster, ProcessError, free_ports, http_json, pid_alive, pid_state,
                         port_is_free, process_start_time, signal_pid, spawn, stop_many, wait_for)
from .portowner import cmdline, port_owners, ports_owners

log = logging.getLogger("durakv.cluster")

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
MASTER_ROLES = ("master", "primary")

# INFO field names, newest first: the jetstream/replication work names them durakv_epoch, journal_applied_index
# and replica_lag_ms; older builds may only have some of them.
EPOCH_FIELDS = ("durakv_epoch", "epoch")
APPLIED_FIELDS = ("journal_applied_index", "applied_index")
LAG_FIELDS = ("replica_lag_ms", "lag_ms")


class ClusterError(RuntimeError):
    pass


class ClusterNotReady(ClusterError):
    pass


# -- a tiny RESP client ---------------------------------------------------------------------------------------

class RespClient(protocol_client.RespClient):
    """One blocking connection (protocol/client.py) with the control plane's conveniences: INFO parsed.
    `tls_ca`: connect over TLS, verifying the server against that CA file."""

    def __init__(self, host="127.0.0.1", port=6379, timeout_s=2.0, tls_ca=None):
        super().__init__(host, port, timeout_s, ssl_context=client_context(tls_ca) if tls_ca else None)

    def info(self, *sections) -> dict:
        return parse_info(self.execute("INFO", *sections))


def _value(text):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_info(raw) -> dict:
    """INFO text -> {section (lower case): {field: value}}; numbers become int/float."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    sections = {}
    current = sections.setdefault("", {})
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = sections.setdefault(line[1:].strip().lower(), {})
            continue
        key, sep, val = line.partition(":")
        if sep:
            current[key] = _value(val)
    if not sections[""]:
        del sections[""]
    return sections


def first_field(fields, names, default=None):
    for n in names:
        if n in fields:
            return fields[n]
    return default


# -- manifest ---------------------------------------------------------------------------------------------------

def manifest_path(dir) -> str:
    return os.path.join(os.path.abspath(str(dir)), MANIFEST)


def read_manifest(dir) -> dict:
    path = manifest_path(dir)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ClusterError(f"no cluster manifest at {path} (start one with `durakv cluster up --dir {dir}`)") \
            from None


def write_manifest(dir, manifest):
    path = manifest_path(dir)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def package_env():
    """The environment for child `python -m durakv`: this durakv importable even when not pip-installed."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in parts:
        env["PYTHONPATH"] = os.pathsep.join([src] + parts)
    return env


def durakv_argv(port, node_dir, nats_servers, shard, az, node_id, durability, journal_backend, extra=(),
                cluster_mode=True, tls=None):
    """The command line of one node. tls ({"cert", "key", "ca"}): clients only over TLS (on `port`), NATS too."""
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
        "--cluster-enabled", "yes" if cluster_mode else "no"] + list(extra)


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


def _proxy_ports(base_port):
    """Listeners of the partition proxy: a client and a route port per NATS node (free ports)."""
    ports = free_ports(2 * len(AZS), exclude=set(range(base_port, base_port + 40)) if base_port else ())
    return {f"nats-{az}": {"client": ports[2 * i], "cluster": ports[2 * i + 1]} for i, az in enumerate(AZS)}


# -- processes ---------------------------------------------------------------------------------------------------

class Proc:
    """One manifest entry (a NATS or durakv process); a view on the manifest dict it came from."""

    def __init__(self, entry):
        self.entry = entry

    name = property(lambda self: self.entry["name"])
    kind = property(lambda self: self.entry["kind"])
    az = property(lambda self: self.entry["az"])
    pid = property(lambda self: self.entry.get("pid"))
    start_time = property(lambda self: self.entry.get("start_time"))
    ports = property(lambda self: self.entry["ports"])
    port = property(lambda self: self.entry["ports"]["client"])
    dir = property(lambda self: self.entry["dir"])
    log = property(lambda self: self.entry["log"])
    argv = property(lambda self: self.entry["argv"])
    shard = property(lambda self: self.entry.get("shard"))
    node_id = property(lambda self: self.entry.get("node_id"))

    @property
    def state(self) -> str:
        return pid_state(self.pid, self.start_time)

    @property
    def alive(self) -> bool:
        return self.state != "dead"

    def client(self, timeout_s=2.0) -> RespClient:
        if self.kind != "durakv":
            raise ClusterError(f"{self.name} is not a durakv node")
        return RespClient("127.0.0.1", self.port, timeout_s, tls_ca=self.entry.get("tls_ca"))

    def info(self, *sections, timeout_s=2.0) -> dict:
        with self.client(timeout_s) as c:
            return c.info(*sections)

    def role(self, timeout_s=1.0):
        """'master', 'slave' (or whatever INFO replication says), None when it does not answer or is still
        loading its data (it answers INFO then, and -LOADING to everything that reads data)."""
        if self.state != "running":
            return None
        try:
            info = self.info("replication", "persistence", timeout_s=timeout_s)
        except (OSError, RespError):
            return None
        if info.get("persistence", {}).get("loading"):
            return None
        return info.get("replication", {}).get("role")

    def log_tail(self, lines=20) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __repr__(self):
        return f"<{self.kind} {self.name} {self.az} pid={self.pid} ports={self.ports}>"


class LocalCluster:
    """The processes of a local cluster, from its manifest; signals, restarts, roles and NATS leaders."""

    def __init__(self, dir, manifest):
        self.dir = os.path.abspath(str(dir))
        self.manifest = manifest

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def load(cls, dir) -> "LocalCluster":
        return cls(dir, read_manifest(dir))

    def reload(self):
        self.manifest = read_manifest(self.dir)
        return self

    def save(self):
        write_manifest(self.dir, self.manifest)

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
        proxy_ports = _proxy_ports(base_port) if partitionable else None
        nats = NatsCluster(dir, base_port=base_port, tls=certs, proxy=proxy_ports)
        nats.check_ports()
        if base_port:
            durakv_ports = [base_port + 10 + k for k in range(n_durakv)]
            busy = [p for p in durakv_ports if not port_is_free(p)]
            if busy:
                raise ClusterError(f"port(s) {busy} already in use")
        else:
            durakv_ports = free_ports(n_durakv, exclude=set(nats.ports))
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
                proxy_ports = _proxy_ports(None) if partitionable else None
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
                                   tls=certs)
                manifest["processes"].append({
                    "kind": "durakv", "name": name, "node_id": node_id, "shard": shard, "index": i, "az": az,
                    "ports": {"client": durakv_ports[k]}, "pid": None, "start_time": None, "dir": node_dir,
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
        new = free_ports(1, exclude=taken)[0]
        old = p.port
        argv = p.entry["argv"]
        flag = "--tls-port" if "--tls-port" in argv else "--port"
        argv[argv.index(flag) + 1] = str(new)
        p.entry["ports"]["client"] = new
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

    # -- growing and shrinking (cluster mode) -------------------------------------------------------------------
    def _store_call(self, fn, timeout_s=60.0):
        ca = (self.manifest.get("tls") or {}).get("ca")

        async def go():
            nc = await connect([u for u in self.nats_servers.split(",") if u], name="durakv-cluster",
                               tls=client_context(ca) if ca else None)
            try:
                return await fn(await NatsStore(nc).open())
            finally:
                await nc.close()
        return asyncio.run(asyncio.wait_for(go(), timeout_s))

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
        ports = free_ports(1 + replicas, exclude={port for p in self.processes for port in p.ports.values()})
        procs, members = [], []
        for i in range(1 + replicas):
            az = AZS[i % len(AZS)]
            name = f"{shard}-{i}"
            node_id = node_id_for(f"{os.path.basename(self.dir)}:{name}")
            node_dir = os.path.join(self.dir, "nodes", name)
            os.makedirs(node_dir, exist_ok=True)
            argv = durakv_argv(ports[i], node_dir, self.node_nats_servers(az), shard, az, node_id,
                               opts["durability"], opts["journal_backend"], cluster_mode=True, tls=certs)
            entry = {"kind": "durakv", "name": name, "node_id": node_id, "shard": shard, "index": i, "az": az,
                     "ports": {"client": ports[i]}, "pid": None, "start_time": None, "dir": node_dir,
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

    def _spawn(self, p):
        env = None
        if p.kind in ("durakv", "proxy"):
            env = package_env()
            env.update(self.manifest.get("env") or {})
        p.entry["pid"], p.entry["start_time"] = spawn(p.argv, p.log, env=env)
        p.entry.pop("stopped_at", None)

    # -- the partition proxy (partitionable clusters) ------------------------------------------------------------
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

    # -- views -------------------------------------------------------------------------------------------------
    @property
    def options(self) -> dict:
        return self.manifest.get("options", {})

    @property
    def processes(self) -> list:
        return [Proc(e) for e in self.manifest["processes"]]

    @property
    def nodes(self) -> list:
        """The durakv nodes."""
        return [p for p in self.processes if p.kind == "durakv"]

    @property
    def nats(self) -> list:
        return [p for p in self.processes if p.kind == "nats"]

    @property
    def nats_servers(self) -> str:
        return self.manifest.get("nats_servers", "")

    def get(self, name) -> Proc:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(f"no process named {name!r} in {manifest_path(self.dir)}")

    def shard_nodes(self, shard=0) -> list:
        return [p for p in self.nodes if p.shard == shard]

    @property
    def shards(self) -> list:
        return sorted({p.shard for p in self.nodes})

    def az_processes(self, az) -> list:
        return [p for p in self.processes if p.az == az]

    def masters(self, shard=0) -> list:
        return [p for p in self.shard_nodes(shard) if p.role() in MASTER_ROLES]

    def primary(self, shard=0):
        """The node of the shard that reports role:master (with the local journal backend every node is a
        standalone master: the first by index is returned); None if no node does."""
        masters = self.masters(shard)
        return masters[0] if masters else None

    def replicas(self, shard=0) -> list:
        return [p for p in self.shard_nodes(shard) if p.role() not in (None,) + MASTER_ROLES]

    # -- process control ---------------------------------------------------------------------------------------
    def kill(self, name, sig=signal.SIGKILL) -> bool:
        p = self.reload().get(name)
        return signal_pid(p.pid, sig, p.start_time)

    def pause(self, name, wait=True) -> bool:
        """SIGSTOP; with wait, returns once the kernel shows the process stopped."""
        return self._signal_and_wait(name, signal.SIGSTOP, "paused" if wait else None)

    def resume(self, name, wait=True) -> bool:
        return self._signal_and_wait(name, signal.SIGCONT, "running" if wait else None)

    def _signal_and_wait(self, name, sig, state):
        if not self.kill(name, sig):
            return False
        if state:
            p = self.get(name)
            wait_for(lambda: p.state in (state, "dead"), 5.0, f"{name} to be {state}", interval_s=0.005)
        return True

    def stop(self, name, timeout_s=10.0) -> str:
        p = self.reload().get(name)
        return stop_many({name: (p.pid, p.start_time)}, timeout_s)[name]

    def restart(self, name, wait=True, timeout_s=30.0) -> Proc:
        """Start the process again with its recorded argv (stopping it first if it still runs)."""
        self.restart_nodes([name], wait=wait, timeout_s=timeout_s)
        return self.reload().get(name)

    def _wait_nats_node(self, p, timeout_s):
        def ready():
            if not p.alive:
                raise ProcessError(f"{p.name} exited:\n{p.log_tail()}")
            status, _ = http_json(p.ports["monitor"], "/healthz")
            return status == 200
        wait_for(ready, timeout_s, f"{p.name} to be healthy")

    def down(self, timeout_s=10.0) -> dict:
        """Stop every process of the manifest, by its pid and by the owner of its ports (a node restarted by
        hand has another pid): durakv nodes first, then NATS, then the partition proxy; already-dead ones are
        fine. The manifest then shows every process stopped."""
        with self._locked():
            out = {}
            for group in (self.nodes, self.nats, [p for p in self.processes if p.kind == "proxy"]):
                out.update(self._stop_procs(group, timeout_s))
            self.save()
        return out

    # -- node lifecycle ------------------------------------------------------------------------------------------
    def _locked(self):
        """An exclusive lock on the manifest for a read-modify-write (the CLI, chaos and tests may overlap);
        the manifest is read again under it."""
        cluster = self

        class _Lock:
            def __enter__(self):
                import fcntl
                self.f = open(os.path.join(cluster.dir, "manifest.lock"), "a+")
                fcntl.flock(self.f, fcntl.LOCK_EX)
                cluster.reload()
                return cluster

            def __exit__(self, *exc):
                import fcntl
                fcntl.flock(self.f, fcntl.LOCK_UN)
                self.f.close()
        return _Lock()

    def is_this_process(self, p, pid) -> bool:
        """Whether pid runs p's program: a durakv node on p's data directory, NATS with p's config file, the
        proxy with its config (so that a port taken by some other program is never mistaken for p)."""
        argv = cmdline(pid)
        if not argv:
            return False
        if p.kind == "durakv":
            return "durakv" in " ".join(argv) and any(a == "--dir" and b == p.dir for a, b in zip(argv, argv[1:]))
        mark = p.entry.get("config")
        return bool(mark) and mark in argv

    def orphan(self, p):
        """(pid, start_time) of a live process that serves p's ports and runs p's program although it is not
        the manifest's pid (restarted by hand from its argv), else None."""
        return self._orphans([p]).get(p.name)

    def _orphans(self, procs) -> dict:
        """orphan() of several processes with one pass over /proc: {name: (pid, start_time)}."""
        first = {}
        for p in procs:
            ports = [v for v in p.ports.values() if isinstance(v, int)]
            if ports:
                first[p.name] = ports[0]   # the client port (the proxy: its control port)
        owners = ports_owners(set(first.values())) if first else {}
        out = {}
        for p in procs:
            for pid in owners.get(first.get(p.name), []):
                if pid != p.pid and self.is_this_process(p, pid):
                    st = process_start_time(pid)
                    if pid_state(pid, st) != "dead":
                        out[p.name] = (pid, st)
                        break
        return out

    def live_pid(self, p):
        """(pid, start_time, adopted) of the live process that is p: the manifest's pid, else a process
        serving p's port as p (adopted True); None when p is not running at all."""
        if p.pid and pid_state(p.pid, p.start_time) != "dead":
            return p.pid, p.start_time, False
        found = self.orphan(p)
        return (found[0], found[1], True) if found else None

    def _stop_procs(self, procs, timeout_s, sig=None) -> dict:
        """Stops procs by manifest pid and by port owner (SIGTERM then SIGKILL, or `sig` at once); marks them
        stopped in the (already locked and reloaded) manifest. Returns {name: outcome}."""
        targets = {p.name: (p.pid, p.start_time) for p in procs if p.pid}
        out = {}
        if sig is not None:
            # A power cut: the manifest's processes get the signal before anything else is looked up.
            for key, (pid, st) in targets.items():
                out[key] = "killed" if signal_pid(pid, sig, st) else "already-dead"
        orphans = {f"{name} (pid {found[0]}, not in the manifest)": found
                   for name, found in self._orphans(procs).items()}
        if sig is None:
            targets.update(orphans)
            out = stop_many(targets, timeout_s)
        else:
            for key, (pid, st) in orphans.items():
                out[key] = "killed" if signal_pid(pid, sig, st) else "already-dead"
            targets.update(orphans)
            for key, (pid, st) in targets.items():
                if out[key] == "killed":
                    wait_for(lambda pid=pid, st=st: not pid_alive(pid, st), 10.0, f"pid {pid} to die")
        for p in procs:
            if p.name not in out and not any(k.startswith(p.name + " (pid") for k in out):
                out[p.name] = "already-dead"
        now = time.time()
        for p in procs:
            if p.pid:
                p.entry["stopped_at"] = now
            p.entry["pid"], p.entry["start_time"] = None, None
        return out

    def select(self, node=None, az=None) -> list:
        """The processes `--node NAME` (a durakv node or a NATS server) or `--az AZ` (every process of it)
        names, NATS first."""
        if (node is None) == (az is None):
            raise ClusterError("name either a node (--node NAME) or an availability zone (--az AZ)")
        if node is not None:
            names = [n for n in str(node).split(",") if n]
            procs = [self.get(n) for n in names]
        else:
            procs = self.az_processes(az)
            if not procs:
                raise ClusterError(f"no process in AZ {az!r} (AZs: {', '.join(sorted({str(p.az) for p in self.processes if p.az}))})")
        order = {"proxy": 0, "nats": 1, "durakv": 2}
        return sorted(procs, key=lambda p: (order.get(p.kind, 3), p.name))

    def stop_nodes(self, names, timeout_s=10.0, sig=None) -> dict:
        """Stops the named processes (durakv nodes first, then NATS) by pid and by port owner, and records them
        stopped. sig: send that signal instead of SIGTERM-then-SIGKILL (SIGKILL for a power cut)."""
        with self._locked():
            procs = [self.get(n) for n in names]
            ordered = [p for p in procs if p.kind == "durakv"] + [p for p in procs if p.kind != "durakv"]
            if sig is not None:
                out = self._stop_procs(ordered, timeout_s, sig)   # all at once: a power cut has no order
            else:
                out = {}
                for kind in ("durakv", "nats", "proxy"):
                    group = [p for p in ordered if p.kind == kind]
                    if group:
                        out.update(self._stop_procs(group, timeout_s))
            self.save()
        return out

    def start_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        """Starts the named processes from their manifest argv (NATS before durakv), unless they run: a node
        restarted by hand that serves its port is adopted (its pid goes into the manifest). With wait, returns
        once every started NATS server is healthy and every durakv node answers (a node whose shard has a
        primary rejoins as a replica). Returns {name: 'started' | 'running' | 'adopted'}."""
        out = {}
        started = []
        with self._locked():
            procs = [self.get(n) for n in names]
            order = {"proxy": 0, "nats": 1, "durakv": 2}
            for p in sorted(procs, key=lambda p: order.get(p.kind, 3)):
                live = self.live_pid(p)
                if live and not live[2]:
                    out[p.name] = "running"
                    continue
                if live:
                    p.entry["pid"], p.entry["start_time"] = live[0], live[1]
                    p.entry.pop("stopped_at", None)
                    out[p.name] = "adopted"
                    continue
                for port in [v for v in p.ports.values() if isinstance(v, int)][:1]:
                    holders = [pid for pid in port_owners(port)]
                    if holders:
                        raise ClusterError(f"{p.name}: port {port} is held by pid {holders[0]} "
                                           f"({' '.join(cmdline(holders[0]))[:120]}), which is not this node")
                self._spawn(p)
                started.append(p)
                out[p.name] = "started"
            self.save()
        if wait:
            for p in started:
                if p.kind == "nats":
                    self._wait_nats_node(p, timeout_s)
            nodes = [p for p in started if p.kind == "durakv"]
            if nodes:
                self.wait_ready(timeout_s, procs=nodes, single_master=False)
        return out

    def restart_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        """stop_nodes then start_nodes."""
        self.stop_nodes(names)
        return self.start_nodes(names, wait=wait, timeout_s=timeout_s)

    # -- readiness ---------------------------------------------------------------------------------------------
    def wait_ready(self, timeout_s=60.0, procs=None, single_master=None):
        """Poll until the given durakv nodes (default: all) answer PING and, for the jetstream backend,
        exactly one node per shard reports role:master. Raises ClusterNotReady with what is missing."""
        procs = list(procs) if procs is not None else self.nodes
        if single_master is None:
            single_master = self.options.get("journal_backend") == "jetstream"
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
                        infos[p.name] = c.info("replication", "durability")
                except (OSError, RespError) as exc:
                    state["waiting"] = f"{p.name}: {exc}"
                    state["node"] = p
                    return False
            state["infos"] = infos
            if not single_master:
                return True
            for shard in sorted({p.shard for p in procs}):
                members = [p for p in self.shard_nodes(shard)]
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
        return self

    def _not_ready_text(self, exc, state) -> str:
        lines = [str(exc)]
        if state.get("waiting"):
            lines.append("still waiting on " + state["waiting"])
        if state.get("node") is not None:
            lines.append(f"last lines of {state['node'].log}:\n{state['node'].log_tail(10)}")
        wanted = self.options.get("journal_backend")
        for name, info in (state.get("infos") or {}).items():
            got = info.get("durability", {}).get("journal_backend")
            if wanted and got and got != wanted:
                lines.append(f"node {name} reports journal_backend:{got} although {wanted} was asked for: "
                             f"this server build may not implement the {wanted} backend yet")
        lines.append(f"processes are left running; inspect with `durakv cluster status --dir {self.dir}`, "
                     f"stop with `durakv cluster down --dir {self.dir}`")
        return "\n".join(lines)

    # -- NATS --------------------------------------------------------------------------------------------------
    def _nats_views(self, path):
        views = {}
        for p in self.nats:
            if p.state != "running":
                continue
            try:
                status, body = http_json(p.ports["monitor"], path, timeout_s=1.0)
            except OSError:
                continue
            if status == 200 and body:
                views[p.name] = body
        return views

    def nats_meta_leader(self):
        """The JetStream meta leader most running NATS servers name, or None while they elect one. A server
        the manifest knows to be dead is never shown as leader (the survivors keep naming it until they elect)."""
        running = {p.name for p in self.nats if p.state == "running"}
        leaders = [((v.get("meta_cluster") or {}).get("leader")) for v in self._nats_views("/jsz").values()]
        leaders = [x for x in leaders if x and x in running]
        return max(set(leaders), key=leaders.count) if leaders else None

    def nats_streams(self) -> dict:
        """{stream name: {"leader", "replicas" (server names), "messages", "last_seq"}} as the NATS nodes see
        them (the leader's own view wins)."""
        seen = {}
        for server, view in self._nats_views("/jsz?accounts=true&streams=true").items():
            for acct in view.get("account_details") or []:
                for st in acct.get("stream_detail") or []:
                    cl = st.get("cluster") or {}
                    info = {"leader": cl.get("leader"),
                            "replicas": sorted(([cl["leader"]] if cl.get("leader") else [])
                                               + [r["name"] for r in cl.get("replicas") or []]),
                            "messages": (st.get("state") or {}).get("messages"),
                            "last_seq": (st.get("state") or {}).get("last_seq"),
                            "account": acct.get("name")}
                    name = st.get("name")
                    if name not in seen or (info["leader"] and info["leader"] == server):
                        seen[name] = info
        return seen

    def nats_leader_of_stream(self, stream_name):
        """The server name (= manifest name, e.g. 'nats-az2') leading the stream's Raft group, or None."""
        return (self.nats_streams().get(stream_name) or {}).get("leader")

    def move_stream_leader(self, stream_name, server_name, timeout_s=30.0):
        """Makes `server_name` (e.g. 'nats-az2') the leader of the stream's Raft group (JetStream's leader
        step-down with a preferred server, repeated until it holds); returns the leader."""
        ca = (self.manifest.get("tls") or {}).get("ca")

        async def go():
            nc = await connect([u for u in self.nats_servers.split(",") if u], name="durakv-cluster",
                               tls=client_context(ca) if ca else None)
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout_s
                body = json.dumps({"placement": {"preferred": server_name}}).encode()
                while loop.time() < deadline:
                    leader = await loop.run_in_executor(None, self.nats_leader_of_stream, stream_name)
                    if leader == server_name:
                        return leader
                    if leader is not None:
                        try:
                            await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.%s" % stream_name, body, timeout=5)
                        except Exception:  # noqa: BLE001 - an election in progress: look again
                            pass
                    await asyncio.sleep(0.5)
                raise ClusterError("%s did not become the leader of %s in %.0fs" % (server_name, stream_name,
                                                                                 timeout_s))
            finally:
                await nc.close()
        return asyncio.run(go())

    # -- status and failover -----------------------------------------------------------------------------------
    def status(self) -> dict:
        """Every process with its state; for durakv nodes also role, epoch, applied index, lag and the INFO
        replication and durability sections as they are."""
        meta = self.nats_meta_leader()
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
                "nats_meta_leader": meta, "streams": self.nats_streams() if meta else {},
                "nats": nats_rows, "nodes": rows, "proxy": proxy}

    def _live_view(self, p):
        """(pid, state, not in manifest) of the process that is p, by manifest pid or by port owner."""
        live = self.live_pid(p)
        if live is None:
            return p.pid, "dead", False
        return live[0], pid_state(live[0], live[1]), live[2]

    def failover(self, shard=0, to=None, timeout_s=30.0):
        """Send CLUSTER FAILOVER to a replica (default: the live replica with the highest applied index) and
        wait until it reports role:master and no other node of the shard does. Returns (node, seconds)."""
        old = self.primary(shard)
        if to is not None:
            target = self.get(to)
            if target.shard != shard and target.kind == "durakv":
                shard = target.shard
        else:
            candidates = []
            for p in self.shard_nodes(shard):
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
            others = [p.name for p in self.shard_nodes(shard) if p.name != target.name
                      and p.role() in MASTER_ROLES]
            return not others
        wait_for(done, timeout_s, f"{target.name} to become the primary of shard {shard}", interval_s=0.01)
        return target, time.monotonic() - t0
