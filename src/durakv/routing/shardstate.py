"""A shard's own state, and how the routed topology is composed from the operator's topology and every shard's.

Why two kinds of document: a node may write only what concerns its own shard (its NATS identity may publish to
`state.<its shard>` and not to `topology`, cluster/natsauth.py), yet a shard changes its routing by itself: a
failover names a new primary, a node recovering clears its failure mark, a migrating slot is handed to its
target when its last key has moved, a move the source starts (CLUSTER MIGRATESLOTS) or cancels, a slot nobody
owns that it takes (CLUSTER ADDSLOTS) or one of its own it gives up (CLUSTER DELSLOTS). So:

* the **topology** (operator-written: `durakv cluster create`, `reshard`, `add-node`, ...) holds the members of
  every shard with their addresses, the slot owners and the migrations the operator asked for;
* each shard's **state** (written by that shard's nodes) holds its primary and config epoch, its nodes' health,
  and its slot hand-overs, its own migration marks and its cancellations;
* `compose(topology, states)` is the topology every node routes by. A state can change only its own shard,
  and only in ways that shard may decide: it names a primary only among the shard's members; it hands over or
  cancels only a slot migrating *out of* the shard; it marks or releases only a slot the shard owns; it claims
  only a slot nobody owns (two claims of one slot: the shard whose id sorts first). Anything else in a
  state is ignored (and a document that does not validate is not used at all), so a node with a stolen
  identity cannot route another shard's slots anywhere.

The state document (version 1), bounded like the topology's:

    {"version": 1, "primary": <node id> | "", "epoch": 4, "health": {<node id>: "online" | "fail"},
     "handed": [{"slots": [[a, b]], "target": <shard id>}], "marks": [{"slots": [[a, b]], "target": <shard id>}],
     "unmarked": [[a, b]], "claimed": [[a, b]], "released": [[a, b]]}

The operator folds the states into the topology (`fold`) before each change of its own, so that stale
hand-overs or cancellations can never apply to a later migration: after a fold the states carry only their
primary, epoch and health (cluster/reshard.py `fold_states` removes exactly the entries it folded, so one a
node adds meanwhile survives).
"""

import json
from dataclasses import dataclass, field, replace

from .slots import SLOTS
from .topology import (HEALTH, MAX_DOCUMENT_BYTES, MAX_NODES, Topology, TopologyError, _check_int, _id, _only,
                       _ranges, _slots_in, ranges_of)

VERSION = 1


@dataclass(frozen=True)
class ShardState:
    primary: str = ""                               # node id, "" = as the topology says
    epoch: int = 0                                  # the config epoch of the shard's last promotion
    health: dict = field(default_factory=dict)      # node id -> "online" | "fail"
    handed: dict = field(default_factory=dict)      # slot -> target shard id: emptied here, now the target's
    marks: dict = field(default_factory=dict)       # slot -> target shard id: moves this shard started
    unmarked: frozenset = frozenset()               # slots whose move out of this shard was cancelled
    claimed: frozenset = frozenset()                # slots nobody owned that this shard takes
    released: frozenset = frozenset()               # slots of this shard it gives up (owned by nobody then)

    def __post_init__(self):
        if self.primary:
            _id(self.primary, "state primary")
        _check_int(self.epoch, "state epoch")
        if len(self.health) > MAX_NODES:
            raise TopologyError("state health lists more than %d nodes" % MAX_NODES)
        for node, h in self.health.items():
            _id(node, "state health node")
            if h not in HEALTH:
                raise TopologyError("state health of %s must be one of %s" % (node, ", ".join(HEALTH)))
        for what in ("handed", "marks"):
            for slot, target in getattr(self, what).items():
                _check_int(slot, "state %s slot" % what, 0, SLOTS - 1)
                _id(target, "state %s target" % what)
        for what in ("unmarked", "claimed", "released"):
            for slot in getattr(self, what):
                _check_int(slot, "state %s slot" % what, 0, SLOTS - 1)

    @property
    def folded(self) -> "ShardState":
        """What stays after the operator folded this state into the topology."""
        return replace(self, handed={}, marks={}, unmarked=frozenset(), claimed=frozenset(), released=frozenset())

    def without(self, folded: "ShardState") -> "ShardState":
        """This state less the slot entries of `folded` (an earlier read that the operator folded): what a node
        added after that read stays."""
        return replace(self, handed={s: t for s, t in self.handed.items() if folded.handed.get(s) != t},
                       marks={s: t for s, t in self.marks.items() if folded.marks.get(s) != t},
                       unmarked=self.unmarked - folded.unmarked, claimed=self.claimed - folded.claimed,
                       released=self.released - folded.released)

    def to_json(self) -> bytes:
        doc = {"version": VERSION, "primary": self.primary, "epoch": self.epoch, "health": dict(self.health),
               "handed": _by_target(self.handed), "marks": _by_target(self.marks),
               "unmarked": [list(r) for r in ranges_of(self.unmarked)],
               "claimed": [list(r) for r in ranges_of(self.claimed)],
               "released": [list(r) for r in ranges_of(self.released)]}
        raw = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise TopologyError("a shard's state exceeds %d bytes" % MAX_DOCUMENT_BYTES)
        return raw

    @classmethod
    def from_json(cls, raw) -> "ShardState":
        """Parses and validates a document; raises TopologyError (never anything else) when it is bad."""
        if not isinstance(raw, (bytes, bytearray, str)) or len(raw) > MAX_DOCUMENT_BYTES:
            raise TopologyError("a shard's state is not text of at most %d bytes" % MAX_DOCUMENT_BYTES)
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise TopologyError("a shard's state is not JSON: %s" % exc) from None
        if not isinstance(doc, dict):
            raise TopologyError("a shard's state is not an object")
        _only(doc, ("version", "primary", "epoch", "health", "handed", "marks", "unmarked", "claimed", "released"),
              "state")
        if doc.get("version") != VERSION:
            raise TopologyError("unsupported shard state version %r" % (doc.get("version"),))
        health = doc.get("health", {})
        if not isinstance(health, dict) or not isinstance(doc.get("primary", ""), str):
            raise TopologyError("state health must be an object and primary a string")
        return cls(primary=doc.get("primary", ""), epoch=doc.get("epoch", 0), health=dict(health),
                   handed=_from_target_list(doc.get("handed", []), "handed"),
                   marks=_from_target_list(doc.get("marks", []), "marks"),
                   unmarked=frozenset(_slots_in(_ranges(doc.get("unmarked", []), "state unmarked"))),
                   claimed=frozenset(_slots_in(_ranges(doc.get("claimed", []), "state claimed"))),
                   released=frozenset(_slots_in(_ranges(doc.get("released", []), "state released"))))


