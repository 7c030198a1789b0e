"""RSS per key of durakv against redis-server (and Valkey 9.1.2) measured in the same run: issue 28's memory row.

Three scenarios, each on fresh servers started here on 127.0.0.1 (one at a time, pinned to one CPU when there are
two), each target measured the same way:

- set:      `redis-benchmark -t set -r KEYS -d VALUE -n REQUESTS` (random keys `key:%012d`: about 95% of KEYS
            distinct with the default REQUESTS = 3 x KEYS). RSS growth / DBSIZE.
- populate: `DEBUG POPULATE KEYS key VALUE`. RSS growth / DBSIZE.
- restart:  the set scenario's dataset persisted (redis/valkey and durakv-none: SAVE, an RDB or a snapshot;
            durakv-sync: its journal, plus whatever snapshot it took by itself), the server stopped and started
            again on the same directory; once it loaded: (RSS - RSS of the empty server) / DBSIZE.

- breakdown: no server. A child Python process builds KEYS keys of the set scenario's shape
            (`key:%012d`, VALUE bytes) in each layout and reads its own RSS after each structure: the key and
            value objects, the dict, Db.access's dict (main before the key table), then the key table
            (keyspace/_keytable.c) with every key's access time set. Where each byte per key goes (docs/memory.md).

RSS is VmRSS from /proc; each reading waits until RSS stopped moving (an allocator returning pages, a background
snapshot ending). Ratios are against redis-server from the same run. With --results DIR the tool writes its
report (command, commit, date, machine load, figures) into DIR/memory-<date>.md and .json.

    .venv/bin/python scripts/measure_memory.py [--keys 1000000] [--value-bytes 100] \\
        [--targets redis,valkey91,durakv-none,durakv-sync] [--scenarios set,populate,restart] [--results docs/results]
        [--baseline-src /path/to/other/checkout/src]

--baseline-src adds, for every durakv target, the same target run from another checkout's src/ (its compiled
modules built in place: `python setup.py build_ext --inplace` there), named `<target>@base`: before and after a
change, in the same run as redis-server.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from durakv.protocol.client import RespError  # noqa: E402
from durakv.tools.bench import results as bench_results  # noqa: E402
from durakv.tools.bench.compare import split_cpus  # noqa: E402
from durakv.tools.bench.servers import ManagedServer, ServerSpec, ServerStartError, available_specs  # noqa: E402

SCENARIOS = ("set", "populate", "restart", "breakdown")
ROW_ORDER = ("set", "populate", "restart", "restart+purge")
DEFAULT_TARGETS = ("redis", "valkey91", "durakv-none", "durakv-sync")
SETTLE_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 900.0


def with_args(spec, extra):
    """The spec with extra command-line arguments (DEBUG enabled for POPULATE and INFO)."""
    return ServerSpec(spec.name, spec.kind, lambda port, d, f=spec.argv_fn: f(port, d) + list(extra),
                      spec.description, spec.persistence, env=spec.env)


def baseline_spec(spec, src):
    """spec run from another checkout's src/ (kind "durakv-base": ManagedServer does not put this tree first)."""
    env = dict(spec.env)
    env["PYTHONPATH"] = os.path.abspath(src)
    return ServerSpec(spec.name + "@base", "durakv-base", spec.argv_fn, spec.description + f" ({src})",
                      spec.persistence, env=env)


