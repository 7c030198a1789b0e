"""Does a pipelined write load that keeps the primary's event loop busy cost lease errors or a failover?

Starts a local sync cluster (1 shard, 2 replicas, real NATS), runs `--connections` clients that each send
pipelines of `--pipeline` SETs of `--value-bytes` bytes to the primary for `--seconds`, and prints how the
replies went (OK, -CLUSTERDOWN lease expired, other errors), whether any node failed over or re-executed,
and the primary's eventloop_longest_stall_ms / lease_lapses / lease_renewals (0 when the code has none).

    PYTHONPATH=src python scripts/measure_busy_loop.py [--connections 4] [--pipeline 2000] [--value-bytes 1024]
        [--seconds 20] [--script-seconds 0]

--script-seconds S also runs, once the load is going, an EVAL spinning S seconds (busy-reply-threshold
stays at its 5 s default, so the loop is held that long when S < 5).
"""

import argparse
import collections
import os
import sys
import tempfile
import threading
import time

import valkey

from durakv.cluster.local import LocalCluster

LEASE = "CLUSTERDOWN The primary's lease expired"


def states(cluster, timeout_s=60.0):
    """(role, epoch, promotions, run_id) of every node; a node re-executing itself is waited for."""
    out = {}
    deadline = time.monotonic() + timeout_s
    for p in cluster.nodes:
        while True:
            try:
                info = p.info("replication", "server", timeout_s=30)
                repl = info["replication"]
                out[p.name] = (repl["role"], int(repl["durakv_epoch"]), int(repl["promotions"]),
                               info["server"]["run_id"])
                break
            except (OSError, KeyError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--pipeline", type=int, default=2000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--script-seconds", type=float, default=0.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="busy-loop-")
    cluster = LocalCluster.up(os.path.join(tmp, "cluster"), durability="sync", timeout_s=90)
    try:
        primary = cluster.primary(0)
        before = states(cluster)
        counts = collections.Counter()
        lock = threading.Lock()
        stop = time.monotonic() + args.seconds
        value = b"x" * args.value_bytes

        def writer(i):
            c = valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=120)
            n = 0
            while time.monotonic() < stop:
                p = c.pipeline(transaction=False)
                for _ in range(args.pipeline):
                    p.set(f"{{w}}:{i}:{n}", value)
                    n += 1
                try:
                    replies = p.execute(raise_on_error=False)
                except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError) as exc:
                    with lock:
                        counts["connection: %s" % type(exc).__name__] += 1
                    return
                local = collections.Counter("ok" if r is True else str(r)[:60] for r in replies)
                with lock:
                    counts.update(local)
            c.close()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(args.connections)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        if args.script_seconds:
            time.sleep(min(2.0, args.seconds / 4))
            with valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=120) as c:
                try:
                    c.eval("local t0 = os.clock() while os.clock() - t0 < tonumber(ARGV[1]) do end return 1", 0,
                           args.script_seconds)
                    counts["script: ok"] += 1
                except (valkey.exceptions.ConnectionError, valkey.exceptions.ResponseError) as exc:
                    counts["script: %s" % exc] += 1
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        after = states(cluster)
        repl = cluster.primary(0).info("replication", "stats", timeout_s=30)
        stats, rep = repl.get("stats", {}), repl.get("replication", {})
        lease_errors = sum(v for k, v in counts.items() if k.startswith(LEASE))
        print(f"load: {args.connections} connections x pipelines of {args.pipeline} SETs of {args.value_bytes} B "
              f"for {took:.1f}s: {counts['ok']} OK ({counts['ok'] / took:.0f}/s), {lease_errors} lease-expired")
        for k, v in sorted(counts.items()):
            if k != "ok":
                print(f"  {v:8d}  {k}")
        print("failover or re-exec:", "none" if after == before else f"{before} -> {after}")
        print(f"primary: eventloop_longest_stall_ms={stats.get('eventloop_longest_stall_ms', 'n/a')} "
              f"lease_lapses={rep.get('lease_lapses', 'n/a')} lease_renewals={rep.get('lease_renewals', 'n/a')} "
              f"lease_refused_commands={rep.get('lease_refused_commands', 'n/a')}")
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
