#!/usr/bin/env python3
"""Commit latency under a fixed load, every figure from one run (issue 11, "Measure").

The same memtier_benchmark workload runs against each target: one SET-only and one GET-only memtier process
side by side (reads and writes on separate connections, so one command's wait never shifts the other's
latency), each at a fixed rate, 256-byte values, 100k keys (prefilled), random keys. Targets:

  cluster-sync   `durakv cluster up` (3 NATS nodes, a primary and 2 replicas in az1..az3, JetStream journal),
                 durability sync; one row per --cluster-windows value (journal-max-appends-in-flight)
  single-sync    one durakv server, durability sync on the local journal (fsync per group commit)
  durakv-none    one durakv server, durability none
  redis          redis-server, no persistence
  redis-aof      redis-server, appendonly yes, appendfsync always

It prints one table (SET p50/p99, GET p50/p99 in ms, ops/s achieved per process, server CPU), the ratios the
issue sets targets on (against durakv none and redis appendfsync always), and then searches the highest fixed
rate the cluster sustains in sync with SET p99 < 10 ms (both processes at that rate; a rate is sustained when
both also reach 95% of it). Load average (`uptime`) is printed before and after: other programs on the
machine shift every figure.

    python scripts/bench_sync_latency.py --memtier /path/to/memtier_benchmark --rate 2500 --duration 20

memtier_benchmark: --memtier, else $MEMTIER, else PATH. It is not a dependency of durakv; build it outside the
project (https://github.com/RedisLabs/memtier_benchmark: autoreconf -ivf && ./configure && make).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import valkey

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from durakv.cluster.local import LocalCluster  # noqa: E402
from durakv.tools.bench.drivers import parse_memtier_json  # noqa: E402
from durakv.tools.bench.servers import CLK_TCK, ManagedServer, available_specs  # noqa: E402

TARGETS = ("cluster-sync", "single-sync", "durakv-none", "redis", "redis-aof")
EXTRA_TARGETS = ("cluster-async",)   # not run by default: the same cluster in async (replies not held)
DESCRIPTIONS = {
    "single-sync": "durakv, 1 node, sync, local journal",
    "durakv-none": "durakv, 1 node, durability none",
    "redis": "redis-server, no persistence",
    "redis-aof": "redis-server, appendfsync always",
}
SET_P99_LIMIT_MS = 10.0
SUSTAINED = 0.95


def find_memtier(explicit):
    for path in (explicit, os.environ.get("MEMTIER", ""), shutil.which("memtier_benchmark") or ""):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def cpu_seconds(pid) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return math.nan
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# -- memtier --------------------------------------------------------------------------------------------------

def memtier_argv(memtier, port, opts, ratio, rate, duration_s, json_path):
    clients = opts.clients
    return [memtier, "-s", "127.0.0.1", "-p", str(port), "--protocol=redis", f"--ratio={ratio}",
            f"--data-size={opts.data_size}", "--key-prefix=key:", "--key-minimum=1",
            f"--key-maximum={opts.keys}", "--key-pattern=R:R", f"--test-time={duration_s}", "--threads=1",
            f"--clients={clients}", "--pipeline=1", f"--rate-limiting={max(1, round(rate / clients))}",
            "--hide-histogram", "--print-percentiles=50,99,99.9", f"--json-out-file={json_path}",
            # A seed of its own per process: with memtier's constant seed (--distinct-client-seed alone) the
            # GET process asks for the very keys the SET process just wrote, in step, and in sync every such
            # read rightly waits for that write's commit (measured: 56% of GETs waited in one run).
            "--randomize", "--distinct-client-seed"]


def prefill(memtier, port, opts):
    """Every key once, so that GETs hit (sequential keys, pipelined, as fast as the server takes them)."""
    with tempfile.TemporaryDirectory(prefix="bench-prefill-") as tmp:
        argv = [memtier, "-s", "127.0.0.1", "-p", str(port), "--protocol=redis", "--ratio=1:0",
                f"--data-size={opts.data_size}", "--key-prefix=key:", "--key-minimum=1",
                f"--key-maximum={opts.keys}", "--key-pattern=P:P", "--requests=allkeys", "--threads=1",
                "--clients=1", "--pipeline=64", "--hide-histogram", f"--json-out-file={tmp}/p.json"]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)


def run_load(memtier, port, opts, rate, duration_s, pids):
    """SET-only and GET-only memtier processes at `rate` each, side by side -> measured row."""
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        procs = {}
        cpu0 = {pid: cpu_seconds(pid) for pid in pids}
        t0 = time.monotonic()
        for name, ratio in (("SET", "1:0"), ("GET", "0:1")):
            argv = memtier_argv(memtier, port, opts, ratio, rate, duration_s, os.path.join(tmp, name + ".json"))
            procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        errors = {}
        try:
            for name, p in procs.items():
                _, err = p.communicate(timeout=duration_s + 120)
                if p.returncode != 0:
                    errors[name] = err.decode(errors="replace")[-400:]
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
        elapsed_s = time.monotonic() - t0
        cpu = {pid: cpu_seconds(pid) - cpu0[pid] for pid in pids}
        if errors:
            raise RuntimeError("memtier failed: %s" % errors)
        row = {"rate": rate, "cpu_pct": {pid: 100.0 * c / elapsed_s for pid, c in cpu.items()}}
        for name in ("SET", "GET"):
            with open(os.path.join(tmp, name + ".json")) as f:
                parsed = parse_memtier_json(json.load(f))
            c = parsed["commands"].get(name, {})
            row[name] = {"p50": c.get("p50"), "p99": c.get("p99"), "p99.9": c.get("p99.9"),
                         "ops": c.get("ops_per_sec", 0.0)}
        return row


def _next(counter):
    counter[0] += 1
    return counter[0]


def median_rows(rows):
    out = {"rate": rows[0]["rate"], "cpu_pct": rows[-1]["cpu_pct"], "rounds": len(rows)}
    for name in ("SET", "GET"):
        out[name] = {k: statistics.median([r[name][k] for r in rows if r[name][k] is not None] or [math.nan])
                     for k in ("p50", "p99", "p99.9", "ops")}
    return out


# -- targets --------------------------------------------------------------------------------------------------

class ClusterTarget:
    def __init__(self, base_dir, window, durability="sync", timeout_s=120.0):
        self.name = f"cluster-{durability} w={window}"
        self.description = (f"durakv cluster up: 3 AZ, primary + 2 replicas, JetStream {durability}, "
                            f"window {window}")
        self.dir = os.path.join(base_dir, f"cluster-{durability}-w{window}")
        self.durability = durability
        self.window = window
        self.timeout_s = timeout_s
        self.cluster = None

    def start(self):
        self.cluster = LocalCluster.up(self.dir, shards=1, replicas=2, durability=self.durability,
                                       timeout_s=self.timeout_s,
                                       extra_server_args=["--journal-max-appends-in-flight", str(self.window),
                                                          "--replica-snapshot-interval-ms", "0"])
        primary = self.cluster.primary(0)
        if primary is None:
            raise RuntimeError("the cluster has no primary")
        self.port = primary.port
        self.durakv = True
        self.groups = {"primary": [primary.pid],
                       "replicas": [p.pid for p in self.cluster.nodes if p.pid != primary.pid],
                       "nats": [p.pid for p in self.cluster.nats]}
        return self

    def stop(self):
        if self.cluster is not None:
            self.cluster.down()
            self.cluster = None


class ServerTarget:
    def __init__(self, name, spec, base_dir):
        self.name = name
        self.description = DESCRIPTIONS[name]
        self.server = ManagedServer(spec, base_dir)

    def start(self):
        self.server.start()
        self.port = self.server.port
        self.durakv = self.server.spec.kind == "durakv"
        self.groups = {"server": [self.server.pid]}
        return self

    def stop(self):
        self.server.stop()


def measure_once(target, memtier, opts, say, round_no):
    """Prefill, then one fixed-rate measurement of a freshly started target."""
    pids = [pid for group in target.groups.values() for pid in group]
    say(f"  {target.name}: prefill {opts.keys} keys")
    prefill(memtier, target.port, opts)
    say(f"  {target.name}: {opts.rate}/s SET + {opts.rate}/s GET for {opts.duration}s"
        f" (round {round_no}/{opts.rounds}, load {load_average()})")
    row = run_load(memtier, target.port, opts, opts.rate, opts.duration, pids)
    row["load"] = load_average()
    if target.durakv:
        # Reads that waited for a commit (they touched a pending write) against every GET served.
        info = valkey.Valkey(host="127.0.0.1", port=target.port, socket_timeout=5).info("all")
        row["read_waits"] = info.get("durability_read_waits", 0)
        row["gets"] = info.get("cmdstat_get", {}).get("calls", 0)
    row["cpu_by_group"] = {g: sum(row["cpu_pct"].get(pid, 0.0) for pid in ps) for g, ps in target.groups.items()}
    return row


def combine(name, description, rounds):
    row = median_rows(rounds)
    row["name"], row["description"] = name, description
    row["cpu_by_group"] = {g: statistics.median([r["cpu_by_group"][g] for r in rounds])
                           for g in rounds[0]["cpu_by_group"]}
    row["read_waits"] = sum(r.get("read_waits", 0) for r in rounds)
    row["gets"] = sum(r.get("gets", 0) for r in rounds)
    row["all_rounds"] = [{k: r[k] for k in ("SET", "GET", "load")} for r in rounds]
    return row


def sustained(row, rate):
    return (row["SET"]["p99"] is not None and row["SET"]["p99"] < SET_P99_LIMIT_MS
            and row["SET"]["ops"] >= SUSTAINED * rate and row["GET"]["ops"] >= SUSTAINED * rate)


def search_rate(target, memtier, opts, say):
    """Doubling from --search-start until a rate is not sustained, then bisection (--search-steps)."""
    pids = [pid for group in target.groups.values() for pid in group]
    tried = []

    def attempt(rate):
        row = run_load(memtier, target.port, opts, rate, opts.search_duration, pids)
        ok = sustained(row, rate)
        tried.append((rate, ok, row["SET"]["p50"], row["SET"]["p99"], row["SET"]["ops"], row["GET"]["ops"]))
        say(f"  search {target.name}: {rate}/s per process: SET p50 {fmt(row['SET']['p50'])} p99 "
            f"{fmt(row['SET']['p99'])} ms, SET {row['SET']['ops']:.0f}/s GET {row['GET']['ops']:.0f}/s -> "
            f"{'sustained' if ok else 'not sustained'}")
        return ok

    good, bad = 0, None
    rate = opts.search_start
    while rate <= opts.search_max:
        if attempt(rate):
            good = rate
            rate *= 2
        else:
            bad = rate
            break
    if bad is not None and good:
        for _ in range(opts.search_steps):
            mid = int(round((good + bad) / 2 / 50.0)) * 50
            if mid in (good, bad):
                break
            if attempt(mid):
                good = mid
            else:
                bad = mid
    return good, bad, tried


# -- output ---------------------------------------------------------------------------------------------------

def fmt(v, digits=2):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or not b or (isinstance(a, float) and math.isnan(a)):
        return None
    return a / b


def print_table(rows, opts, out=sys.stdout):
    w = max(len(r["name"]) for r in rows) + 2
    print(f"\n{opts.rate}/s SET + {opts.rate}/s GET (separate memtier processes, {opts.clients} connections each),"
          f" {opts.data_size} B values, {opts.keys} keys, {opts.duration}s x {opts.rounds} round(s) (median)",
          file=out)
    head = (f"{'target':<{w}}{'SET p50':>9}{'SET p99':>9}{'GET p50':>9}{'GET p99':>9}{'SET/s':>9}{'GET/s':>9}"
            f"  server CPU %")
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        cpu = ", ".join(f"{g} {v:.0f}" for g, v in r["cpu_by_group"].items())
        print(f"{r['name']:<{w}}{fmt(r['SET']['p50']):>9}{fmt(r['SET']['p99']):>9}{fmt(r['GET']['p50']):>9}"
              f"{fmt(r['GET']['p99']):>9}{r['SET']['ops']:>9.0f}{r['GET']['ops']:>9.0f}  {cpu}", file=out)
    print("(latencies in ms, as memtier measures them)", file=out)
    for r in rows:
        if r.get("gets"):
            print(f"{r['name']}: {r['read_waits']} of {r['gets']} GETs waited for a commit", file=out)


def print_targets(rows, out=sys.stdout):
    by = {r["name"]: r for r in rows}
    none, aof = by.get("durakv-none"), by.get("redis-aof")
    single = by.get("single-sync")
    checks = []
    for r in rows:
        if not r["name"].startswith("cluster-sync"):
            continue
        if none:
            checks.append((f"{r['name']} SET p50 <= 3x durakv-none's", ratio(r["SET"]["p50"], none["SET"]["p50"]), 3.0))
            checks.append((f"{r['name']} GET p50 <= 1.2x durakv-none's", ratio(r["GET"]["p50"], none["GET"]["p50"]),
                           1.2))
        if aof:
            checks.append((f"{r['name']} SET p50 <= 2x redis-aof's", ratio(r["SET"]["p50"], aof["SET"]["p50"]), 2.0))
    if single and none:
        checks.append(("single-sync GET p50 <= 1.2x durakv-none's", ratio(single["GET"]["p50"], none["GET"]["p50"]),
                       1.2))
    if single and aof:
        checks.append(("single-sync SET p50 <= redis-aof's", ratio(single["SET"]["p50"], aof["SET"]["p50"]), 1.0))
    if by.get("redis"):
        for r in rows:
            if r["name"] != "redis":
                checks.append((f"{r['name']} SET p50 vs redis (no persistence)",
                               ratio(r["SET"]["p50"], by["redis"]["SET"]["p50"]), None))
    print("\nratio                                                        value   target", file=out)
    for what, value, limit in checks:
        verdict = "" if limit is None or value is None else ("met" if value <= limit else "MISSED")
        lim = "" if limit is None else f"<= {limit:g}"
        print(f"{what:<58}{fmt(value):>8}x  {lim:<8}{verdict}", file=out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memtier", default="", help="memtier_benchmark binary (default $MEMTIER, then PATH)")
    p.add_argument("--rate", type=int, default=2500, help="ops/s of the SET process and of the GET process")
    p.add_argument("--duration", type=int, default=20, help="seconds per measurement")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds over every target, interleaved, each target started afresh (the median is shown)")
    p.add_argument("--keys", type=int, default=100000)
    p.add_argument("--data-size", type=int, default=256)
    p.add_argument("--clients", type=int, default=25,
                   help="connections per memtier process (each sends one request at a time: enough of them to "
                        "keep the rate when latency grows)")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="comma-separated subset of %s (also: %s)" % (",".join(TARGETS), ",".join(EXTRA_TARGETS)))
    p.add_argument("--cluster-windows", default="8",
                   help="journal-max-appends-in-flight values, one cluster-sync row each (e.g. 1,4,8,16)")
    p.add_argument("--no-search", action="store_true", help="skip the highest-sustained-rate search")
    p.add_argument("--search-start", type=int, default=1000)
    p.add_argument("--search-max", type=int, default=64000)
    p.add_argument("--search-steps", type=int, default=3)
    p.add_argument("--search-duration", type=int, default=10)
    p.add_argument("--dir", default="", help="where the servers' data goes (default: a temporary directory)")
    p.add_argument("--json", default="", help="also write every figure to this file")
    opts = p.parse_args(argv)

    memtier = find_memtier(opts.memtier)
    if memtier is None:
        p.error("memtier_benchmark not found: pass --memtier PATH or set $MEMTIER")
    targets = [t.strip() for t in opts.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS + EXTRA_TARGETS]
    if unknown:
        p.error("unknown target(s): %s" % ", ".join(unknown))
    windows = [int(w) for w in opts.cluster_windows.split(",") if w.strip()]

    def say(msg):
        print(msg, file=sys.stderr, flush=True)

    specs, missing = available_specs()
    for m in missing:
        say("note: " + m)
    base = opts.dir or tempfile.mkdtemp(prefix="durakv-bench-sync-")
    os.makedirs(base, exist_ok=True)
    load_before = load_average()
    say(f"load average before: {load_before}; data under {base}")
    plan = []          # (name, description, factory), in the order each round runs them
    for name in targets:
        if name in ("cluster-sync", "cluster-async"):
            for window in windows:
                probe = ClusterTarget(base, window, durability=name.split("-")[1])
                plan.append((probe.name, probe.description,
                             lambda w=window, d=name.split("-")[1], r=[0]: ClusterTarget(
                                 os.path.join(base, f"r{_next(r)}"), w, durability=d)))
            continue
        spec_name = {"single-sync": "durakv-sync"}.get(name, name)
        if spec_name not in specs:
            say(f"skipping {name}: not available")
            continue
        plan.append((name, DESCRIPTIONS[name],
                     lambda n=name, sp=specs[spec_name], r=[0]: ServerTarget(n, sp, os.path.join(base, f"r{_next(r)}"))))
    results = {name: [] for name, _d, _f in plan}
    # Rounds are interleaved (every target once per round, each freshly started): load that other programs
    # put on the machine meanwhile falls on every target alike, and the median of the rounds is shown.
    for round_no in range(1, opts.rounds + 1):
        for name, description, factory in plan:
            target = factory()
            try:
                say(f"starting {description} (round {round_no})")
                target.start()
                results[name].append(measure_once(target, memtier, opts, say, round_no))
            finally:
                target.stop()
    rows = [combine(name, description, results[name]) for name, description, _f in plan]
    search = None
    cluster_plans = [(n, d, f) for n, d, f in plan if n.startswith("cluster-sync")]
    if cluster_plans and not opts.no_search:
        name, _d, factory = cluster_plans[-1]
        target = factory()
        try:
            say(f"starting {name} for the rate search")
            target.start()
            say(f"  {name}: prefill {opts.keys} keys")
            prefill(memtier, target.port, opts)
            search = (name,) + search_rate(target, memtier, opts, say)
        finally:
            target.stop()
    load_after = load_average()
    if not opts.dir:
        shutil.rmtree(base, ignore_errors=True)

    print(f"\ncommand: {' '.join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))}")
    print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} CPUs)")
    for r in rows:
        print(f"  {r['name']}: {r['description']}")
    print_table(rows, opts)
    print_targets(rows)
    if search is not None:
        name, good, bad, tried = search
        if good:
            print(f"\nhighest fixed rate {name} sustains with SET p99 < {SET_P99_LIMIT_MS:g} ms: "
                  f"{good}/s SET + {good}/s GET" + (f" (not {bad}/s)" if bad else f" (searched up to {opts.search_max})"))
        else:
            print(f"\n{name} sustains none of the rates tried with SET p99 < {SET_P99_LIMIT_MS:g} ms "
                  f"(lowest tried: {bad}/s SET + {bad}/s GET)")
        for rate, ok, p50, p99, set_ops, get_ops in tried:
            print(f"  {rate:>6}/s: SET p50 {fmt(p50)} p99 {fmt(p99)} ms, SET {set_ops:.0f}/s, GET {get_ops:.0f}/s"
                  f" -> {'sustained' if ok else 'not sustained'}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "load_before": load_before, "load_after": load_after, "rows": rows,
                       "search": search}, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
