"""A local cluster's manifest (dir/manifest.json): reading and writing it, and Proc, a view on one entry.

The manifest records every process of a local cluster with its kind, name, AZ, ports, pid (+ the kernel's
start time of that pid), directory, log and exact argv, so that any later command or test can inspect,
signal, restart or stop it by pid. ClusterError, the local cluster tooling's error, lives here because
every part of that tooling starts by reading the manifest.
"""

import json
import os

from .processes import pid_state
from .respclient import RespClient, RespError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class ClusterError(RuntimeError):
    pass


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

    @property
    def password(self):
        """The cluster's password the node asks for (None when it asks for none)."""
        path = self.entry.get("password_file")
        if not path:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read().strip()

    def client(self, timeout_s=2.0) -> RespClient:
        if self.kind != "durakv":
            raise ClusterError(f"{self.name} is not a durakv node")
        return RespClient("127.0.0.1", self.port, timeout_s, tls_ca=self.entry.get("tls_ca"), password=self.password)

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
