"""`durakv migrate` beyond the plain path (tests/test_migrate_tool.py): a standalone source's writes that span
slots (MSET, DEL of several keys, a transaction, a script) into a 2-shard cluster, the replication link dropped
twice mid-stream and a target primary killed mid-migration (each resumed with a new full sync, then verified),
and transactions and numbered databases into a standalone durakv; the cut-over's triggers (a hold file, the lag
staying within a bound, --cutover-after as the maximum), which the other tests use to cut over when their
disruption is over instead of after a fixed window. Real redis-server and durakv processes on 127.0.0.1,
bounded loads, every wait a poll with a deadline."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import valkey
from valkey.cluster import ValkeyCluster

from conftest import ROOT, scaled, terminate, wait_until

SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); return 1"
OPS = 6                      # the kinds of write MixedWriter cycles through


class MixedWriter(threading.Thread):
    """Writes against a standalone source, each kind in turn: an MSET of two slots, a DEL of two prefilled keys,
    a one-slot MULTI/EXEC, a MULTI/EXEC over two slots, a script writing two keys of one slot, a SET with a TTL.
    Every acknowledged write is recorded with its time and the values it left; bounded in count and time."""

    def __init__(self, port, max_writes=20000, max_s=90.0, rate_per_s=300):
        super().__init__(daemon=True)
        self.port = port
        self.max_writes, self.max_s = max_writes, max_s
        self.interval_s = 1.0 / rate_per_s
        self.acked = []                      # (monotonic s, {key: value, or None for a deleted key})
        self.stop = threading.Event()

    @staticmethod
    def prefill(client, max_writes):
        p = client.pipeline(transaction=False)
        for i in range(1, max_writes, OPS):
            p.set(f"pre:{i}", "x" * 40)
            p.set(f"pre:{i}:b", "y")
        p.execute()

    def one(self, client, script, i):
        kind, v = i % OPS, str(i)
        if kind == 0:
            client.mset({f"m:{i}:a": v, f"m:{i}:b": v})
            return {f"m:{i}:a": v, f"m:{i}:b": v}
        if kind == 1:
            client.delete(f"pre:{i}", f"pre:{i}:b")
            return {f"pre:{i}": None, f"pre:{i}:b": None}
        if kind == 2:
            p = client.pipeline(transaction=True)
            p.set(f"{{t{i}}}:x", v)
            p.incr(f"{{t{i}}}:n")
            p.execute()
            return {f"{{t{i}}}:x": v, f"{{t{i}}}:n": "1"}
        if kind == 3:
            p = client.pipeline(transaction=True)
            p.set(f"tx:{i}:a", v)
            p.set(f"tx:{i}:b", v)
            p.execute()
            return {f"tx:{i}:a": v, f"tx:{i}:b": v}
        if kind == 4:
            script(keys=[f"{{e{i}}}:a", f"{{e{i}}}:b"], args=[v])
            return {f"{{e{i}}}:a": v, f"{{e{i}}}:b": v}
        client.set(f"w:{i}", v, ex=3600)
        return {f"w:{i}": v}

    def run(self):
        client = valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=3)
        script = client.register_script(SCRIPT)
        start = time.monotonic()
        i = 0
        while not self.stop.is_set() and i < self.max_writes and time.monotonic() - start < self.max_s:
            ahead_s = start + i * self.interval_s - time.monotonic()
            if ahead_s > 0:
                time.sleep(ahead_s)
            try:
                wrote = self.one(client, script, i)
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
                return                        # the cut-over's pause
            self.acked.append((time.monotonic(), wrote))
            i += 1

    def missing(self, cut_s, read):
        """The writes acknowledged before cut_s that the target does not show: [(key, expected, found)]."""
        before = [w for t, w in self.acked if t < cut_s]
        assert len(before) > 3 * OPS, "the load ran during the migration"
        out = []
        for wrote in before:
            for key, value in wrote.items():
                found = read(key)
                if found != (value.encode() if value is not None else None):
                    out.append((key, value, found))
        return out


def held_cutover(hold_file):
    """The options of a --cutover that waits for the test: no cut-over while hold_file exists (the test deletes
    it once its disruption is over), then as soon as the target has kept up with every source for a second
    (a lag within a second, stretched like every deadline on a slow machine): no fixed window."""
    hold_file.touch()
    return ("--cutover", "--cutover-hold-file", hold_file, "--cutover-lag", scaled(1), "--cutover-stable", 1)


def start_migrate(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}/src")
    return subprocess.Popen([sys.executable, "-m", "durakv", "migrate", *map(str, args), "--quiet"],
                            stdout=stdout, stderr=stderr, text=True, env=env, start_new_session=True)


def finish(proc, timeout_s=240):
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"durakv migrate did not finish in {timeout_s} s: {err[-3000:]} {out[-3000:]}")
    return proc.returncode, out, err


def wait_while_migrating(proc, predicate, timeout_s, what):
    """wait_until, but a migration that ended or a timeout fails with the migration's own output."""
    deadline = time.monotonic() + scaled(timeout_s)
    while proc.poll() is None and time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    ended = proc.poll()
    if ended is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    state = f"ended ({ended})" if ended is not None else "timed out"
    raise AssertionError(f"waiting for {what}: durakv migrate {state}; it said: {err[-3000:]} {out[-3000:]}")


