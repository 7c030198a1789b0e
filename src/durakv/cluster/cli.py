"""`durakv cluster up|status|down|failover|start-node|stop-node|restart-node|...`: a local three-AZ cluster
(NATS + durakv nodes) from one command, and its processes' lifecycle."""

import argparse
import asyncio
import json
import sys
import time

from ..journal.jetstream import connect
from .local import LocalCluster
from .manifest import ClusterError
from .nats_procs import ProcessError
from .reshard import ReshardError, rebalance, reshard
from .respclient import RespError
from .roles import ClusterNotReady
from .store import NatsStore
from .tls import client_context


def _table(headers, rows) -> str:
    cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    return "\n".join([fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in cells])


def render_status(st) -> str:
    out = [f"cluster {st['dir']}  (nats servers: {st['nats_servers']})", ""]
    out.append(_table(["NATS", "AZ", "CLIENT", "ROUTE", "MONITOR", "PID", "STATE", "META-LEADER"],
                      [[n["name"], n["az"], n["ports"].get("client"), n["ports"].get("cluster"),
                        n["ports"].get("monitor"), n["pid"], n["state"], "yes" if n["meta_leader"] else ""]
                       for n in st["nats"]]))
    out.append("")
    rows = []
    for n in st["nodes"]:
        dur = n["durability"]
        mode = dur.get("effective_durability") or dur.get("durability_mode")
        repl = n.get("replication") or {}
        phase = repl.get("durakv_phase")
        if phase == "following" and repl.get("replica_known_index", 0) > (n["applied_index"] or 0):
            phase = "catching up %s/%s" % (n["applied_index"], repl.get("replica_known_index"))
        rows.append([n["name"], n["shard"], n["az"], n["port"], n["pid"], n["state"],
                     n["role"] or n.get("error"), phase, n["epoch"], n["applied_index"], n["lag_ms"],
                     mode, dur.get("durability_lag_ms"), dur.get("journal_backend")])
    out.append(_table(["NODE", "SHARD", "AZ", "PORT", "PID", "STATE", "ROLE", "PHASE", "EPOCH", "APPLIED",
                       "LAG_MS", "DURABILITY", "DUR_LAG_MS", "JOURNAL"], rows))
    stray = [n["name"] for n in st["nats"] + st["nodes"] if n.get("not_in_manifest")]
    if stray:
        out.append(f"(pid of {', '.join(stray)} is not the manifest's: started by hand; `durakv cluster "
                   f"start-node` adopts it, `stop-node` and `down` stop it by its port)")
    proxy = st.get("proxy")
    if proxy:
        cut = " | ".join(",".join(g) for g in proxy.get("groups") or []) or "none"
        out.append("")
        out.append(f"partition proxy: pid {proxy['pid']} {proxy['state']}, control 127.0.0.1:{proxy['control_port']}, "
                   f"cut: {cut}, connections: {proxy.get('connections', '-')}")
    if st["streams"]:
        out.append("")
        out.append(_table(["STREAM", "LEADER", "REPLICAS", "MESSAGES", "LAST_SEQ"],
                          [[name, s["leader"], ",".join(s["replicas"]), s["messages"], s["last_seq"]]
                           for name, s in sorted(st["streams"].items())]))
    return "\n".join(out)


def _cmd_up(args):
    try:
        cluster = LocalCluster.up(args.dir, shards=args.shards, replicas=args.replicas, durability=args.durability,
                                  base_port=args.base_port, journal_backend=args.journal_backend,
                                  timeout_s=args.timeout, log=lambda m: print(m, flush=True),
                                  cluster_mode=not args.no_cluster_mode, tls=args.tls,
                                  partitionable=args.partitionable, extra_server_args=args.server_arg or ())
    except ClusterNotReady as exc:
        print(f"cluster started but not ready: {exc}", file=sys.stderr)
        return 1
    except (ClusterError, ProcessError, TimeoutError, OSError) as exc:
        print(f"cluster up failed: {exc}", file=sys.stderr)
        return 1
    print(render_status(cluster.status()))
    for shard in cluster.shards:
        p = cluster.primary(shard)
        if p is not None:
            print(f"shard {shard}: primary {p.name} ({p.az}) at 127.0.0.1:{p.port}")
    if cluster.options.get("cluster_mode"):
        print(client_lines(cluster))
    print(metrics_lines(cluster))
    print(f"manifest: {cluster.dir}/manifest.json   stop with: durakv cluster down --dir {args.dir}")
    return 0


