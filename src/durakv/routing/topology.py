"""An immutable snapshot of the cluster's topology, and its JSON document (what the coordination store keeps).

A cluster is a list of shards; a shard owns slot ranges and has one primary node and any number of replicas.
A node belongs to exactly one shard, and its role is where it sits in that shard (primary or replica): the
document cannot say one thing in a shard and another in a node. Config epochs are per shard (Valkey's nodeEpoch:
a replica reports its primary's epoch), and the cluster keeps a current epoch >= every shard's.

Online resharding marks slots as moving from a source shard (which still owns them) to a target shard.

The document (version 1):

    {"version": 1, "current_epoch": 7,
     "shards": [{"id": <40 hex>, "name": <journal/lease name>, "config_epoch": 3, "slots": [[0, 5460], ...],
                 "primary": <node>, "replicas": [<node>, ...]}, ...],
     "migrations": [{"slots": [[100, 120]], "source": <shard id>, "target": <shard id>}, ...]}
    <node> = {"id": <40 hex>, "ip": "10.0.0.1", "port": 6379, "tls_port": 0, "bus_port": 0, "hostname": "",
              "az": "az1", "health": "online" | "pfail" | "fail", "repl_offset": 0}

Every slot may be owned at most once; slots owned by nobody are allowed (the cluster is then down, as Valkey
with cluster-require-full-coverage) and reported by `uncovered()`.
"""

import hashlib
import json
import re
from dataclasses import dataclass, replace

from ..errors import DurakvError
from .slots import SLOTS

VERSION = 1
# The document must fit in one NATS message (default max_payload 1 MiB, less headers); a larger one is refused
# before it is parsed.
MAX_DOCUMENT_BYTES = 1_000_000
# Valkey's practical ceiling on cluster size; bounds the work of validating an untrusted document.
MAX_NODES = 1000
MAX_TEXT = 255

HEALTH = ("online", "pfail", "fail")
PRIMARY = "primary"
REPLICA = "replica"

_ID = re.compile(r"[0-9a-f]{40}\Z")
# Text that appears in CLUSTER NODES lines: no separators (space, comma, '@', newline) or control characters.
_TEXT = re.compile(r"[^\s,@\x00-\x1f\x7f]*\Z")
_NODE_FIELDS = ("id", "ip", "port", "tls_port", "bus_port", "hostname", "az", "health", "repl_offset")


class TopologyError(DurakvError, ValueError):
    """The topology document or a requested change is invalid; the message says which part."""


@dataclass(frozen=True, slots=True)
class Node:
    """One durakv process as the cluster sees it.

    `port`/`tls_port` are the client ports (0 = not served that way); `bus_port` is the cport shown in CLUSTER
    NODES. `repl_offset` is the replication offset clients are shown: 0 means "not in sync yet" (Valkey hides such
    a replica from CLUSTER SLOTS and shows it as "loading" in CLUSTER SHARDS), so a following replica should report
    at least 1. `shard_id` and `role` are derived from the shard that lists the node.
    """
    id: str
    ip: str
    port: int
    tls_port: int = 0
    bus_port: int = 0
    hostname: str = ""
    az: str = ""
    health: str = "online"
    repl_offset: int = 0
    shard_id: str = ""
    role: str = REPLICA

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in _NODE_FIELDS}


@dataclass(frozen=True, slots=True)
class Shard:
    id: str
    name: str
    config_epoch: int
    slots: tuple          # ((start, end), ...) sorted, non-overlapping, merged
    primary: Node
    replicas: tuple       # (Node, ...)

    @property
    def nodes(self) -> tuple:
        return (self.primary,) + self.replicas

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "config_epoch": self.config_epoch,
                "slots": [list(r) for r in self.slots], "primary": self.primary.to_dict(),
                "replicas": [n.to_dict() for n in self.replicas]}


def ranges_of(slots) -> tuple:
    """Sorted slot numbers (any iterable) as merged ((start, end), ...) ranges."""
    out = []
    for s in sorted(set(slots)):
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return tuple((a, b) for a, b in out)


def _slots_in(ranges):
    for a, b in ranges:
        yield from range(a, b + 1)