def replica_online(client, full_syncs):
    """The source has had `full_syncs` full syncs and its replica (durakv migrate) is online, i.e. streaming."""
    if client.info("stats")["sync_full"] < full_syncs:
        return False
    info = client.info("replication")
    return info.get("connected_slaves") == 1 and info["slave0"]["state"] == "online"


def commandstat_calls(port, name):
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10) as c:
        return c.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0)


def test_migrate_resumes_after_the_replication_link_drops(redis_server, local_cluster, tmp_path):
    port, src = redis_server("--repl-diskless-sync", "no")         # the sized `$<len>` RDB transfer
    MixedWriter.prefill(src, 20000)
    cluster = local_cluster(shards=2, replicas=0, durability="sync")
    writer = MixedWriter(port)
    writer.start()
    wait_until(lambda: len(writer.acked) > 20, 20, what="the load to start")
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{cluster.primary(0).port}",
                         *held_cutover(hold), "--verify")
    try:
        for n in (1, 2):
            wait_while_migrating(proc, lambda: replica_online(src, n), 60, what=f"full sync {n} streaming")
            seen = len(writer.acked)
            wait_while_migrating(proc, lambda: len(writer.acked) > seen + 30, 20, what="writes through the stream")
            assert src.execute_command("CLIENT", "KILL", "TYPE", "replica") == 1
        wait_while_migrating(proc, lambda: replica_online(src, 3), 60, what="the third full sync streaming")
        seen = len(writer.acked)
        wait_while_migrating(proc, lambda: len(writer.acked) > seen + 30, 20, what="writes through the third stream")
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cut_s = time.monotonic()
    writer.stop.set()
    writer.join(10)
    assert rc == 0, err + out
    assert re.search(r"127\.0\.0\.1:\d+: resumed 2 time\(s\) with a full sync after: the replication link from "
                     r"127\.0\.0\.1:\d+ dropped", out), out
    assert "clients may switch to" in out and "verify: per-slot key counts equal, every key equal" in out, out
    assert "(per-slot counts: counted from SCAN of both)" in out, out       # a standalone source
    split = re.search(r"(\d+) transaction\(s\) split over target slots", out)
    assert split and int(split.group(1)) > 0, out        # the two-slot MULTI/EXECs went as their commands
    with ValkeyCluster(host="127.0.0.1", port=cluster.primary(1).port) as dk:
        assert writer.missing(cut_s, dk.get) == []
        assert dk.ttl(next(k for _t, w in writer.acked for k in w if k.startswith("w:"))) > 3000
    # the one-slot transactions and the scripts' effects arrived as MULTI/EXEC on the owning primary
    assert sum(commandstat_calls(p.port, "exec") for p in (cluster.primary(0), cluster.primary(1))) > 0


