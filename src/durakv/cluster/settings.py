"""A shard's settings: what every node of the shard applies, whichever of them is primary.

ElastiCache makes durability a property of the replication group, not of a node: a failover, a restart or a
replaced node must not change it. So the shard's durability mode and its async buffer live in the coordination
store (key `settings.<shard>` in the lease bucket), are changed by compare-and-set (`CONFIG SET` on any node of
the shard), and every node applies what it reads there, over whatever its own start-up flags said.

The document (JSON, version 1):

    {"version": 1, "durability": "sync" | "async", "durability_buffer_ms": 10000, "lease_ttl_ms": 2000 | null}

`lease_ttl_ms` is the primary's lease (cluster/controller.py): one value for the shard, so that the node holding
the lease and the replicas watching it time it alike, whichever node is primary. null: stored before it was a
shard setting; the next node to start stores its own flag there. (A lease record also carries the TTL it was
written with, and a replica waits by the longer of that and its own, so a change never shortens a lease already
granted: cluster/store.py Lease.ttl_ms.)

The cluster's users are not a shard's: they are the cluster's `auth` document (AuthSettings below), which every
node of every shard applies, as MemoryDB's ACLs apply to a whole cluster.

The cluster document (`cluster`, the operator's) names the cluster and its format: a node of another format
refuses to join it with a message that names both (ClusterDocument below).

`none` is not a shard setting: a shard's replicas follow its journal, so a shard without one would have
replicas that never learn anything (cluster/cli.py and CONFIG SET refuse it with that reason).
"""

import json
from dataclasses import asdict, dataclass, replace

from ..errors import DurakvError

VERSION = 1
MAX_DOCUMENT_BYTES = 900 * 1024     # one NATS KV value (max_payload 1 MiB), users included
SHARD_MODES = ("sync", "async")
# CONFIG SET names that are shard settings, and the field each one sets
CONFIG_FIELDS = {"durability": "durability", "durability-buffer-ms": "durability_buffer_ms",
                 "lease-ttl-ms": "lease_ttl_ms"}
LEASE_TTL_RANGE_MS = (200, 600000)    # config.py's lease-ttl-ms
NONE_REFUSED = ("a shard's replicas follow its journal, so durability none (no journal) cannot be a shard's "
                "mode; use async for a bounded loss window")


class SettingsError(DurakvError, ValueError):
    """A settings document or a requested change is invalid; the message says which part."""


@dataclass(frozen=True)
class ShardSettings:
    durability: str = "sync"
    durability_buffer_ms: int = 10000
    lease_ttl_ms: int = None  # None: not stored yet (a document from before it was a shard setting)

    def __post_init__(self):
        if self.durability not in SHARD_MODES:
            raise SettingsError("durability must be one of %s, not %r (%s)"
                                % (", ".join(SHARD_MODES), self.durability, NONE_REFUSED))
        if (not isinstance(self.durability_buffer_ms, int) or isinstance(self.durability_buffer_ms, bool)
                or not 1 <= self.durability_buffer_ms <= 2**31 - 1):
            raise SettingsError("durability_buffer_ms must be an integer in 1..2147483647")
        low, high = LEASE_TTL_RANGE_MS
        if self.lease_ttl_ms is not None and (not isinstance(self.lease_ttl_ms, int)
                                              or isinstance(self.lease_ttl_ms, bool)
                                              or not low <= self.lease_ttl_ms <= high):
            raise SettingsError("lease_ttl_ms must be an integer in %d..%d" % LEASE_TTL_RANGE_MS)

    def with_config(self, name: str, value) -> "ShardSettings":
        """These settings with CONFIG SET `name` (a key of CONFIG_FIELDS) set to its parsed value."""
        field = CONFIG_FIELDS.get(name)
        if field is None:
            raise SettingsError("%s is not a shard setting" % name)
        return replace(self, **{field: value})

    def config_values(self) -> dict:
        """{config name: value} for every shard setting stored (one still None is not)."""
        return {name: getattr(self, field) for name, field in CONFIG_FIELDS.items() if getattr(self, field) is not None}

    def to_json(self) -> bytes:
        raw = json.dumps({"version": VERSION, **asdict(self)}, sort_keys=True).encode()
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise SettingsError("the shard's settings exceed %d bytes (too many ACL users?)" % MAX_DOCUMENT_BYTES)
        return raw

    @classmethod
    def from_json(cls, raw: bytes) -> "ShardSettings":
        doc = _document(raw, "settings")
        unknown = set(doc) - {"version", "durability", "durability_buffer_ms", "lease_ttl_ms"}
        if unknown:
            raise SettingsError("unknown settings: %s" % ", ".join(sorted(unknown)))
        return cls(durability=doc.get("durability", "sync"),
                   durability_buffer_ms=doc.get("durability_buffer_ms", 10000), lease_ttl_ms=doc.get("lease_ttl_ms"))


