"""A local multi-AZ cluster on 127.0.0.1: three NATS nodes (az1..az3) and, per shard, 1 + replicas durakv nodes.

`LocalCluster.up(dir, ...)` (cluster/bootstrap.py) starts everything and writes dir/manifest.json
(cluster/manifest.py); `LocalCluster.load(dir)` reads it back. LocalCluster itself holds the manifest, its
lock and the views on it; each other concern is a mixin of its own module: bringing up (bootstrap.py),
process control (procs.py), the partition proxy (proxyctl.py), shards (shards.py), roles, readiness and
failover (readiness.py), NATS views (natsview.py), status (status.py). The RESP client is respclient.py.
"""

import asyncio
import os

from .bootstrap import Bootstrap
from .manifest import Proc, manifest_path, read_manifest, write_manifest
from .natsview import NatsView
from .procs import ProcessControl
from .proxyctl import PartitionProxy
from .readiness import Readiness
from .shards import ShardMembership
from .status import Status


class LocalCluster(Bootstrap, ShardMembership, PartitionProxy, ProcessControl, Readiness, Status):
    """The processes of a local cluster, from its manifest; signals, restarts, roles and NATS leaders."""

    def __init__(self, dir, manifest):
        self.dir = os.path.abspath(str(dir))
        self.manifest = manifest
        # parts that own their state, given what they need (the rest are still mixins, below)
        self.nats_view = NatsView(lambda: self.nats, self.nats_connect)   # NATS monitoring, stream leaders

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def load(cls, dir) -> "LocalCluster":
        return cls(dir, read_manifest(dir))

    def reload(self):
        self.manifest = read_manifest(self.dir)
        return self

    def save(self):
        write_manifest(self.dir, self.manifest)

    # -- the manifest's lock, the coordination store ---------------------------------------------------------
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