def test_migrate_transactions_and_databases_into_a_standalone_durakv(redis_server, server_factory, tmp_path):
    port, src = redis_server()
    src.set("before", "1")
    srv = server_factory("--durability", "sync")
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{srv.port}", *held_cutover(hold),
                         "--verify")
    try:
        wait_while_migrating(proc, lambda: replica_online(src, 1), 60, what="the migration streaming")
        exec_before = commandstat_calls(srv.port, "exec")
        db2 = valkey.Valkey(host="127.0.0.1", port=port, db=2, socket_timeout=10)
        p = db2.pipeline(transaction=True)
        p.set("tx:a", "1")
        p.rpush("tx:list", "x", "y")
        p.set("tx:b", "2")
        p.execute()
        src.mset({"m:a": "1", "m:b": "2", "m:c": "3"})
        src.register_script(SCRIPT)(keys=["s:a", "s:b"], args=["z"])
        src.delete("before", "m:c")
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err + out
    assert "0 transaction(s) split over target slots" in out, out     # one node takes any transaction whole
    assert "verify: per-slot key counts equal, every key equal" in out, out
    # the MULTI/EXEC and the script's effects, each one transaction on durakv too
    assert commandstat_calls(srv.port, "exec") - exec_before == 2
    dk2 = srv.client(db=2)
    assert (dk2.get("tx:a"), dk2.lrange("tx:list", 0, -1), dk2.get("tx:b")) == (b"1", [b"x", b"y"], b"2")
    dk = srv.client()
    assert dk.mget("m:a", "m:b", "m:c", "s:a", "s:b", "before") == [b"1", b"2", None, b"z", b"z", None]
    assert dk.dbsize() == 4 and dk2.dbsize() == 3


def test_migrate_resumes_after_a_target_primary_is_killed(redis_server, local_cluster, tmp_path):
    port, src = redis_server()
    MixedWriter.prefill(src, 20000)
    cluster = local_cluster(shards=2, replicas=1, durability="sync")
    old = cluster.primary(0)
    writer = MixedWriter(port, rate_per_s=200)
    writer.start()
    wait_until(lambda: len(writer.acked) > 20, 20, what="the load to start")
    # the killed node is the one --target names: the resumption finds the cluster through the other primary
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{old.port}", *held_cutover(hold),
                         "--verify")
    try:
        wait_while_migrating(proc, lambda: replica_online(src, 1), 60, what="the migration streaming")
        seen = len(writer.acked)
        wait_while_migrating(proc, lambda: len(writer.acked) > seen + 30, 20, what="writes through the stream")
        # the primary now (under this load on two cores a lease may have moved since the start)
        killed = cluster.primary(0)
        assert killed is not None and cluster.kill(killed.name, signal.SIGKILL)
        # a role poll, no probe write: a key the source does not have would fail --verify
        wait_while_migrating(proc, lambda: (lambda p: p is not None and p.name != killed.name)(cluster.primary(0)),
                             60, what="a new primary of shard 0")
        # the cut-over may go now: it waits until the link streams (again) and keeps up
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cut_s = time.monotonic()
    writer.stop.set()
    writer.join(10)
    assert rc == 0, err + out
    # Writes in flight to the killed node (their effect unknown) start the source over with a full sync; a kill
    # between two round trips leaves nothing unknown: refused connections and CLUSTERDOWN are retried on the new
    # primary. Either way every write the source acknowledged is on durakv, and verify finds both the same.
    assert "verify: per-slot key counts equal, every key equal" in out, out
    with ValkeyCluster(host="127.0.0.1", port=cluster.primary(1).port) as dk:
        assert writer.missing(cut_s, dk.get) == []


def _redis_cluster_with_replicas(tmp_path, masters=3):
    """A redis-server cluster of `masters` primaries with a replica each, on free ports (bus ports free too):
    (procs, ports)."""
    import shutil
    from conftest import cluster_port
    procs, ports = [], []
    for n in range(2 * masters):
        port = cluster_port()
        d = tmp_path / f"rc{n}"
        d.mkdir()
        procs.append(subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                       "--cluster-enabled", "yes", "--cluster-config-file", str(d / "nodes.conf"),
                                       "--save", "", "--appendonly", "no", "--dir", str(d),
                                       "--repl-diskless-sync-delay", "0"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        ports.append(port)
    try:
        for port in ports:
            wait_until(lambda: valkey.Valkey(port=port).ping(), 10, what="redis-server cluster node")
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                        "--cluster-replicas", "1", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        wait_until(lambda: all(valkey.Valkey(port=p).cluster("info")["cluster_state"] == "ok" for p in ports), 30,
                   what="the redis cluster to be ok")
    except BaseException:
        _stop(procs)
        raise
    return procs, ports


def _stop(procs):
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=10)


def _role(port):
    with valkey.Valkey(port=port, socket_timeout=5) as c:
        return c.info("replication")


