#!/usr/bin/env python3
"""Micro-benchmark of the cluster routing hot path: key_slot and Router.route per keyed command.

Prints ns per call, and two ratios:
* against the cost of one in-process GET through the Dispatcher (what a command costs durakv before any I/O),
* against what cluster mode costs redis-server per GET: server CPU per op of a cluster-enabled redis-server
  (one node, all slots) minus a standalone one, same redis-benchmark load (needs redis-server/redis-benchmark).

    .venv/bin/python scripts/bench_routing.py [--no-redis]
"""

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from durakv.routing import Node, Router, Shard, Topology, key_slot  # noqa: E402
from durakv.tools.bench.slots import key_hash_slot as bench_tool_slot  # noqa: E402


def ns_per_call(fn, items, repeat=25):
    """Best of `repeat` runs of fn over (up to 20000) items, in ns per item: the minimum filters out the time
    other processes take the CPU."""
    items = items[:20000]
    n = len(items)
    best = min(timeit.repeat(lambda: [fn(x) for x in items], number=1, repeat=repeat))
    empty = min(timeit.repeat(lambda: [x for x in items], number=1, repeat=repeat))
    return (best - empty) / n * 1e9


def nid(n):
    return "%040x" % n


def topology(shards=3):
    per = 16384 // shards
    out = []
    for s in range(shards):
        first, last = s * per, (16383 if s == shards - 1 else (s + 1) * per - 1)
        out.append(Shard(nid(0x5000 + s), str(s), s + 1, ((first, last),),
                         Node(nid(s * 10 + 1), "127.0.0.1", 7000 + s, tls_port=8000 + s),
                         (Node(nid(s * 10 + 2), "127.0.0.1", 7100 + s),)))
    return Topology(out, shards)


def keys_in_shard(t, shard_index, count, fmt=b"key:%08d"):
    sh = t.shards[shard_index]
    out, i = [], 0
    while len(out) < count:
        k = fmt % i
        if t.shard_by_slot[key_slot(k)] is sh:
            out.append(k)
        i += 1
    return out


def in_process_get_ns(keys):
    from durakv.commands.dispatch import Dispatcher
    from durakv.commands.session import Session
    from durakv.keyspace.db import Keyspace
    ks = Keyspace()
    d = Dispatcher(ks)
    s = Session()
    for k in keys:
        d.execute(s, [b"SET", k, b"v"])
    argvs = [[b"GET", k] for k in keys]
    return ns_per_call(lambda a: d.execute(s, a), argvs)


def _cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= 55535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    pass


