"""Vector search on real local clusters (three NATS nodes, JetStream journals, durakv shards):

- a replica's index follows its primary's writes (the journal applied through the pipeline) and its index
  definitions (FT.CREATE is an effect);
- sync mode, vectors in hashes and JSON documents written by a writer, the primary killed with SIGKILL: every
  acknowledged vector and document is found by FT.SEARCH on the new primary (its indexes rebuilt from the
  keyspace it recovered);
- two shards: FT.CREATE on one node makes the index on every shard, and FT.SEARCH on any node answers for the
  whole cluster (each shard's primary asked, the answers merged).
"""

import json
import signal
import threading
import time

import numpy as np
import valkey
from valkey.cluster import ValkeyCluster

from conftest import wait_new_primary, wait_until
from helpers.clusters import local_cluster  # noqa: F401

DIM = 16


def vector_of(i):
    return np.random.default_rng(i).random(DIM, dtype=np.float32).tobytes()


def create(c, name="idx", algo="FLAT"):
    return c.execute_command("FT.CREATE", name, "ON", "HASH", "PREFIX", "1", "doc:", "SCHEMA", "v", "VECTOR",
                             algo, "6", "DIM", str(DIM), "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2",
                             "n", "NUMERIC")


def info(c, name="idx"):
    raw = c.execute_command("FT.INFO", name)
    return dict(zip(raw[::2], raw[1::2]))


def all_keys(c, name="idx"):
    reply = c.execute_command("FT.SEARCH", name, "*", "NOCONTENT", "LIMIT", "0", "100000")
    return set(reply[1:])


def nearest(c, i, name="idx"):
    reply = c.execute_command("FT.SEARCH", name, "*=>[KNN 1 @v $q]", "PARAMS", "2", "q", vector_of(i),
                              "NOCONTENT")
    return reply[1:]


def readonly_client(node):
    c = valkey.Valkey(host="127.0.0.1", port=node.port, socket_timeout=10, single_connection_client=True)
    c.execute_command("READONLY")
    return c