class ClusterWriter(threading.Thread):
    """Unique SETs through a cluster client, each acknowledgement recorded with its time; a refusal while the
    source fails over (CLUSTERDOWN, TRYAGAIN, a reset connection) is not acknowledged and the load goes on; a
    timeout is the cut-over's pause and ends it. Bounded in count and time."""

    def __init__(self, make_client, max_writes=20000, max_s=90.0, rate_per_s=200):
        super().__init__(daemon=True)
        self.make_client = make_client
        self.max_writes, self.max_s = max_writes, max_s
        self.interval_s = 1.0 / rate_per_s
        self.acked = []                    # (monotonic s, key, value)
        self.stop = threading.Event()

    def run(self):
        client = self.make_client()
        start = time.monotonic()
        i = 0
        while not self.stop.is_set() and i < self.max_writes and time.monotonic() - start < self.max_s:
            ahead_s = start + i * self.interval_s - time.monotonic()
            if ahead_s > 0:
                time.sleep(ahead_s)
            try:
                client.set(f"w:{i}", str(i))
                self.acked.append((time.monotonic(), f"w:{i}", str(i)))
            except valkey.exceptions.TimeoutError:
                return
            except (valkey.exceptions.ValkeyError, valkey.exceptions.ValkeyClusterException):
                pass
            i += 1


@pytest.mark.long_pole(24)     # seconds on the 2-core machine: xdist starts it first
def test_migrate_follows_a_source_cluster_failover(local_cluster, tmp_path):
    procs, ports = _redis_cluster_with_replicas(tmp_path)
    writers = []
    try:
        masters = [p for p in ports if _role(p)["role"] == "master"]
        assert len(masters) == 3
        wait_until(lambda: all(_role(p).get("connected_slaves") == 1 for p in masters), 30,
                   what="every redis master's replica")
        src = ValkeyCluster(host="127.0.0.1", port=masters[0])
        for i in range(3000):
            src.set(f"k{i}", f"v{i}")
        cluster = local_cluster(shards=2, replicas=0, durability="sync")
        writer = ClusterWriter(lambda: ValkeyCluster(host="127.0.0.1", port=masters[1], socket_timeout=3))
        writers.append(writer)
        writer.start()
        wait_until(lambda: len(writer.acked) > 50, 20, what="the load to start")
        hold = tmp_path / "hold-cutover"
        proc = start_migrate("--source", f"127.0.0.1:{masters[0]}", "--target",
                             f"127.0.0.1:{cluster.primary(0).port}", *held_cutover(hold), "--verify")
        try:
            old = masters[2]
            # durakv migrate is the master's second replica once it streams
            wait_while_migrating(proc, lambda: _role(old).get("connected_slaves") == 2
                                 and all(_role(old)[f"slave{i}"]["state"] == "online" for i in (0, 1)), 60,
                                 what="the migration streaming from the master that fails over")
            info = _role(old)
            replica = next(int(info[f"slave{i}"]["port"]) for i in (0, 1)
                           if any(int(info[f"slave{i}"]["port"]) == p for p in ports))
            # a manual failover gives up after 5 s when the replica cannot catch up (a busy machine): ask again
            for attempt in range(3):
                with valkey.Valkey(port=replica) as r:
                    assert r.execute_command("CLUSTER", "FAILOVER") == b"OK"
                try:
                    wait_until(lambda: _role(replica)["role"] == "master" and _role(old)["role"] == "slave", 10,
                               what="the source's planned failover")
                    break
                except TimeoutError:
                    assert proc.poll() is None and attempt < 2, "the source did not fail over"
            # the tool found the new master of those slots and took a full sync from it
            wait_while_migrating(proc, lambda: valkey.Valkey(port=replica).info("stats")["sync_full"] >= 1, 60,
                                 what="a full sync from the new source master")
            hold.unlink()
            rc, out, err = finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cut_s = time.monotonic()
        writer.stop.set()
        writer.join(10)
        assert rc == 0, err + out
        assert re.search(rf"127\.0\.0\.1:{replica}: resumed 1 time\(s\) with a full sync after", out), out
        assert "from 3 source primaries" in out and "verify: per-slot key counts equal, every key equal" in out, out
        assert "(per-slot counts: CLUSTER COUNTKEYSINSLOT on both)" in out, out
        with ValkeyCluster(host="127.0.0.1", port=cluster.primary(1).port) as dk:
            before = [(k, v) for t, k, v in writer.acked if t < cut_s]
            assert len(before) > 100
            assert [(k, v) for k, v in before if dk.get(k) != v.encode()] == []
            assert dk.get("k2999") == b"v2999"
    finally:
        for writer in writers:
            writer.stop.set()
            writer.join(10)
        _stop(procs)


