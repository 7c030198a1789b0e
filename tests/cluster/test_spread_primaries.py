"""After failovers a shard's primary may sit in another shard's AZ, so one AZ's power cut would take more than a
third of the primaries. `durakv cluster spread-primaries` hands each back to its home AZ (shard i in AZ i mod the
AZs, where `create` placed it) by planned failovers, when the operator asks. The plan is pure (plan_spread); the
hand-over runs on a real local cluster (NATS and durakv processes, stopped by pid)."""

from conftest import durakv_cli, wait_until
from durakv.cluster.admin import home_az, plan_spread
from durakv.cluster.store import Lease
from durakv.routing.topology import Node, Shard, Topology


def _node(i, az):
    return Node(id="%040x" % i, ip="10.0.0.%d" % i, port=7000 + i, az=az)


def _topology():
    a = [_node(1, "az1"), _node(2, "az2"), _node(3, "az3")]
    b = [_node(4, "az2"), _node(5, "az3"), _node(6, "az1")]
    return Topology([Shard(id="%040x" % 100, name="0", config_epoch=1, slots=((0, 8191),), primary=a[0],
                           replicas=tuple(a[1:])),
                     Shard(id="%040x" % 101, name="1", config_epoch=2, slots=((8192, 16383),), primary=b[0],
                           replicas=tuple(b[1:]))], current_epoch=2), a, b


def _lease(node):
    return Lease(holder=node.id, epoch=1, addr="%s:%d" % (node.ip, node.port), az=node.az, expires_ms=0)


def test_home_az_is_shard_index_mod_the_azs():
    assert [home_az(i, ["az1", "az2", "az3"]) for i in range(5)] == ["az1", "az2", "az3", "az1", "az2"]
    assert home_az(0, []) == ""


def test_the_plan_moves_only_primaries_away_from_home():
    topology, a, b = _topology()
    assert plan_spread(topology, {"0": _lease(a[0]), "1": _lease(b[0])}) == []
    # shard 0's lease went to its az3 replica, shard 1's to its az1 replica: both go home
    plan = plan_spread(topology, {"0": _lease(a[2]), "1": _lease(b[2])})
    assert [(shard, src, dst, node.id) for shard, src, dst, node in plan] == [
        ("0", "az3", "az1", a[0].id), ("1", "az1", "az2", b[0].id)]
    # a shard with no node in its home AZ is reported with no node to move to
    c = [_node(7, "az2"), _node(8, "az3")]
    t2 = Topology([Shard(id="%040x" % 102, name="0", config_epoch=3, slots=((0, 8191),), primary=c[0],
                         replicas=(c[1],)), topology.shards[1]], current_epoch=3)
    assert plan_spread(t2, {"0": _lease(c[0]), "1": _lease(b[0])}) == [("0", "az2", "az1", None)]


def test_spread_primaries_hands_a_moved_primary_back_to_its_home_az(local_cluster):
    cluster = local_cluster(durability="sync")
    home = cluster.primary(0)
    assert home.az == "az1"
    moved, _seconds = cluster.failover(shard=0)
    wait_until(lambda: (cluster.primary(0) or home).az != "az1", 30, what="shard 0's primary out of az1")
    res = durakv_cli("cluster", "spread-primaries", "--dir", cluster.dir)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "shard 0: primary in %s, home az1" % moved.az in res.stdout and "moved in" in res.stdout, res.stdout
    wait_until(lambda: (cluster.primary(0) or moved).az == "az1", 30, what="shard 0's primary back in az1")
    res = durakv_cli("cluster", "spread-primaries", "--dir", cluster.dir)
    assert res.returncode == 0 and "every shard's primary is in its home AZ" in res.stdout, res.stdout + res.stderr
