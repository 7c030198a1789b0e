"""routing/topology.py Topology.uncovered: the slot ranges no shard owns, found from the shards' ranges (every
composed topology asks for them); they must be what a walk over all 16384 slots finds."""

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from durakv.routing import Node, Shard, Topology
from durakv.routing.topology import SLOTS, ranges_of

pytestmark = pytest.mark.unit


def nid(n):
    return "%040x" % n


@st.composite
def topologies(draw):
    n = draw(st.integers(1, 5))
    cuts = sorted(draw(st.sets(st.integers(0, SLOTS), min_size=1, max_size=24)) | {0, SLOTS})
    slots_of = {i: [] for i in range(n)}
    for a, b in zip(cuts, cuts[1:]):
        owner = draw(st.integers(-1, n - 1))          # -1: nobody owns this stretch
        if owner >= 0:
            slots_of[owner].extend(range(a, b))
    shards = [Shard(nid(0x5000 + i), str(i), 1, ranges_of(slots_of[i]), Node(nid(i + 1), "127.0.0.1", 7000 + i), ())
              for i in range(n)]
    return Topology(shards, 1)


@settings(max_examples=200, deadline=None)
@given(topologies())
def test_uncovered_is_what_a_walk_over_every_slot_finds(topology):
    expected = ranges_of(s for s in range(SLOTS) if topology.shard_by_slot[s] is None)
    assert topology.uncovered() == expected
    assert topology.slots_assigned() == sum(b - a + 1 for sh in topology.shards for a, b in sh.slots)
