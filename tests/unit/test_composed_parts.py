"""A shard member (replication/node.py) and a local cluster (cluster/local.py) are objects composed of parts,
not piles of mixins: no part's state hides in a base class, each part is an attribute that owns its state
(docs/architecture.md, "A shard member is an object with parts")."""

import inspect

from durakv.replication import follow, lease, promotion
from durakv.replication.node import ClusterNode


def test_the_shard_member_inherits_nothing():
    assert ClusterNode.__bases__ == (object,)
    for module in (follow, lease, promotion):
        mixins = [name for name, obj in vars(module).items() if inspect.isclass(obj) and name.endswith("Mixin")]
        assert mixins == [], (module.__name__, mixins)

