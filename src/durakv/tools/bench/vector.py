"""`durakv bench --workload vector`: FT.SEARCH KNN 10 over N vectors of D dimensions, with a concurrent writer.

Steps, against a server the tool is pointed at (or one it starts, --spawn):
  1. FT.CREATE an HNSW index (M 16, EF_CONSTRUCTION 200, EF_RUNTIME 10: valkey-search's defaults) on HASH
     keys `vec:<i>` and load N random float32 vectors with pipelined HSETs; the load rate and the resident
     memory the vectors add (INFO used_memory_rss, before and after, per vector) are reported;
  2. recall@10 of the index against exact search (numpy) for --queries queries at the default EF_RUNTIME, and
     at larger EF_RUNTIME values (the KNN clause's own EF_RUNTIME) to show what each costs;
  3. --readers connections send FT.SEARCH KNN 10 in a closed loop for --duration seconds while one writer
     rewrites random vectors at --write-rate per second: searches/s, search p50/p99 and the writer's p50/p99.

There is no reference server here with valkey-search loaded, so no ratio is printed (the issue's "where one
exists"); the JSON (written under --results-dir) carries the command, the commit, the date and the load.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import valkey

from . import hist as histmod

INDEX = "durakv_bench_vectors"
PREFIX = "vec:"


def _commit():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _pct(samples_s, p):
    s = sorted(samples_s)
    return round(s[min(len(s) - 1, int(len(s) * p))] * 1000, 3) if s else None


def _exact_top(data, queries, k):
    norms = (data * data).sum(axis=1)
    out = []
    for q in queries:
        d = norms - 2.0 * data.dot(q)
        idx = np.argpartition(d, k)[:k]
        out.append(set(idx.tolist()))
    return out


class Spawned:
    """A durakv server started for the run (--spawn): a temporary directory, stopped by pid at the end."""

    def __init__(self, port, durability):
        self.dir = tempfile.mkdtemp(prefix="durakv-bench-vector-")
        self.port = port
        env = dict(os.environ)
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind",
                                      "127.0.0.1", "--dir", self.dir, "--durability", durability],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                with valkey.Valkey(port=port, socket_timeout=1) as c:
                    c.ping()
                    break
            except valkey.exceptions.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the spawned server did not start; see %s" % self.log.name)
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)   # the run's data: its figures are the report


def run_vector(host, port, vectors=100_000, dim=128, queries=200, duration_s=20.0, readers=4,
               write_rate=100.0, batch=500, seed=7, ef_values=(10, 50, 100, 200, 400), progress=None):
    say = (lambda msg: print(msg, file=progress, flush=True)) if progress is not None else (lambda msg: None)
    rng = np.random.default_rng(seed)
    data = rng.random((vectors, dim), dtype=np.float32)
    qs = rng.random((queries, dim), dtype=np.float32)
    c = valkey.Valkey(host=host, port=port, socket_timeout=120)
    try:
        c.execute_command("FT.DROPINDEX", INDEX)
    except valkey.exceptions.ResponseError:
        pass
    rss_before = c.info("memory")["used_memory_rss"]
    c.execute_command("FT.CREATE", INDEX, "ON", "HASH", "PREFIX", "1", PREFIX, "SCHEMA", "v", "VECTOR", "HNSW", "6",
                      "DIM", str(dim), "TYPE", "FLOAT32", "DISTANCE_METRIC", "L2")
    say(f"loading {vectors} vectors of {dim} dims ...")
    t0 = time.perf_counter()
    for s in range(0, vectors, batch):
        p = c.pipeline(transaction=False)
        for i in range(s, min(vectors, s + batch)):
            p.hset(f"{PREFIX}{i}", "v", data[i].tobytes())
        p.execute()
    load_s = time.perf_counter() - t0
    raw = c.execute_command("FT.INFO", INDEX)
    info = dict(zip(raw[::2], raw[1::2]))
    assert info[b"num_docs"] == vectors, info[b"num_docs"]
    rss_after = c.info("memory")["used_memory_rss"]
    say(f"loaded in {load_s:.1f}s ({vectors / load_s:.0f} vectors/s)")
    truth = _exact_top(data, qs, 10)
    recall = {}
    for ef in ef_values:
        hits = 0
        for q, want in zip(qs, truth):
            clause = "*=>[KNN 10 @v $q]" if ef == 10 else f"*=>[KNN 10 @v $q EF_RUNTIME {ef}]"
            reply = c.execute_command("FT.SEARCH", INDEX, clause, "PARAMS", "2", "q", q.tobytes(), "NOCONTENT")
            got = {int(k[len(PREFIX):]) for k in reply[1:]}
            hits += len(want & got)
        recall[ef] = round(hits / (10 * len(qs)), 4)
        say(f"recall@10 at EF_RUNTIME {ef}: {recall[ef]}")
    # the mixed run: closed-loop searchers, one writer at a fixed rate
    stop = threading.Event()
    search_lat, write_lat, errors = [], [], []

    def reader(n):
        rr = np.random.default_rng(seed + 100 + n)
        with valkey.Valkey(host=host, port=port, socket_timeout=30) as rc:
            while not stop.is_set():
                q = rr.random(dim, dtype=np.float32).tobytes()
                t = time.perf_counter()
                try:
                    rc.execute_command("FT.SEARCH", INDEX, "*=>[KNN 10 @v $q]", "PARAMS", "2", "q", q, "NOCONTENT")
                except valkey.exceptions.RedisError as exc:   # valkey-py's base error
                    errors.append(str(exc))
                    continue
                search_lat.append(time.perf_counter() - t)

    def writer():
        rw = np.random.default_rng(seed + 99)
        interval = 1.0 / write_rate if write_rate > 0 else None
        with valkey.Valkey(host=host, port=port, socket_timeout=30) as wc:
            nxt = time.perf_counter()
            while not stop.is_set() and interval is not None:
                i = int(rw.integers(vectors))
                t = time.perf_counter()
                try:
                    wc.hset(f"{PREFIX}{i}", "v", rw.random(dim, dtype=np.float32).tobytes())
                except valkey.exceptions.RedisError as exc:
                    errors.append(str(exc))
                write_lat.append(time.perf_counter() - t)
                nxt += interval
                delay = nxt - time.perf_counter()
                if delay > 0:
                    stop.wait(delay)
    say(f"{readers} searchers and a writer at {write_rate:g}/s for {duration_s:g}s ...")
    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(readers)]
    threads.append(threading.Thread(target=writer, daemon=True))
    t_run = time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(duration_s)
    stop.set()
    for t in threads:
        t.join(60)
    run_s = time.perf_counter() - t_run
    c.close()
    hist = histmod.new_histogram()
    for s in search_lat:
        hist.record_value(max(1, int(s * 1e6)))
    return {
        "workload": "vector", "vectors": vectors, "dim": dim, "index": "HNSW M 16 EF_CONSTRUCTION 200 EF_RUNTIME 10",
        "load_seconds": round(load_s, 2), "load_vectors_per_s": round(vectors / load_s),
        "rss_bytes_per_vector": round((rss_after - rss_before) / vectors),
        "recall_at_10": {str(k): v for k, v in recall.items()},
        "searchers": readers, "search_ops_per_s": round(len(search_lat) / run_s, 1),
        "search_p50_ms": _pct(search_lat, 0.50), "search_p99_ms": _pct(search_lat, 0.99),
        "search_p99_9_ms": round(histmod.percentile_ms(hist, 99.9), 3) if search_lat else None,
        "writer_rate": write_rate, "writes": len(write_lat), "write_p50_ms": _pct(write_lat, 0.50),
        "write_p99_ms": _pct(write_lat, 0.99), "errors": errors[:5], "error_count": len(errors),
        "duration_s": round(run_s, 2),
    }


def format_vector(r) -> str:
    lines = [f"durakv bench --workload vector: {r['vectors']} x {r['dim']}-dim vectors, {r['index']}",
             f"  load        {r['load_vectors_per_s']} vectors/s ({r['load_seconds']} s), "
             f"{r['rss_bytes_per_vector']} bytes of RSS per vector (hash + index)",
             "  recall@10   " + ", ".join(f"EF_RUNTIME {k}: {v}" for k, v in r["recall_at_10"].items()),
             f"  search      {r['search_ops_per_s']} ops/s over {r['searchers']} connections, "
             f"p50 {r['search_p50_ms']} ms, p99 {r['search_p99_ms']} ms, p99.9 {r['search_p99_9_ms']} ms",
             f"  writer      {r['writes']} HSETs at {r['writer_rate']:g}/s, p50 {r['write_p50_ms']} ms, "
             f"p99 {r['write_p99_ms']} ms; errors {r['error_count']}"]
    if "durability" in r:
        lines.append(f"  server      durakv started by the tool, durability {r['durability']}")
    lines.append(f"  run         commit {r.get('commit')}, {r.get('date')}, load average {r.get('loadavg')}")
    return "\n".join(lines)


def vector_main(args, argv):
    """From `durakv bench --workload vector ...`: runs, prints, and with --results writes the report there."""
    from .results import machine_load, write_results
    load_before = machine_load()
    spawned = None
    host, port = args.host, args.port
    if args.spawn:
        from ...cluster.processes import free_port
        port = free_port()
        host = "127.0.0.1"
        spawned = Spawned(port, args.spawn)
    try:
        r = run_vector(host, port, vectors=args.vectors, dim=args.dim, queries=args.queries,
                       duration_s=args.duration, readers=args.clients if args.clients else 4,
                       write_rate=args.write_rate, seed=args.seed or 7,
                       progress=None if args.quiet else sys.stderr)
    finally:
        if spawned is not None:
            spawned.stop()
    r.update({"commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
              "loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()})
    if args.spawn:
        r["durability"] = args.spawn
    text = format_vector(r)
    print(text)
    if args.results:
        print("results: " + write_results(args.results, "vector", r, text, load_before, argv), file=sys.stderr)
    return 0 if r["search_ops_per_s"] and not r["error_count"] else 1
