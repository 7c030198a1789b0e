"""`durakv cluster start-node / stop-node / restart-node`, `cluster status` and `down` with a node restarted by
hand (found by the owner of its port), and `durakv chaos` (az-power, kill, pause, partition, failover, heal)
against real NATS and durakv processes; plus the pure parts (port owner lookup, the partition proxy's groups
and cut rule, the event log)."""

import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest
import valkey
import valkey.cluster

from conftest import ROOT, durakv_cli
from helpers.waiting import scaled, wait_until
from durakv.cluster.processes import pid_alive
from durakv.cluster.netproxy import NetProxy, parse_groups
from durakv.cluster.portowner import _decode_addr, cmdline, port_owners
from durakv.tools.chaos import EventLog, Nemesis, read_events, wait_healthy
from durakv.tools.chaos.events import events_path

def manifest_entry(d, name):
    with open(os.path.join(d, "manifest.json")) as f:
        return next(p for p in json.load(f)["processes"] if p["name"] == name)


def status_json(d):
    r = durakv_cli("cluster", "status", "--dir", d, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    return {row["name"]: row for row in st["nats"] + st["nodes"]}, st


# -- pure parts ------------------------------------------------------------------------------------------------

def test_proc_net_tcp_addresses_decode():
    assert _decode_addr("0100007F:1F90") == ("127.0.0.1", 8080)
    assert _decode_addr("00000000000000000000000001000000:0050") == ("::1", 80)
    assert _decode_addr("0000000000000000FFFF00000100007F:1F90") == ("127.0.0.1", 8080)


def test_port_owner_is_the_listening_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert port_owners(port) == [os.getpid()]
        with open("/proc/self/cmdline", "rb") as f:
            assert cmdline(os.getpid()) == [a.decode() for a in f.read().split(b"\0") if a]
    assert port_owners(port) == []


def test_partition_groups_and_the_cut_rule():
    azs = ["az1", "az2", "az3"]
    assert parse_groups(["az1"], azs) == [["az1"], ["az2", "az3"]]
    assert parse_groups(["az1", "az2"], azs) == [["az1"], ["az2"], ["az3"]]
    assert parse_groups(["az2,az1"], azs) == [["az1", "az2"], ["az3"]]
    assert parse_groups([], azs) == []
    assert parse_groups(["az1,az2,az3"], azs) == []          # one group: no cut
    with pytest.raises(ValueError, match="unknown AZ az9"):
        parse_groups(["az9"], azs)
    with pytest.raises(ValueError, match="named twice"):
        parse_groups(["az1", "az1,az2"], azs)
    proxy = NetProxy({"manifest": "/nonexistent", "azs": azs, "links": [], "control_port": 0})
    assert not proxy.blocked("az1", "az2")
    proxy.groups = parse_groups(["az1"], azs)
    assert proxy.blocked("az1", "az2") and proxy.blocked("az3", "az1")
    assert not proxy.blocked("az2", "az3") and not proxy.blocked("az1", "az1")
    assert not proxy.blocked(None, "az1"), "a connection from outside the cluster (a tool) is never cut"


def test_event_log_lines_and_offsets(tmp_path):
    path = str(tmp_path / "chaos" / "events.jsonl")
    lines = []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass
    log = EventLog(path, "kill", out=Out())
    a = log.emit("start", "SIGKILL 0-0", node="0-0")
    offset = os.path.getsize(path)
    b = log.emit("stop", "restarting 0-0")
    events, end = read_events(path)
    assert [e["event"] for e in events] == ["start", "stop"] and end == os.path.getsize(path)
    assert events[0]["detail"] == {"node": "0-0"} and events[0]["id"] == events[1]["id"] == log.id
    assert a["monotonic_ns"] <= b["monotonic_ns"]
    assert [e["event"] for e in read_events(path, offset)[0]] == ["stop"]
    assert [e["event"] for e in read_events(path, 0, offset)[0]] == ["start"]
    with open(path, "a") as f:
        f.write('{"half a line')          # being written: not read yet
    assert len(read_events(path)[0]) == 2
    assert "chaos kill start: SIGKILL 0-0" in "".join(lines)


# -- node lifecycle --------------------------------------------------------------------------------------------

@pytest.mark.long_pole(33)     # seconds on the 2-core machine: xdist starts it first
def test_stop_start_restart_node_and_az_keep_the_manifest_true(local_cluster):
    cluster = local_cluster(durability="sync")
    d = cluster.dir
    primary = cluster.primary(0)
    victim = next(p for p in cluster.nodes if p.name != primary.name)
    r = durakv_cli("cluster", "stop-node", d, "--node", victim.name)
    assert r.returncode == 0, r.stderr
    assert manifest_entry(d, victim.name)["pid"] is None
    rows, _ = status_json(d)
    assert rows[victim.name]["state"] == "dead" and rows[victim.name]["alive"] is False

    r = durakv_cli("cluster", "start-node", "--dir", d, "--node", victim.name)
    assert r.returncode == 0, r.stderr
    assert f"{victim.name}: started" in r.stdout
    entry = manifest_entry(d, victim.name)
    assert pid_alive(entry["pid"], entry["start_time"])
    wait_until(lambda: cluster.reload().get(victim.name).role() == "slave", 30,
               interval_s=0.05, what="the node to rejoin as a replica")
    rows, _ = status_json(d)
    assert rows[victim.name]["pid"] == entry["pid"] and rows[victim.name]["state"] == "running"
    assert rows[victim.name]["role"] == "slave"

    r = durakv_cli("cluster", "start-node", d, "--node", victim.name)
    assert r.returncode == 0 and f"{victim.name}: running" in r.stdout      # already running: left alone

    # A whole AZ at a time: its NATS server and its durakv node get new pids in the manifest and serve again.
    az = primary.az
    before = {p.name: p.pid for p in cluster.az_processes(az)}
    r = durakv_cli("cluster", "restart-node", d, "--az", az)
    assert r.returncode == 0, r.stderr
    after = {p.name: manifest_entry(d, p.name)["pid"] for p in cluster.reload().az_processes(az)}
    assert set(after) == set(before) == {f"nats-{az}", primary.name}
    assert all(after[n] != before[n] and pid_alive(after[n]) for n in after)
    wait_healthy(cluster, 60)   # one primary with a lease (the restarted node, if it got back before the lease
    rows, _ = status_json(d)     # lapsed: its node id still holds it), every replica caught up
    assert all(row["state"] == "running" for row in rows.values())

    r = durakv_cli("cluster", "stop-node", d, "--node", "nope")
    assert r.returncode == 1 and "no process named 'nope'" in r.stderr
    r = durakv_cli("cluster", "stop-node", d)
    assert r.returncode == 2 and "--node" in r.stderr


def _start_by_hand(d, name):
    """Starts a stopped node with its manifest command line, outside the manifest (an operator's restart by
    hand), and waits until it listens: (its manifest entry, the process)."""
    entry = manifest_entry(d, name)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    with open(entry["log"], "ab") as log:
        orphan = subprocess.Popen(entry["argv"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        wait_until(lambda: port_owners(entry["ports"]["client"]) == [orphan.pid], 30,
                   interval_s=0.05, what="the orphan to listen")
    except BaseException:
        orphan.kill()
        orphan.wait(10)
        raise
    return entry, orphan


def test_status_and_down_see_a_node_restarted_by_hand(local_cluster):
    cluster = local_cluster(durability="sync")
    d = cluster.dir
    victim = cluster.replicas(0)[0]
    assert durakv_cli("cluster", "stop-node", d, "--node", victim.name).returncode == 0
    entry, orphan = _start_by_hand(d, victim.name)
    try:
        rows, _ = status_json(d)
        row = rows[victim.name]
        assert row["pid"] == orphan.pid and row["state"] == "running" and row["alive"] is True
        assert row["not_in_manifest"] is True
        wait_until(lambda: status_json(d)[0][victim.name]["role"] == "slave", 30,
                   interval_s=0.05, what="the orphan to serve")
        r = durakv_cli("cluster", "status", "--dir", d)
        assert "is not the manifest's: started by hand" in r.stdout
        r = durakv_cli("cluster", "down", "--dir", d)
        assert r.returncode == 0, r.stderr
        # found by its port and stopped: by SIGTERM, or by SIGKILL when a loaded machine kept it past the timeout
        assert re.search(rf"{victim.name} \(pid {orphan.pid}, not in the manifest\): (terminated|killed)\n",
                         r.stdout), r.stdout
        assert orphan.wait(10) is not None
        rows, st = status_json(d)
        assert all(row["state"] == "dead" for row in rows.values())
        # a stopped cluster's status answers at once (it waited out a 20 s NATS connection before)
        assert st["cluster"] == {"error": "no NATS server of this cluster is running"}
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(10)


def test_start_node_adopts_a_node_restarted_by_hand(local_cluster):
    cluster = local_cluster(durability="sync")
    d = cluster.dir
    victim = cluster.replicas(0)[0]
    cluster.stop_nodes([victim.name])
    entry, orphan = _start_by_hand(d, victim.name)
    try:
        r = durakv_cli("cluster", "start-node", d, "--node", victim.name)
        assert r.returncode == 0, r.stderr
        assert f"{victim.name}: adopted" in r.stdout
        assert manifest_entry(d, victim.name)["pid"] == orphan.pid
        assert status_json(d)[0][victim.name]["not_in_manifest"] is False
    finally:
        cluster.down()
        if orphan.poll() is None:
            orphan.kill()
        orphan.wait(10)


# -- chaos -----------------------------------------------------------------------------------------------------

class Probe(threading.Thread):
    """Writes through a cluster client every few ms and remembers which writes were acknowledged and when."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.nodes = [valkey.cluster.ClusterNode("127.0.0.1", p.port) for p in cluster.nodes]
        self.stop = threading.Event()
        self.acked = []

    def run(self):
        i, c = 0, None
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                if c is None:
                    c = valkey.cluster.ValkeyCluster(startup_nodes=self.nodes[i % 3:] + self.nodes[:i % 3],
                                                     socket_timeout=1, socket_connect_timeout=1,
                                                     cluster_error_retry_attempts=0)
                c.set(f"probe:{i}", i)
                self.acked.append((time.monotonic(), f"probe:{i}"))
            except Exception:  # noqa: BLE001 - a fault is on: build the client again
                if c is not None:
                    c.close()
                c = None
                self.stop.wait(0.02)
            i += 1
            self.stop.wait(0.005)
        if c is not None:
            c.close()


def test_chaos_faults_heal_and_log(local_cluster):
    cluster = local_cluster(durability="sync", partitionable=True)
    d = cluster.dir
    probe = Probe(cluster)
    probe.start()
    try:
        wait_until(lambda: len(probe.acked) > 20, 30, interval_s=0.05, what="the probe to write")
        # az-power: every process of the primary's AZ SIGKILLed at once, down for the duration, restarted
        old = cluster.primary(0)
        r = durakv_cli("chaos", d, "az-power", "--az", "primary", "--duration", "2", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        result = json.loads(r.stdout[r.stdout.index("\n{\n") + 1:])
        assert result["az"] == old.az and set(result["processes"]) == {f"nats-{old.az}", old.name}
        assert result["roles_after"] == {old.name: "slave"}
        assert "chaos az-power start:" in r.stdout and "chaos az-power recovered:" in r.stdout
        events, _ = read_events(events_path(d))
        assert [e["event"] for e in events] == ["start", "stop", "recovered"]
        assert events[1]["monotonic_ns"] - events[0]["monotonic_ns"] >= 2e9
        for name in result["processes"]:
            e = manifest_entry(d, name)
            assert pid_alive(e["pid"], e["start_time"])
        wait_healthy(cluster, 60)

        # kill with a restart, pause, planned failover
        nem = Nemesis(cluster, out=None)
        res = nem.kill("primary", restart_after_s=1)
        assert res["role_before"] == "master" and res["roles_after"] == {res["node"]: "slave"}
        wait_healthy(cluster, 60)
        res = nem.pause("primary", duration_s=4)      # past the 2 s lease: replaced, then a replica
        assert res["role_before"] == "master" and res["role_after"] == "slave"
        wait_healthy(cluster, 60)
        res = nem.failover(0)
        assert res["new"] != res["old"] and cluster.primary(0).name == res["new"]

        # partition: the primary's AZ is cut off; a node of another AZ takes over during the cut. 20 s: when the
        # cut AZ's NATS server led the lease bucket, its followers elect only after NATS's raft election timeout
        # (4-9 s, fixed in nats-server), then the lease is watched for its TTL: ~8 s here, more on a busy CI box.
        old = cluster.primary(0)
        seen = {}

        def watch():
            deadline = time.monotonic() + scaled(40)
            while time.monotonic() < deadline and "new" not in seen:
                for p in cluster.nodes:
                    if p.az != old.az:
                        try:
                            info = p.info("replication", timeout_s=0.5)["replication"]
                        except Exception:  # noqa: BLE001
                            continue
                        if info.get("role") == "master" and info.get("lease_valid_ms", 0) > 0:
                            seen["new"] = (p.name, time.monotonic())
                time.sleep(0.05)
        w = threading.Thread(target=watch)
        w.start()
        t0 = time.monotonic()
        # healed 1 s after a replica serves as primary: the cut lasts what the failover takes, at most the 20 s
        res = nem.partition("primary", duration_s=scaled(20), heal_after_failover_s=1.0)
        t_heal = time.monotonic()
        assert res["cut_s"] < scaled(20) - 0.5, res
        w.join(scaled(40))
        if "new" in seen:
            print(f"partition of {old.az}: {seen['new'][0]} primary {seen['new'][1] - t0:.2f}s into the cut")
        assert res["az"] == old.az
        assert "new" in seen and t0 < seen["new"][1] < t_heal, \
            f"no node outside {old.az} became primary while it was cut off: {seen}"
        wait_healthy(cluster, 60)
        assert cluster.proxy_control("STATE").startswith('{"groups": []')
        kinds = [e["fault"] for e in read_events(events_path(d))[0] if e["event"] == "start"]
        assert kinds == ["az-power", "kill", "pause", "failover", "partition"]
    finally:
        probe.stop.set()
        probe.join(10)
    assert len(probe.acked) > 100


def test_chaos_heal_and_errors(local_cluster):
    cluster = local_cluster(durability="sync", replicas=1)
    d = cluster.dir
    r = durakv_cli("chaos", d, "partition", "--az", "az1", "--duration", "1")
    assert r.returncode == 1 and "not partitionable" in r.stderr
    r = durakv_cli("chaos", d, "kill", "--node", "replica")      # no restart: stays down
    assert r.returncode == 0, r.stderr
    assert "stays down" in r.stdout
    killed = next(p.name for p in cluster.reload().nodes if manifest_entry(d, p.name)["pid"] is None)
    nats = cluster.nats[2]
    assert cluster.pause(nats.name)
    r = durakv_cli("chaos", d, "heal")
    assert r.returncode == 0, r.stderr
    assert f"{killed} started" in r.stdout and f"{nats.name} resumed" in r.stdout
    wait_healthy(cluster, 60)
    r = durakv_cli("chaos", d, "kill", "--node", "0-9")
    assert r.returncode == 1 and "no process named '0-9'" in r.stderr
