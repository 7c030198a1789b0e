"""Load drivers for `durakv bench compare`: the built-in generator, memtier_benchmark, redis-benchmark.

Each returns a result row: ops, ops_per_sec, commands (SET/GET -> ops_per_sec, p50, p99, p99.9, max in ms),
errors, cpu_s (server CPU seconds during the measured run).
"""

import csv
import io
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile

from .config import BenchConfig
from .runner import run_bench

DRIVERS = ("builtin", "memtier", "redis-benchmark")


class DriverUnavailable(RuntimeError):
    pass


def find_memtier(explicit=""):
    for path in (explicit, shutil.which("memtier_benchmark") or "", "/work/ext/memtier/memtier_benchmark"):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def bench_config(server, wl, opts, gen_cpus, **over) -> BenchConfig:
    kw = dict(host="127.0.0.1", port=server.port, rate=wl.rate, clients=wl.clients, pipeline=wl.pipeline,
              processes=opts.processes, ratio=(1, 1), data_size=opts.data_size, key_maximum=opts.keys,
              duration=opts.duration, cpus=gen_cpus, drain=opts.drain)
    kw.update(over)
    return BenchConfig(**kw)


def prefill(server, opts, gen_cpus, keys=None, progress=None):
    keys = opts.keys if keys is None else keys
    cfg = bench_config(server, _PREFILL, opts, gen_cpus, prefill=keys, key_maximum=keys, duration=0, clients=8,
                       processes=opts.processes)
    result = run_bench(cfg, progress=progress)
    return result.report["prefill"]


class _Prefill:
    rate, clients, pipeline = 0, 8, 1


_PREFILL = _Prefill()


def run_builtin(server, wl, opts, gen_cpus, progress=None):
    cpu = {}
    cfg = bench_config(server, wl, opts, gen_cpus)
    result = run_bench(cfg, progress=progress, before_start=lambda: cpu.setdefault("start", server.cpu_seconds()),
                       after_end=lambda: cpu.setdefault("end", server.cpu_seconds()))
    rep = result.report
    commands = {}
    for name, c in rep["commands"].items():
        lat = c["latency_ms"]
        commands[name] = {"ops_per_sec": c["ops_per_sec"], "p50": lat["p50"], "p99": lat["p99"],
                          "p99.9": lat["p99.9"], "max": lat["max"]}
    return {"ops": rep["ops"], "ops_per_sec": rep["ops_per_sec"], "commands": commands,
            "errors": sum(rep["errors"].values()), "error_types": rep["errors"],
            "cpu_s": cpu.get("end", math.nan) - cpu.get("start", math.nan),
            "send_lag_ms": rep.get("send_lag_ms"), "generator_cpu_util": rep["generator"]["cpu_util"],
            "schedule": {k: (rep.get("schedule") or {}).get(k) for k in ("kept", "late_pct", "late_ms")}
            if rep.get("schedule") else None,
            "notes": rep["notes"]}


def _run_tool(argv, timeout_s, gen_cpus):
    taskset = shutil.which("taskset")
    if gen_cpus and taskset:
        argv = [taskset, "-c", ",".join(str(c) for c in gen_cpus)] + argv
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} exited with {proc.returncode}: "
                           f"{err.decode(errors='replace')[-800:]}")
    return out.decode(errors="replace"), err.decode(errors="replace")


def memtier_argv(path, server, wl, opts, json_path):
    threads = max(1, opts.processes)
    per_thread = max(1, math.ceil(wl.clients / threads))
    argv = [path, "-s", "127.0.0.1", "-p", str(server.port), "--protocol=redis", "--ratio=1:1",
            f"--data-size={opts.data_size}", "--key-prefix=key:", "--key-minimum=1",
            f"--key-maximum={opts.keys}", "--key-pattern=R:R", f"--test-time={max(1, int(round(opts.duration)))}",
            f"--threads={threads}", f"--clients={per_thread}", f"--pipeline={wl.pipeline}", "--hide-histogram",
            "--print-percentiles=50,99,99.9", f"--json-out-file={json_path}", "--distinct-client-seed"]
    if wl.rate:
        argv.append(f"--rate-limiting={max(1, round(wl.rate / (threads * per_thread)))}")
    return argv


