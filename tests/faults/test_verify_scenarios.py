"""`durakv verify`: short versions of every scenario against real local clusters (NATS + durakv processes),
failing if one acknowledged sync write is lost or a history is rejected; the deliberately broken server mode
(debug-ack-before-commit) must be caught by both checkers; any RESP endpoint with a user-given fault command.
Plus the pure parts of the runner (outcome classification, merging fault windows, the write gap)."""

import json
import os
import subprocess
import sys

import pytest
import valkey

from conftest import durakv_cli, wait_until
from durakv.cluster.local import LocalCluster
from durakv.tools.verify import Recorder
from durakv.tools.verify import scenarios as sc
from durakv.tools.verify.history import FAULT_START, FAULT_STOP, NEMESIS, WRITE_KEY
from durakv.tools.verify.workload import FAIL, INFO, classify
from helpers.servers import cluster_port_range

SHORT = dict(warmup_s=1.0, after_s=1.0)


def quiet(_msg):
    pass


@pytest.fixture(scope="module")
def sync_cluster(tmp_path_factory):
    """One sync cluster over TLS, partitionable, shared by the sync scenarios (each leaves it healthy)."""
    d = tmp_path_factory.mktemp("verify-sync") / "cluster"
    try:
        cluster = LocalCluster.up(d, durability="sync", tls=True, partitionable=True, timeout_s=90,
                                 port_range=cluster_port_range())
        yield cluster
    finally:
        if os.path.exists(os.path.join(d, "manifest.json")):
            LocalCluster.load(d).down()


@pytest.fixture(scope="module")
def async_cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify-async") / "cluster"
    try:
        yield LocalCluster.up(d, durability="async", timeout_s=90, port_range=cluster_port_range())
    finally:
        if os.path.exists(os.path.join(d, "manifest.json")):
            LocalCluster.load(d).down()


def env_of(cluster):
    return sc.Env.local(cluster.dir, say=quiet)


# -- pure parts ------------------------------------------------------------------------------------------------

def test_outcomes_of_errors():
    E = valkey.exceptions
    assert classify(E.ReadOnlyError("You can't write against a read only replica.")) == (
        FAIL, "READONLY You can't write against a read only replica.")
    assert classify(E.ClusterDownError("The primary's lease expired; it is not serving until it is renewed"))[0] \
        == FAIL
    assert classify(E.ResponseError("MISCONF Errors writing to the journal: x. Writes are refused until it can "
                                    "persist again."))[0] == FAIL
    assert classify(E.ResponseError("MISCONF Errors writing to the journal: x. This write, or the write this "
                                    "read waited for, may not be durable"))[0] == INFO
    assert classify(E.TimeoutError("Timeout reading from socket"))[0] == INFO
    assert classify(E.ConnectionError("Connection closed by server."))[0] == INFO
    # a connection error proves nothing about a command a cluster client may already have sent
    assert classify(E.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."))[0] == INFO
    assert classify(E.TimeoutError("Timeout connecting to server"))[0] == INFO
    assert classify(E.BusyLoadingError("durakv is loading the dataset in memory"))[0] == FAIL
    assert classify(E.ResponseError("ERR something unknown"))[0] == INFO
    assert classify(E.WatchError("Watched variable changed."))[0] == FAIL


def test_fault_windows_merge_into_the_history_and_the_gap_after_a_fault():
    t = iter(range(0, 10**12, 10**8))          # a clock ticking 0.1 s per reading
    rec = Recorder(clock_ns=lambda: next(t))
    for i in range(3):                          # acks at 0.1, 0.3, 0.5 s
        rec.invoke(0, WRITE_KEY, f"k{i}", "v")
        rec.ok(0)
    start, stop = next(t), next(t)              # the fault: 0.6 .. 0.7 s
    for _ in range(10):
        next(t)                                 # 1 s without a write
    rec.invoke(0, WRITE_KEY, "k3", "v")
    rec.ok(0)                                   # ack at 1.9 s
    h = sc.with_faults(rec.history(), [(start, stop, "kill 0-0")])
    assert [o.index for o in h.ops] == list(range(len(h.ops)))
    nem = [(o.f, o.value) for o in h.ops if o.process == NEMESIS]
    assert nem == [(FAULT_START, "kill 0-0"), (FAULT_STOP, "kill 0-0")]
    assert [o.time_ns for o in h.ops] == sorted(o.time_ns for o in h.ops)
    assert h.fault_windows()[0].start_ns == start
    a, b = sc.gap_after(h, start)
    assert (a, b) == (int(0.5e9), int(1.9e9))
    assert sc.gap_after(h, int(2e9)) is None
    assert sc.chaos_args("kill", 2) == ["kill", "--node", "primary", "--restart-after", "2", "--shard", "0"]
    assert sc.chaos_args("az-power")[:5] == ["az-power", "--az", "primary", "--duration", "30"]


def test_the_broken_mode_needs_the_test_environment(tmp_path):
    r = durakv_cli("server", "--port", "0", "--dir", tmp_path, "--debug-ack-before-commit", "yes",
                   env={"DURAKV_TEST_UNSAFE": ""}, timeout_s=60)
    assert r.returncode == 1
    assert "refused unless the environment has DURAKV_TEST_UNSAFE=1" in r.stderr


# -- the sync scenarios ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault,seconds", [("kill", 1.5), ("pause", 4.0), ("az-power", 2.0), ("partition", 6.0),
                                           ("failover", None)])
