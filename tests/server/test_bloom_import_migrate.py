"""Bloom filters through `durakv import` (an RDB file: the filters as valkey-bloom's module type bloomfltr) and
`durakv migrate` (a full sync, then the live stream of BF.* effects), from a durakv source into another durakv,
compared by their DUMP payloads. Real processes, real sockets, bounded loads, polls with deadlines."""

import shutil
import subprocess

import pytest

from conftest import durakv_cli
from durakv.keyspace import rdbvalue
from test_import_migrate import finish, held_cutover, replica_online, start_migrate, wait_while_migrating


def fill(c):
    """Filters of every shape: random seed, fixed seed, scaled out, NONSCALING, tightened, with a TTL, empty."""
    c.execute_command("BF.MADD", "bf:rand", *[b"r%d" % i for i in range(250)])
    c.config_set("bf.bloom-use-random-seed", "no")
    c.execute_command("BF.ADD", "bf:fixed", "x")
    c.config_set("bf.bloom-use-random-seed", "yes")
    c.execute_command("BF.INSERT", "bf:ns", "CAPACITY", "50", "ERROR", "0.001", "NONSCALING",
                      "ITEMS", *[b"n%d" % i for i in range(60)])
    c.execute_command("BF.INSERT", "bf:tight", "CAPACITY", "10", "EXPANSION", "3", "TIGHTENING", "0.3",
                      "ITEMS", *[b"t%d" % i for i in range(100)])
    c.execute_command("BF.RESERVE", "bf:empty", "0.05", "1000")
    c.execute_command("BF.ADD", "bf:ttl", "x")
    c.pexpire("bf:ttl", 3_600_000)
    c.set("plain", "v")
    return ["bf:rand", "bf:fixed", "bf:ns", "bf:tight", "bf:empty", "bf:ttl", "plain"]


def test_import_an_rdb_with_bloom_filters(server_factory, tmp_path):
    redis_cli = shutil.which("redis-cli")
    if redis_cli is None:
        pytest.skip("redis-cli (redis-tools) is not installed")
    src = server_factory()
    c = src.client()
    keys = fill(c)
    path = str(tmp_path / "bloom.rdb")
    subprocess.run([redis_cli, "-p", str(src.port), "--rdb", path], check=True, capture_output=True, timeout=60)
    # the file holds each filter as the module type, as a Valkey with valkey-bloom writes it
    kinds = {rec[2]: rec[3][0] for rec in rdbvalue.iter_rdb_file(path) if rec[0] == "key"}
    assert {k.decode() for k, t in kinds.items() if t == rdbvalue.T_MODULE_2} == {k for k in keys if k != "plain"}
    dst = server_factory()
    r = durakv_cli("import", path, "--target", f"127.0.0.1:{dst.port}", "--quiet")
    assert r.returncode == 0, r.stderr + r.stdout
    d = dst.client()
    for key in keys:
        assert d.dump(key) == c.dump(key), key
    assert 3_500_000 < d.pttl("bf:ttl") <= 3_600_000
    assert d.execute_command("BF.MEXISTS", "bf:rand", *[b"r%d" % i for i in range(250)]) == [1] * 250


def test_migrate_carries_filters_and_their_live_additions(server_factory, tmp_path):
    src = server_factory()
    c = src.client()
    keys = fill(c)
    dst = server_factory("--durability", "sync")
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{src.port}", "--target", f"127.0.0.1:{dst.port}",
                         *held_cutover(hold), "--verify")
    try:
        wait_while_migrating(proc, lambda: replica_online(c, 1), 60, what="the migration streaming")
        # after the full sync: additions to existing filters, a new filter that scales as it is created
        c.execute_command("BF.MADD", "bf:rand", *[b"live%d" % i for i in range(300)])
        c.execute_command("BF.INSERT", "bf:new", "CAPACITY", "5", "ITEMS", *[b"new%d" % i for i in range(50)])
        c.execute_command("BF.ADD", "bf:fixed", "y")
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err + out
    assert "every key equal" in out, out
    d = dst.client()
    for key in keys + ["bf:new"]:
        assert d.dump(key) == c.dump(key), key