class Topology:
    """Immutable. Build with `Topology(shards, current_epoch, migrations)` or `Topology.from_json(raw)`.

    `shard_by_slot[slot]` is the owning Shard or None (a 16384-entry tuple built once); `migrating` maps a slot to
    (source shard id, target shard id). The `with_*`/`promote` methods return a new, validated Topology.
    """

    __slots__ = ("shards", "current_epoch", "migrating", "nodes", "shard_by_id", "shard_by_slot", "_uncovered")

    def __init__(self, shards, current_epoch=0, migrations=None):
        shards = tuple(shards)
        _check_int(current_epoch, "current_epoch")
        self.current_epoch = current_epoch
        nodes, by_id = {}, {}
        owner = [None] * SLOTS
        fixed = []
        for shard in shards:
            shard = _finish_shard(shard)
            if shard.id in by_id:
                raise TopologyError("shard %s is listed twice" % shard.id)
            if shard.config_epoch > current_epoch:
                raise TopologyError("shard %s has config epoch %d above the current epoch %d"
                                    % (shard.id, shard.config_epoch, current_epoch))
            for node in shard.nodes:
                if node.id in nodes:
                    raise TopologyError("node %s is listed twice" % node.id)
                nodes[node.id] = node
            if len(nodes) > MAX_NODES:
                raise TopologyError("more than %d nodes" % MAX_NODES)
            for a, b in shard.slots:
                if any(owner[a:b + 1]):
                    s = next(i for i in range(a, b + 1) if owner[i] is not None)
                    raise TopologyError("slot %d is owned by shard %s and shard %s" % (s, owner[s].id, shard.id))
                owner[a:b + 1] = [shard] * (b - a + 1)
            by_id[shard.id] = shard
            fixed.append(shard)
        migrating = {}
        for slot, (source, target) in dict(migrations or {}).items():
            _check_slot(slot, "migrating slot")
            if source not in by_id or target not in by_id:
                raise TopologyError("slot %d migrates between unknown shards %s -> %s" % (slot, source, target))
            if source == target:
                raise TopologyError("slot %d migrates from shard %s to itself" % (slot, source))
            if owner[slot] is None or owner[slot].id != source:
                raise TopologyError("slot %d migrates from shard %s, which does not own it" % (slot, source))
            migrating[slot] = (source, target)
        self.shards = tuple(fixed)
        self.nodes = nodes
        self.shard_by_id = by_id
        self.shard_by_slot = tuple(owner)
        self.migrating = migrating
        self._uncovered = None

    # ---- queries --------------------------------------------------------------------------------------------

    def shard_of_node(self, node_id: str):
        node = self.nodes.get(node_id)
        return None if node is None else self.shard_by_id[node.shard_id]

    def uncovered(self) -> tuple:
        """Slot ranges no shard owns, as ((start, end), ...)."""
        if self._uncovered is None:
            # the gaps between the shards' ranges (each sorted, merged and disjoint from the others'): a walk over
            # the ranges, not the 16384 slots, since every composed topology asks
            gaps, nxt = [], 0
            for a, b in sorted(r for sh in self.shards for r in sh.slots):
                if a > nxt:
                    gaps.append((nxt, a - 1))
                nxt = max(nxt, b + 1)
            if nxt < SLOTS:
                gaps.append((nxt, SLOTS - 1))
            self._uncovered = tuple(gaps)
        return self._uncovered

    def slots_assigned(self) -> int:
        return SLOTS - sum(b - a + 1 for a, b in self.uncovered())

    def state_ok(self, require_full_coverage: bool = True) -> bool:
        """Valkey's clusterUpdateState without the partition rule: with full coverage required, the cluster is
        down while any slot is unowned or owned by a failed primary."""
        if not require_full_coverage:
            return True
        if self.uncovered():
            return False
        return all(sh.primary.health != "fail" for sh in self.shards if sh.slots)

    # ---- document -------------------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        by_pair = {}
        for slot in sorted(self.migrating):
            by_pair.setdefault(self.migrating[slot], []).append(slot)
        return {"version": VERSION, "current_epoch": self.current_epoch,
                "shards": [sh.to_dict() for sh in self.shards],
                "migrations": [{"slots": [list(r) for r in ranges_of(slots)], "source": src, "target": dst}
                               for (src, dst), slots in by_pair.items()]}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, doc):
        if not isinstance(doc, dict):
            raise TopologyError("the topology document is not an object")
        _only(doc, ("version", "current_epoch", "shards", "migrations"), "topology")
        if doc.get("version") != VERSION:
            raise TopologyError("unsupported topology version %r" % (doc.get("version"),))
        shards = doc.get("shards")
        if not isinstance(shards, list):
            raise TopologyError("shards is not a list")
        if len(shards) > MAX_NODES:
            raise TopologyError("more than %d shards" % MAX_NODES)
        built = [_shard_from_dict(s) for s in shards]
        migrations = {}
        raw_migrations = doc.get("migrations", [])
        if not isinstance(raw_migrations, list) or len(raw_migrations) > SLOTS:
            raise TopologyError("migrations is not a list of at most %d entries" % SLOTS)
        for m in raw_migrations:
            if not isinstance(m, dict):
                raise TopologyError("a migration is not an object")
            _only(m, ("slots", "source", "target"), "migration")
            pair = (_id(m.get("source"), "migration source"), _id(m.get("target"), "migration target"))
            for slot in _slots_in(_ranges(m.get("slots"), "migration slots")):
                if slot in migrations:
                    raise TopologyError("slot %d migrates twice" % slot)
                migrations[slot] = pair
        return cls(built, doc.get("current_epoch"), migrations)

    @classmethod
    def from_json(cls, raw):
        """Parses and validates a document; raises TopologyError (never anything else) when it is bad."""
        if not isinstance(raw, (bytes, bytearray, str)):
            raise TopologyError("the topology document is not text")
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise TopologyError("the topology document exceeds %d bytes" % MAX_DOCUMENT_BYTES)
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise TopologyError("the topology document is not JSON: %s" % exc) from None
        return cls.from_dict(doc)

    def __eq__(self, other):
        return isinstance(other, Topology) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(self.to_json())

    def __repr__(self):
        return "Topology(%d shards, %d nodes, epoch %d, %d migrating)" % (
            len(self.shards), len(self.nodes), self.current_epoch, len(self.migrating))

    # ---- changes (each returns a new Topology) -----------------------------------------------------------------

    def _rebuild(self, shards, current_epoch=None, migrating=None):
        return Topology(shards, self.current_epoch if current_epoch is None else current_epoch,
                        self.migrating if migrating is None else migrating)

    def with_node(self, node_id: str, **changes):
        """The same topology with one node's fields changed (address, health, repl_offset, ...)."""
        if node_id not in self.nodes:
            raise TopologyError("unknown node %s" % node_id)
        if {"id", "shard_id", "role"} & set(changes):
            raise TopologyError("a node's id, shard and role change only through the shard")
        new = replace(self.nodes[node_id], **changes)
        shards = []
        for sh in self.shards:
            if sh.primary.id == node_id:
                sh = replace(sh, primary=new)
            elif any(n.id == node_id for n in sh.replicas):
                sh = replace(sh, replicas=tuple(new if n.id == node_id else n for n in sh.replicas))
            shards.append(sh)
        return self._rebuild(shards)

    def promote(self, node_id: str, old_failed: bool = False):
        """Failover: `node_id` becomes its shard's primary, the old primary its first replica, and the shard takes
        a new config epoch (current epoch + 1), as a Valkey replica does when it wins an election.
        old_failed: the old primary's lease expired (it is down or cut off), so it is marked "fail" as Valkey's
        failover finds it (CLUSTER SLOTS stops sending clients there) until it rejoins (`with_node(health=)`)."""
        shard = self.shard_of_node(node_id)
        if shard is None:
            raise TopologyError("unknown node %s" % node_id)
        if shard.primary.id == node_id:
            return self
        epoch = self.current_epoch + 1
        new_primary = replace(self.nodes[node_id], health="online")
        old = replace(shard.primary, health="fail") if old_failed else shard.primary
        replicas = (old,) + tuple(n for n in shard.replicas if n.id != node_id)
        shards = [replace(sh, primary=new_primary, replicas=replicas, config_epoch=epoch) if sh is shard else sh
                  for sh in self.shards]
        return self._rebuild(shards, current_epoch=epoch)

    def with_migration(self, slots, target_shard: str):
        """Marks `slots` (owned by one shard) as moving to `target_shard`."""
        slots = sorted(set(slots))
        migrating = dict(self.migrating)
        for s in slots:
            _check_slot(s, "slot")
            owner = self.shard_by_slot[s]
            if owner is None:
                raise TopologyError("slot %d is not owned by any shard" % s)
            migrating[s] = (owner.id, target_shard)
        return self._rebuild(self.shards, migrating=migrating)

    def without_migration(self, slots):
        """Cancels the migration of `slots` (ownership unchanged)."""
        migrating = dict(self.migrating)
        for s in slots:
            migrating.pop(s, None)
        return self._rebuild(self.shards, migrating=migrating)

    def with_shard(self, shard):
        """The topology with one more shard (normally owning no slot yet: a rebalance gives it some)."""
        return self._rebuild(self.shards + (shard,), current_epoch=max(self.current_epoch, shard.config_epoch))

    def with_replicas(self, shard_id: str, nodes):
        """The topology with `nodes` added as replicas of shard shard_id (a new node joins it)."""
        shard = self.shard_by_id.get(shard_id)
        if shard is None:
            raise TopologyError("unknown shard %s" % shard_id)
        shards = [replace(sh, replicas=sh.replicas + tuple(nodes)) if sh.id == shard_id else sh for sh in self.shards]
        return self._rebuild(shards)

    def without_node(self, node_id: str):
        """The topology without one replica (a node removed, or replaced by another)."""
        node = self.nodes.get(node_id)
        if node is None:
            raise TopologyError("unknown node %s" % node_id)
        shard = self.shard_by_id[node.shard_id]
        if shard.primary.id == node_id:
            raise TopologyError("node %s is its shard's primary" % node_id)
        shards = [replace(sh, replicas=tuple(n for n in sh.replicas if n.id != node_id)) if sh.id == shard.id else sh
                  for sh in self.shards]
        return self._rebuild(shards)

    def without_shard(self, shard_id: str):
        """The topology without an empty shard (its slots moved elsewhere first)."""
        shard = self.shard_by_id.get(shard_id)
        if shard is None:
            raise TopologyError("unknown shard %s" % shard_id)
        if shard.slots:
            raise TopologyError("shard %s still owns slots" % shard_id)
        if any(shard_id in pair for pair in self.migrating.values()):
            raise TopologyError("shard %s takes part in a migration" % shard_id)
        return self._rebuild([sh for sh in self.shards if sh.id != shard_id])

    def with_slots_assigned(self, slots, shard_id: str):
        """`slots` now belong to `shard_id` (the end of a migration, or a first assignment): their migration marks
        are cleared and the receiving shard takes a new config epoch, as CLUSTER SETSLOT NODE bumps it."""
        if shard_id not in self.shard_by_id:
            raise TopologyError("unknown shard %s" % shard_id)
        moved = set(slots)
        for s in moved:
            _check_slot(s, "slot")
        epoch = self.current_epoch + 1
        shards = []
        for sh in self.shards:
            owned = set(_slots_in(sh.slots))
            if sh.id == shard_id:
                sh = replace(sh, slots=ranges_of(owned | moved), config_epoch=epoch)
            elif owned & moved:
                sh = replace(sh, slots=ranges_of(owned - moved))
            shards.append(sh)
        migrating = {s: m for s, m in self.migrating.items() if s not in moved}
        return self._rebuild(shards, current_epoch=epoch, migrating=migrating)

    def with_slots_unassigned(self, slots):
        """`slots` belong to no shard any more (CLUSTER DELSLOTS): a slot still migrating cannot be."""
        gone = set(slots)
        for s in gone:
            _check_slot(s, "slot")
            if s in self.migrating:
                raise TopologyError("slot %d is migrating" % s)
        shards = [replace(sh, slots=ranges_of(set(_slots_in(sh.slots)) - gone)) if sh.slots else sh
                  for sh in self.shards]
        return self._rebuild(shards)