def test_acked_writes_survive_each_fault(sync_cluster, fault, seconds):
    res = sc.acked_writes(env_of(sync_cluster), fault=fault, runs=1, writers=3, fault_s=seconds, **SHORT)
    assert res.status == sc.PASS, res.reasons
    run = res.report.data["runs"][0]
    assert run["acked"] > 0 and run["lost"] == 0 and run["unexpected"] == 0
    detail = res.report.data["details"][0]
    assert detail["replicas_behind"] and not any(detail["replicas_behind"].values())
    assert detail["unavailable_s"] is not None
    if seconds:
        assert detail["fault_s"] >= seconds * 0.9     # the window comes from the nemesis' event log
    table = res.report.tables[0].to_text()
    assert "1/1 runs lost no acknowledged write." in table


@pytest.mark.long_pole(28)     # seconds on the 2-core machine: xdist starts it first
def test_acked_writes_with_a_bulk_load_step(sync_cluster):
    """Pipelined batches of 4 KB values and 2 MB values from two clients before the fault, counted in the
    "Bulk load" table and checked after recovery like every other write."""
    bulk = {"clients": 2, "batches": 2, "batch": 1000, "value_bytes": 4096, "large": 1, "large_bytes": 2 << 20}
    res = sc.acked_writes(env_of(sync_cluster), fault="kill", runs=1, writers=2, fault_s=1.0, bulk=bulk, **SHORT)
    assert res.status == sc.PASS, res.reasons
    row = res.report.data["bulk"][0]
    assert row["Pipelined SETs sent"] == 4000 and row["Pipelined SETs acked"] == 4000
    assert row["Large values sent"] == 2 and row["Large values acked"] == 2 and row["Errors"] == 0
    assert row["MB acked"] >= (4000 * 4096 + 2 * (2 << 20)) / 1e6 - 0.001
    run = res.report.data["runs"][0]
    assert run["acked"] >= 4002 and run["lost"] == 0
    text = res.report.to_text()
    assert "Bulk load" in text and "pipelining 2 batch(es) of 1,000 SETs of 4,096 B" in text


def test_failover_planned_and_unplanned(sync_cluster):
    res = sc.failover(env_of(sync_cluster), runs=1, writers=3, warmup_s=1.0, after_s=1.0, restart_after_s=1.0)
    assert res.status == sc.PASS, res.reasons
    runs = res.report.data["runs"]
    assert set(runs) == {"planned", "unplanned (kill -9)"}
    assert all(len(v) == 1 and v[0] is not None and v[0] > 0 for v in runs.values())
    rows = res.report.tables[1].rows
    assert [r[0] for r in rows] == ["planned", "unplanned (kill -9)"] and all(r[2] != r[3] for r in rows)
    assert res.report.tables[1].columns[-1] == "Client errors"
    assert rows[0][-1] == 0     # the planned run's: the clients only waited and followed MOVED
    assert "median" in res.report.tables[0].to_text()


@pytest.mark.long_pole(23)     # seconds on the 2-core machine: xdist starts it first
def test_linearizable_under_kill_pause_failover_partition(sync_cluster):
    res = sc.linearizable(env_of(sync_cluster), faults=("kill", "pause", "failover", "partition"), clients=4,
                          keys=3, rate_per_client=40, warmup_s=1.0, gap_s=1.0, after_s=1.0, time_limit_s=60,
                          fault_s={"kill": 1.0, "pause": 4.0, "partition": 6.0})
    assert res.status == sc.PASS, res.reasons
    assert res.check.status == "ok" and len(res.check.keys) == 3
    faults = [w["label"].split()[0] for w in res.report.data["history"]["faults"]]
    assert faults == ["kill", "pause", "failover", "partition"]
    outcomes = res.report.data["history"]["outcomes"]
    assert outcomes["ok"] > 100
    assert "linearizable" in res.report.to_text()


