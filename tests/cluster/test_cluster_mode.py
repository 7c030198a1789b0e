"""Cluster mode: 16384 slots, Valkey's redirections and CLUSTER replies, and the cluster clients users run,
unchanged: valkey-py ValkeyCluster, redis-py RedisCluster, valkey-glide GlideClusterClient, redis-cli -c.

A one-node cluster on the local journal (`--cluster-enabled yes`) and a two-shard JetStream cluster (`cluster
up --shards 2`), real processes and real clients; error texts are Valkey's, written out here."""

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time

import pytest
import redis
import valkey
import valkey.cluster
from valkey.cluster import ValkeyCluster

from conftest import ServerProcess, wait_until
from durakv.routing import key_slot


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("cluster1"), args=["--cluster-enabled", "yes", "--durability", "sync"])
    srv.start()
    yield srv
    srv.stop()


def _err(fn, *args):
    """The error text as valkey-py shows it: it drops an "ERR " prefix and keeps the others (MOVED, CROSSSLOT)."""
    try:
        fn(*args)
    except (valkey.exceptions.ResponseError, redis.exceptions.ResponseError) as exc:
        return str(exc)
    raise AssertionError("no error")


def _key_in(slot_range, prefix="k"):
    a, b = slot_range
    return next(f"{prefix}{i}" for i in range(100000) if a <= key_slot(f"{prefix}{i}".encode()) <= b)


# -- one node owning every slot ----------------------------------------------------------------------------

def test_cluster_replies_of_a_one_node_cluster(one_node):
    with one_node.client() as c:
        myid = c.execute_command("CLUSTER", "MYID").decode()
        assert len(myid) == 40 and int(myid, 16) >= 0
        assert c.execute_command("CLUSTER", "SLOTS") == [[0, 16383, [b"127.0.0.1", one_node.port, myid.encode(), []]]]
        nodes = c.execute_command("CLUSTER", "NODES").decode()
        assert nodes == f"{myid} 127.0.0.1:{one_node.port}@{one_node.port + 10000 if one_node.port < 55536 else 0} " \
                        f"myself,master - 0 0 1 connected 0-16383\n"
        info = c.execute_command("CLUSTER", "INFO").decode()
        assert info.startswith("cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n"
                               "cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n"
                               "cluster_size:1\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\n")
        shards = c.execute_command("CLUSTER", "SHARDS")
        assert shards[0][0] == b"slots" and shards[0][1] == [0, 16383]
        assert c.execute_command("CLUSTER", "KEYSLOT", "foo") == 12182
        assert c.execute_command("CLUSTER", "KEYSLOT", "{user1000}.following") == \
            c.execute_command("CLUSTER", "KEYSLOT", "{user1000}.followers")
        c.set("foo", "1")
        assert c.execute_command("CLUSTER", "COUNTKEYSINSLOT", "12182") == 1
        assert c.execute_command("CLUSTER", "GETKEYSINSLOT", "12182", "10") == [b"foo"]
        assert _err(c.execute_command, "CLUSTER", "COUNTKEYSINSLOT", "16384") == "Invalid slot"
        assert c.execute_command("CLUSTER", "LINKS") == []
        assert c.info("cluster") == {"cluster_enabled": 1}
        assert len(c.execute_command("CLUSTER", "MYSHARDID")) == 40