def metrics_lines(cluster) -> str:
    """Each node's own metrics (Prometheus text format, server/metrics.py), one URL a line."""
    lines = ["metrics (Prometheus):"]
    for p in cluster.processes:
        if p.kind == "durakv" and p.ports.get("metrics"):
            lines.append(f"  {p.name} ({p.az}): http://127.0.0.1:{p.ports['metrics']}/metrics")
    return "\n".join(lines)


def client_lines(cluster) -> str:
    """How to talk to the cluster with the usual clients (any node's address bootstraps a cluster client)."""
    p = cluster.primary(0) or cluster.nodes[0]
    ca = (cluster.manifest.get("tls") or {}).get("ca")
    if ca:
        return "\n".join([
            "cluster clients, over TLS only (any node bootstraps; they follow MOVED and failovers):",
            f"  valkey-py:  valkey.cluster.ValkeyCluster(host=\"127.0.0.1\", port={p.port}, ssl=True, "
            f"ssl_ca_certs=\"{ca}\")",
            f"  redis-py:   redis.cluster.RedisCluster(host=\"127.0.0.1\", port={p.port}, ssl=True, "
            f"ssl_ca_certs=\"{ca}\")",
            f"  GLIDE:      GlideClusterClientConfiguration([NodeAddress(\"127.0.0.1\", {p.port})], use_tls=True, "
            f"advanced_config=AdvancedGlideClusterClientConfiguration(tls_config=TlsAdvancedConfiguration("
            f"root_pem_cacerts=open(\"{ca}\", \"rb\").read())))",
            f"  redis-cli:  redis-cli -c --tls --cacert {ca} -p {p.port}",
            f"  memtier:    memtier_benchmark --cluster-mode --tls --cacert {ca} -s 127.0.0.1 -p {p.port}"])
    return "\n".join([
        "cluster clients (any node bootstraps; they follow MOVED and failovers):",
        f"  valkey-py:  valkey.cluster.ValkeyCluster(host=\"127.0.0.1\", port={p.port})",
        f"  redis-py:   redis.cluster.RedisCluster(host=\"127.0.0.1\", port={p.port})",
        f"  GLIDE:      GlideClusterClient.create(GlideClusterClientConfiguration([NodeAddress(\"127.0.0.1\", "
        f"{p.port})]))",
        f"  redis-cli:  redis-cli -c -p {p.port}",
        f"  memtier:    memtier_benchmark --cluster-mode -s 127.0.0.1 -p {p.port}"])


def _cmd_status(args):
    st = LocalCluster.load(args.dir).status()
    print(json.dumps(st, indent=2) if args.json else render_status(st))
    return 0


def _cmd_down(args):
    out = LocalCluster.load(args.dir).down(timeout_s=args.timeout)
    for name, what in out.items():
        print(f"{name}: {what}")
    return 0


def _lifecycle_dir(args):
    d = args.dir or args.dir_pos
    if not d:
        raise ClusterError("give the cluster directory (DIR or --dir DIR)")
    return d


def _print_outcomes(out):
    for name, what in out.items():
        print(f"{name}: {what}", flush=True)


def _cmd_stop_node(args):
    cluster = LocalCluster.load(_lifecycle_dir(args))
    names = [p.name for p in cluster.select(args.node, args.az)]
    _print_outcomes(cluster.stop_nodes(names, timeout_s=args.timeout))
    return 0


def _cmd_start_node(args):
    cluster = LocalCluster.load(_lifecycle_dir(args))
    names = [p.name for p in cluster.select(args.node, args.az)]
    try:
        out = cluster.start_nodes(names, wait=not args.no_wait, timeout_s=args.timeout)
    except (ClusterNotReady, TimeoutError) as exc:
        print(f"started, but not serving yet: {exc}", file=sys.stderr)
        return 1
    _print_outcomes(out)
    _print_roles(cluster, names)
    return 0


def _cmd_restart_node(args):
    cluster = LocalCluster.load(_lifecycle_dir(args))
    names = [p.name for p in cluster.select(args.node, args.az)]
    _print_outcomes(cluster.stop_nodes(names, timeout_s=min(args.timeout, 10.0)))
    try:
        out = cluster.start_nodes(names, wait=not args.no_wait, timeout_s=args.timeout)
    except (ClusterNotReady, TimeoutError) as exc:
        print(f"restarted, but not serving yet: {exc}", file=sys.stderr)
        return 1
    _print_outcomes(out)
    _print_roles(cluster, names)
    return 0


def _print_roles(cluster, names):
    for name in names:
        p = cluster.reload().get(name)
        if p.kind == "durakv":
            print(f"{name}: pid {p.pid}, role {p.role() or '-'}", flush=True)


