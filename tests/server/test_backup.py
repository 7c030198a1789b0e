"""Backups of a single server (issue 31): `durakv backup create/list/verify/delete/expire` to a directory and to a
local S3-compatible server (moto's server mode, a process started here), `durakv restore` into a data directory a
server then serves and into an RDB file Valkey 9.1.2 loads, point-in-time restore to three instants of a
recorded workload checked exactly against its history, and a damaged backup refused with the file named.

Every server and the S3 server are processes on loopback ports, stopped by pid; every wait polls a condition."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import valkey

from conftest import durakv_cli, free_port, valkey91_binary, wait_until
from durakv.backup.create import expire_backups, list_backups
from durakv.backup.storage import open_storage
from durakv.keyspace import rdbvalue

BUCKET = "durakv-backups"


# -- helpers ---------------------------------------------------------------------------------------------------

def state(client):
    """Every key of db 0 as {key: (type, value, has_ttl)}: compared exactly between a source and a restore."""
    out = {}
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:
            value = kind
        out[key] = (kind, value, client.pttl(key) > 0)
    return out


def rdb_state(path):
    """The same view of an RDB file's db 0 (what `durakv restore --rdb` wrote)."""
    from durakv.keyspace import ZSet
    out = {}
    for rec in rdbvalue.iter_rdb_file(path):
        if rec[0] != "key" or rec[1] != 0:
            continue
        _k, _db, key, payload, at = rec
        value = rdbvalue.load(payload)
        if isinstance(value, bytes):
            entry = ("string", value)
        elif isinstance(value, dict):
            entry = ("hash", value)
        elif isinstance(value, set):
            entry = ("set", sorted(value))
        elif isinstance(value, ZSet):
            entry = ("zset", [(m, s) for s, m in value.order])
        else:
            entry = ("list", list(value))
        out[key] = entry + (at is not None,)
    return out


def cli(*args, env=None, ok=True):
    res = durakv_cli(*args, env=env)
    if ok:
        assert res.returncode == 0, "durakv %s failed: %s %s" % (" ".join(map(str, args)), res.stdout, res.stderr)
    return res