def _migrate_to_files(tmp_path, *args):
    """durakv migrate with its stdout and stderr in files the test reads while it runs: (proc, out(), err())."""
    out_path, err_path = tmp_path / "migrate.out", tmp_path / "migrate.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = start_migrate(*args, stdout=out, stderr=err)
    return proc, out_path.read_text, err_path.read_text


def test_the_cutover_waits_for_its_hold_file_then_for_the_target_to_keep_up(redis_server, server_factory,
                                                                              tmp_path):
    """Issue 27: the cut-over had one trigger, a fixed --cutover-after window. --cutover-hold-file holds it while
    the file exists (the target has caught up meanwhile: the tool says so once, the source keeps taking writes
    and they keep streaming); once the file is gone --cutover-lag lets it begin as soon as the target has stayed
    within the bound for --cutover-stable, not at the --cutover-after maximum (an hour here), and says which
    trigger it was."""
    port, src = redis_server()
    src.set("before", "1")
    srv = server_factory("--durability", "sync")
    hold = tmp_path / "hold-cutover"
    proc, out, err = _migrate_to_files(
        tmp_path, "--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{srv.port}", *held_cutover(hold),
        "--cutover-after", 3600, "--verify")
    try:
        wait_until(lambda: "held while" in out() or proc.poll() is not None, 60, what="the cut-over held")
        assert proc.poll() is None, err() + out()
        assert f"cut-over: ready, held while {hold} exists" in out(), out()
        dk = srv.client()
        for i in range(20):
            src.set(f"held:{i}", str(i))          # a paused source would hold these past the socket timeout
        wait_until(lambda: dk.get("held:19") == b"19", 30, what="the writes made while held streamed")
        assert proc.poll() is None and "cut-over: begins" not in out(), err() + out()
        hold.unlink()
        proc.wait(timeout=scaled(120))
    finally:
        terminate(proc)
    assert proc.returncode == 0, err() + out()
    text = out()
    assert re.search(r"cut-over: begins: the target stayed within [\d.]+ s of every source for 1 s, [\d.]+ s "
                     r"after the full sync", text), text
    assert text.count("held while") == 1 and "cut-over: source writes paused" in text, text
    assert "verify: per-slot key counts equal, every key equal" in text, text
    assert dk.mget("before", "held:0", "held:19") == [b"1", b"0", b"19"]


def test_cutover_after_is_the_most_the_lag_trigger_waits(redis_server, server_factory, tmp_path):
    """With --cutover-lag, --cutover-after S is a maximum: a lag that never stays within its bound long enough
    (0 s for an hour) still cuts over S seconds after the full sync, and the report says that was the trigger.
    Out-of-range values, and the options without --cutover, are refused before anything starts."""
    port, src = redis_server()
    src.set("k", "v")
    srv = server_factory("--durability", "sync")
    proc, out, err = _migrate_to_files(
        tmp_path, "--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{srv.port}", "--cutover",
        "--cutover-lag", 0, "--cutover-stable", 3600, "--cutover-after", 1, "--verify")
    try:
        proc.wait(timeout=scaled(120))
    finally:
        terminate(proc)
    assert proc.returncode == 0, err() + out()
    assert ("cut-over: begins: 1 s after the full sync (--cutover-after) without the target staying within 0 s "
            "of every source for 3600 s") in out(), out()
    assert "verify: per-slot key counts equal, every key equal" in out() and srv.client().get("k") == b"v"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}/src")
    full_syncs = src.info("stats")["sync_full"]
    for option, value in (("--cutover-lag", "-1"), ("--cutover-stable", "nan"), ("--cutover-after", "1e9")):
        r = subprocess.run([sys.executable, "-m", "durakv", "migrate", "--source", f"127.0.0.1:{port}", "--target",
                            f"127.0.0.1:{srv.port}", "--cutover", option, value], capture_output=True, text=True,
                           env=env, timeout=scaled(60))
        assert r.returncode == 2 and f"{option} must be between 0 and 604800 seconds" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "durakv", "migrate", "--source", f"127.0.0.1:{port}", "--target",
                        f"127.0.0.1:{srv.port}", "--cutover-lag", "1"], capture_output=True, text=True, env=env,
                       timeout=scaled(60))
    assert r.returncode == 2 and "--cutover-lag is an option of --cutover" in r.stderr, r.stderr
    assert src.info("stats")["sync_full"] == full_syncs          # the refused runs never asked for a sync


