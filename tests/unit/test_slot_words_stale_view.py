"""CLUSTER ADDSLOTS / DELSLOTS on a node whose copy of the topology is behind the store's.

A DELSLOTS committed to the store through one node is answered OK there, and reaches the other nodes a moment
later. An ADDSLOTS of that slot on another node in between was refused "Slot 8191 is already busy" by the node's
old copy (seen beside two CPU burners: cluster/test_cluster_slot_migration_words.py). The store's topology is the
cluster's: a refusal by the node's copy is decided again on the store's, and stands only if that one refuses too.
"""

import pytest

from durakv.commands.cluster_admin import cluster_addslots, cluster_delslots
from durakv.errors import CommandError
from durakv.routing import Node, Shard, Topology
from durakv.routing.topology import ranges_of

pytestmark = pytest.mark.unit


def nid(n):
    return "%040x" % n


def topology(owners):
    """owners: {shard index: slots}; two shards, 0 and 1."""
    shards = [Shard(nid(0x5000 + i), str(i), 1, ranges_of(sorted(owners.get(i, ()))), Node(nid(i + 1), "127.0.0.1",
                                                                                           7000 + i), ())
              for i in range(2)]
    return Topology(shards, 1)


class Routing:
    def __init__(self, view, mine):
        self._view = view
        self.router = type("Router", (), {"my_shard": view.shards[mine]})()

    def view(self):
        return self._view


class Cluster:
    """The cluster services: this node's routing, and the changes asked of the store (recorded)."""

    def __init__(self, routing):
        self._routing = routing
        self.changes = []

    def routing(self):
        return self._routing

    def assign_slots(self, name, slots, shard_id, check=None):
        self.changes.append(("assign", name, slots, shard_id, check))
        return "deferred"

    def unassign_slots(self, name, slots, shard_id, check=None):
        self.changes.append(("unassign", name, slots, shard_id, check))
        return "deferred"


class Ctx:
    def __init__(self, cluster):
        self.services = type("Services", (), {"cluster": cluster})()


# shard 0 owned 0..8191 and released 8191 (the store's now); this node (shard 1) still has the old copy
OLD = topology({0: range(0, 8192), 1: range(8192, 16384)})
NEW = topology({0: range(0, 8191), 1: range(8192, 16384)})


def test_addslots_refused_by_a_stale_copy_is_decided_on_the_stores():
    cluster = Cluster(Routing(OLD, mine=1))
    assert cluster_addslots(Ctx(cluster), [b"CLUSTER", b"ADDSLOTS", b"8191"]) == "deferred"
    kind, name, slots, shard_id, check = cluster.changes[0]
    assert (kind, name, slots, shard_id) == ("assign", "ADDSLOTS", None, OLD.shards[1].id)
    assert check(NEW) == [8191]                    # the store's copy: nobody owns it, so it is added
    with pytest.raises(CommandError, match="^ERR Slot 8191 is already busy$"):
        check(OLD)                                 # a store that still has it owned refuses with Valkey's text


def test_a_copy_that_agrees_changes_at_once_and_arguments_are_refused_here():
    cluster = Cluster(Routing(NEW, mine=1))
    cluster_addslots(Ctx(cluster), [b"CLUSTER", b"ADDSLOTS", b"8191"])
    assert cluster.changes[0][:4] == ("assign", "ADDSLOTS", [8191], NEW.shards[1].id)
    assert cluster.changes[0][4] is None
    with pytest.raises(CommandError, match="^ERR Slot 8191 specified multiple times$"):
        cluster_addslots(Ctx(cluster), [b"CLUSTER", b"ADDSLOTS", b"8191", b"8191"])
    assert len(cluster.changes) == 1


def test_delslots_refused_by_a_stale_copy_is_decided_on_the_stores():
    # this node (shard 0) has not seen its own shard get 100 (an ADDSLOTS through its other member)
    old = topology({0: range(0, 100)})
    new = topology({0: range(0, 101)})
    cluster = Cluster(Routing(old, mine=0))
    cluster_delslots(Ctx(cluster), [b"CLUSTER", b"DELSLOTS", b"100"])
    kind, _name, slots, _shard, check = cluster.changes[0]
    assert (kind, slots) == ("unassign", None)
    assert check(new) == [100]
    with pytest.raises(CommandError, match="^ERR Slot 100 is already unassigned$"):
        check(old)
    # another shard's slot, by the store's copy, keeps its own refusal
    with pytest.raises(CommandError, match="is owned by shard 1"):
        check(topology({0: range(0, 100), 1: [100]}))