def _by_target(slots: dict) -> list:
    groups = {}
    for slot, target in slots.items():
        groups.setdefault(target, []).append(slot)
    return [{"slots": [list(r) for r in ranges_of(s)], "target": t} for t, s in sorted(groups.items())]


def _from_target_list(items, what) -> dict:
    if not isinstance(items, list) or len(items) > SLOTS:
        raise TopologyError("state %s must be a list of at most %d entries" % (what, SLOTS))
    out = {}
    for item in items:
        if not isinstance(item, dict):
            raise TopologyError("a state %s entry is not an object" % what)
        _only(item, ("slots", "target"), "state %s entry" % what)
        target = _id(item.get("target"), "state %s target" % what)
        for slot in _slots_in(_ranges(item.get("slots"), "state %s slots" % what)):
            out[slot] = target
    return out


def compose(topology: Topology, states: dict) -> Topology:
    """The topology to route by: `topology` (the operator's) with what each shard's state (by shard name) may
    change of its own shard applied; see the module's text for what a state may do. In order: each shard's
    primary, epoch and health; slots released; slots claimed (a slot nobody owns after the releases); moves the
    owners started; cancellations and hand-overs of moves out of a shard."""
    if topology is None:
        return None
    shards = list(topology.shards)
    by_name = {sh.name: i for i, sh in enumerate(shards)}
    mine = [(shards[by_name[name]].id, state) for name, state in sorted(states.items())
            if state is not None and name in by_name]
    migrating = dict(topology.migrating)
    current = topology.current_epoch
    for name, state in states.items():
        i = by_name.get(name)
        if i is None or state is None:
            continue
        sh = shards[i]
        members = {n.id: n for n in sh.nodes}
        primary = sh.primary
        replicas = list(sh.replicas)
        if state.primary in members and state.primary != sh.primary.id:
            primary = members[state.primary]
            replicas = [sh.primary] + [n for n in sh.replicas if n.id != state.primary]
        health = {nid: h for nid, h in state.health.items() if nid in members}
        if health:
            primary = replace(primary, health=health.get(primary.id, primary.health))
            replicas = [replace(n, health=health.get(n.id, n.health)) for n in replicas]
        epoch = max(sh.config_epoch, state.epoch)
        current = max(current, epoch)
        shards[i] = replace(sh, primary=primary, replicas=tuple(replicas), config_epoch=epoch)
    if not any(st.released or st.claimed or st.marks or st.unmarked or st.handed for _sid, st in mine):
        # no state moves a slot (a promotion, an epoch, health: the usual change): every shard keeps its slots,
        # already sorted and merged, and the moves stay as they are; the slot-by-slot map below took 5.3 ms for
        # three shards, on every node, at every change of any shard's state
        return Topology(shards, current, migrating)
    owner = {s: sh.id for sh in shards for s in _slots_in(sh.slots)}
    for sid, state in mine:
        for slot in state.released:
            if owner.get(slot) == sid and slot not in migrating:
                del owner[slot]
    claims = {}
    for sid, state in mine:
        for slot in state.claimed:
            if slot not in owner and (slot not in claims or sid < claims[slot]):
                claims[slot] = sid
    owner.update(claims)
    for sid, state in mine:
        for slot, target in state.marks.items():
            if owner.get(slot) == sid and slot not in migrating and target != sid and target in topology.shard_by_id:
                migrating[slot] = (sid, target)
    for sid, state in mine:
        for slot in state.unmarked:
            if migrating.get(slot, (None,))[0] == sid:
                del migrating[slot]
        for slot, target in state.handed.items():
            if migrating.get(slot) == (sid, target):
                owner[slot] = target
                del migrating[slot]
    slots_of = {}
    for slot, sid in owner.items():
        slots_of.setdefault(sid, []).append(slot)
    shards = [replace(sh, slots=ranges_of(slots_of.get(sh.id, ()))) for sh in shards]
    return Topology(shards, current, migrating)


def fold(topology: Topology, states: dict):
    """(the composed topology, {shard name: its folded state}): what the operator stores before a change of its
    own, so that no hand-over, mark or cancellation of a state can apply to a later migration."""
    composed = compose(topology, states)
    return composed, {name: st.folded for name, st in states.items() if st is not None}