@pytest.mark.long_pole(30)     # seconds on the 2-core machine: xdist starts it first
def test_bench_tables_per_mode_on_a_given_cluster(sync_cluster):
    env = env_of(sync_cluster)

    def to(mode):
        return lambda e: e.config_set_primaries("durability", mode)
    try:
        res = sc.bench([(lambda: env, [("async", to("async")), ("sync", to("sync"))])], rate=400, clients=4,
                       duration_s=2, key_maximum=300, say=quiet)
    finally:
        env.config_set_primaries("durability", "sync")
    assert res.status == sc.PASS, res.reasons
    write, read = res.report.tables
    assert [r[0] for r in write.rows] == ["async", "sync"] and [r[0] for r in read.rows] == ["async", "sync"]
    assert all(r[1] > 0 and r[2] >= r[1] for r in write.rows + read.rows)     # p50 and p99 in ms
    assert res.report.data["effective"] == {"async": ["async"], "sync": ["sync"]}


def test_cli_json_and_report(sync_cluster, tmp_path):
    out, rep, results = tmp_path / "out.json", tmp_path / "report", tmp_path / "results"
    r = durakv_cli("verify", "acked-writes", "--dir", sync_cluster.dir, "--fault", "failover", "--warmup", "1",
                   "--after", "1", "--writers", "2", "--json", out, "--report", rep, "--results", results)
    assert r.returncode == 0, r.stdout + r.stderr
    # --results: the table as docs/results keeps it, with the command, commit, date and load
    (page,) = [n for n in os.listdir(results) if n.endswith(".md")]
    text = (results / page).read_text()
    assert page.startswith("acked-writes-") and os.path.exists(results / page.replace(".md", ".json"))
    assert "- command: `durakv verify acked-writes --dir" in text and "- commit: " in text
    assert "load average (1 min)" in text and "Acknowledged writes after recovery" in text
    assert "verify acked-writes: ok" in r.stdout
    assert "Acknowledged writes after recovery" in r.stdout and "chaos failover start" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["status"] == "ok" and doc["data"]["runs"][0]["lost"] == 0
    assert {"report.md", "report.json", "report.txt", "writes_run1.png"} <= set(os.listdir(rep))
    assert (rep / "writes_run1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = durakv_cli("verify", "failover", "--target", "127.0.0.1:1")
    assert r.returncode == 2 and "unrecognized arguments: --target" in r.stderr


# -- async -----------------------------------------------------------------------------------------------------

def test_async_rpo_loses_only_within_the_buffer(async_cluster):
    res = sc.acked_writes(env_of(async_cluster), fault="kill", runs=1, writers=3, fault_s=1.0, rpo=True, **SHORT)
    assert res.status == sc.PASS, res.reasons
    rpo = res.report.tables[0]
    assert rpo.name == "async_rpo"
    row = rpo.rows[0]
    assert row[1] > 0 and row[3] is not None and row[4] == 10000    # acked, lag before the fault, buffer
    assert res.report.data["runs"][0]["unexpected"] == 0


def test_switch_async_to_sync_and_back_without_errors(async_cluster):
    res = sc.switch(env_of(async_cluster), to="sync", back=True, writers=3, warmup_s=1.0, hold_s=1.0,
                    after_s=1.0, effective_timeout_s=5.0)
    switches = res.report.data["switches"]
    assert [s["to"] for s in switches] == ["sync", "async"]
    for s in switches:
        assert s["errors"] == 0, s["error_texts"]
        assert s["primaries_s"] is not None and s["writes"] > 0
    assert res.report.data["acked"]["lost"] == 0
    # Every replica answers for the shard's mode only once the mode is a shard setting (issue 11, item 1);
    # until then the scenario reports which nodes still answer the old one, and fails on it.
    lagging = {n for s in switches for n in s["not_effective"]}
    assert (res.status == sc.PASS) == (not lagging), res.reasons


# -- the broken mode -------------------------------------------------------------------------------------------

@pytest.mark.long_pole(36)     # seconds on the 2-core machine: xdist starts it first
def test_the_checkers_catch_acknowledgement_before_commit(tmp_path):
    with sc.Env.start_own(durability="sync", tls=False, server_args=["--debug-ack-before-commit", "yes"],
                          env={"DURAKV_TEST_UNSAFE": "1"}, say=quiet, parent=str(tmp_path)) as env:
        # A kill loses what was acknowledged and not yet committed; on a loaded machine the journal can catch up
        # before the kill lands and nothing is lost (seen with four workers). Up to three runs: one must lose.
        for _attempt in range(3):
            res = sc.acked_writes(env, fault="kill", runs=1, writers=3, fault_s=1.0, **SHORT)
            if res.status == sc.FAILED:
                break
            env.healthy()
        assert res.status == sc.FAILED, res.report.data["runs"]
        assert res.report.data["runs"][0]["lost"] > 0, "a kill of the primary must lose writes acked early"
        assert "acknowledged write(s) lost" in res.reasons[0]
        # A kill loses only what was acknowledged in the last commit's few milliseconds, and a 160 ops/s
        # history does not always read one of those writes back before a newer write hides it: about one run
        # in six passed the check on a loaded machine. Up to three runs (fresh keys each): the checker must
        # reject one of them.
        for _attempt in range(3):
            lin = sc.linearizable(env, faults=("kill", "kill"), clients=4, keys=3, rate_per_client=40,
                                  warmup_s=1.0, gap_s=1.0, after_s=1.0, fault_s=1.0)
            if lin.status == sc.FAILED:
                break
            env.healthy()
        assert lin.status == sc.FAILED
        assert lin.check.failures and "not linearizable" in lin.reasons[0]
        hist = tmp_path / "history.jsonl"
        lin.history.save_jsonl(hist)
    from durakv.tools.verify import History, check_registers
    assert check_registers(History.load(hist)).status == "fail"   # the saved history is rejected again


# -- any endpoint ----------------------------------------------------------------------------------------------

def test_standalone_target_with_a_fault_command(server_factory):
    srv = server_factory("--durability", "sync")
    fault = f"redis-cli -p {srv.port} DEBUG SLEEP 1"
    env = sc.Env.endpoint("127.0.0.1", srv.port, fault_cmd=fault, say=quiet)
    assert env.target.cluster_mode is False
    res = sc.acked_writes(env, fault="kill", runs=1, writers=2, **SHORT)
    assert res.status == sc.PASS, res.reasons
    detail = res.report.data["details"][0]
    assert detail["target"] == fault and detail["fault_s"] >= 1.0
    assert detail["unavailable_s"] >= 0.9                    # nothing acknowledged while the server slept
    lin = sc.linearizable(env, faults=("fault-cmd",), clients=3, keys=2, rate_per_client=40, warmup_s=1.0,
                          after_s=1.0)
    assert lin.status == sc.PASS, lin.reasons


def test_cluster_target_with_a_fault_command(sync_cluster):
    # The manifest on disk is the truth: earlier scenarios' `durakv chaos` processes restarted nodes (new pids).
    node = wait_until(lambda: sync_cluster.reload().primary(0), 30, what="the cluster's primary")
    ca = sync_cluster.manifest["tls"]["ca"]
    fault = f"{sys.executable} -m durakv cluster failover --dir {sync_cluster.dir}"
    env = sc.Env.endpoint("127.0.0.1", node.port, tls=True, tls_ca=ca, fault_cmd=fault, say=quiet,
                          password=sync_cluster.secrets.resp_password)    # a cluster `up` made: locked
    assert env.target.cluster_mode is True and len(env.target.nodes) == 3
    res = sc.acked_writes(env, fault="failover", runs=1, writers=2, **SHORT)
    assert res.status == sc.PASS, res.reasons
    # (a node that does not answer INFO within its timeout on a loaded machine counts as no primary: polled)
    wait_until(lambda: (p := sync_cluster.reload().primary(0)) is not None and p.name != node.name, 30,
               what="another node as the primary after the fault command's failover")


def test_redis_server_as_target_through_the_cli(tmp_path):
    """Any RESP endpoint: redis-server (from the test set-up) with a user-given fault command."""
    import shutil
    import signal
    import socket
    from conftest import wait_until
    redis_server = shutil.which("redis-server")
    assert redis_server, "redis-server is needed: apt-get install redis-server (scripts/test.sh does)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                             "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: valkey.Valkey(port=port, socket_timeout=1).ping(), 10, what="redis-server")
        fault = f"redis-cli -p {port} DEBUG SLEEP 1"
        out = tmp_path / "acked.json"
        r = durakv_cli("verify", "acked-writes", "--target", f"127.0.0.1:{port}", "--fault-cmd", fault,
                       "--warmup", "1", "--after", "1", "--writers", "2", "--json", out)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(out.read_text())
        assert doc["status"] == "ok" and doc["data"]["runs"][0]["acked"] > 0
        assert doc["data"]["details"][0]["fault"] == "fault-cmd"
        r = durakv_cli("verify", "bench", "--target", f"127.0.0.1:{port}", "--rate", "300", "--duration", "1",
                       "--clients", "2", "--key-maximum", "100", "--json", out)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no durakv durability mode: one run, labelled `target`" in r.stdout
        doc = json.loads(out.read_text())
        assert [row[0] for row in doc["tables"]["write_latency"]["rows"]] == ["target"]
        r = durakv_cli("verify", "acked-writes", "--target", f"127.0.0.1:{port}")
        assert r.returncode == 2 and "needs --fault-cmd" in r.stderr
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