def test_crossslot_select_and_cluster_only_rules(one_node):
    with one_node.client() as c:
        assert _err(c.mset, {"a": 1, "b": 2}) == "CROSSSLOT Keys in request don't hash to the same slot"
        assert c.mset({"{t}a": 1, "{t}b": 2}) is True
        # Valkey 9.1.2 with cluster-databases at its default (1): db 1 does not exist (no cluster-mode refusal
        # of SELECT, MOVE or COPY ... DB any more); SWAPDB stays refused
        assert _err(c.execute_command, "SELECT", "1") == "DB index is out of range"
        assert c.execute_command("SELECT", "0") is True
        assert _err(c.execute_command, "SWAPDB", "0", "1") == "SWAPDB is not allowed in cluster mode"
        assert _err(c.execute_command, "MOVE", "a", "1") == "DB index is out of range"
        assert _err(c.execute_command, "COPY", "{t}a", "{t}c", "DB", "1") == "DB index is out of range"
        # a transaction must stay in one slot: EXEC answers CROSSSLOT itself and the transaction is gone
        raw = c.connection_pool.get_connection("x")
        raw.send_command("MULTI")
        assert raw.read_response() == b"OK"
        raw.send_command("SET", "a", "1")
        assert raw.read_response() == b"QUEUED"
        raw.send_command("SET", "b", "1")
        assert raw.read_response() == b"QUEUED"
        raw.send_command("EXEC")
        with pytest.raises(valkey.exceptions.ResponseError) as e:
            raw.read_response()
        assert str(e.value) == "CROSSSLOT Keys in request don't hash to the same slot"
        raw.send_command("EXEC")
        with pytest.raises(valkey.exceptions.ResponseError) as e:
            raw.read_response()
        assert str(e.value) == "EXEC without MULTI"
        c.connection_pool.release(raw)
        # scripts: declared keys in one slot; a command on another slot is refused inside the script
        assert _err(c.eval, "return 1", 2, "a", "b") == "CROSSSLOT Keys in request don't hash to the same slot"
        err = _err(c.eval, "return server.call('GET', 'b')", 1, "a")
        assert "Script attempted to access keys that do not hash to the same slot" in err
        assert c.eval("#!lua flags=allow-cross-slot-keys\nreturn server.call('GET', 'b')", 1, "a") is None
        assert c.eval("return server.call('GET', KEYS[1])", 1, "{t}a") == b"1"
        assert _err(c.eval, "#!lua flags=no-cluster\nreturn 1", 0) == "Can not run script on cluster, 'no-cluster' flag is set."


def test_routing_takes_the_keys_valkey_takes(one_node):
    """Routing asks the same key walker as COMMAND GETKEYS: SORT ... STORE's destination counts (as Valkey's
    sortGetKeys says), and MIGRATE ... KEYS routes on the listed keys, not on its empty key argument."""
    src, dst = "a", "b"
    assert key_slot(src.encode()) != key_slot(dst.encode())
    with one_node.client() as c:
        assert _err(c.execute_command, "SORT", src, "STORE", dst) == \
            "CROSSSLOT Keys in request don't hash to the same slot"
        assert c.execute_command("SORT", "{a}x", "STORE", "{a}y") == 0
        assert key_slot(b"") != key_slot(src.encode())
        # the key does not exist: MIGRATE answers NOKEY without connecting anywhere
        assert c.execute_command("MIGRATE", "127.0.0.1", "1", "", "0", "5000", "KEYS", src) == b"NOKEY"


def test_cluster_clients_on_one_node(one_node):
    rc = ValkeyCluster(host="127.0.0.1", port=one_node.port)
    for i in range(200):
        rc.set(f"vk{i}", i)
    assert rc.get("vk7") == b"7" and rc.mget(["{x}1", "{x}2"]) == [None, None]
    rc.close()
    rp = redis.cluster.RedisCluster(host="127.0.0.1", port=one_node.port)
    assert rp.set("rp", "1") is True and rp.get("rp") == b"1"
    rp.close()
    if shutil.which("redis-cli"):
        out = subprocess.run(["redis-cli", "-c", "-p", str(one_node.port), "SET", "cli", "v"], capture_output=True,
                             text=True, timeout=20)
        assert out.stdout.strip() == "OK"
        out = subprocess.run(["redis-cli", "--cluster", "check", "127.0.0.1:%d" % one_node.port],
                             capture_output=True, text=True, timeout=30)
        assert "[OK] All 16384 slots covered." in out.stdout, out.stdout + out.stderr


def test_glide_cluster_client(one_node):
    from glide import GlideClusterClient, GlideClusterClientConfiguration, NodeAddress

    async def scenario():
        client = await GlideClusterClient.create(
            GlideClusterClientConfiguration([NodeAddress("127.0.0.1", one_node.port)], request_timeout=5000))
        try:
            assert await client.set("glide", "v") == "OK"
            assert await client.get("glide") == b"v"
        finally:
            await client.close()
    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_standalone_reports_cluster_disabled(shared_server):
    with shared_server.client() as c:
        assert c.info("cluster") == {"cluster_enabled": 0}
        assert _err(c.execute_command, "CLUSTER", "SLOTS") == "This instance has cluster support disabled"
        # Valkey 9.1 answers READONLY/READWRITE with OK outside cluster mode (docs/compatibility.md)
        assert c.execute_command("READONLY") is True
        assert c.execute_command("READWRITE") is True


