"""What clients and operators read about a shard must be true (issue 11 item 7): the primary lists its replicas
with the journal index each applied (INFO replication, ROLE), WAIT counts them, every node of a shard reports one
replication id per epoch, and DurabilityLag is 0 in sync as ElastiCache defines it."""

import valkey

from conftest import wait_until


def test_primary_lists_its_replicas_with_offsets_and_wait_counts_them(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    replicas = cluster.replicas(0)
    with valkey.Valkey(port=primary.port, socket_timeout=10) as c:
        for i in range(50):
            c.set(f"k{i}", i)
        assert c.execute_command("WAIT", 2, 5000) == 2
        offset = int(c.info("replication")["master_repl_offset"])

        def listed():
            repl = c.info("replication")
            rows = [repl.get(f"slave{i}") for i in range(repl["connected_slaves"])]
            return repl["connected_slaves"] == 2 and rows
        rows = wait_until(listed, 10, what="both replicas listed")
        ports = sorted(int(r["port"]) for r in rows)
        assert ports == sorted(p.port for p in replicas)
        assert all(r["state"] == "online" and int(r["offset"]) >= offset for r in rows)
        role = c.execute_command("ROLE")
        assert role[0] == b"master" and role[1] >= offset
        assert sorted(int(r[1]) for r in role[2]) == ports and all(int(r[2]) >= offset for r in role[2])
        d = c.info("durability")
        assert d["durability_mode"] == "sync" and d["durability_lag_ms"] == 0

    replids = {p.name: p.info("replication")["replication"]["master_replid"] for p in cluster.nodes}
    assert len(set(replids.values())) == 1 and len(next(iter(replids.values()))) == 40, replids
    for r in replicas:
        repl = r.info("replication")["replication"]
        assert repl["role"] == "slave" and int(repl["master_port"]) == primary.port
        assert repl["master_link_status"] == "up" and int(repl["slave_repl_offset"]) >= offset

    # a new primary: a new replication id, again one for the whole shard
    new, _s = cluster.failover(0)
    def one_new_replid():
        ids = {p.info("replication")["replication"]["master_replid"] for p in cluster.nodes}
        return len(ids) == 1 and ids != set(replids.values())
    wait_until(one_new_replid, 10, what="one new replication id on every node")
    with valkey.Valkey(port=new.port, socket_timeout=10) as c:
        c.set("after", "1")
        assert c.execute_command("WAIT", 2, 5000) == 2


def test_a_lost_nats_server_is_logged_once_and_never_shown_as_leader(local_cluster):
    """Killing the JetStream meta leader: `cluster status` stops naming it at once, and each durakv node logs
    the lost connection as a line or two (with a count), not a traceback per reconnect attempt."""
    import signal
    import time
    cluster = local_cluster(durability="sync")
    leader = cluster.nats_meta_leader()
    assert leader is not None
    assert cluster.kill(leader, signal.SIGKILL)
    wait_until(lambda: cluster.get(leader).state == "dead", 10, what=f"{leader} gone")
    assert cluster.status()["nats_meta_leader"] != leader
    primary = cluster.primary(0)
    # writes go on (through the other two NATS servers) for a few seconds of reconnect attempts
    with valkey.Valkey(port=primary.port, socket_timeout=15) as c:
        deadline = time.monotonic() + 4
        n = 0
        while time.monotonic() < deadline:
            try:
                c.set(f"x{n}", n)
                n += 1
            except valkey.ResponseError:
                time.sleep(0.05)
    assert n > 0
    for p in cluster.nodes:
        text = open(p.log).read()
        assert "Traceback" not in text, text[-3000:]
        nats_lines = [line for line in text.splitlines() if "NATS connection" in line]
        assert len(nats_lines) <= 6, nats_lines
