"""A shard stream's copy that goes away shows in INFO, not only in `durakv cluster status`: a NATS server whose
disk filled turns JetStream off, and the shard then runs on 2 of 3 copies. Killing one NATS server takes its
copy away the same way; its restart brings the copy back. Real NATS and durakv processes, stopped by pid."""

from conftest import wait_until


def _copies(p):
    try:
        repl = p.info("replication", timeout_s=5)["replication"]
    except Exception:  # noqa: BLE001 - a node busy reconnecting: ask again before the deadline
        return None
    return int(repl.get("journal_copies", -1)), int(repl.get("journal_copies_ok", -1))


def test_info_shows_a_journal_copy_that_went_away_and_came_back(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    wait_until(lambda: _copies(primary) == (3, 3), 60, what="INFO journal_copies 3 of 3")
    victim = next(n for n in cluster.nats if n.az != primary.az)
    cluster.kill(victim.name)
    wait_until(lambda: _copies(cluster.primary(0) or primary) == (3, 2), 90,
               what="INFO journal_copies_ok 2 once a NATS server is gone")
    cluster.restart(victim.name)
    wait_until(lambda: _copies(cluster.primary(0) or primary) == (3, 3), 120,
               what="INFO journal_copies_ok 3 once it is back")