def _cmd_failover(args):
    cluster = LocalCluster.load(args.dir)
    old = cluster.primary(args.shard)
    try:
        node, seconds = cluster.failover(shard=args.shard, to=args.to, timeout_s=args.timeout)
    except RespError as exc:
        print(f"CLUSTER FAILOVER refused: {exc}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        print(f"failover not completed: {exc}", file=sys.stderr)
        return 1
    print(f"shard {args.shard}: primary {old.name if old else '-'} -> {node.name} ({node.az}) "
          f"in {seconds * 1000:.0f} ms")
    return 0


def _tls_ca(cluster):
    return (cluster.manifest.get("tls") or {}).get("ca")


def _with_store(cluster, fn):
    """Runs `await fn(store)` against the cluster's coordination store."""
    async def go():
        ca = (cluster.manifest.get("tls") or {}).get("ca")
        nc = await connect([u for u in cluster.nats_servers.split(",") if u], name="durakv-cluster-cli",
                           tls=client_context(ca) if ca else None)
        try:
            return await fn(await NatsStore(nc).open())
        finally:
            await nc.close()
    return asyncio.run(go())


class _Progress:
    """Prints the move's progress: slots handed over and keys moved, with the rate between the last two key
    counts the source primaries reported."""

    def __init__(self):
        self.t0 = self.t_keys = time.monotonic()
        self.keys = 0
        self.rate = 0.0

    def __call__(self, done, total, keys):
        now = time.monotonic()
        if keys != self.keys:
            self.rate = max(0, keys - self.keys) / max(now - self.t_keys, 1e-3)
            self.t_keys, self.keys = now, keys
        print(f"  {done}/{total} slots moved, {keys} keys moved ({self.rate:,.0f} keys/s) after {now - self.t0:.1f}s",
              flush=True)


def _cmd_reshard(args):
    cluster = LocalCluster.load(args.dir)
    print(f"moving {args.slots} slot(s) from shard {args.source} to shard {args.target}", flush=True)
    try:
        seconds = _with_store(cluster, lambda store: reshard(store, args.slots, args.source, args.target,
                                                             timeout_s=args.timeout, progress=_Progress(),
                                                             tls_ca=_tls_ca(cluster)))
    except ReshardError as exc:
        print(f"reshard failed: {exc}", file=sys.stderr)
        return 1
    print(f"done in {seconds:.2f}s")
    return 0


def _cmd_rebalance(args):
    cluster = LocalCluster.load(args.dir)
    try:
        seconds = _with_store(cluster, lambda store: rebalance(store, timeout_s=args.timeout, progress=_Progress(),
                                                               tls_ca=_tls_ca(cluster)))
    except ReshardError as exc:
        print(f"rebalance failed: {exc}", file=sys.stderr)
        return 1
    print(f"balanced in {seconds:.2f}s")
    return 0


def _cmd_add_shard(args):
    cluster = LocalCluster.load(args.dir)
    name = cluster.add_shard(replicas=args.replicas, log=lambda m: print(m, flush=True))
    if not args.no_rebalance:
        _cmd_rebalance(args)
    print(f"shard {name} added")
    return 0


def _cmd_remove_shard(args):
    cluster = LocalCluster.load(args.dir)
    try:
        cluster.remove_shard(args.shard, timeout_s=args.timeout, log=lambda m: print(m, flush=True))
    except ReshardError as exc:
        print(f"remove-shard failed: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="durakv cluster",
                                     description="A local multi-AZ cluster: 3 NATS nodes (az1..az3) + durakv nodes.")
    sub = parser.add_subparsers(dest="action", required=True)

    up = sub.add_parser("up", help="start NATS and the durakv nodes, write DIR/manifest.json, wait until serving")
    up.add_argument("--dir", required=True, help="cluster directory (data, logs, manifest)")
    up.add_argument("--shards", type=int, default=1)
    up.add_argument("--tls", action="store_true",
                    help="serve clients only over TLS (a CA and node certificate are made in DIR/tls), NATS too")
    up.add_argument("--no-cluster-mode", action="store_true",
                    help="nodes without cluster mode (no slots: one shard answered by its primary, replicas READONLY)")
    up.add_argument("--replicas", type=int, default=2, help="replicas per shard (besides the primary)")
    up.add_argument("--durability", choices=["none", "async", "sync"], default="sync")
    up.add_argument("--base-port", type=int, default=None,
                    help="NATS on P..P+8, durakv nodes from P+10 (default: free ports)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster to serve")
    up.add_argument("--journal-backend", choices=["jetstream", "local"], default="jetstream",
                    help=argparse.SUPPRESS)
    up.add_argument("--partitionable", action="store_true",
                    help="route NATS routes and durakv-to-NATS connections between AZs through a TCP proxy, so "
                         "that `durakv chaos DIR partition --az AZ` can cut an AZ off")
    up.add_argument("--server-arg", action="append", metavar="ARG",
                    help="an extra argument for every durakv node (repeat it: --server-arg=--lease-ttl-ms "
                         "--server-arg=3000)")
    up.set_defaults(func=_cmd_up)

    for action, func, text in (
            ("start-node", _cmd_start_node, "start stopped processes from their manifest argv (a durakv node "
                                            "rejoins as a replica); adopt one restarted by hand"),
            ("stop-node", _cmd_stop_node, "stop processes by pid and by the owner of their ports"),
            ("restart-node", _cmd_restart_node, "stop-node, then start-node")):
        lc = sub.add_parser(action, help=text)
        lc.add_argument("dir_pos", nargs="?", metavar="DIR", help="cluster directory")
        lc.add_argument("--dir", default=None, help="cluster directory (or give it as DIR)")
        who = lc.add_mutually_exclusive_group(required=True)
        who.add_argument("--node", help="process name(s), comma-separated: 0-1, nats-az2, ...")
        who.add_argument("--az", help="every process (NATS and durakv) of this AZ")
        lc.add_argument("--timeout", type=float, default=60.0 if action != "stop-node" else 10.0,
                        help="seconds to wait for serving (start) or before SIGKILL (stop)")
        if action != "stop-node":
            lc.add_argument("--no-wait", action="store_true", help="do not wait until they serve")
        lc.set_defaults(func=func)

    status = sub.add_parser("status", help="role, AZ, port, pid, epoch, applied index and lag of every node")
    status.add_argument("--dir", required=True)
    status.add_argument("--json", action="store_true", help="JSON instead of a table")
    status.set_defaults(func=_cmd_status)

    down = sub.add_parser("down", help="stop every process of the manifest (SIGTERM, then SIGKILL)")
    down.add_argument("--dir", required=True)
    down.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
    down.set_defaults(func=_cmd_down)

    fo = sub.add_parser("failover", help="planned failover: CLUSTER FAILOVER on a replica, wait for the switch")
    fo.add_argument("--dir", required=True)
    fo.add_argument("--shard", type=int, default=0)
    fo.add_argument("--to", default=None, help="node name (e.g. 0-1); default: the most caught-up replica")
    fo.add_argument("--timeout", type=float, default=30.0)
    fo.set_defaults(func=_cmd_failover)

    rs = sub.add_parser("reshard", help="move slots (and their keys) from one shard to another, online")
    rs.add_argument("--dir", required=True)
    rs.add_argument("--slots", type=int, required=True, help="how many slots to move")
    rs.add_argument("--from", dest="source", required=True, help="source shard (its name: 0, 1, ...)")
    rs.add_argument("--to", dest="target", required=True, help="target shard")
    rs.add_argument("--timeout", type=float, default=600.0,
                    help="give up waiting after this many seconds without progress (no slot handed over, no key "
                         "moved); the nodes finish the move anyway")
    rs.set_defaults(func=_cmd_reshard)
    rb = sub.add_parser("rebalance", help="move slots until every shard owns the same number")
    rb.add_argument("--dir", required=True)
    rb.add_argument("--timeout", type=float, default=600.0, help="seconds without progress before giving up")
    rb.set_defaults(func=_cmd_rebalance)
    ad = sub.add_parser("add-shard", help="start a new shard's nodes and rebalance slots onto it")
    ad.add_argument("--dir", required=True)
    ad.add_argument("--replicas", type=int, default=None, help="replicas of the new shard (default: as the others)")
    ad.add_argument("--no-rebalance", action="store_true", help="add it owning no slot")
    ad.add_argument("--timeout", type=float, default=600.0)
    ad.set_defaults(func=_cmd_add_shard)
    rm = sub.add_parser("remove-shard", help="move a shard's slots to the others, then stop its nodes")
    rm.add_argument("--dir", required=True)
    rm.add_argument("--shard", required=True)
    rm.add_argument("--timeout", type=float, default=600.0)
    rm.set_defaults(func=_cmd_remove_shard)
    return parser


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ClusterError, ProcessError, KeyError) as exc:
        print(f"durakv cluster {args.action}: {exc}", file=sys.stderr)
        return 1