def settled_rss(server, timeout_s=SETTLE_TIMEOUT_S, quiet_s=1.0):
    """VmRSS once it changed by less than 0.1% over quiet_s (pages freed, a background job ended), or after
    timeout_s whatever it does."""
    deadline = time.monotonic() + timeout_s
    last = server.rss_bytes()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = server.rss_bytes()
        if abs(now - last) <= max(last // 1000, 64 * 1024):
            return now
        last = now
    return last


def dbsize(server) -> int:
    return int(server.command(b"DBSIZE", timeout=60.0))


def wait_loaded(server, timeout_s=LOAD_TIMEOUT_S):
    """Polls until the server answers DBSIZE (not -LOADING) and INFO persistence says loading:0."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = server.command(b"INFO", b"persistence", timeout=10.0)
            if b"loading:0" in info:
                return dbsize(server)
        except (OSError, RespError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{server.spec.name} did not finish loading within {timeout_s:g} s")


def run_benchmark(server, opts, gen_cpus):
    argv = [shutil.which("redis-benchmark") or "redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port),
            "-t", "set", "-r", str(opts.keys), "-d", str(opts.value_bytes), "-n", str(opts.requests),
            "-c", str(opts.clients), "-P", str(opts.pipeline), "-q"]
    if gen_cpus and shutil.which("taskset"):
        argv = ["taskset", "-c", ",".join(map(str, gen_cpus))] + argv
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=opts.timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark exited with {proc.returncode}: {proc.stderr[-500:]}")
    return time.monotonic() - t0, " ".join(argv[argv.index("-h") - 1:])


def measure_target(spec, opts, base, server_cpus, gen_cpus, log):
    """The rows (one per scenario) of one target."""
    rows = []
    extra = ["--enable-debug-command", "yes"]
    spec = with_args(spec, extra)
    want = opts.scenarios
    if "set" in want or "restart" in want:
        data_dir = os.path.join(base, spec.name + "-set")
        server = ManagedServer(spec, data_dir, cpus=server_cpus)
        try:
            server.start()
            rss0 = settled_rss(server)
            seconds, cmd = run_benchmark(server, opts, gen_cpus)
            keys = dbsize(server)
            rss1 = settled_rss(server)
            row = {"target": spec.name, "scenario": "set", "keys": keys, "rss_empty": rss0, "rss_loaded": rss1,
                   "bytes_per_key": round((rss1 - rss0) / keys, 1), "load_s": round(seconds, 1), "command": cmd,
                   "loadavg": round(os.getloadavg()[0], 2)}
            log(f"{spec.name} set: {keys:,} keys, {row['bytes_per_key']:.1f} B/key ({seconds:.1f} s)")
            if "set" in want:
                rows.append(row)
            if "restart" in want:
                if spec.persistence == "none":
                    server.command(b"SAVE", timeout=600.0)
                server.stop()
                server = ManagedServer(spec, data_dir, cpus=server_cpus)
                # the same directory: ManagedServer keeps data under base_dir/<name>
                t0 = time.monotonic()
                server.start(timeout_s=LOAD_TIMEOUT_S)
                loaded = wait_loaded(server)
                load_s = time.monotonic() - t0
                rss2 = settled_rss(server)
                rrow = {"target": spec.name, "scenario": "restart", "keys": loaded, "rss_empty": rss0,
                        "rss_loaded": rss2, "bytes_per_key": round((rss2 - rss0) / max(loaded, 1), 1),
                        "load_s": round(load_s, 1), "keys_before": keys,
                        "persisted_by": "SAVE" if spec.persistence == "none" else "journal",
                        "loadavg": round(os.getloadavg()[0], 2)}
                log(f"{spec.name} restart: {loaded:,} keys, {rrow['bytes_per_key']:.1f} B/key ({load_s:.1f} s)")
                rows.append(rrow)
                # what of it is free memory the allocator kept (MEMORY PURGE: jemalloc's dirty pages in
                # redis/valkey, glibc's malloc_trim in durakv; a no-op where a build has neither)
                server.command(b"MEMORY", b"PURGE", timeout=120.0)
                rss3 = settled_rss(server)
                rows.append(dict(rrow, scenario="restart+purge", rss_loaded=rss3,
                                 bytes_per_key=round((rss3 - rss0) / max(loaded, 1), 1)))
        except (ServerStartError, RuntimeError, RespError, OSError) as exc:
            log(f"{spec.name}: {exc}")
            rows.append({"target": spec.name, "scenario": "set/restart", "failed": str(exc)})
        finally:
            server.stop()
    if "populate" in want:
        server = ManagedServer(spec, os.path.join(base, spec.name + "-populate"), cpus=server_cpus)
        try:
            server.start()
            rss0 = settled_rss(server)
            t0 = time.monotonic()
            server.command(b"DEBUG", b"POPULATE", str(opts.keys).encode(), b"key", str(opts.value_bytes).encode(),
                           timeout=opts.timeout_s)
            seconds = time.monotonic() - t0
            keys = dbsize(server)
            rss1 = settled_rss(server)
            row = {"target": spec.name, "scenario": "populate", "keys": keys, "rss_empty": rss0, "rss_loaded": rss1,
                   "bytes_per_key": round((rss1 - rss0) / keys, 1), "load_s": round(seconds, 1),
                   "command": f"DEBUG POPULATE {opts.keys} key {opts.value_bytes}",
                   "loadavg": round(os.getloadavg()[0], 2)}
            log(f"{spec.name} populate: {keys:,} keys, {row['bytes_per_key']:.1f} B/key ({seconds:.1f} s)")
            rows.append(row)
        except (ServerStartError, RuntimeError, RespError, OSError) as exc:
            log(f"{spec.name}: {exc}")
            rows.append({"target": spec.name, "scenario": "populate", "failed": str(exc)})
        finally:
            server.stop()
    return rows


BREAKDOWN_CHILD = r"""
import gc, json, sys
from durakv.keyspace.keytable import COMPILED, KeyTable
layout, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
gc.disable()   # (nothing here makes cycles; a collection would only add noise)
out = {}
r0 = rss()
keys = [b"key:%012d" % i for i in range(n)]
r1 = rss()
values = [b"%d" % i + bytes(size - len(b"%d" % i)) for i in range(n)]
r2 = rss()
lists = 2 * sys.getsizeof(keys)   # the two lists' pointers, counted in r1 - r0 and r2 - r1
out.update(key_objects=r1 - r0 - lists // 2, value_objects=r2 - r1 - lists // 2)
stamp = 1_765_000_000            # one LRU clock second shared by every key (the cron's cached int)
if layout == "before":           # main before the key table: Db.data and Db.access, two dicts
    d = {}
    for k, v in zip(keys, values):
        d[k] = v
    r3 = rss()
    access = {}
    for k in keys:
        access[k] = stamp
    r4 = rss()
    out.update(dict_slots=r3 - r2, access_dict=r4 - r3, dict_sizeof=d.__sizeof__(), access_sizeof=access.__sizeof__())
else:                            # the key table holding copies of the keys and the values inline
    t = KeyTable()
    for k, v in zip(keys, values):
        t[k] = v
    for k in keys:
        t.set_access(k, stamp)
    r3 = rss()
    stats = t.stats()
    out.update(keytable=r3 - r2, entries_accounted=stats["entry_bytes"], buckets_accounted=stats["bucket_bytes"],
               compiled=int(COMPILED))
print(json.dumps(out))
"""


def breakdown(opts, src, log):
    """Per structure RSS of KEYS keys in each layout, each in its own child process importing durakv from src
    (a fresh heap: memory one structure freed cannot hide the next one's)."""
    import json
    env = dict(os.environ, PYTHONPATH=src)
    n = opts.keys
    per, compiled = {}, False
    for layout in ("before", "after"):
        proc = subprocess.run([sys.executable, "-c", BREAKDOWN_CHILD, layout, str(n), str(opts.value_bytes)],
                              capture_output=True, text=True, env=env, timeout=opts.timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"breakdown child ({layout}) failed: {proc.stderr[-500:]}")
        raw = json.loads(proc.stdout)
        compiled = compiled or bool(raw.pop("compiled", 0))
        per[layout] = {k: round(v / n, 1) for k, v in raw.items()}
    b, a = per["before"], per["after"]
    row = {"target": "in-process", "scenario": "breakdown", "keys": n, "compiled": compiled,
           "bytes_per_key": per,
           "before_total": round(b["key_objects"] + b["value_objects"] + b["dict_slots"] + b["access_dict"], 1),
           "after_total": a["keytable"]}
    log(f"breakdown: {per}")
    return row


def add_ratios(rows, reference):
    ref = {r["scenario"]: r["bytes_per_key"] for r in rows if r["target"] == reference and r.get("bytes_per_key")}
    for r in rows:
        base = ref.get(r.get("scenario"))
        if base and r.get("bytes_per_key") is not None:
            r["ratio"] = round(r["bytes_per_key"] / base, 3)


def format_report(result) -> str:
    o = result["options"]
    lines = [f"RSS per key: {o['keys']:,} keys of {o['value_bytes']} B; {result['pinning']}",
             f"{'scenario':<14}{'server':<18}{'keys':>11}{'RSS empty MB':>14}{'RSS loaded MB':>15}{'B/key':>9}"
             f"{'vs ' + result['reference']:>10}{'load s':>8}"]
    lines.append("-" * len(lines[-1]))
    order = {s: i for i, s in enumerate(ROW_ORDER)}
    for r in sorted(result["rows"], key=lambda r: order.get(r["scenario"], 9)):
        if r["scenario"] == "breakdown":
            continue
        if r.get("failed"):
            lines.append(f"{r['scenario']:<14}{r['target']:<18}  FAILED: {r['failed'][:90]}")
            continue
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-"
        lines.append(f"{r['scenario']:<14}{r['target']:<18}{r['keys']:>11,}{r['rss_empty'] / 2**20:>14.1f}"
                     f"{r['rss_loaded'] / 2**20:>15.1f}{r['bytes_per_key']:>9.1f}{ratio:>10}{r['load_s']:>8.1f}")
    for r in result["rows"]:
        if r["scenario"] == "breakdown" and not r.get("failed"):
            b, a = r["bytes_per_key"]["before"], r["bytes_per_key"]["after"]
            lines.append(f"breakdown (in-process RSS per key, {r['keys']:,} keys; compiled table: {r['compiled']}):")
            lines.append(f"  before: key objects {b['key_objects']} + value objects {b['value_objects']} + "
                         f"dict {b['dict_slots']} (sizeof {b['dict_sizeof']}) + Db.access dict {b['access_dict']} "
                         f"(sizeof {b['access_sizeof']}) = {r['before_total']} B")
            lines.append(f"  after:  key table {a['keytable']} B (its own accounting: entries "
                         f"{a['entries_accounted']} + buckets {a['buckets_accounted']})")
    sets = [r for r in result["rows"] if r.get("command") and r["scenario"] == "set"]
    if sets:
        lines.append(f"set: {sets[0]['command']}")
    lines.append("restart: RSS after loading minus the empty server's RSS; redis/valkey and durakv-none SAVE first, "
                 "durakv-sync recovers from its journal; restart+purge: the same after MEMORY PURGE")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--requests", type=int, default=0, help="SETs for the set scenario (default 3 x keys)")
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--pipeline", type=int, default=1)
    p.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--reference", default="redis")
    p.add_argument("--timeout-s", type=float, default=1800.0)
    p.add_argument("--no-pin", action="store_true")
    p.add_argument("--results", default="", help="write memory-<date>.md/.json into this directory")
    p.add_argument("--baseline-src", default="", help="also run each durakv target from this src/ directory")
    opts = p.parse_args(argv)
    opts.requests = opts.requests or 3 * opts.keys
    opts.scenarios = [s for s in opts.scenarios.split(",") if s]
    bad = [s for s in opts.scenarios if s not in SCENARIOS]
    if bad:
        p.error(f"unknown scenario(s) {bad}; known: {', '.join(SCENARIOS)}")
    specs, missing = available_specs()
    names = [t for t in opts.targets.split(",") if t]
    unknown = [t for t in names if t not in specs]
    for m in missing:
        print("note: " + m, file=sys.stderr)
    if unknown:
        p.error(f"unavailable target(s) {unknown}; known here: {', '.join(specs)}")
    if opts.baseline_src:
        if not os.path.isdir(os.path.join(opts.baseline_src, "durakv")):
            p.error(f"--baseline-src {opts.baseline_src}: no durakv package there")
        for name in [n for n in names if specs[n].kind == "durakv"]:
            base_spec = baseline_spec(specs[name], opts.baseline_src)
            specs[base_spec.name] = base_spec
            names.insert(names.index(name), base_spec.name)
    server_cpus, gen_cpus, pinning = split_cpus(opts.no_pin)
    load_before = bench_results.machine_load()

    def log(text):
        print(text, file=sys.stderr, flush=True)

    log(pinning)
    base = tempfile.mkdtemp(prefix="durakv-measure-memory-")
    rows = []
    try:
        if "breakdown" in opts.scenarios:
            try:
                rows.append(breakdown(opts, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"),
                                      log))
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                rows.append({"target": "in-process", "scenario": "breakdown", "failed": str(exc)})
        for name in names:
            if set(opts.scenarios) - {"breakdown"}:
                rows += measure_target(specs[name], opts, base, server_cpus, gen_cpus, log)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result = {"options": {k: v for k, v in vars(opts).items()}, "pinning": pinning, "reference": opts.reference,
              "rows": rows, "notes": missing}
    add_ratios(rows, opts.reference)
    text = format_report(result)
    print(text)
    if opts.results:
        path = bench_results.write_results(opts.results, "memory", result, text, load_before,
                                           argv=sys.argv[1:] if argv is None else argv,
                                           tool="python scripts/measure_memory.py")
        print(f"written: {path}")
    return 0 if all(not r.get("failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
