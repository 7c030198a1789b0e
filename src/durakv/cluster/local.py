"""A local multi-AZ cluster on 127.0.0.1: three NATS nodes (az1..az3) and, per shard, 1 + replicas durakv nodes.

`LocalCluster.up(dir, ...)` (cluster/bootstrap.py) starts everything and writes dir/manifest.json
(cluster/manifest.py); `LocalCluster.load(dir)` reads it back. LocalCluster itself holds the manifest, its
lock and the views on it; each other concern is a part it holds, built in __init__ with what it needs:
process control (procs.py, `launcher`), the partition proxy (proxyctl.py, `partition`), shards (shards.py,
`shard_membership`), roles, readiness and failover (readiness.py, `readiness`), NATS views (natsview.py,
`nats_view`), status (status.py, `status_report`). Bringing a cluster up (bootstrap.py) is a procedure that
makes one. The RESP client is respclient.py.
"""

import asyncio
import logging
import os
import signal

from . import bootstrap
from .manifest import Proc, manifest_path, read_manifest, write_manifest
from .natsview import NatsView
from .procs import ProcessControl
from .proxyctl import PartitionProxy
from .readiness import Readiness
from .shards import ShardMembership
from .status import StatusReport

log = logging.getLogger("durakv.cluster")


class LocalCluster:
    """The processes of a local cluster, from its manifest; signals, restarts, roles and NATS leaders.

    Owns `dir` and `manifest` (every process's entry: argv, ports, pid; written under the manifest's lock by
    `locked()`) and the views on it (`processes`, `nodes`, `nats`, `get`, `shard_nodes`, ...). Its parts own no
    state of their own beyond what they say; each is handed this cluster and the parts it uses:

    - `readiness` (readiness.py): roles, wait_ready, failover;
    - `launcher` (procs.py, ProcessControl): spawn, signals, stop/start/restart, adoption by port;
    - `partition` (proxyctl.py, PartitionProxy): the partition proxy process and its control lines;
    - `shard_membership` (shards.py): add_shard, remove_shard;
    - `nats_view` (natsview.py): the NATS servers' monitoring: meta leader, streams, stream leaders;
    - `status_report` (status.py): what `durakv cluster status` prints.

    The methods below the views forward the public API the CLI, the tools and the tests use to those parts."""

    def __init__(self, dir, manifest):
        self.dir = os.path.abspath(str(dir))
        self.manifest = manifest
        self.readiness = Readiness(self)
        self.launcher = ProcessControl(self, self.readiness)
        self.partition = PartitionProxy(self, self.launcher)
        self.shard_membership = ShardMembership(self, self.launcher, self.readiness, self.partition)
        self.nats_view = NatsView(lambda: self.nats, self.nats_connect)   # NATS monitoring, stream leaders
        self.status_report = StatusReport(self, self.launcher, self.partition, self.nats_view)

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def up(cls, dir, **kwargs) -> "LocalCluster":
        """Starts a local cluster in dir and returns it once it serves (cluster/bootstrap.py `up`: its
        options)."""
        return bootstrap.up(cls, dir, **kwargs)

    @classmethod
    def up_or_down(cls, dir, **kwargs) -> "LocalCluster":
        """up() for a caller that removes dir afterwards (the verify and bench tools' own clusters): when the
        start fails or is interrupted, whatever it started is stopped first. up() itself leaves a cluster that
        did not become ready running, for the operator to look at; with its directory gone, nothing could stop
        those processes any more."""
        try:
            return cls.up(dir, **kwargs)
        except BaseException:
            if os.path.exists(manifest_path(dir)):
                try:
                    cls.load(dir).down()
                except Exception:  # noqa: BLE001 - the start's own error is the one to report
                    log.exception("stopping the half-started cluster in %s failed", dir)
            raise

    @classmethod
    def load(cls, dir) -> "LocalCluster":
        return cls(dir, read_manifest(dir))

    def reload(self):
        self.manifest = read_manifest(self.dir)
        return self

    def save(self):
        write_manifest(self.dir, self.manifest)

    # -- the manifest's lock, the coordination store ---------------------------------------------------------
    def locked(self):
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

    @property
    def secrets(self):
        from .secrets import ClusterSecrets
        return ClusterSecrets(self.manifest["secrets"])

    def admin(self, say=None):
        """The operator's operations on this cluster (cluster/admin.py), with its secrets and password."""
        from .admin import ClusterAdmin
        return ClusterAdmin(self.secrets, nats=[u for u in self.nats_servers.split(",") if u],
                            password=self.secrets.resp_password if self.manifest.get("password") else "", say=say)

    def node_id_of(self, p) -> str:
        """A node's id, as DURAKV IDENTITY reports it."""
        from .admin import _decode_map
        with p.client(5.0) as c:
            return _decode_map(c.execute("DURAKV", "IDENTITY"))["node-id"]

    def _store_call(self, fn, timeout_s=60.0):
        """Runs `await fn(store)` against the coordination store, with the operator's identity."""
        admin = self.admin()

        async def go():
            store = await admin.store()
            try:
                return await fn(store)
            finally:
                await store.nc.close()
        return asyncio.run(asyncio.wait_for(go(), timeout_s))

    def nats_connect(self, **kw):
        """An awaitable NATS connection with the operator's identity (for tests and tools)."""
        return self.admin().connect_nats(**kw)

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

    # -- the public API, forwarded to the parts --------------------------------------------------------------
    @property
    def proxy(self):
        """The partition proxy's manifest entry, or None (the cluster is not partitionable)."""
        return self.partition.entry()

    def proxy_control(self, line) -> str:
        return self.partition.control(line)

    def add_shard(self, replicas=None, timeout_s=60.0, log=None):
        return self.shard_membership.add_shard(replicas, timeout_s, log)

    def remove_shard(self, shard, timeout_s=600.0, log=None):
        return self.shard_membership.remove_shard(shard, timeout_s, log)

    def masters(self, shard=0) -> list:
        return self.readiness.masters(shard)

    def primary(self, shard=0):
        return self.readiness.primary(shard)

    def replicas(self, shard=0) -> list:
        return self.readiness.replicas(shard)

    def wait_ready(self, timeout_s=60.0, procs=None, single_master=None):
        return self.readiness.wait_ready(timeout_s, procs, single_master)

    def failover(self, shard=0, to=None, timeout_s=30.0):
        return self.readiness.failover(shard, to, timeout_s)

    def status(self) -> dict:
        return self.status_report.status()

    def live_pid(self, p):
        return self.launcher.live_pid(p)

    def kill(self, name, sig=signal.SIGKILL) -> bool:
        return self.launcher.kill(name, sig)

    def pause(self, name, wait=True) -> bool:
        return self.launcher.pause(name, wait)

    def resume(self, name, wait=True) -> bool:
        return self.launcher.resume(name, wait)

    def stop(self, name, timeout_s=10.0) -> str:
        return self.launcher.stop(name, timeout_s)

    def restart(self, name, wait=True, timeout_s=30.0) -> Proc:
        return self.launcher.restart(name, wait, timeout_s)

    def down(self, timeout_s=10.0) -> dict:
        return self.launcher.down(timeout_s)

    def select(self, node=None, az=None) -> list:
        return self.launcher.select(node, az)

    def stop_nodes(self, names, timeout_s=10.0, sig=None) -> dict:
        return self.launcher.stop_nodes(names, timeout_s, sig)

    def start_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        return self.launcher.start_nodes(names, wait, timeout_s)

    def restart_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        return self.launcher.restart_nodes(names, wait, timeout_s)