def redis_cpu_per_get_ns(cluster, requests):
    port = _free_port()
    d = tempfile.mkdtemp(prefix="bench-routing-")
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", d]
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", os.path.join(d, "nodes.conf")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        cli = ["redis-cli", "-p", str(port)]
        deadline = time.monotonic() + 10
        while subprocess.run(cli + ["PING"], capture_output=True, text=True).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        if cluster:
            subprocess.run(cli + ["CLUSTER", "ADDSLOTSRANGE", "0", "16383"], check=True, capture_output=True)
            deadline = time.monotonic() + 10
            while "cluster_state:ok" not in subprocess.run(cli + ["CLUSTER", "INFO"], capture_output=True,
                                                           text=True).stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError("cluster not ok")
                time.sleep(0.05)
        bench = ["redis-benchmark", "-p", str(port), "-q", "-P", "32", "-c", "4", "-r", "100000", "-t", "get"]
        subprocess.run(bench + ["-n", "20000"], capture_output=True, check=True)   # warm-up
        before = _cpu_s(proc.pid)
        subprocess.run(bench + ["-n", str(requests)], capture_output=True, check=True)
        return (_cpu_s(proc.pid) - before) / requests * 1e9
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--redis-requests", type=int, default=1_000_000)
    ap.add_argument("--redis-runs", type=int, default=3)
    opts = ap.parse_args()

    rng = random.Random(1)
    plain = [b"key:%08d" % rng.randrange(10**8) for _ in range(100_000)]
    long_keys = [b"user:session:%032x" % rng.getrandbits(128) for _ in range(100_000)]
    tagged = [b"{user%d}.following" % rng.randrange(10**6) for _ in range(100_000)]
    rows = [("key_slot, 12-byte key, no tag", ns_per_call(key_slot, plain)),
            ("key_slot, 45-byte key, no tag", ns_per_call(key_slot, long_keys)),
            ("key_slot, {tag} key", ns_per_call(key_slot, tagged)),
            ("tools/bench/slots.py key_hash_slot (pure-Python CRC), 12-byte key",
             ns_per_call(bench_tool_slot, plain[:20000]))]

    t = topology(3)
    mine = keys_in_shard(t, 0, 50_000)
    other = keys_in_shard(t, 1, 50_000)
    primary = Router(t, nid(1))
    replica = Router(t, nid(2))
    single = [[k] for k in mine]
    pairs = [[b"{%s}a" % k, b"{%s}b" % k] for k in mine[:20000]]
    pairs = [p for p in pairs if primary.route(p) is None]
    route_rows = [
        ("route: primary, 1 key of its own", ns_per_call(lambda ks: primary.route(ks, True), single)),
        ("route: replica READONLY read, 1 key", ns_per_call(lambda ks: replica.route(ks, False, True), single)),
        ("route: primary, 2 keys one {tag}", ns_per_call(lambda ks: primary.route(ks, True), pairs)),
        ("route: MOVED (key of another shard)", ns_per_call(lambda ks: primary.route(ks), [[k] for k in other])),
    ]
    migrating = Router(t.with_migration(range(0, 5461), t.shards[1].id), nid(1))
    present = set(mine[::2]).__contains__
    route_rows.append(("route: migrating slot, exists() + serve/ASK",
                       ns_per_call(lambda ks: migrating.route(ks, exists=present), single)))
    build_ns = min(timeit.repeat(lambda: Router(t, nid(1)), number=1, repeat=5)) * 1e9
    topo_ns = min(timeit.repeat(lambda: Topology.from_json(t.to_json()), number=1, repeat=5)) * 1e9

    get_ns = in_process_get_ns(mine[:20000])
    print("%-70s %10s" % ("operation", "ns/call"))
    for name, ns in rows + route_rows:
        print("%-70s %10.0f" % (name, ns))
    print("%-70s %10.0f" % ("Router(...) build (per topology change)", build_ns))
    print("%-70s %10.0f" % ("Topology.from_json(3 shards) (per topology change)", topo_ns))
    print("%-70s %10.0f" % ("in-process GET through the Dispatcher (reference)", get_ns))
    fast = route_rows[0][1]
    print("\nrouting a 1-key command on its primary = %.1f%% of an in-process GET" % (100 * fast / get_ns))
    print("key_slot vs the bench tool's pure-Python CRC: %.1fx faster" % (rows[3][1] / rows[0][1]))
    if not opts.no_redis and shutil.which("redis-server") and shutil.which("redis-benchmark"):
        # Alternating runs, best of each: the difference is small next to the noise of a shared machine.
        standalone = cluster = float("inf")
        for _ in range(opts.redis_runs):
            standalone = min(standalone, redis_cpu_per_get_ns(False, opts.redis_requests))
            cluster = min(cluster, redis_cpu_per_get_ns(True, opts.redis_requests))
        print("\nredis-server CPU per GET (redis-benchmark -P 32 -c 4, %d requests, best of %d): standalone "
              "%.0f ns, cluster-enabled %.0f ns: cluster mode costs redis %.0f ns/op"
              % (opts.redis_requests, opts.redis_runs, standalone, cluster, cluster - standalone))
        print("durakv routing per 1-key command: %.0f ns = %.1fx redis-server's whole cluster-mode cost "
              "(noisy on a shared machine; rerun to compare)"
              % (fast, fast / (cluster - standalone) if cluster > standalone else float("inf")))


if __name__ == "__main__":
    main()