# ---- ids and ports ---------------------------------------------------------------------------------------------

def node_id_for(name: str) -> str:
    """A stable 40-hex node id for a name (Valkey's node ids are 40 random hex chars; a local cluster derives
    them from the node's name so that a node keeps its id across restarts)."""
    return hashlib.sha1(("durakv-node:" + name).encode()).hexdigest()


def bus_port_of(port: int) -> int:
    """The cport CLUSTER NODES shows (Valkey's default: port + 10000). durakv has no cluster bus, so it is only
    a number clients parse; 0 when that would not be a port."""
    return port + 10000 if port and port + 10000 <= 65535 else 0


# ---- validation helpers -----------------------------------------------------------------------------------------

def _check_int(value, what, low=0, high=None):
    if type(value) is not int or value < low or (high is not None and value > high):
        raise TopologyError("%s must be an integer%s, not %r"
                            % (what, " in %d..%d" % (low, high) if high is not None else " >= %d" % low, value))


def _check_slot(value, what):
    _check_int(value, what, 0, SLOTS - 1)


def _id(value, what):
    if not isinstance(value, str) or not _ID.match(value):
        raise TopologyError("%s must be 40 lowercase hex characters, not %r" % (what, value))
    return value


def _text(value, what):
    if not isinstance(value, str) or len(value) > MAX_TEXT or not _TEXT.match(value):
        raise TopologyError("%s must be a string of at most %d characters without spaces, commas or '@', not %r"
                            % (what, MAX_TEXT, value))
    return value


