"""`durakv bench compare --cluster-shape NAME`: the cluster shapes of issue 28 as workloads of their own.

Each shape starts a local durakv cluster (`durakv cluster up`: three NATS servers, one per AZ, JetStream journal,
durability sync, locked: the password comes from the cluster's secrets) and, where the shape has one, the
reference cluster of redis-server 7 (cluster-enabled, made with `redis-cli --cluster create`), runs the same
memtier_benchmark command against each in cluster mode, one after the other, and reports ops/s, SET/GET p50 and
p99, the server CPU per operation by role (primaries, replicas, NATS; from /proc), the machine's load, and the
issue's target for that shape:

  seed-002   memtier --cluster-mode -c 20 -t 2 --ratio=1:1 -d 32 (the seed's command, scaled to the machine):
             3 sync shards, no replicas, against 3 redis-server shards. Target: >= 0.5x redis.
  seed-000   memtier --cluster-mode --tls --ratio=1:1 -d 256, rate-limited to --rate ops/s (default 5000):
             1 shard + 2 replicas over TLS. Target: sync SET p50 <= 2.0 ms and p99 <= 5.0 ms at that rate.
  one-shard  memtier --cluster-mode -c 20 -t 2 --ratio=1:1 -d 32, closed loop: 1 shard + 2 replicas.
             Target: >= 80,000 ops/s.

memtier_benchmark is not packaged: build it outside the project (docs/commit-path.md says how) and put it on
PATH, in /work/ext/memtier, or pass --memtier-path.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .drivers import find_memtier, parse_memtier_json
from .servers import CLK_TCK, find_redis_server, free_port

SHAPES = {
    "seed-002": {"shards": 3, "replicas": 0, "tls": False, "data_size": 32, "threads": 2, "clients": 20,
                 "rate": 0, "reference": True,
                 "about": "memtier --cluster-mode -c 20 -t 2 --ratio=1:1 -d 32; 3 sync shards, no replicas"},
    "seed-000": {"shards": 1, "replicas": 2, "tls": True, "data_size": 256, "threads": 2, "clients": 10,
                 "rate": 5000, "reference": False,
                 "about": "memtier --cluster-mode --tls --ratio=1:1 -d 256 at a fixed rate; 1 shard + 2 replicas"},
    "one-shard": {"shards": 1, "replicas": 2, "tls": False, "data_size": 32, "threads": 2, "clients": 20,
                  "rate": 0, "reference": False,
                  "about": "memtier --cluster-mode -c 20 -t 2 --ratio=1:1 -d 32; 1 shard + 2 replicas, closed loop"},
}


class ShapeError(RuntimeError):
    pass


def _say(log, text):
    if log is not None:
        print(text, file=log, flush=True)


def cpu_seconds(pid) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def memtier_cluster_argv(memtier, port, shape, duration_s, json_path, password=None, cacert=None, rate=0,
                         keys=100_000):
    argv = [memtier, "--cluster-mode", "-s", "127.0.0.1", "-p", str(port), "--protocol=redis", "--ratio=1:1",
            f"--data-size={shape['data_size']}", f"--threads={shape['threads']}", f"--clients={shape['clients']}",
            f"--test-time={max(1, int(round(duration_s)))}", "--key-prefix=key:", f"--key-maximum={keys}",
            "--key-pattern=R:R", "--hide-histogram", "--print-percentiles=50,99,99.9",
            f"--json-out-file={json_path}", "--distinct-client-seed"]
    if password:
        argv += ["-a", password]
    if cacert:
        argv += ["--tls", "--cacert", cacert]
    if rate:
        per_connection = max(1, round(rate / (shape["threads"] * shape["clients"])))
        argv.append(f"--rate-limiting={per_connection}")
    return argv


def run_memtier(argv, groups, duration_s):
    """Runs memtier once; returns its parsed row with CPU per op by role ({role: [pid]})."""
    with tempfile.TemporaryDirectory(prefix="durakv-shape-") as tmp:
        json_path = os.path.join(tmp, "out.json")
        argv = [a if not a.startswith("--json-out-file=") else f"--json-out-file={json_path}" for a in argv]
        cpu0 = {g: sum(cpu_seconds(p) for p in ps) for g, ps in groups.items()}
        t0 = time.monotonic()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=duration_s + 120)
        elapsed_s = time.monotonic() - t0
        cpu1 = {g: sum(cpu_seconds(p) for p in ps) for g, ps in groups.items()}
        if proc.returncode != 0 or not os.path.exists(json_path):
            raise ShapeError("memtier_benchmark exited with %s: %s" % (proc.returncode,
                                                                      proc.stderr.decode(errors="replace")[-600:]))
        with open(json_path) as f:
            row = parse_memtier_json(json.load(f))
    ops = row["ops"] or 1
    row["cpu_us_per_op"] = {g: round((cpu1[g] - cpu0[g]) / ops * 1e6, 1) for g in groups}
    row["cores"] = {g: round((cpu1[g] - cpu0[g]) / elapsed_s, 2) for g in groups}
    return row


class RedisCluster:
    """`shards` redis-server processes with cluster-enabled, joined by `redis-cli --cluster create`; stopped by
    pid."""

    def __init__(self, shards, base_dir):
        self.shards = shards
        self.dir = os.path.join(base_dir, "redis-cluster")
        self.procs = []
        self.ports = []

    def start(self, timeout_s=30.0):
        binary = find_redis_server()
        cli = shutil.which("redis-cli")
        if not binary or not cli:
            raise ShapeError("the reference needs redis-server and redis-cli (apt-get install redis-server)")
        for i in range(self.shards):
            port = free_port()
            d = os.path.join(self.dir, str(port))
            os.makedirs(d, exist_ok=True)
            log = open(os.path.join(d, "server.log"), "ab")
            self.procs.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "", "--appendonly", "no",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
            log.close()
            self.ports.append(port)
        deadline = time.monotonic() + timeout_s
        for port in self.ports:
            while subprocess.run([cli, "-p", str(port), "ping"], capture_output=True, text=True).stdout.strip() != "PONG":
                if time.monotonic() > deadline:
                    raise ShapeError("redis-server on %d did not start" % port)
                time.sleep(0.05)
        out = subprocess.run([cli, "--cluster", "create", *("127.0.0.1:%d" % p for p in self.ports),
                              "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise ShapeError("redis-cli --cluster create failed: %s" % out.stdout[-400:])
        for port in self.ports:
            while "cluster_state:ok" not in subprocess.run([cli, "-p", str(port), "cluster", "info"],
                                                           capture_output=True, text=True).stdout:
                if time.monotonic() > deadline:
                    raise ShapeError("the redis cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        return self

    @property
    def pids(self):
        return [p.pid for p in self.procs]

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_shape(name, opts, log=sys.stderr):
    """Runs one shape; returns the JSON-ready report (rows, targets, load)."""
    from ...cluster.local import LocalCluster
    shape = dict(SHAPES[name])
    memtier = find_memtier(getattr(opts, "memtier_path", ""))
    if not memtier:
        raise ShapeError("memtier_benchmark not found (PATH, /work/ext/memtier or --memtier-path); build it as "
                         "docs/commit-path.md says")
    rate = shape["rate"] and (opts.rate if getattr(opts, "rate_given", False) else shape["rate"])
    duration_s = opts.duration
    keys = opts.keys
    report = {"shape": name, "about": shape["about"], "duration_s": duration_s, "rate": rate, "rows": [],
              "load_before": os.getloadavg()[0], "targets": []}
    base = tempfile.mkdtemp(prefix="durakv-bench-shape-")
    try:
        _say(log, f"--- durakv: {shape['shards']} shard(s) x (1 + {shape['replicas']}), sync"
                  f"{', TLS' if shape['tls'] else ''}")
        c = LocalCluster.up_or_down(os.path.join(base, "durakv"), shards=shape["shards"], replicas=shape["replicas"],
                                    durability="sync", tls=shape["tls"], timeout_s=180)
        try:
            primaries = {c.primary(i).name for i in range(shape["shards"])}
            groups = {"primaries": [p.pid for p in c.nodes if p.name in primaries],
                      "replicas": [p.pid for p in c.nodes if p.name not in primaries],
                      "nats": [p.pid for p in c.nats]}
            with open(os.path.join(c.dir, "secrets", "resp.pass")) as f:
                password = f.read().strip()
            cacert = os.path.join(c.dir, "secrets", "tls", "ca.crt") if shape["tls"] else None
            argv = memtier_cluster_argv(memtier, c.primary(0).port, shape, duration_s, "", password, cacert, rate,
                                        keys)
            row = run_memtier(argv, groups, duration_s)
            row.update(target="durakv-sync", load=os.getloadavg()[0], command=_shown(argv))
            report["rows"].append(row)
            _say(log, _line(row))
        finally:
            c.down()
        if shape["reference"]:
            _say(log, f"--- redis-server: {shape['shards']} shard(s), cluster-enabled, no persistence")
            rc = RedisCluster(shape["shards"], base).start()
            try:
                argv = memtier_cluster_argv(memtier, rc.ports[0], shape, duration_s, "", None, None, rate, keys)
                row = run_memtier(argv, {"servers": rc.pids}, duration_s)
                row.update(target="redis-cluster", load=os.getloadavg()[0], command=_shown(argv))
                report["rows"].append(row)
                _say(log, _line(row))
            finally:
                rc.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report["load_after"] = os.getloadavg()[0]
    report["targets"] = shape_targets(name, report["rows"], rate)
    return report


def _shown(argv):
    """The memtier command as run, without its password."""
    out, skip = [], False
    for a in argv:
        if skip:
            out.append("<password>")
            skip = False
            continue
        skip = a == "-a"
        out.append(os.path.basename(a) if a == argv[0] else a)
    return " ".join(x for x in out if not x.startswith("--json-out-file"))


def _line(row):
    s = row["commands"].get("SET", {})
    g = row["commands"].get("GET", {})
    return (f"{row['target']}: {row['ops_per_sec']:,.0f} ops/s, SET p50/p99 {s.get('p50')}/{s.get('p99')} ms, "
            f"GET p50/p99 {g.get('p50')}/{g.get('p99')} ms, cpu us/op {row['cpu_us_per_op']}, load {row['load']:.1f}")


def shape_targets(name, rows, rate):
    by = {r["target"]: r for r in rows}
    d = by.get("durakv-sync")
    out = []
    if d is None:
        return out
    if name == "seed-002" and by.get("redis-cluster"):
        ratio = d["ops_per_sec"] / by["redis-cluster"]["ops_per_sec"]
        out.append({"target": "seed-002: durakv 3 sync shards vs redis 3 shards, ops/s", "value": round(ratio, 3),
                    "goal": ">= 0.5x", "met": ratio >= 0.5})
    elif name == "seed-000":
        s = d["commands"].get("SET", {})
        achieved = d["ops_per_sec"] >= 0.95 * rate
        out.append({"target": f"seed-000: sync SET p50 at {rate:,} ops/s", "value": s.get("p50"), "goal": "<= 2.0 ms",
                    "met": bool(achieved and s.get("p50") is not None and s["p50"] <= 2.0)})
        out.append({"target": f"seed-000: sync SET p99 at {rate:,} ops/s", "value": s.get("p99"), "goal": "<= 5.0 ms",
                    "met": bool(achieved and s.get("p99") is not None and s["p99"] <= 5.0)})
        out.append({"target": "seed-000: rate achieved", "value": round(d["ops_per_sec"]), "goal": f">= 95% of {rate:,}",
                    "met": achieved})
    elif name == "one-shard":
        out.append({"target": "one-shard sync cluster, closed loop, ops/s", "value": round(d["ops_per_sec"]),
                    "goal": ">= 80,000", "met": d["ops_per_sec"] >= 80_000})
    return out


def format_shape(report) -> str:
    lines = [f"durakv bench compare --cluster-shape {report['shape']}: {report['about']}; "
             f"{report['duration_s']:g} s per run" + (f", {report['rate']:,} ops/s" if report["rate"] else "")]
    head = f"{'target':<15}{'ops/s':>10}{'SET p50':>9}{'SET p99':>9}{'GET p50':>9}{'GET p99':>9}{'load':>6}  cpu us/op by role"
    lines += [head, "-" * len(head)]
    for r in report["rows"]:
        s, g = r["commands"].get("SET", {}), r["commands"].get("GET", {})

        def ms(v):
            return f"{v:>9.2f}" if v is not None else f"{'-':>9}"
        roles = ", ".join(f"{k} {v}" for k, v in r["cpu_us_per_op"].items())
        lines.append(f"{r['target']:<15}{r['ops_per_sec']:>10,.0f}{ms(s.get('p50'))}{ms(s.get('p99'))}"
                     f"{ms(g.get('p50'))}{ms(g.get('p99'))}{r['load']:>6.1f}  {roles}")
    lines.append("latencies in ms as memtier measures them; cpu us/op: CPU (utime+stime) of every process of the "
                 "role per operation; load: 1-minute load average at the end of the run")
    for r in report["rows"]:
        lines.append(f"  {r['target']}: {r['command']}")
    if report["targets"]:
        lines.append("targets (issue 28):")
        for t in report["targets"]:
            lines.append(f"  {'met ' if t['met'] else 'MISS'}  {t['target']}: {t['value']} (goal {t['goal']})")
    ncpu = os.cpu_count() or 1
    if max(report["load_before"], report["load_after"]) > ncpu:
        lines.append(f"note: the machine was busy (load average {report['load_before']:.1f} before, "
                     f"{report['load_after']:.1f} after, on {ncpu} CPUs): throughput and latency move with it; "
                     "CPU per op by role is the figure to compare across runs")
    return "\n".join(lines)
