"""`durakv import FILE --target HOST:PORT`: an RDB file written by a real redis-server (every type and
encoding it writes, TTLs, several databases, a function library) streamed into a running durakv server and
into a 2-shard durakv cluster, then compared key by key with the source; a cluster refuses a database it
does not have, and a damaged file stops the import with an error. Real processes, real sockets."""

import valkey
from valkey.cluster import ValkeyCluster

from conftest import durakv_cli

LIB = ("#!lua name=importlib\n"
       "redis.register_function('imp_echo', function(keys, args) return args[1] end)\n")


def fill(client):
    """Every type redis-server 7.0 writes, in its compact and its large encodings, with and without TTLs."""
    p = client.pipeline(transaction=False)
    p.set("s:int", 12345)
    p.set("s:neg", -7)
    p.set("s:text", "hello world")
    p.set("s:big", b"x" * (1 << 20))
    p.set("s:ttl", "soon", px=3_600_000)
    p.rpush("l:small", "a", "b", "c")
    p.rpush("l:big", *[f"item-{i}" * 4 for i in range(600)])
    p.sadd("set:ints", 1, 2, 3, 99)
    p.sadd("set:strs", "x", "y", "z")
    p.sadd("set:big", *[f"m{i}" for i in range(700)])
    p.hset("h:small", mapping={"f1": "v1", "f2": "2"})
    p.hset("h:big", mapping={f"f{i}": f"v{i}" * 10 for i in range(600)})
    p.expire("h:big", 7200)
    p.zadd("z:small", {"a": 1, "b": 2.5, "c": -3})
    p.zadd("z:big", {f"m{i}": i / 7 for i in range(300)})
    p.xadd("st", {"f": "v"}, id="1-1")
    p.xadd("st", {"f": "w", "g": "x"}, id="2-0")
    p.xgroup_create("st", "grp", id="0")
    p.execute()
    client.xreadgroup("grp", "alice", {"st": ">"}, count=1)
    for db in (3, 9):
        client.execute_command("SELECT", db)
        client.set(f"db{db}:k", f"in {db}")
        client.rpush(f"db{db}:l", "q")
    client.execute_command("SELECT", 0)
    client.function_load(LIB)


def contents(client, keys):
    """key -> (type, the value through its type's reads, PTTL rounded to minutes)."""
    out = {}
    for key in keys:
        t = client.type(key).decode()
        if t == "string":
            v = client.get(key)
        elif t == "list":
            v = client.lrange(key, 0, -1)
        elif t == "set":
            v = sorted(client.smembers(key))
        elif t == "hash":
            v = sorted(client.hgetall(key).items())
        elif t == "zset":
            v = client.zrange(key, 0, -1, withscores=True)
        elif t == "stream":
            v = (client.xrange(key), [(g["name"], g["pending"], g["last-delivered-id"])
                                      for g in client.xinfo_groups(key)])
        else:
            v = None
        pttl = client.pttl(key)
        out[key] = (t, v, pttl if pttl < 0 else round(pttl / 60000))
    return out


def source_rdb(redis_server, tmp_path, filler=fill):
    port, client = redis_server("--dbfilename", "dump.rdb", data_dir=tmp_path)
    filler(client)
    assert client.save()
    path = tmp_path / "dump.rdb"
    assert path.exists()
    return client, str(path)


def keys_of(client, db):
    client.execute_command("SELECT", db)
    return sorted(client.keys("*"))


def test_import_every_type_ttls_databases_and_functions(redis_server, server_factory, tmp_path):
    src, path = source_rdb(redis_server, tmp_path)
    srv = server_factory("--durability", "sync")
    r = durakv_cli("import", path, "--target", f"127.0.0.1:{srv.port}", "--quiet", "--batch", "7")
    assert r.returncode == 0, r.stderr
    assert "imported 19 keys in 3 database(s) and 1 function library" in r.stdout, r.stdout
    dk = srv.client()
    for db in (0, 3, 9):
        names = keys_of(src, db)
        assert keys_of(dk, db) == names and names
        dk.execute_command("SELECT", db)
        src.execute_command("SELECT", db)
        assert contents(dk, names) == contents(src, names), db
    dk.execute_command("SELECT", 0)
    assert dk.fcall("imp_echo", 0, "hi") == b"hi"
    # what was acknowledged is committed: a kill -9 and a restart keep all of it
    srv.kill()
    srv.start()
    dk = srv.client()
    src.execute_command("SELECT", 0)
    names = keys_of(src, 0)
    assert contents(dk, names) == contents(src, names)