def test_target_writer_retries_a_long_run_of_refusals_in_a_loop(monkeypatch):
    """A node that answers TRYAGAIN 1,500 times in a row (a slot's move, a node loading) before it takes the
    write: the writer resends until it is acknowledged, in a loop (once it recursed per retry and died with
    RecursionError), and a node that never takes it fails the run at the deadline with the last refusal."""
    import socket

    from conftest import free_port
    from durakv.tools.migrate import target as target_mod

    refusals = {"left": 1500}
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    stop = threading.Event()

    def serve():
        import hiredis
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            reader = hiredis.Reader()
            with conn:
                while not stop.is_set():
                    data = conn.recv(65536)
                    if not data:
                        break
                    reader.feed(data)
                    out = []
                    while (cmd := reader.gets()) is not False:
                        name = cmd[0].upper()
                        if name == b"INFO":
                            body = b"# Cluster\r\ncluster_enabled:0\r\n"
                            out.append(b"$%d\r\n%s\r\n" % (len(body), body))
                        elif refusals["left"] > 0:
                            refusals["left"] -= 1
                            out.append(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n")
                        else:
                            out.append(b"+OK\r\n")
                    conn.sendall(b"".join(out))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    monkeypatch.setattr(target_mod, "RETRY_FIRST_S", 0.0005)
    monkeypatch.setattr(target_mod, "RETRY_MAX_S", 0.0005)
    try:
        t = target_mod.Target("127.0.0.1", port, batch_writes=1)
        t.write(0, ("RESTORE", b"k", b"0", b"payload", b"REPLACE", b"ABSTTL"), b"k")
        t.flush()
        assert (t.acknowledged, t.retries, refusals["left"]) == (1, 1500, 0)
        refusals["left"] = 10 ** 9
        monkeypatch.setattr(target_mod, "RETRY_DEADLINE_S", 0.5)
        t.write(0, ("RESTORE", b"k2", b"0", b"payload", b"REPLACE", b"ABSTTL"), b"k2")
        try:
            t.flush()
        except target_mod.TargetError as exc:
            assert "still failing after 0.5 s; last: RESTORE on 127.0.0.1" in str(exc)
            assert "TRYAGAIN Multiple keys request" in str(exc)
        else:
            raise AssertionError("a write that is never taken must fail the run")
        t.close()
    finally:
        stop.set()
        server.join(5)
        listener.close()


@pytest.mark.long_pole(40)     # seconds on the 2-core machine: xdist starts it first
def test_a_long_full_sync_load_keeps_the_link(redis_server, server_factory, tmp_path):
    """A disk-based full sync makes the replica online as soon as the RDB is sent, and the source drops a
    replica that sends no REPLCONF ACK for repl-timeout: the load, longer than that here, sends keep-alive ACKs,
    so the link holds (no resynchronization) and the stream's writes arrive."""
    port, src = redis_server("--repl-diskless-sync", "no", "--repl-timeout", "2", "--enable-debug-command", "local")
    # the source fills itself (keys k:0 .. k:299999, 20-byte values): 1.5 s where a client pipeline of 300,000
    # SETs took 29 s of the test on the loaded 2-core machine, and the load under test is the same size
    assert src.execute_command("DEBUG", "POPULATE", 300000, "k", 20) == b"OK"
    assert src.dbsize() == 300000
    srv = server_factory("--durability", "sync")
    hold = tmp_path / "hold-cutover"
    proc = start_migrate("--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{srv.port}", *held_cutover(hold),
                         "--verify")
    try:
        wait_while_migrating(proc, lambda: replica_online(src, 1), 60, what="the RDB sent")
        src.set("during", "load")
        hold.unlink()
        rc, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err + out
    m = re.search(r"full sync: 300,000 keys from 1 source primary in ([\d.]+) s", out)
    assert m, out
    assert "; 0 resynchronization(s) after a dropped source link" in out, out
    assert "verify: per-slot key counts equal, every key equal" in out, out
    assert srv.client().get("during") == b"load"
