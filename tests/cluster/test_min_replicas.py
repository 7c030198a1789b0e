"""min-replicas-to-write / min-replicas-max-lag (and their min-slaves-* aliases): a primary refuses writes with
Valkey's NOREPLICAS while fewer replicas than asked were heard from within the lag; reads, and scripts that
declare no-writes, still run. On a shard the replicas are its journal followers (their heartbeats).

Before this, CONFIG SET min-replicas-to-write answered "Unknown option" (Valkey's scripting unit stopped there)."""

import signal

import pytest
import valkey

from conftest import wait_until

NOREPLICAS = "NOREPLICAS Not enough good replicas to write."


def test_standalone_primary_has_no_replicas(r):
    r.set("x", "some value")
    assert r.config_set("min-replicas-to-write", 1)
    try:
        with pytest.raises(valkey.ResponseError) as e:
            r.set("y", "1")
        assert str(e.value) == NOREPLICAS
        assert r.get("x") == b"some value"
        # Valkey 8.0.1's script rules: a no-writes script and a flagless script that only reads run; a script
        # with flags (so may write) is refused before it runs; a flagless script is refused at its first write
        assert r.eval("#!lua flags=no-writes\nreturn redis.call('get','x')", 1, "x") == b"some value"
        assert r.eval("return redis.call('get','x')", 1, "x") == b"some value"
        with pytest.raises(valkey.ResponseError) as e:
            r.eval("#!lua\nreturn redis.call('get','x')", 1, "x")
        assert str(e.value) == NOREPLICAS
        with pytest.raises(valkey.ResponseError) as e:
            r.eval("return redis.call('set','x', 1)", 1, "x")
        assert str(e.value).startswith(NOREPLICAS + " script: ")
        pipe = r.pipeline(transaction=True)
        pipe.set("z", "1")
        with pytest.raises(valkey.ResponseError, match="NOREPLICAS"):
            pipe.execute()
        assert r.config_get("min-slaves-*") == {"min-slaves-to-write": "1", "min-slaves-max-lag": "10"}
        assert r.config_set("min-replicas-max-lag", 0)       # lag 0 turns the check off, as in Valkey
        assert r.set("y", "1")
    finally:
        r.config_set("min-replicas-max-lag", 10)
        r.config_set("min-replicas-to-write", 0)
    assert r.set("y", "2")


def test_shard_primary_counts_the_replicas_it_hears(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    c = valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=5)
    c.config_set("min-replicas-max-lag", 1)
    c.config_set("min-replicas-to-write", 2)
    assert c.set("k", "1")

    def refused():
        try:
            c.set("k", "2")
        except valkey.ResponseError as exc:
            return str(exc) == NOREPLICAS
        return False

    victim = cluster.replicas(0)[0]
    cluster.stop_nodes([victim.name], sig=signal.SIGKILL)
    wait_until(refused, 15, what="writes refused with one replica gone")
    assert c.get("k") in (b"1", b"2")       # reads are served
    c.config_set("min-replicas-to-write", 1)
    assert c.set("k", "3")
    c.config_set("min-replicas-to-write", 2)
    cluster.start_nodes([victim.name])
    wait_until(lambda: not refused(), 30, what="writes accepted with the replica back")
    c.close()
