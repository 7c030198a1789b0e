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



def _manifest(tmp_path, partitionable):
    """A local cluster's manifest as `up` writes it (cluster/bootstrap.py), no process running: two AZs of NATS,
    one shard of two nodes, and the partition proxy's entry when partitionable."""
    processes = []
    if partitionable:
        processes.append({"kind": "proxy", "name": "netproxy", "az": None, "ports": {"control": 7100},
                          "links": {"nats-az1": {"client": 7101, "cluster": 7102},
                                    "nats-az2": {"client": 7103, "cluster": 7104}},
                          "pid": None, "start_time": None, "dir": str(tmp_path), "log": "", "argv": []})
    for i, az in enumerate(("az1", "az2")):
        processes.append({"kind": "nats", "name": "nats-" + az, "az": az, "ports": {"client": 7001 + i},
                          "pid": None, "start_time": None, "dir": str(tmp_path), "log": "", "argv": []})
        processes.append({"kind": "durakv", "name": "0-%d" % i, "shard": 0, "index": i, "az": az,
                          "ports": {"client": 7201 + i}, "pid": None, "start_time": None, "dir": str(tmp_path),
                          "log": "", "argv": []})
    return {"version": 1, "dir": str(tmp_path), "options": {"shards": 1, "partitionable": partitionable},
            "tls": None, "nats_servers": "nats://127.0.0.1:7001,nats://127.0.0.1:7002", "processes": processes}


def test_the_local_cluster_inherits_nothing_and_its_parts_share_its_manifest(tmp_path):
    from durakv.cluster.local import LocalCluster
    assert LocalCluster.__bases__ == (object,)
    plain = LocalCluster(tmp_path, _manifest(tmp_path, partitionable=False))
    assert plain.proxy is None and plain.partition.entry() is None
    assert plain.partition.node_nats_servers("az2") == "nats://127.0.0.1:7001,nats://127.0.0.1:7002"
    cut = LocalCluster(tmp_path, _manifest(tmp_path, partitionable=True))
    # a node dials its own AZ's NATS directly and every other AZ's through the partition proxy
    assert cut.partition.node_nats_servers("az2") == "nats://127.0.0.1:7002,nats://127.0.0.1:7101"
    # the launcher selects from the cluster's manifest, NATS before durakv nodes
    assert [p.name for p in cut.launcher.select(az="az1")] == ["nats-az1", "0-0"]
    assert [p.name for p in cut.select(node="0-1,nats-az2")] == ["nats-az2", "0-1"]
    assert cut.proxy.name == "netproxy" and [p.name for p in cut.shard_nodes(0)] == ["0-0", "0-1"]