# -- two shards on the JetStream journal ------------------------------------------------------------------

def test_two_shards_redirections_clients_pubsub_and_failover(local_cluster):
    cluster = local_cluster(shards=2, replicas=1, durability="sync")
    nodes = {p.name: p for p in cluster.nodes}
    with valkey.Valkey(port=nodes["0-0"].port) as c0:
        slots = c0.execute_command("CLUSTER", "SLOTS")
    assert [(s[0], s[1]) for s in slots] == [(0, 8191), (8192, 16383)]
    k0, k1 = _key_in((0, 8191)), _key_in((8192, 16383))
    p1 = cluster.primary(1)
    # a key of the other shard: MOVED to that shard's primary, exactly as Valkey words it
    with valkey.Valkey(port=nodes["0-0"].port) as c0:
        assert _err(c0.set, k1, "x") == f"MOVED {key_slot(k1.encode())} 127.0.0.1:{p1.port}"
        # a write to a replica goes to its primary; with READONLY the replica serves reads of its slots
    replica0 = cluster.replicas(0)[0]
    with valkey.Valkey(port=replica0.port, single_connection_client=True) as r0:
        assert _err(r0.set, k0, "x").startswith(f"MOVED {key_slot(k0.encode())} ")
        r0.execute_command("READONLY")
        assert r0.get(k0) is None
        assert _err(r0.get, k1).startswith("MOVED ")
    rc = ValkeyCluster(host="127.0.0.1", port=nodes["0-0"].port)
    for i in range(300):
        rc.set(f"c{i}", i)
    assert [rc.get(f"c{i}") for i in (0, 150, 299)] == [b"0", b"150", b"299"]
    sizes = [valkey.Valkey(port=cluster.primary(s).port).dbsize() for s in (0, 1)]
    assert sum(sizes) == 300 and min(sizes) > 100       # both shards hold keys
    rp = redis.cluster.RedisCluster(host="127.0.0.1", port=nodes["1-0"].port, read_from_replicas=True)
    wait_until(lambda: rp.get("c150") == b"150", 10, what="a replica read through redis-py")
    # PUBLISH reaches subscribers on every node; SPUBLISH stays within the channel's shard
    sub = valkey.Valkey(port=nodes["1-1"].port).pubsub()
    sub.subscribe("news")
    assert sub.get_message(timeout=5)["type"] == "subscribe"
    valkey.Valkey(port=nodes["0-0"].port).publish("news", "hello")
    msg = sub.get_message(timeout=5)
    assert msg is not None and msg["data"] == b"hello"
    sub.close()
    # a failover in shard 0 while shard 1 keeps serving; the cluster client follows it by itself
    stop = threading.Event()
    errors, acked = [], []

    def write_shard1():
        client = valkey.Valkey(port=p1.port)
        i = 0
        while not stop.is_set() and i < 5000:
            try:
                client.set(_key_in((8192, 16383), f"s1-{i}-"), i)
                acked.append(i)
            except valkey.exceptions.ValkeyError as exc:
                errors.append(str(exc))
            i += 1
    t = threading.Thread(target=write_shard1)
    t.start()
    old = cluster.primary(0)
    cluster.kill(old.name)
    t0 = time.monotonic()
    deadline = t0 + 30
    while time.monotonic() < deadline:
        try:
            rc.set(k0, "after-failover")
            break
        except (valkey.exceptions.ConnectionError, valkey.exceptions.ClusterDownError,
                valkey.exceptions.TimeoutError):
            time.sleep(0.05)
    seconds = time.monotonic() - t0
    stop.set()
    t.join(30)
    assert rc.get(k0) == b"after-failover"
    assert errors == [] and len(acked) > 0, errors[:3]   # the other shard never noticed
    new = cluster.primary(0)
    assert new is not None and new.name != old.name
    with valkey.Valkey(port=nodes["1-0"].port) as c:
        slots = c.execute_command("CLUSTER", "SLOTS")
    assert [entry[2][1] for entry in slots if entry[0] == 0] == [new.port]   # every node's view follows
    print(f"failover of shard 0 seen by ValkeyCluster: {seconds:.2f}s; shard 1 served {len(acked)} writes")
    rc.close()
    rp.close()