def _document(raw, what, max_bytes=MAX_DOCUMENT_BYTES) -> dict:
    if not isinstance(raw, (bytes, bytearray, str)) or len(raw) > max_bytes:
        raise SettingsError("the %s document is not text of at most %d bytes" % (what, max_bytes))
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SettingsError("the %s document is not JSON: %s" % (what, exc)) from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise SettingsError("the %s document is not version %d" % (what, VERSION))
    return doc


MAX_USERS = 10000


def check_acl(acl):
    users = acl.get("users") if isinstance(acl, dict) else None
    if (not isinstance(users, list) or acl.get("version") != 1 or len(users) > MAX_USERS
            or not all(isinstance(u, dict) and set(u) == {"name", "rules"} and isinstance(u.get("name"), str)
                       and isinstance(u.get("rules"), str) for u in users)):
        raise SettingsError("acl must be {'version': 1, 'users': [{'name': str, 'rules': str}, ...]} (at most %d "
                            "users)" % MAX_USERS)


@dataclass(frozen=True)
class AuthSettings:
    """The cluster's users (key `auth`), applied by every node of every shard: `acl` as ServerAcl.settings()
    gives them (their ACL LIST rules; passwords only as hashes), `internal_user`/`internal_password` what nodes
    present to each other's RESP ports (slot migration), Valkey's primaryuser/primaryauth of the cluster."""
    acl: dict
    internal_user: str = ""
    internal_password: str = ""

    def __post_init__(self):
        check_acl(self.acl)
        for f in ("internal_user", "internal_password"):
            v = getattr(self, f)
            if not isinstance(v, str) or len(v) > 512:
                raise SettingsError("%s must be a string of at most 512 characters" % f)

    def to_json(self) -> bytes:
        raw = json.dumps({"version": VERSION, **asdict(self)}, sort_keys=True).encode()
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise SettingsError("the cluster's users exceed %d bytes" % MAX_DOCUMENT_BYTES)
        return raw

    @classmethod
    def from_json(cls, raw) -> "AuthSettings":
        doc = _document(raw, "auth")
        unknown = set(doc) - {"version", "acl", "internal_user", "internal_password"}
        if unknown:
            raise SettingsError("unknown auth fields: %s" % ", ".join(sorted(unknown)))
        return cls(acl=doc.get("acl"), internal_user=doc.get("internal_user", ""),
                   internal_password=doc.get("internal_password", ""))


@dataclass(frozen=True)
class ClusterDocument:
    """Key `cluster`: which cluster this is and the format its documents, journal entries and names follow. A
    node whose format differs refuses to join (cluster/membership.py) with both numbers in its message."""
    cluster_id: str
    format: int

    def __post_init__(self):
        if not isinstance(self.cluster_id, str) or not 1 <= len(self.cluster_id) <= 64:
            raise SettingsError("cluster_id must be a string of 1..64 characters")
        if not isinstance(self.format, int) or isinstance(self.format, bool) or not 1 <= self.format <= 1000:
            raise SettingsError("format must be an integer in 1..1000")

    def to_json(self) -> bytes:
        return json.dumps({"version": VERSION, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw) -> "ClusterDocument":
        doc = _document(raw, "cluster", 4096)
        unknown = set(doc) - {"version", "cluster_id", "format"}
        if unknown:
            raise SettingsError("unknown cluster fields: %s" % ", ".join(sorted(unknown)))
        return cls(cluster_id=doc.get("cluster_id"), format=doc.get("format"))