def parse_memtier_json(data) -> dict:
    stats = data["ALL STATS"]
    commands = {}
    for name, key in (("SET", "Sets"), ("GET", "Gets")):
        s = stats.get(key)
        if not s or not s.get("Count"):
            continue
        pct = s.get("Percentile Latencies", {})
        commands[name] = {"ops_per_sec": float(s["Ops/sec"]), "p50": pct.get("p50.00"), "p99": pct.get("p99.00"),
                          "p99.9": pct.get("p99.90"), "max": s.get("Max Latency")}
    totals = stats["Totals"]
    return {"ops": int(totals.get("Count", 0)), "ops_per_sec": float(totals["Ops/sec"]), "commands": commands,
            "errors": int(totals.get("Connection Errors", 0)), "error_types": {}}


def run_memtier(server, wl, opts, gen_cpus, progress=None):
    path = find_memtier(opts.memtier_path)
    if not path:
        raise DriverUnavailable("memtier_benchmark not found (PATH, /work/ext/memtier, or --memtier-path)")
    with tempfile.TemporaryDirectory(prefix="durakv-memtier-") as tmp:
        json_path = os.path.join(tmp, "out.json")
        cpu0 = server.cpu_seconds()
        _run_tool(memtier_argv(path, server, wl, opts, json_path), opts.duration + 120, gen_cpus)
        cpu1 = server.cpu_seconds()
        with open(json_path) as f:
            row = parse_memtier_json(json.load(f))
    row["cpu_s"] = cpu1 - cpu0
    row["notes"] = ["memtier sends SET and GET on the same connection"]
    return row


def redis_benchmark_argv(path, server, wl, opts):
    return [path, "-h", "127.0.0.1", "-p", str(server.port), "-c", str(wl.clients), "-P", str(wl.pipeline),
            "-d", str(opts.data_size), "-r", str(opts.keys), "-n", str(opts.requests), "-t", "set,get", "--csv"]


def parse_redis_benchmark_csv(text) -> dict:
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header = None
    commands = {}
    for r in rows:
        if r[0] == "test":
            header = r
            continue
        if header is None:
            # redis-benchmark < 7: "SET","12345.67"
            commands[r[0].upper()] = {"ops_per_sec": float(r[1]), "p50": None, "p99": None, "p99.9": None,
                                      "max": None}
            continue
        d = dict(zip(header, r))
        name = d["test"].upper()
        if name not in ("SET", "GET"):
            continue
        commands[name] = {"ops_per_sec": float(d["rps"]),
                          "p50": _float(d.get("p50_latency_ms")), "p99": _float(d.get("p99_latency_ms")),
                          "p99.9": None, "max": _float(d.get("max_latency_ms"))}
    return commands


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def run_redis_benchmark(server, wl, opts, gen_cpus, progress=None):
    path = shutil.which("redis-benchmark")
    if not path:
        raise DriverUnavailable("redis-benchmark not found: apt-get install redis-tools")
    if wl.rate:
        raise DriverUnavailable("redis-benchmark has no fixed-rate mode")
    cpu0 = server.cpu_seconds()
    out, _ = _run_tool(redis_benchmark_argv(path, server, wl, opts), max(120.0, opts.duration * 12), gen_cpus)
    cpu1 = server.cpu_seconds()
    commands = parse_redis_benchmark_csv(out)
    n = opts.requests
    seconds = sum(n / c["ops_per_sec"] for c in commands.values() if c["ops_per_sec"])
    ops = n * len(commands)
    return {"ops": ops, "ops_per_sec": round(ops / seconds, 1) if seconds else 0.0, "commands": commands,
            "errors": 0, "error_types": {}, "cpu_s": cpu1 - cpu0,
            "notes": ["redis-benchmark runs SET then GET (not mixed); -n %d each" % n]}


RUNNERS = {"builtin": run_builtin, "memtier": run_memtier, "redis-benchmark": run_redis_benchmark}
