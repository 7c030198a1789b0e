"""A node that is down is not offered to clients: CLUSTER SLOTS leaves it out and CLUSTER NODES / SHARDS show
it failed, as Valkey does once it marks a node FAIL; back and caught up, it is listed again.

The defect this guards against: a killed (old) primary stayed in every CLUSTER SLOTS reply as a replica, so a
client that sends a command to a random node (valkey-py's COMMAND while it builds a ValkeyCluster) or reads from
replicas met a refused connection after a failover.
"""

import signal

import valkey
from valkey.cluster import ClusterNode, ValkeyCluster

from conftest import wait_new_primary, wait_until


def _slots_ports(port):
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5) as c:
        slots = c.execute_command("CLUSTER", "SLOTS")
    return {int(n[1]) for entry in slots for n in entry[2:]}


def _node_flags(port):
    """{port: flags} from CLUSTER NODES of the node at `port`."""
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5, decode_responses=True) as c:
        text = c.execute_command("CLUSTER", "NODES")
    if isinstance(text, dict):      # valkey-py parses CLUSTER NODES into {addr: {...}}
        return {int(addr.split(":")[1].split("@")[0]): set(v["flags"].split(",")) for addr, v in text.items()}
    out = {}
    for line in text.splitlines():
        f = line.split()
        out[int(f[1].split("@")[0].split(":")[1])] = set(f[2].split(","))
    return out


def _health(port):
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5) as c:
        shards = c.execute_command("CLUSTER", "SHARDS")
    out = {}
    for sh in shards:
        sh = dict(zip(sh[::2], sh[1::2])) if isinstance(sh, list) else sh
        for n in sh[b"nodes"]:
            n = dict(zip(n[::2], n[1::2])) if isinstance(n, list) else n
            out[int(n[b"port"])] = n[b"health"].decode()
    return out


def test_killed_nodes_leave_cluster_slots_and_return_when_back(local_cluster):
    cluster = local_cluster(durability="sync", extra_server_args=["--cluster-node-timeout", "1500"])
    old = cluster.primary(0)
    all_ports = {p.port for p in cluster.nodes}
    assert _slots_ports(old.port) == all_ports

    # The primary dies: the node that takes over its expired lease marks it failed at once.
    cluster.stop_nodes([old.name], sig=signal.SIGKILL)
    new, _ = wait_new_primary(cluster, old.name, timeout_s=30)
    live = [p for p in cluster.nodes if p.name != old.name]
    for p in live:
        wait_until(lambda: old.port not in _slots_ports(p.port), 10, what=f"{p.name} to leave {old.name} out")
        assert _node_flags(p.port)[old.port] >= {"slave", "fail"}
        assert _health(p.port)[old.port] == "fail"
    # a cluster client built now only meets live nodes (COMMAND goes to a random one)
    for attempt in range(10):
        c = ValkeyCluster(startup_nodes=[ClusterNode("127.0.0.1", p.port) for p in live], socket_timeout=5,
                          cluster_error_retry_attempts=0)
        try:
            assert c.set(f"k{attempt}", "v") and c.get(f"k{attempt}") == b"v"
        finally:
            c.close()

    # A replica dies: the others stop offering it after cluster-node-timeout without hearing from it.
    victim = next(p for p in live if p.name != new.name)
    cluster.stop_nodes([victim.name], sig=signal.SIGKILL)
    wait_until(lambda: victim.port not in _slots_ports(new.port), 20, what=f"{victim.name} to be left out")
    assert "fail" in _node_flags(new.port)[victim.port]
    assert _node_flags(new.port)[new.port] >= {"myself", "master"}

    # Both back: caught up and listed again, no node marked failed.
    cluster.start_nodes([old.name, victim.name])
    for p in cluster.nodes:
        wait_until(lambda: _slots_ports(p.port) == all_ports, 30, what=f"{p.name} to list every node again")
        wait_until(lambda: not any("fail" in f for f in _node_flags(p.port).values()), 30,
                   what=f"{p.name} to show no failed node")
        assert set(_health(p.port).values()) == {"online"}
