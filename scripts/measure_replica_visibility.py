"""How eventually consistent a shard's replicas are: write a key on the primary, read it at once on a replica
(READONLY), and if it is not there yet, poll until it is. Prints how often the first read missed and how long
the value took to become visible (p50/p99), and the same against redis-server with a real replica
(`replicaof`), measured in the same run.

    python scripts/measure_replica_visibility.py --count 2000
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import valkey  # noqa: E402

from durakv.cluster.local import LocalCluster  # noqa: E402
from durakv.cluster.processes import free_ports  # noqa: E402


def measure(primary_port, replica_port, count, prefix):
    missed = 0
    visible_us = []
    with valkey.Valkey(port=primary_port, socket_timeout=10) as p, \
            valkey.Valkey(port=replica_port, socket_timeout=10, single_connection_client=True) as r:
        try:
            r.execute_command("READONLY")
        except valkey.ResponseError:
            pass
        for i in range(count):
            key = "%s:%d" % (prefix, i)
            p.set(key, "1")
            t0 = time.perf_counter()
            if r.get(key) is not None:
                continue
            missed += 1
            deadline = t0 + 5
            while r.get(key) is None and time.perf_counter() < deadline:
                pass
            visible_us.append((time.perf_counter() - t0) * 1e6)
    return missed, visible_us


def pct(values, q):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def report(name, count, missed, visible_us):
    print("%-34s first read missed %5.1f%% (%d of %d); visible after p50 %.0f us, p99 %.0f us"
          % (name, 100.0 * missed / count, missed, count, pct(visible_us, 0.5), pct(visible_us, 0.99)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--durability", default="sync")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="durakv-visibility-")
    cluster = LocalCluster.up(d, durability=args.durability, timeout_s=90)
    try:
        missed, vis = measure(cluster.primary(0).port, cluster.replicas(0)[0].port, args.count, "v")
        report("durakv %s, 3 AZs (JetStream)" % args.durability, args.count, missed, vis)
    finally:
        cluster.down()
    redis = shutil.which("valkey-server") or shutil.which("redis-server")
    if redis:
        pp, rp = free_ports(2)
        # Each in the run's own directory: a replica's full sync writes dump.rdb into its --dir, which would
        # otherwise be the directory the script was started from.
        rdir = tempfile.mkdtemp(prefix="redis-visibility-")
        procs = [subprocess.Popen([redis, "--port", str(pp), "--save", "", "--appendonly", "no", "--dir", rdir],
                                  stdout=subprocess.DEVNULL),
                 subprocess.Popen([redis, "--port", str(rp), "--save", "", "--appendonly", "no", "--dir", rdir,
                                   "--dbfilename", "replica.rdb", "--replicaof", "127.0.0.1", str(pp)],
                                  stdout=subprocess.DEVNULL)]
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    with valkey.Valkey(port=rp) as c:
                        if c.info("replication").get("master_link_status") == "up":
                            break
                except valkey.exceptions.ConnectionError:
                    pass
                time.sleep(0.05)
            missed, vis = measure(pp, rp, args.count, "v")
            report("%s with a replica" % os.path.basename(redis), args.count, missed, vis)
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
            shutil.rmtree(rdir, ignore_errors=True)


if __name__ == "__main__":
    main()
