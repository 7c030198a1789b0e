"""Cluster mode measurements (issue 10): throughput of a 1-shard and a 2-shard cluster (async and sync) with the
same generator, the server CPU per operation of each (durakv nodes and NATS, from /proc), a redis-server
measured in the same run as the reference, and failover time as a cluster client (valkey-py ValkeyCluster) sees
it: from the fault to its first acknowledged write, median of N, for kill -9 of a primary and for planned
failover.

    python scripts/measure_cluster.py --duration 8 --runs 5 [--json out.json]

`none` is not a shard mode (a shard's replicas follow its journal), so the cheapest mode measured is async.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import valkey  # noqa: E402
from valkey.cluster import ValkeyCluster  # noqa: E402

from durakv.cluster.local import LocalCluster  # noqa: E402
from durakv.cluster.processes import free_ports  # noqa: E402
from durakv.tools.bench.config import BenchConfig  # noqa: E402
from durakv.tools.bench.runner import run_bench  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    total = 0.0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
        except (OSError, IndexError, ValueError):
            pass
    return total


def bench(port, cluster, args, pids, groups=None):
    """groups: {name: [pid]} whose CPU per op is reported apart (a shard's primaries, replicas, NATS)."""
    cfg = BenchConfig(port=port, rate=0.0, clients=args.clients, duration=args.duration, cluster=cluster,
                      key_maximum=args.keys, prefill=args.keys, data_size=args.data_size, processes=1)
    groups = groups or {}
    marks = {}

    def mark(when):
        marks["t" + when] = time.monotonic()
        marks["c" + when] = cpu_s(pids)
        marks["g" + when] = {g: cpu_s(ps) for g, ps in groups.items()}
    result = run_bench(cfg, before_start=lambda: mark("0"), after_end=lambda: mark("1"))
    r = result.report
    ops = r["ops"]
    cmds = r["commands"]
    return {"ops_per_sec": r["ops_per_sec"], "ops": ops, "errors": r["errors"],
            "server_cpu_us_per_op": round((marks["c1"] - marks["c0"]) / ops * 1e6, 2) if ops else None,
            "cpu_us_per_op_by_role": {g: round((marks["g1"][g] - marks["g0"][g]) / ops * 1e6, 2) if ops else None
                                      for g in groups},
            "server_cpu_cores": round((marks["c1"] - marks["c0"]) / (marks["t1"] - marks["t0"]), 2),
            "set_p50_ms": cmds.get("SET", {}).get("latency_ms", {}).get("p50"),
            "set_p99_ms": cmds.get("SET", {}).get("latency_ms", {}).get("p99"),
            "get_p50_ms": cmds.get("GET", {}).get("latency_ms", {}).get("p50"),
            "get_p99_ms": cmds.get("GET", {}).get("latency_ms", {}).get("p99")}


def throughput(args, workdir):
    rows = {}
    redis = shutil.which("valkey-server") or shutil.which("redis-server")
    if redis:
        port = free_ports(1)[0]
        proc = subprocess.Popen([redis, "--port", str(port), "--save", "", "--appendonly", "no"],
                                stdout=subprocess.DEVNULL)
        try:
            _wait_ping(port)
            rows["%s (none)" % os.path.basename(redis)] = bench(port, False, args, [proc.pid])
        finally:
            proc.terminate()
            proc.wait(10)
    for shards in (1, 2):
        for mode in args.modes.split(","):
            c = LocalCluster.up(os.path.join(workdir, "tp-%d-%s" % (shards, mode)), shards=shards,
                                durability=mode, timeout_s=120)
            try:
                pids = [p.pid for p in c.processes if p.pid]
                primaries = {c.primary(n).name for n in c.shards}
                groups = {"primaries": [p.pid for p in c.nodes if p.name in primaries],
                          "replicas": [p.pid for p in c.nodes if p.name not in primaries],
                          "nats": [p.pid for p in c.processes if p.kind == "nats"]}
                row = bench(c.primary(0).port, True, args, pids, groups)
                rows["durakv %d shard%s %s" % (shards, "s" if shards > 1 else "", mode)] = row
            finally:
                c.down()
            print(json.dumps({k: rows[k] for k in list(rows)[-1:]}), flush=True)
    return rows


def _wait_ping(port, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with valkey.Valkey(port=port) as c:
                if c.ping():
                    return
        except valkey.exceptions.ConnectionError:
            time.sleep(0.05)
    raise TimeoutError("port %d" % port)


def failover_once(kind, workdir):
    """Seconds from the fault to the first write a ValkeyCluster client has acknowledged after it."""
    c = LocalCluster.up(workdir, shards=1, durability="sync", timeout_s=120)
    try:
        primary = c.primary(0)
        client = ValkeyCluster(host="127.0.0.1", port=primary.port, socket_timeout=2,
                               socket_connect_timeout=1, cluster_error_retry_attempts=1)
        for i in range(100):
            client.set("warm:%d" % i, i)
        if kind == "kill -9":
            t0 = time.monotonic()
            c.kill(primary.name, signal.SIGKILL)
        else:
            target = c.replicas(0)[0]
            t0 = time.monotonic()
            with valkey.Valkey(port=target.port) as r:
                r.execute_command("CLUSTER", "FAILOVER")
        i = 0
        deadline = t0 + 60
        while time.monotonic() < deadline:
            try:
                client.set("probe:%d" % i, i)
                if kind == "planned" or c.primary(0) is None or c.primary(0).name != primary.name:
                    # kill -9: an ack from the killed primary cannot happen; planned: the first ack after the
                    # request counts once the new primary has it (MOVED is followed by the client)
                    owner = client.get_node_from_key("probe:%d" % i)
                    if owner is not None and owner.port != primary.port:
                        return time.monotonic() - t0
            except Exception:  # noqa: BLE001 - CLUSTERDOWN, MOVED, connection errors while it fails over
                try:
                    client.nodes_manager.initialize()
                except Exception:  # noqa: BLE001
                    pass
            i += 1
            time.sleep(0.005)
        raise TimeoutError("no acknowledged write within 60 s")
    finally:
        c.down()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--data-size", type=int, default=256)
    ap.add_argument("--modes", default="async,sync")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="durakv-measure-cluster-")
    out = {"load_average_before": os.getloadavg()}
    if not args.skip_throughput:
        out["throughput"] = throughput(args, workdir)
        ref = next((v for k, v in out["throughput"].items() if not k.startswith("durakv")), None)
        print("\n%-28s %10s %8s %10s %9s %9s %9s %9s" % ("target (closed loop, %d conns)" % args.clients,
                                                         "ops/s", "vs ref", "cpu us/op", "SET p50", "SET p99",
                                                         "GET p50", "GET p99"))
        for name, r in out["throughput"].items():
            print("%-28s %10.0f %8s %10s %9s %9s %9s %9s" % (
                name, r["ops_per_sec"], "%.2fx" % (r["ops_per_sec"] / ref["ops_per_sec"]) if ref else "-",
                r["server_cpu_us_per_op"], r["set_p50_ms"], r["set_p99_ms"], r["get_p50_ms"], r["get_p99_ms"]))
        print("\ncpu us/op by role (all processes of that role together):")
        for name, r in out["throughput"].items():
            if r.get("cpu_us_per_op_by_role"):
                print("  %-26s %s" % (name, "  ".join("%s %.1f" % kv for kv in r["cpu_us_per_op_by_role"].items())))
    if not args.skip_failover:
        out["failover_s"] = {}
        for kind in ("kill -9", "planned"):
            times = [failover_once(kind, os.path.join(workdir, "fo-%s-%d" % (kind.replace(" ", ""), i)))
                     for i in range(args.runs)]
            out["failover_s"][kind] = times
            print("failover seen by ValkeyCluster, %-8s median %.2f s  (runs: %s)"
                  % (kind, statistics.median(times), ", ".join("%.2f" % t for t in times)))
    out["load_average_after"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
