"""A shard's durability mode is the shard's, not a node's (issue 11 items 1 and 2): stored in the coordination
store, changed by CONFIG SET on any node, applied by every node, and surviving planned and unplanned failover
and restarts. Real NATS, real durakv processes."""

import signal

import pytest
import valkey

from conftest import wait_new_primary, wait_until
from durakv.cluster.local import LocalCluster
from durakv.cluster.manifest import ClusterError


def _modes(cluster):
    out = {}
    for p in cluster.nodes:
        if p.alive:
            d = p.info("durability", timeout_s=5)["durability"]
            out[p.name] = (d["durability_mode"], d["effective_durability"], int(d["durability_buffer_ms"]))
    return out


def _all_nodes_say(cluster, mode, buffer_ms=None):
    def check():
        modes = _modes(cluster)
        return modes and all(m == mode and e == mode and (buffer_ms is None or b == buffer_ms)
                             for m, e, b in modes.values())
    return check


def test_a_shards_mode_survives_failover_and_restart(local_cluster):
    cluster = local_cluster(durability="async")
    assert _all_nodes_say(cluster, "async")()
    primary = cluster.primary(0)
    with valkey.Valkey(port=primary.port, socket_timeout=10) as c:
        assert c.config_set("durability", "sync")
        # effective on the primary before CONFIG SET answered
        d = c.info("durability")
        assert (d["durability_mode"], d["effective_durability"]) == ("sync", "sync")
        assert c.config_get("durability") == {"durability": "sync"}
    wait_until(_all_nodes_say(cluster, "sync"), 10, what="every node of the shard applying sync")
    rows = cluster.status()["nodes"]
    assert {r["durability"]["effective_durability"] for r in rows} == {"sync"}

    # planned failover: the new primary runs sync although its own start-up flag says async
    new, _seconds = cluster.failover(0)
    assert new.name != primary.name
    d = new.info("durability")["durability"]
    assert (d["durability_mode"], d["effective_durability"]) == ("sync", "sync")

    # unplanned: kill -9 the primary; the next one is sync as well
    cluster.kill(new.name, signal.SIGKILL)
    third, _seconds = wait_new_primary(cluster, new.name, timeout_s=30)
    d = third.info("durability")["durability"]
    assert (d["durability_mode"], d["effective_durability"]) == ("sync", "sync")

    # a restarted node (argv: --durability async) comes back applying the shard's sync
    cluster.restart(new.name)
    wait_until(lambda: cluster.get(new.name).role() == "slave", 30, what="the killed node back as a replica")
    wait_until(_all_nodes_say(cluster, "sync"), 10, what="the restarted node applying sync")


def test_shard_settings_from_a_replica_and_none_refused(local_cluster):
    cluster = local_cluster(durability="sync", replicas=1)
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(port=replica.port, socket_timeout=10) as c:
        assert c.config_set("durability-buffer-ms", "4321")
        with pytest.raises(valkey.ResponseError) as exc:
            c.config_set("durability", "none")
        assert str(exc.value) == (
            "CONFIG SET failed (possibly related to argument 'durability') - a shard's replicas follow its "
            "journal, so durability none (no journal) cannot be a shard's mode; use async for a bounded loss "
            "window")
    wait_until(_all_nodes_say(cluster, "sync", buffer_ms=4321), 10, what="the buffer applied on every node")
    primary = cluster.primary(0)
    assert primary.info("durability")["durability"]["durability_buffer_ms"] == 4321


def test_cluster_up_refuses_durability_none(tmp_path):
    with pytest.raises(ClusterError, match="durability none"):
        LocalCluster.up(tmp_path / "c", durability="none", timeout_s=30)
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_acl_users_are_the_shards_and_survive_failover(local_cluster):
    """Issue 13: users and their rules are part of a shard's settings, so a failover (and a restart) keeps them."""
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    with valkey.Valkey(port=primary.port, socket_timeout=10) as c:
        assert c.acl_setuser("alice", enabled=True, passwords=["+s3cret"], keys=["app:*"], commands=["+@all"])

    def everyone_knows(name, present=True):
        def check():
            for p in cluster.nodes:
                if not p.alive:
                    continue
                with valkey.Valkey(port=p.port, socket_timeout=5) as c:
                    if (c.acl_getuser(name) is not None) != present:
                        return False
            return True
        return check
    wait_until(everyone_knows("alice"), 10, what="alice on every node")
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(port=replica.port, username="alice", password="s3cret", socket_timeout=10) as a:
        assert a.acl_whoami() == "alice"

    new, _s = cluster.failover(0)
    with valkey.Valkey(port=new.port, username="alice", password="s3cret", socket_timeout=10) as a:
        assert a.set("app:1", "x")
        with pytest.raises(valkey.exceptions.NoPermissionError):
            a.set("other:1", "x")

    # a restarted node takes the shard's users over its own (it has none of its own)
    old = primary.name
    cluster.kill(old, signal.SIGKILL)
    wait_until(lambda: cluster.get(old).state == "dead", 10, what="the old primary gone")
    cluster.restart(old)
    wait_until(everyone_knows("alice"), 20, what="alice on the restarted node")

    with valkey.Valkey(port=cluster.replicas(0)[0].port, socket_timeout=10) as c:
        assert c.acl_deluser("alice") == 1
    wait_until(everyone_knows("alice", present=False), 10, what="alice gone from every node")