def wait_snapshot(srv, count=1):
    """BGSAVE, then poll until the data directory holds `count` snapshot(s) more than before, or one newer."""
    snaps = os.path.join(srv.data_dir, "snapshots")
    before = set(os.listdir(snaps)) if os.path.isdir(snaps) else set()
    with srv.client() as c:
        c.bgsave()
    wait_until(lambda: {n for n in os.listdir(snaps) if n.endswith(".dks")} - before if os.path.isdir(snaps)
               else False, 30, what="a new snapshot")
    with srv.client() as c:
        wait_until(lambda: c.info("persistence").get("rdb_bgsave_in_progress") == 0, 30, what="BGSAVE done")


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server on a loopback port (the registry package moto[server]); yields the environment a
    client needs (endpoint and credentials) with the bucket made."""
    import boto3
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up():
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        wait_until(up, 30, what="moto's S3 server")
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % port}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield env
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()


def populate(c, prefix="k", n=40):
    for i in range(n):
        c.set("%s:s%d" % (prefix, i), "v%d" % i)
    c.hset("%s:h" % prefix, mapping={"a": "1", "b": "2"})
    c.rpush("%s:l" % prefix, "x", "y", "z")
    c.sadd("%s:set" % prefix, "m1", "m2", "m3")
    c.zadd("%s:z" % prefix, {"p": 1.5, "q": -2.25})
    c.set("%s:ttl" % prefix, "expiring", ex=3600)


# -- create, list, verify, restore, expire: a directory and S3 -------------------------------------------------

@pytest.mark.parametrize("where", ["dir", "s3"])
def test_backup_create_list_verify_restore_expire(where, server_factory, tmp_path, request):
    if where == "s3":
        env = request.getfixturevalue("s3_server")
        dest = "s3://%s/run-%d" % (BUCKET, os.getpid())
    else:
        env = None
        dest = str(tmp_path / "backups")
    srv = server_factory("--durability", "sync")
    c = srv.client()
    populate(c)
    c.function_load("#!lua name=lib1\nserver.register_function('f1', function() return 7 end)")
    wait_snapshot(srv)                 # the backup copies this snapshot and the journal after it
    c.set("k:s0", "overwritten")
    c.delete("k:s1")
    c.incr("k:counter")
    expected = state(c)

    res = cli("backup", "create", "--to", dest, "--port", srv.port, "--json", env=env)
    first = json.loads(res.stdout)
    c.set("after-backup", "not in it")    # written after the backup: a restore of it must not hold this

    rows = json.loads(cli("backup", "list", "--from", dest, "--json", env=env).stdout)
    assert [r["id"] for r in rows] == [first["id"]] and rows[0]["complete"] and rows[0]["kind"] == "server"
    assert rows[0]["start_ms"] > 0 and rows[0]["end_ms"] >= rows[0]["start_ms"]     # restorable range
    listing = cli("backup", "list", "--from", dest, env=env).stdout
    assert first["id"] in listing and "complete" in listing
    out = cli("backup", "verify", "--from", dest, env=env).stdout
    assert "backup %s: ok" % first["id"] in out

    # restored into a data directory: a server started on it serves exactly what was backed up
    datadir = tmp_path / "restored"
    cli("restore", "--from", dest, "--to", datadir, env=env)
    restored = server_factory(data_dir=datadir)
    with restored.client() as r:
        assert state(r) == expected
        assert r.fcall("f1", 0) == 7
        assert r.get("after-backup") is None

    # into an RDB file: Valkey 9.1.2 loads it
    rdb = tmp_path / "restored.rdb"
    cli("restore", "--from", dest, "--rdb", rdb, env=env)
    assert rdb_state(str(rdb)) == expected
    binary = valkey91_binary()
    if binary:
        vdir = tmp_path / "valkey"
        vdir.mkdir()
        shutil.copy(rdb, vdir / "dump.rdb")
        port = free_port()
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(vdir),
                                 "--dbfilename", "dump.rdb", "--save", ""], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            v = valkey.Valkey(port=port, socket_timeout=5)
            wait_until(lambda: v.ping() and v.info("persistence")["loading"] == 0, 20, what="valkey to load")
            assert state(v) == expected
            assert v.fcall("f1", 0) == 7
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)

    # a second backup; expiry keeps the newest, drops what is past the retention
    second = json.loads(cli("backup", "create", "--to", dest, "--port", srv.port, "--json", env=env).stdout)
    assert second["id"] > first["id"]
    storage = open_storage(dest)
    assert expire_backups(storage, 1) == []                                   # both younger than a day
    assert expire_backups(storage, 1, now_ms=int(time.time() * 1000) + 2 * 86_400_000) == [first["id"]]
    assert [r["id"] for r in list_backups(storage)] == [second["id"]]
    out = cli("backup", "expire", "--from", dest, "--retention-days", "1", env=env).stdout
    assert "0 backup(s) expired" in out
    cli("backup", "delete", "--from", dest, second["id"], env=env)
    assert list_backups(storage) == []
    res = cli("backup", "delete", "--from", dest, second["id"], env=env, ok=False)
    assert res.returncode == 1 and "no backup %s" % second["id"] in res.stderr


def test_backup_command_refusals(server_factory):
    """DURAKV BACKUP's errors: no journal (durability none), a token that is not a session, bad arguments; the
    server keeps serving."""
    srv = server_factory("--durability", "none")
    c = srv.client()
    with pytest.raises(valkey.exceptions.ResponseError, match="keeps no journal"):
        c.execute_command("DURAKV", "BACKUP", "BEGIN")
    c.config_set("durability", "sync")
    c.set("a", "1")
    reply = c.execute_command("DURAKV", "BACKUP", "BEGIN")
    info = dict(zip(reply[::2], reply[1::2]))
    token = info[b"token"]
    assert info[b"journal-upto"] >= 1
    with pytest.raises(valkey.exceptions.ResponseError, match="no such backup session"):
        c.execute_command("DURAKV", "BACKUP", "READ", "nosuch", "JOURNAL", "0", "10")
    with pytest.raises(valkey.exceptions.ResponseError, match="not an integer"):
        c.execute_command("DURAKV", "BACKUP", "READ", token, "JOURNAL", "1_0", "10")
    with pytest.raises(valkey.exceptions.ResponseError, match="syntax error"):
        c.execute_command("DURAKV", "BACKUP", "READ", token, "BOTH", "0", "10")
    with pytest.raises(valkey.exceptions.ResponseError, match="syntax error"):
        c.execute_command("DURAKV", "BACKUP", "BEGIN", "AFTER")
    entries = c.execute_command("DURAKV", "BACKUP", "READ", token, "JOURNAL", "0", "1000000")
    assert entries and entries[-1][0] == info[b"journal-upto"] and entries[-1][2] > 0   # index, epoch, time
    assert c.execute_command("DURAKV", "BACKUP", "END", token) == b"OK"
    with pytest.raises(valkey.exceptions.ResponseError, match="no such backup session"):
        c.execute_command("DURAKV", "BACKUP", "END", token)
    assert c.get("a") == b"1"


# -- point-in-time restore -------------------------------------------------------------------------------------

class Model:
    """The history of acknowledged writes: every write is applied to `data` when its reply came."""

    def __init__(self):
        self.data = {}

    def run(self, c, rng, keys, count):
        for _ in range(count):
            k = "p:%d" % rng.randrange(keys)
            op = rng.random()
            if op < 0.5:
                v = "v%d" % rng.randrange(10 ** 6)
                c.set(k, v)
                self.data[k] = ("string", v.encode())
            elif op < 0.7 and (k not in self.data or self.data[k][0] == "string"):
                n = c.incr(k) if k not in self.data or self.data[k][1].lstrip(b"-").isdigit() else None
                if n is None:
                    c.delete(k)
                    self.data.pop(k, None)
                else:
                    self.data[k] = ("string", b"%d" % n)
            else:
                c.delete(k)
                self.data.pop(k, None)

    def view(self):
        return {k.encode(): v + (False,) for k, v in self.data.items()}


def pause_instant():
    """An instant in a pause of the workload: no write is in flight around it."""
    time.sleep(0.15)
    t = int(time.time() * 1000)
    time.sleep(0.15)
    return t


def test_point_in_time_restore_to_three_instants(server_factory, tmp_path):
    import random
    rng = random.Random(31)
    dest = str(tmp_path / "backups")
    # small segments, no automatic snapshots: the journal is cut only where the test's BGSAVEs allow
    srv = server_factory("--durability", "sync", "--journal-segment-bytes", "4096",
                         "--auto-snapshot-journal-bytes", "0")
    c = srv.client()
    model = Model()
    snapshots = {}

    model.run(c, rng, 40, 300)
    t_a = pause_instant()                     # inside the first backup (no snapshot yet: journal from entry 1)
    snapshots["a"] = model.view()
    b1 = json.loads(cli("backup", "create", "--to", dest, "--port", srv.port, "--json").stdout)["id"]

    model.run(c, rng, 40, 300)
    t_b = pause_instant()                     # after the first backup, before any snapshot covers it
    snapshots["b"] = model.view()
    model.run(c, rng, 40, 200)
    wait_snapshot(srv)
    model.run(c, rng, 40, 200)
    wait_snapshot(srv)                        # two snapshots: the journal before the older one may now go ...
    jdir = os.path.join(srv.data_dir, "journal")
    first_segment = min(int(n.split(".")[0]) for n in os.listdir(jdir) if n.endswith(".seg"))
    assert first_segment > 1                  # ... and did, up to what the first backup asked to keep
    b2 = json.loads(cli("backup", "create", "--to", dest, "--port", srv.port, "--json").stdout)["id"]

    model.run(c, rng, 40, 300)
    t_c = pause_instant()
    snapshots["c"] = model.view()
    b3 = json.loads(cli("backup", "create", "--to", dest, "--port", srv.port, "--json").stdout)["id"]
    model.run(c, rng, 40, 50)                 # after every backup: no instant restores it

    from durakv.backup.format import iso_ms
    for name, t, backups in (("a", t_a, [b1]), ("b", t_b, [b1, b2]), ("c", t_c, [b2, b3])):
        rdb = str(tmp_path / ("at-%s.rdb" % name))
        res = cli("restore", "--from", dest, "--at", iso_ms(t), "--rdb", rdb, "--json")
        doc = json.loads(res.stdout)
        assert rdb_state(rdb) == snapshots[name], "instant %s" % name
        assert set(doc["backups"]) >= set(backups[-1:]), doc     # the instant's backup(s)
    # "b" needs the first backup's journal continued by the second's (the server cut its journal meanwhile)
    doc = json.loads(cli("restore", "--from", dest, "--at", iso_ms(t_b), "--rdb", str(tmp_path / "b2.rdb"),
                         "--json").stdout)
    assert doc["backups"][:2] == [b1, b2]

    # an instant after the newest backup, or before any kept snapshot, is refused with the reason
    late = cli("restore", "--from", dest, "--at", iso_ms(int(time.time() * 1000) + 60_000), "--rdb",
               str(tmp_path / "late.rdb"), ok=False)
    assert late.returncode == 1 and "after the newest backup's end" in late.stderr
    cli("backup", "delete", "--from", dest, b1)
    early = cli("restore", "--from", dest, "--at", iso_ms(t_a), "--rdb", str(tmp_path / "early.rdb"), ok=False)
    assert early.returncode == 1 and "before the oldest snapshot" in early.stderr


# -- a damaged backup ------------------------------------------------------------------------------------------

def test_a_damaged_backup_file_is_refused_and_named(server_factory, tmp_path):
    srv = server_factory("--durability", "sync")
    c = srv.client()
    populate(c)
    wait_snapshot(srv)
    populate(c, prefix="more", n=10)
    dest = tmp_path / "backups"
    backup_id = json.loads(cli("backup", "create", "--to", dest, "--port", srv.port, "--json").stdout)["id"]
    piece = dest / backup_id / "shard-0"
    chunk = sorted(piece.glob("journal-*.dkj"))[0]

    def damaged(path, offset):
        copy = tmp_path / ("copy-%s" % path.name)
        shutil.copytree(dest, copy)
        target = copy / path.relative_to(dest)
        data = bytearray(target.read_bytes())
        data[offset] ^= 0xFF
        target.write_bytes(bytes(data))
        return copy, target

    for path, offset in ((chunk, 60), (piece / "snapshot.dks", 40), (dest / backup_id / "manifest.json", 30),
                         (piece / "shard.json", 30)):
        copy, target = damaged(path, offset)
        res = cli("backup", "verify", "--from", copy, ok=False)
        assert res.returncode == 1 and "FAILED" in res.stdout and str(target) in res.stdout, res.stdout
        res = cli("restore", "--from", copy, "--backup", backup_id, "--rdb", tmp_path / "x.rdb", ok=False)
        assert res.returncode == 1 and str(target) in res.stderr, res.stderr
        assert "damaged" in res.stderr
    # the intact backup still verifies and restores
    assert "ok" in cli("backup", "verify", "--from", dest).stdout
