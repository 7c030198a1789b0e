"""Backups of a cluster (issue 31): scheduled backups elected one node per shard (a replica), an operator's backup
through the locked NATS with the operator's identity, restore into a running cluster of another shard count
(keys re-routed by slot), and point-in-time restore on JetStream's commit times. Local clusters are real NATS
and durakv processes (tests/nats_fixtures.py), stopped by pid."""

import json
import time

from valkey.cluster import ValkeyCluster

from conftest import durakv_cli, wait_until
from durakv.backup.create import list_backups
from durakv.backup.format import iso_ms
from durakv.backup.storage import open_storage
from test_backup import pause_instant, rdb_state


def cli(*args, ok=True):
    res = durakv_cli(*args)
    if ok:
        assert res.returncode == 0, "durakv %s: %s %s" % (" ".join(map(str, args)), res.stdout, res.stderr)
    return res


def everything(cluster_client):
    return {k: cluster_client.get(k) for k in cluster_client.scan_iter(count=1000)}


def test_cluster_backups_scheduled_operator_restore_other_shard_count_and_pitr(local_cluster, tmp_path):
    src = local_cluster(shards=2, replicas=1, extra_server_args=("--replica-snapshot-interval-ms", "500"))
    dest = str(tmp_path / "backups")
    p0 = src.primary(0)
    c = ValkeyCluster(host="127.0.0.1", port=p0.port)
    for i in range(200):
        c.set("key:%d" % i, "v%d" % i)
    # the replicas store snapshots of both shards (what a backup copies, instead of asking a primary)
    replica_nodes = src.replicas(0) + src.replicas(1)
    wait_until(lambda: all(p.info("replication")["replication"].get("snapshots_stored", 0) > 0
                           for p in replica_nodes), 30, what="replica snapshots")

    # scheduled: every node is told the schedule; per shard one node (a replica: the primary waits) takes it
    for p in src.nodes:
        with p.client() as n:
            n.execute("CONFIG", "SET", "backup-destination", dest, "backup-retention-days", "1",
                      "backup-schedule", "every 10s")
    storage = open_storage(dest)
    wait_until(lambda: any(r["complete"] and r["scheduled"] for r in list_backups(storage)), 40,
               what="a complete scheduled backup")
    for p in src.nodes:
        with p.client() as n:
            n.execute("CONFIG", "SET", "backup-schedule", "")
    replicas = {src.node_id_of(p) for p in replica_nodes}
    for shard in ("0", "1"):
        claim, _rev = src._store_call(lambda store, s=shard: store.get_backup_run(s))
        assert claim["holder"] in replicas and claim["done"], claim.get("error")
    sched = [r for r in list_backups(storage) if r["complete"]][-1]
    assert sched["kind"] == "cluster" and sched["shards"] == 2

    # the operator's backup, later, with a point-in-time instant between two phases of writes
    for i in range(200, 260):
        c.set("key:%d" % i, "v%d" % i)
    t_mid = pause_instant()
    at_mid = everything(c)
    for i in range(0, 40):
        c.set("key:%d" % i, "changed")
    c.delete("key:199")
    final = everything(c)
    out = json.loads(cli("backup", "create", "--dir", src.dir, "--to", dest, "--json").stdout)
    assert out["shards"] == ["0", "1"]
    verified = cli("backup", "verify", "--from", dest, out["id"]).stdout
    assert "ok" in verified and "shard 0" in verified and "shard 1" in verified

    # restore into a running cluster of another shard count: every key lands on the primary of its slot
    dst = local_cluster(shards=3, replicas=0)
    cli("restore", "--from", dest, "--backup", out["id"], "--cluster", "127.0.0.1:%d" % dst.primary(0).port)
    d = ValkeyCluster(host="127.0.0.1", port=dst.primary(1).port)
    assert everything(d) == final

    # PITR: JetStream's stored times are the entries' commit times
    rdb = str(tmp_path / "mid.rdb")
    cli("restore", "--from", dest, "--at", iso_ms(t_mid), "--rdb", rdb)
    assert {k: v[1] for k, v in rdb_state(rdb).items()} == at_mid
    c.close()
    d.close()

    # durakv verify backup-restore: its table, and exactly the acknowledged writes at its instant
    res = cli("verify", "backup-restore", "--dir", src.dir, "--phase", "2", "--writers", "2")
    assert "verify backup-restore: ok" in res.stdout and "Acked before T" in res.stdout