def test_cluster_up_cli_prints_the_client_lines(tmp_path):
    """`durakv cluster up --tls` prints how each client connects, with the cluster's password read from its file
    (never printed), and no asyncio notice that reads like an error ("returning true from eof_received() has no
    effect when using ssl", which every TLS command printed); the printed valkey-py line works as printed."""
    d = tmp_path / "c"
    res = subprocess.run([sys.executable, "-m", "durakv", "cluster", "up", "--dir", str(d), "--shards", "2",
                          "--replicas", "0", "--timeout", "90", "--tls"], capture_output=True, text=True,
                         timeout=180)
    try:
        assert res.returncode == 0, res.stderr[-2000:]
        assert "ValkeyCluster(host=" in res.stdout and "redis-cli -c" in res.stdout
        assert "eof_received" not in res.stdout + res.stderr, res.stderr[-2000:]
        password = (d / "secrets" / "resp.pass").read_text().strip()
        assert password not in res.stdout + res.stderr
        line = next(ln for ln in res.stdout.splitlines() if "valkey-py:" in ln).split("valkey-py:", 1)[1].strip()
        client = eval(line, {"valkey": valkey, "open": open})     # noqa: S307 - the line the tool printed
        client.set("{printed}", "works")
        assert client.get("{printed}") == b"works"
        client.close()
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["options"]["cluster_mode"] is True and manifest["options"]["shards"] == 2
    finally:
        subprocess.run([sys.executable, "-m", "durakv", "cluster", "down", "--dir", str(d)], capture_output=True,
                       timeout=60)


def test_tls_cluster_the_seeds_test1_script_glide_and_redis_cli(local_cluster):
    """`cluster up --tls`: clients only over TLS (NATS too). The seed's Test 1 loop, as written there (plus the
    CA, since ours is not a public one), then GLIDE and redis-cli -c over TLS."""
    cluster = local_cluster(shards=2, replicas=1, durability="sync", tls=True)
    ca = cluster.manifest["tls"]["ca"]
    port = cluster.primary(0).port
    with pytest.raises(valkey.exceptions.ConnectionError):
        valkey.Valkey(port=port, socket_timeout=2).ping()       # no plain-text clients
    client = ValkeyCluster(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, socket_timeout=5)
    acked_keys = []
    fail_count = 0
    for i in range(1000):
        key = f"key:{i}"
        try:
            if client.set(key, f"value:{i}"):
                acked_keys.append(key)
        except Exception:  # noqa: BLE001 - the seed's loop: a failed write is counted, not raised
            fail_count += 1
    missing = [k for k in acked_keys if not client.exists(k)]
    assert (len(acked_keys), fail_count, missing) == (1000, 0, [])
    assert client.dbsize(target_nodes=ValkeyCluster.PRIMARIES) == 1000
    with valkey.Valkey(port=port, ssl=True, ssl_ca_certs=ca) as c:
        slots = c.execute_command("CLUSTER", "SLOTS")
    assert all(entry[2][1] in {p.port for p in cluster.nodes} for entry in slots)   # TLS clients get TLS ports
    client.close()
    from glide import (AdvancedGlideClusterClientConfiguration, GlideClusterClient, GlideClusterClientConfiguration,
                       NodeAddress, TlsAdvancedConfiguration)

    async def glide():
        cfg = GlideClusterClientConfiguration(
            [NodeAddress("127.0.0.1", port)], use_tls=True, request_timeout=5000,
            advanced_config=AdvancedGlideClusterClientConfiguration(
                tls_config=TlsAdvancedConfiguration(root_pem_cacerts=open(ca, "rb").read())))
        g = await GlideClusterClient.create(cfg)
        try:
            assert await g.get("key:7") == b"value:7"
            assert await g.set("glide-tls", "1") == "OK"
        finally:
            await g.close()
    asyncio.run(asyncio.wait_for(glide(), 60))
    if shutil.which("redis-cli"):
        out = subprocess.run(["redis-cli", "-c", "--tls", "--cacert", ca, "-p", str(port), "GET", "key:999"],
                             capture_output=True, text=True, timeout=20)
        assert out.stdout.strip() == "value:999", out.stderr
