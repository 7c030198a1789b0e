"""Measures write-unavailability on a local three-AZ cluster (issue 4's numbers).

For each scenario and run: start a fresh cluster, keep a probe writing (one SET every 5 ms, following the
primary), inject the fault, and report the time from the fault to the first write acknowledged afterwards.
Scenarios: unplanned kill -9 of the primary; planned failover (CLUSTER FAILOVER on a replica); loss of the
whole AZ that holds the JetStream stream leader. Also sync SET latency through the cluster.

    python scripts/measure_failover.py --runs 5 [--json out.json]
"""

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import valkey  # noqa: E402

from durakv.cluster.local import LocalCluster  # noqa: E402

STREAM = "DURAKV_SHARD_0"


def probe_until_write(cluster, exclude, t0, timeout_s=60.0):
    """Writes every 5 ms to whatever node is primary (not `exclude`) until one write is acknowledged."""
    deadline = t0 + timeout_s
    i = 0
    while time.monotonic() < deadline:
        p = cluster.primary(0)
        if p is not None and p.name not in exclude:
            try:
                with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=2, socket_connect_timeout=1) as c:
                    c.set("probe:%d" % i, "1")
                    return time.monotonic() - t0, p
            except (valkey.exceptions.ResponseError, valkey.exceptions.ConnectionError,
                    valkey.exceptions.TimeoutError):
                pass
        i += 1
        time.sleep(0.005)
    raise TimeoutError("no write acknowledged within %ss" % timeout_s)


def run_scenario(kind, workdir):
    cluster = LocalCluster.up(os.path.join(workdir, kind), timeout_s=90)
    try:
        primary = cluster.primary(0)
        with valkey.Valkey(host="127.0.0.1", port=primary.port) as c:
            for i in range(200):
                c.set("warm:%d" % i, i)
        if kind == "unplanned":
            t0 = time.monotonic()
            cluster.kill(primary.name, signal.SIGKILL)
            seconds, new = probe_until_write(cluster, {primary.name}, t0)
        elif kind == "planned":
            target = cluster.replicas(0)[0]
            t0 = time.monotonic()
            with valkey.Valkey(host="127.0.0.1", port=target.port) as c:
                c.execute_command("CLUSTER", "FAILOVER")
            # The first write after the request that the new primary acknowledges.
            seconds, new = probe_until_write(cluster, {primary.name}, t0)
        elif kind == "az-of-stream-leader":
            leader = cluster.nats_leader_of_stream(STREAM)
            az = cluster.get(leader).az
            victims = cluster.az_processes(az)
            t0 = time.monotonic()
            for p in victims:
                cluster.kill(p.name, signal.SIGKILL)
            dead = {p.name for p in victims}
            seconds, new = probe_until_write(cluster, dead, t0)
        else:
            raise ValueError(kind)
        return seconds, new.name
    finally:
        cluster.down()


def sync_latency(workdir, seconds=5.0):
    """p50/p99 of sequential sync SETs (one client) on the cluster and on a single `none` node."""
    import subprocess
    out = {}
    cluster = LocalCluster.up(os.path.join(workdir, "latency"), timeout_s=90)
    try:
        out["cluster-sync"] = _lat(cluster.primary(0).port, seconds)
    finally:
        cluster.down()
    port = 23990
    d = tempfile.mkdtemp(dir=workdir)
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--dir", d,
                             "--durability", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with valkey.Valkey(port=port) as c:
                    c.ping()
                break
            except valkey.exceptions.ConnectionError:
                time.sleep(0.05)
        out["single-none"] = _lat(port, seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    return out


def _lat(port, seconds):
    samples = []
    with valkey.Valkey(host="127.0.0.1", port=port) as c:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            t = time.perf_counter()
            c.set("lat:%d" % (i % 1000), "x" * 256)
            samples.append((time.perf_counter() - t) * 1000)
            i += 1
    samples.sort()
    return {"n": len(samples), "p50_ms": round(samples[len(samples) // 2], 3),
            "p99_ms": round(samples[int(len(samples) * 0.99)], 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--scenarios", default="unplanned,planned,az-of-stream-leader")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="durakv-failover-")
    results = {}
    kinds = [k for k in args.scenarios.split(",") if k]
    for kind in kinds:
        times = []
        for run in range(args.runs):
            seconds, new = run_scenario(kind, os.path.join(workdir, "%d" % run))
            times.append(seconds)
            print("%-20s run %d: %.2fs (new primary %s)" % (kind, run + 1, seconds, new), flush=True)
        results[kind] = {"runs_s": [round(t, 3) for t in times], "median_s": round(statistics.median(times), 3)}
    results["latency"] = sync_latency(workdir)
    print()
    print("%-22s %s" % ("scenario", "write-unavailability, median of %d (runs)" % args.runs))
    for kind in kinds:
        r = results[kind]
        print("%-22s %.2f s  %s" % (kind, r["median_s"], r["runs_s"]))
    for name, lat in results["latency"].items():
        print("%-22s SET p50 %.2f ms  p99 %.2f ms  (%d sequential writes)" % (name, lat["p50_ms"], lat["p99_ms"],
                                                                            lat["n"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
