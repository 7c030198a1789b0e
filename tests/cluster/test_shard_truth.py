"""What clients and operators read about a shard must be true (issue 11 item 7): the primary lists its replicas
with the journal index each applied (INFO replication, ROLE), WAIT counts them, every node of a shard reports one
replication id per epoch, and DurabilityLag is 0 in sync as ElastiCache defines it."""

import re

import pytest
import valkey

from conftest import DEBUG_ARGS, wait_until


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
    leader = cluster.nats_view.meta_leader()
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
        # A node holds several NATS connections (the node's, its journal's, the lease renewer's): each logs
        # what happened to it in a few lines (the error, lost, reconnected), not a line per reconnect attempt.
        per_connection = {}
        for line in text.splitlines():
            m = re.search(r"NATS connection (\S+?):? ", line)
            if m:
                per_connection.setdefault(m.group(1), []).append(line)
        assert all(len(lines) <= 4 for lines in per_connection.values()), per_connection


def test_a_replica_behind_its_journal_refuses_reads_until_it_catches_up(local_cluster):
    """Issue 11 item 6: a replica that knows of journal entries it has not applied for longer than
    replica-max-lag-ms answers reads with -MASTERDOWN instead of stale data, and serves again once caught up."""
    import time
    cluster = local_cluster(durability="sync", extra_server_args=DEBUG_ARGS)
    primary = cluster.primary(0)
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(port=primary.port, socket_timeout=10) as p, \
            valkey.Valkey(port=replica.port, socket_timeout=10, single_connection_client=True) as r:
        r.execute_command("READONLY")
        p.set("k", "old")
        wait_until(lambda: r.get("k") == b"old", 10, what="the replica serving k")
        assert r.config_set("replica-max-lag-ms", "800")
        assert r.execute_command("DEBUG", "JOURNAL-FOLLOW-STALL", "3000") == b"OK"
        p.set("k", "new")
        refused = None
        deadline = time.monotonic() + 10
        n = 0
        while refused is None and time.monotonic() < deadline:
            p.set(f"more:{n}", n)       # the primary's heartbeats tell the replica what it has not applied
            n += 1
            try:
                assert r.get("k") in (b"old", b"new")
            except valkey.ResponseError as exc:
                refused = str(exc)
            time.sleep(0.02)
        assert refused is not None and refused.startswith("MASTERDOWN This replica is") and "replica-max-lag-ms" in refused
        info = r.info("replication")
        assert info["replica_serving_reads"] == 0 and info["replica_behind_ms"] > 800
        wait_until(lambda: r.get("k") == b"new", 15, what="the replica serving again, caught up")
        assert r.info("replication")["replica_serving_reads"] == 1


def test_a_restarted_node_answers_while_it_loads_then_serves(local_cluster):
    """A restarted node answers at once (-LOADING to data commands, INFO with its phase), instead of being
    silent until it has caught up; then it serves what was written while it was down."""
    import signal
    import time
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(port=primary.port, socket_timeout=30) as c:
        for start in range(0, 40000, 2000):
            pipe = c.pipeline(transaction=False)
            for i in range(start, start + 2000):
                pipe.set(f"key:{i}", "x" * 50)
            pipe.execute()
    cluster.kill(replica.name, signal.SIGKILL)
    wait_until(lambda: cluster.get(replica.name).state == "dead", 10, what="replica gone")
    cluster.restart(replica.name, wait=False)
    saw_loading = False
    served = False
    deadline = time.monotonic() + 60
    while not served and time.monotonic() < deadline:
        try:
            with valkey.Valkey(port=replica.port, socket_timeout=5, socket_connect_timeout=0.2,
                               single_connection_client=True) as r:
                if r.info("persistence")["loading"] == 1:
                    saw_loading = True
                    continue
                r.execute_command("READONLY")
                served = r.get("key:39999") == b"x" * 50
        except valkey.exceptions.BusyLoadingError:
            saw_loading = True
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
            pass
        time.sleep(0.01)
    assert served and saw_loading
    row = next(n for n in cluster.status()["nodes"] if n["name"] == replica.name)
    assert row["replication"]["durakv_phase"] == "following"


@pytest.mark.long_pole(23)     # seconds on the 2-core machine: xdist starts it first
def test_a_replica_whose_next_entries_were_purged_reloads_instead_of_skipping_them(local_cluster):
    """A replica stopped long enough to drop out of the shard's heartbeats; meanwhile another replica stores a
    snapshot and purges the journal below it. The stopped replica, resumed, must not follow on from the first
    entry left (a silent gap): it finds the purge and loads the newest snapshot, then serves every key."""
    import signal
    import time
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    a, b = cluster.replicas(0)[:2]
    with valkey.Valkey(port=primary.port, socket_timeout=30) as c:
        for i in range(200):
            c.set(f"early:{i}", i)
        assert c.execute_command("WAIT", 2, 5000) == 2
        assert cluster.pause(a.name)
        try:
            # 2000 writes of 20 KB: more than socket buffers and the consumer's flow-control window hold, so most
            # of them are still only in the journal when b purges it
            for i in range(2000):
                c.set(f"late:{i}", str(i) + "." * 20000)
            # a is no longer heard from (3 s), so b's purge does not wait for it
            wait_until(lambda: c.info("replication")["connected_slaves"] == 1, 15, what="a dropped from the list")
            with valkey.Valkey(port=b.port, socket_timeout=60) as rb:
                assert rb.execute_command("BGSAVE")   # on a shard replica it answers once stored
            # the journal was purged below b's snapshot (the monitoring view follows within moments)
            wait_until(lambda: cluster.nats_view.streams()["DURAKV_SHARD_0"]["messages"] < 2200, 10, what="the purge")
        finally:
            cluster.resume(a.name)

    def a_has_everything():
        with valkey.Valkey(port=a.port, socket_timeout=5) as ra:
            pipe = ra.pipeline(transaction=False)
            pipe.execute_command("READONLY")     # on the pipeline's own connection
            pipe.get("early:0")
            for i in range(2000):
                pipe.get(f"late:{i}")
            values = pipe.execute()[1:]
            return values[0] == b"0" and all(v == (str(i) + "." * 20000).encode() for i, v in enumerate(values[1:]))
    wait_until(a_has_everything, 60, interval_s=0.2, what="the resumed replica serving every key")