def test_import_into_a_two_shard_cluster(redis_server, local_cluster, tmp_path):
    def fill_db0(client):
        p = client.pipeline(transaction=False)
        for i in range(3000):
            p.set(f"k{i}", f"v{i}")
        for i in range(50):
            p.hset(f"h{i}", mapping={"a": i, "b": "x" * 100})
            p.zadd(f"z{i}", {"m": i})
        p.set("ttl", "t", ex=3600)
        p.execute()
        client.function_load(LIB)
    src, path = source_rdb(redis_server, tmp_path, fill_db0)
    cluster = local_cluster(shards=2, replicas=0, durability="sync")
    node = cluster.primary(1)
    r = durakv_cli("import", path, "--target", f"127.0.0.1:{node.port}", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "imported 3,101 keys in 1 database(s)" in r.stdout and "cluster, 2 primaries" in r.stdout, r.stdout
    names = sorted(src.keys("*"))
    with ValkeyCluster(host="127.0.0.1", port=node.port) as dk:
        assert contents(dk, names) == contents(src, names)
    sizes = []
    for p in (cluster.primary(0), cluster.primary(1)):
        with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=10) as one:
            assert one.fcall("imp_echo", 0, "hi") == b"hi"
            sizes.append(one.dbsize())
    assert sum(sizes) == len(names) and min(sizes) > 0      # both shards hold their slots' keys


def test_import_refuses_what_the_target_cannot_hold(redis_server, server_factory, tmp_path):
    src, path = source_rdb(redis_server, tmp_path)
    one_node = server_factory("--cluster-enabled", "yes", "--durability", "sync")
    r = durakv_cli("import", path, "--target", f"127.0.0.1:{one_node.port}", "--quiet")
    assert r.returncode == 1
    assert "the source has keys in database 3; the target has 1 database(s) (cluster-databases)" in r.stderr
    damaged = tmp_path / "damaged.rdb"
    data = open(path, "rb").read()
    damaged.write_bytes(data[:len(data) // 2])
    srv = server_factory("--durability", "sync")
    r = durakv_cli("import", str(damaged), "--target", f"127.0.0.1:{srv.port}", "--quiet")
    assert r.returncode == 1 and "durakv import: stopped: truncated RDB file" in r.stderr, r.stderr
    flipped = tmp_path / "flipped.rdb"
    flipped.write_bytes(data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
    r = durakv_cli("import", str(flipped), "--target", f"127.0.0.1:{srv.port}", "--quiet")
    assert r.returncode == 1 and "RDB checksum mismatch" in r.stderr, r.stderr
    r = durakv_cli("import", path, "--target", "127.0.0.1:1", "--quiet")
    assert r.returncode == 1 and "cannot reach the target 127.0.0.1:1" in r.stderr


def test_redis_cli_cluster_import_into_a_durakv_cluster(redis_server, local_cluster):
    """`redis-cli --cluster import` (MIGRATE ... from a standalone redis-server to each slot's owner, after
    reading the target's CLUSTER NODES) moves a dataset into a 2-shard durakv cluster."""
    import subprocess
    port, src = redis_server()
    p = src.pipeline(transaction=False)
    for i in range(500):
        p.set(f"k{i}", f"v{i}")
    p.hset("h", mapping={"a": 1})
    p.zadd("z", {"m": 2})
    p.set("ttl", "t", ex=3600)
    p.execute()
    cluster = local_cluster(shards=2, replicas=0, durability="sync")
    r = subprocess.run(["redis-cli", "--cluster", "import", f"127.0.0.1:{cluster.primary(0).port}",
                        "--cluster-from", f"127.0.0.1:{port}", "--cluster-copy"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    names = sorted(src.keys("*"))
    with ValkeyCluster(host="127.0.0.1", port=cluster.primary(1).port) as dk:
        assert contents(dk, names) == contents(src, names)
