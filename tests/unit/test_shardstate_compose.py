"""routing/shardstate.py compose: a change of shard states that moves no slot (a promotion, an epoch, health)
takes a short way that keeps every shard's slots and the moves as they are; it must give what the slot-by-slot
way gives. The slot-by-slot way is reached by adding a release that cannot apply (a slot of another shard), which
changes nothing of the result."""

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from durakv.routing import Node, Shard, Topology
from durakv.routing.shardstate import ShardState, compose

pytestmark = pytest.mark.unit

SLOTS = 16384


def nid(n):
    return "%040x" % n


@st.composite
def cases(draw):
    n = draw(st.integers(2, 4))
    cuts = sorted(draw(st.sets(st.integers(1, SLOTS - 1), min_size=n - 1, max_size=n - 1)))
    bounds = [0] + cuts + [SLOTS]
    shards = []
    for s in range(n):
        replicas = tuple(Node(nid(0x100 * (s + 1) + r), "127.0.0.1", 7100 + 10 * s + r)
                         for r in range(draw(st.integers(0, 2))))
        shards.append(Shard(nid(0x5000 + s), str(s), s + 1, ((bounds[s], bounds[s + 1] - 1),),
                            Node(nid(s + 1), "127.0.0.1", 7000 + s), replicas))
    topology = Topology(shards, n + 1)
    if draw(st.booleans()):
        # a move under way: some slots of shard 0 to shard 1
        first = draw(st.integers(bounds[0], bounds[1] - 1))
        topology = topology.with_migration(range(first, min(first + 3, bounds[1])), nid(0x5001))
    states = {}
    for s, sh in enumerate(topology.shards):
        if not draw(st.booleans()):
            states[sh.name] = None if draw(st.booleans()) else ShardState()
            continue
        members = [sh.primary.id] + [r.id for r in sh.replicas]
        states[sh.name] = ShardState(
            primary=draw(st.sampled_from(members + [""])),
            epoch=draw(st.integers(0, n + 5)),
            health={m: draw(st.sampled_from(["online", "fail"])) for m in members if draw(st.booleans())})
    return topology, states


def _slot_by_slot(topology, states):
    """The same states with a release no shard can act on: shard 0 releasing a slot shard 1 owns."""
    other_slot = topology.shards[1].slots[0][0]
    s0 = topology.shards[0].name
    forced = dict(states)
    base = forced.get(s0) or ShardState()
    forced[s0] = ShardState(primary=base.primary, epoch=base.epoch, health=base.health,
                            released=frozenset([other_slot]))
    return compose(topology, forced)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_a_change_that_moves_no_slot_composes_as_the_slot_by_slot_way(case):
    topology, states = case
    short = compose(topology, states)
    assert short == _slot_by_slot(topology, states)
    assert [sh.slots for sh in short.shards] == [sh.slots for sh in topology.shards]
    assert short.migrating == topology.migrating


def test_a_promotion_and_an_epoch_are_applied_on_the_short_way():
    shards = [Shard(nid(0x5000 + s), str(s), s + 1, (r,), Node(nid(s + 1), "127.0.0.1", 7000 + s),
                    (Node(nid(s + 100), "127.0.0.1", 7100 + s),))
              for s, r in enumerate([(0, 8191), (8192, 16383)])]
    topology = Topology(shards, 2)
    out = compose(topology, {"0": ShardState(primary=nid(100), epoch=7, health={nid(1): "fail"}), "1": None})
    sh = out.shard_by_id[nid(0x5000)]
    assert sh.primary.id == nid(100) and [r.id for r in sh.replicas] == [nid(1)]
    assert sh.config_epoch == 7 and out.current_epoch == 7 and sh.replicas[0].health == "fail"
    assert out.shard_by_slot[0] is sh and out.shard_by_slot[16383].id == nid(0x5001)


def test_a_claim_still_takes_the_slot_by_slot_way():
    shards = [Shard(nid(0x5000), "0", 1, ((0, 100),), Node(nid(1), "127.0.0.1", 7000), ()),
              Shard(nid(0x5001), "1", 1, ((200, 16383),), Node(nid(2), "127.0.0.1", 7001), ())]
    topology = Topology(shards, 1)
    out = compose(topology, {"0": ShardState(claimed=frozenset(range(101, 150)))})
    assert out.shard_by_id[nid(0x5000)].slots == ((0, 149),)
