"""Measures the ANN candidates for FT.CREATE ... VECTOR HNSW on this machine: hnswlib, usearch, faiss-cpu.

For each: build time (one insert at a time, as the server adds a vector per write, one thread), query p50/p99
and queries/s at EF_RUNTIME (k=10), recall@10 against exact search (numpy), delete support (and whether a
deleted vector stops being returned), and the resident memory the index adds. Prints one table; writes JSON
with --out. Usage:

    PYTHONPATH=src python scripts/measure_ann_libs.py --vectors 100000 --dim 128 --queries 1000 \
        --out docs/results/ann_libs.json

The candidates are optional dependencies of this script only: it skips a library that is not installed.
"""

import argparse
import gc
import json
import os
import resource
import sys
import time

import numpy as np


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def exact_top(data, queries, k):
    # squared L2, the metric valkey-search's L2 reports
    norms = (data * data).sum(axis=1)
    out = []
    for q in queries:
        d = norms - 2.0 * data.dot(q)
        idx = np.argpartition(d, k)[:k]
        out.append(set(idx[np.argsort(d[idx])].tolist()))
    return out


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


def run_hnswlib(data, queries, m, ef_c, ef):
    import hnswlib
    n, dim = data.shape
    idx = hnswlib.Index(space="l2", dim=dim)
    idx.init_index(max_elements=n, M=m, ef_construction=ef_c, allow_replace_deleted=True)
    idx.set_num_threads(1)
    t0 = time.perf_counter()
    for i in range(n):
        idx.add_items(data[i:i + 1], [i])
    build = time.perf_counter() - t0
    idx.set_ef(ef)

    def query(q, k):
        labels, _ = idx.knn_query(q.reshape(1, -1), k=k)
        return labels[0].tolist()

    def delete(label):
        idx.mark_deleted(label)
    return idx, build, query, delete


def run_usearch(data, queries, m, ef_c, ef):
    from usearch.index import Index
    n, dim = data.shape
    idx = Index(ndim=dim, metric="l2sq", dtype="f32", connectivity=m, expansion_add=ef_c, expansion_search=ef)
    t0 = time.perf_counter()
    for i in range(n):
        idx.add(i, data[i], threads=1)
    build = time.perf_counter() - t0

    def query(q, k):
        return idx.search(q, k, threads=1).keys.tolist()

    def delete(label):
        idx.remove(label)
    return idx, build, query, delete


def run_faiss(data, queries, m, ef_c, ef):
    import faiss
    faiss.omp_set_num_threads(1)
    n, dim = data.shape
    idx = faiss.IndexHNSWFlat(dim, m)
    idx.hnsw.efConstruction = ef_c
    t0 = time.perf_counter()
    for i in range(n):
        idx.add(data[i:i + 1])
    build = time.perf_counter() - t0
    idx.hnsw.efSearch = ef

    def query(q, k):
        _, labels = idx.search(q.reshape(1, -1), k)
        return labels[0].tolist()

    def delete(label):
        raise NotImplementedError("IndexHNSWFlat has no remove_ids")
    return idx, build, query, delete


CANDIDATES = {"hnswlib": run_hnswlib, "usearch": run_usearch, "faiss-cpu": run_faiss}


def measure(name, data, queries, truth, args):
    gc.collect()
    before = rss_bytes()
    try:
        idx, build, query, delete = CANDIDATES[name](data, queries, args.m, args.ef_construction, args.ef_runtime)
    except ImportError as exc:
        return {"library": name, "skipped": str(exc)}
    mem = rss_bytes() - before
    lat = []
    hits = 0
    t_all = time.perf_counter()
    for q, want in zip(queries, truth):
        t0 = time.perf_counter()
        got = query(q, args.k)
        lat.append(time.perf_counter() - t0)
        hits += len(want.intersection(got))
    elapsed = time.perf_counter() - t_all
    # delete support: remove the true nearest neighbour of the first query, it must not come back
    victim = min(truth[0], key=lambda i: float(((data[i] - queries[0]) ** 2).sum()))
    try:
        delete(victim)
        deletes = "yes" if victim not in query(queries[0], args.k) else "returned after delete"
    except NotImplementedError as exc:
        deletes = "no (%s)" % exc
    sweep = {}
    if name == "hnswlib" and args.ef_sweep:
        # the EF_RUNTIME a recall needs on this data (hnswlib searches with max(ef, k))
        for ef in args.ef_sweep:
            idx.set_ef(ef)
            got = sum(len(w.intersection(query(q, args.k))) for q, w in zip(queries, truth))
            sweep[ef] = round(got / (args.k * len(queries)), 4)
        idx.set_ef(args.ef_runtime)
    out = {"library": name, "build_s": round(build, 2), "inserts_per_s": round(len(data) / build),
           "query_p50_us": round(pct(lat, 0.50) * 1e6, 1), "query_p99_us": round(pct(lat, 0.99) * 1e6, 1),
           "queries_per_s": round(len(queries) / elapsed), "recall_at_k": round(hits / (args.k * len(queries)), 4),
           "delete": deletes, "index_rss_bytes": mem, "bytes_per_vector": round(mem / len(data))}
    if sweep:
        out["recall_by_ef"] = sweep
    del idx
    gc.collect()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vectors", type=int, default=100000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef-runtime", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--only", action="append", choices=sorted(CANDIDATES))
    ap.add_argument("--ef-sweep", type=lambda t: [int(x) for x in t.split(",") if x], default=[],
                    help="hnswlib only: recall at each of these EF_RUNTIME values too (e.g. 10,100,400,1000)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    data = rng.random((args.vectors, args.dim), dtype=np.float32)
    queries = rng.random((args.queries, args.dim), dtype=np.float32)
    truth = exact_top(data, queries, args.k)
    rows = [measure(name, data, queries, truth, args) for name in (args.only or CANDIDATES)]
    header = ("library", "build_s", "inserts_per_s", "query_p50_us", "query_p99_us", "queries_per_s",
              "recall_at_k", "delete", "bytes_per_vector")
    print(" | ".join(header))
    for r in rows:
        print(" | ".join(str(r.get(h, r.get("skipped", ""))) for h in header))
        if r.get("recall_by_ef"):
            print("  %s recall@%d by EF_RUNTIME: %s" % (r["library"], args.k, r["recall_by_ef"]))
    result = {"command": "python scripts/measure_ann_libs.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "vectors": args.vectors, "dim": args.dim, "k": args.k, "m": args.m,
              "ef_construction": args.ef_construction, "ef_runtime": args.ef_runtime,
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg": os.getloadavg(),
              "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
