"""A shard's settings: what every node of the shard applies, whichever of them is primary.

ElastiCache makes durability a property of the replication group, not of a node: a failover, a restart or a
replaced node must not change it. So the shard's durability mode and its async buffer live in the coordination
store (key `settings.<shard>` in the lease bucket), are changed by compare-and-set (`CONFIG SET` on any node of
the shard), and every node applies what it reads there, over whatever its own start-up flags said.

The document (JSON, version 1):

    {"version": 1, "durability": "sync" | "async", "durability_buffer_ms": 10000, "lease_ttl_ms": 2000 | null,
     "acl": {"version": 1, "users": [{"name": "default", "rules": "on nopass ~* &* +@all"}, ...]} | null}

`lease_ttl_ms` is the primary's lease (cluster/controller.py): one value for the shard, so that the node holding
the lease and the replicas watching it time it alike, whichever node is primary. null: stored before it was a
shard setting; the next node to start stores its own flag there. (A lease record also carries the TTL it was
written with, and a replica waits by the longer of that and its own, so a change never shortens a lease already
granted: cluster/store.py Lease.ttl_ms.)

`acl` holds the shard's users as their ACL LIST rules (server/acl.py ServerAcl.settings): ACL SETUSER, DELUSER
and LOAD on any node store them here, so every node, and whichever becomes primary, has the same users.

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
    acl: dict = None          # the users, as ServerAcl.settings() gives them; None: not stored yet
    lease_ttl_ms: int = None  # None: not stored yet (a document from before it was a shard setting)

    def __post_init__(self):
        if self.acl is not None:
            users = self.acl.get("users") if isinstance(self.acl, dict) else None
            if (not isinstance(users, list) or self.acl.get("version") != 1
                    or not all(isinstance(u, dict) and isinstance(u.get("name"), str) and isinstance(u.get("rules"), str)
                               for u in users)):
                raise SettingsError("acl must be {'version': 1, 'users': [{'name': str, 'rules': str}, ...]}")
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
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise SettingsError("the settings document exceeds %d bytes" % MAX_DOCUMENT_BYTES)
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise SettingsError("the settings document is not JSON: %s" % exc) from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise SettingsError("the settings document is not version %d" % VERSION)
        unknown = set(doc) - {"version", "durability", "durability_buffer_ms", "acl", "lease_ttl_ms"}
        if unknown:
            raise SettingsError("unknown settings: %s" % ", ".join(sorted(unknown)))
        return cls(durability=doc.get("durability", "sync"),
                   durability_buffer_ms=doc.get("durability_buffer_ms", 10000), acl=doc.get("acl"),
                   lease_ttl_ms=doc.get("lease_ttl_ms"))