def test_replica_index_follows_and_kill9_loses_no_acknowledged_vector(local_cluster):  # noqa: F811
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    replica = cluster.replicas(0)[0]
    with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=10) as c:
        assert create(c) == b"OK"
        assert c.execute_command("FT.CREATE", "jidx", "ON", "JSON", "PREFIX", "1", "jdoc:", "SCHEMA", "$.v", "AS", "v",
                                 "VECTOR", "HNSW", "6", "DIM", str(DIM), "TYPE", "FLOAT32", "DISTANCE_METRIC",
                                 "L2") == b"OK"
        for i in range(50):
            c.hset(f"doc:{i}", mapping={"v": vector_of(i), "n": i})
    # the replica made the index from the journal and indexes what it applies
    with readonly_client(replica) as r:
        wait_until(lambda: sorted(r.execute_command("FT._LIST")) == [b"idx", b"jidx"], 30,
                   what="indexes on the replica")
        wait_until(lambda: len(all_keys(r)) == 50, 30, what="replica's index follows the writes")
        assert nearest(r, 7) == [b"doc:7"]
    # a writer of vectors; the primary is killed while it writes
    acked, stop = [], threading.Event()

    def writer():
        i = 1000
        deadline = time.monotonic() + 120
        c = None
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                if c is None:
                    p = cluster.primary(0)
                    if p is None:
                        time.sleep(0.05)
                        continue
                    c = valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=5)
                if i % 2:
                    c.hset(f"doc:{i}", mapping={"v": vector_of(i), "n": i})
                else:        # every other write a JSON document
                    c.execute_command("JSON.SET", f"jdoc:{i}", "$", json.dumps(
                        {"v": np.frombuffer(vector_of(i), dtype=np.float32).tolist(), "n": i}))
                acked.append(i)      # acknowledged: in sync mode, committed to the journal quorum
                i += 1
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError,
                    valkey.exceptions.ResponseError):
                c = None             # refused or unknown outcome: not acknowledged, try the next key
                i += 1
                time.sleep(0.02)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    wait_until(lambda: len(acked) >= 200, 60, what="200 acknowledged vectors")
    cluster.kill(old.name, signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, old.name, timeout_s=40)
    print(f"failover {old.name} -> {new.name} in {seconds:.2f}s, {len(acked)} vectors acknowledged so far")
    n_before = len(acked)
    wait_until(lambda: len(acked) >= n_before + 100, 60, what="writes resumed on the new primary")
    stop.set()
    t.join(30)
    expected = {f"doc:{i}".encode() for i in acked if i % 2} | {f"doc:{i}".encode() for i in range(50)}
    expected_json = {f"jdoc:{i}".encode() for i in acked if i % 2 == 0}
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c:
        wait_until(lambda: info(c)[b"state"] == b"ready" and info(c, "jidx")[b"state"] == b"ready", 60,
                   what="indexes ready on the new primary")
        missing = expected - all_keys(c)
        assert not missing, f"{len(missing)} acknowledged vectors not found: {sorted(missing)[:5]}"
        missing = expected_json - all_keys(c, "jidx")
        assert not missing, f"{len(missing)} acknowledged JSON documents not found: {sorted(missing)[:5]}"
        for i in acked[::max(1, len(acked) // 40)]:
            if i % 2:
                assert nearest(c, i) == [f"doc:{i}".encode()]
            else:
                assert nearest(c, i, "jidx") == [f"jdoc:{i}".encode()]


def test_two_shards_create_everywhere_and_search_answers_for_the_cluster(local_cluster):  # noqa: F811
    cluster = local_cluster(shards=2, replicas=1, durability="sync")
    p0, p1 = cluster.primary(0), cluster.primary(1)
    with valkey.Valkey(host="127.0.0.1", port=p0.port, socket_timeout=10) as c0:
        assert create(c0, algo="HNSW") == b"OK"
    with valkey.Valkey(host="127.0.0.1", port=p1.port, socket_timeout=10) as c1:
        assert c1.execute_command("FT._LIST") == [b"idx"]          # made on the other shard too
    cc = ValkeyCluster(host="127.0.0.1", port=p0.port, socket_timeout=10)
    try:
        for i in range(200):
            cc.hset(f"doc:{i}", mapping={"v": vector_of(i), "n": i})
        expected = {f"doc:{i}".encode() for i in range(200)}
        here_keys = {}
        for p in (p0, p1):
            with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=10) as c:
                here = set(c.execute_command("FT.SEARCH", "idx", "*", "NOCONTENT", "LOCALONLY", "LIMIT", "0",
                                             "1000")[1:])
                assert 0 < len(here) < 200                       # each shard holds part of the keys
                here_keys[p.name] = here
                assert all_keys(c) == expected                   # any node answers for the cluster
                for i in (3, 77, 150, 199):                      # the nearest of each, wherever it lives
                    assert nearest(c, i) == [f"doc:{i}".encode()]
                reply = c.execute_command("FT.SEARCH", "idx", "@n:[10 19]=>[KNN 5 @v $q]", "PARAMS", "2", "q",
                                          vector_of(12), "RETURN", "2", "n", "__v_score")
                assert reply[0] == 5 and reply[1] == b"doc:12" and reply[2] == [b"n", b"12", b"__v_score", b"0"]
                assert all(10 <= int(f[1]) <= 19 for f in reply[2::2])
        # a replica answers for the cluster too
        with readonly_client(cluster.replicas(1)[0]) as r:
            wait_until(lambda: len(all_keys(r)) == 200, 30, what="a replica's fan-out")
        # in cluster mode an index is the cluster's: FLUSHALL on a shard empties it there and keeps it
        with valkey.Valkey(host="127.0.0.1", port=p0.port, socket_timeout=10) as c0:
            c0.flushall()
            assert c0.execute_command("FT._LIST") == [b"idx"]
            assert len(all_keys(c0)) == 200 - len(here_keys[p0.name])
        # FT.DROPINDEX reaches every shard
        with valkey.Valkey(host="127.0.0.1", port=p1.port, socket_timeout=10) as c1:
            assert c1.execute_command("FT.DROPINDEX", "idx") == b"OK"
        with valkey.Valkey(host="127.0.0.1", port=p0.port, socket_timeout=10) as c0:
            assert c0.execute_command("FT._LIST") == []
    finally:
        cc.close()