def _only(doc, allowed, what):
    extra = set(doc) - set(allowed)
    if extra:
        raise TopologyError("unknown %s field(s): %s" % (what, ", ".join(sorted(map(str, extra)))))


def _ranges(value, what):
    if not isinstance(value, (list, tuple)) or len(value) > SLOTS:
        raise TopologyError("%s must be a list of [start, end] ranges" % what)
    out = []
    for r in value:
        if not isinstance(r, (list, tuple)) or len(r) != 2:
            raise TopologyError("%s must be a list of [start, end] ranges, not %r" % (what, r))
        _check_slot(r[0], what)
        _check_slot(r[1], what)
        if r[0] > r[1]:
            raise TopologyError("%s range %d-%d is reversed" % (what, r[0], r[1]))
        out.append((r[0], r[1]))
    return out


def _check_node(node: Node):
    _id(node.id, "node id")
    _text(node.ip, "node %s ip" % node.id)
    _text(node.hostname, "node %s hostname" % node.id)
    _text(node.az, "node %s az" % node.id)
    for f in ("port", "tls_port", "bus_port"):
        _check_int(getattr(node, f), "node %s %s" % (node.id, f), 0, 65535)
    if not node.port and not node.tls_port:
        raise TopologyError("node %s has neither a port nor a tls_port" % node.id)
    if node.health not in HEALTH:
        raise TopologyError("node %s health must be one of %s, not %r" % (node.id, ", ".join(HEALTH), node.health))
    _check_int(node.repl_offset, "node %s repl_offset" % node.id)


def _finish_shard(shard: Shard) -> Shard:
    """Validates a shard and stamps its nodes with their shard id and role."""
    if not isinstance(shard, Shard):
        raise TopologyError("not a Shard: %r" % (shard,))
    _id(shard.id, "shard id")
    _text(shard.name, "shard %s name" % shard.id)
    _check_int(shard.config_epoch, "shard %s config_epoch" % shard.id)
    if not isinstance(shard.primary, Node):
        raise TopologyError("shard %s has no primary" % shard.id)
    merged = []
    for a, b in sorted(_ranges(shard.slots, "shard %s slots" % shard.id)):
        if merged and a <= merged[-1][1]:
            raise TopologyError("shard %s lists slot %d twice" % (shard.id, a))
        if merged and a == merged[-1][1] + 1:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    slots = tuple((a, b) for a, b in merged)
    nodes = [shard.primary] + list(shard.replicas)
    for n in nodes:
        if not isinstance(n, Node):
            raise TopologyError("shard %s has a replica that is not a Node: %r" % (shard.id, n))
        _check_node(n)
    primary = replace(shard.primary, shard_id=shard.id, role=PRIMARY)
    replicas = tuple(replace(n, shard_id=shard.id, role=REPLICA) for n in shard.replicas)
    return replace(shard, slots=slots, primary=primary, replicas=replicas)


def _node_from_dict(doc, what):
    if not isinstance(doc, dict):
        raise TopologyError("%s is not an object" % what)
    _only(doc, _NODE_FIELDS, what)
    if "id" not in doc or "ip" not in doc or "port" not in doc:
        raise TopologyError("%s needs id, ip and port" % what)
    return Node(**doc)


def _shard_from_dict(doc):
    if not isinstance(doc, dict):
        raise TopologyError("a shard is not an object")
    _only(doc, ("id", "name", "config_epoch", "slots", "primary", "replicas"), "shard")
    sid = _id(doc.get("id"), "shard id")
    replicas = doc.get("replicas", [])
    if not isinstance(replicas, list) or len(replicas) > MAX_NODES:
        raise TopologyError("shard %s replicas is not a list" % sid)
    return Shard(id=sid, name=doc.get("name", ""), config_epoch=doc.get("config_epoch", 0),
                 slots=_ranges(doc.get("slots", []), "shard %s slots" % sid),
                 primary=_node_from_dict(doc.get("primary"), "shard %s primary" % sid),
                 replicas=tuple(_node_from_dict(r, "shard %s replica" % sid) for r in replicas))
