"""`durakv cluster ...`: the operator's commands for a cluster on any hosts, and a local launcher.

On any hosts (cluster/admin.py; each names the cluster by its secrets directory and NATS servers, never by a
local file): init, certs, nats-config, issue-node, create, status, failover, reshard, rebalance, spread-primaries,
add-node, del-node, replace-node, remove-shard. Every one presents the cluster's password to the nodes (--user/--pass,
--pass-file, or DURAKV_AUTH; by default the secrets directory's resp.pass).

Local (a three-AZ cluster of processes on this machine, cluster/local.py, from DIR/manifest.json): up, down,
start-node, stop-node, restart-node, add-shard; status, failover, reshard, rebalance, spread-primaries and
remove-shard take
--dir DIR for a local cluster too.
"""

import argparse
import asyncio
import json
import os
import sys
import time

from .admin import AdminError, ClusterAdmin
from .local import LocalCluster
from .manifest import ClusterError
from .processes import ProcessError, parse_port_range
from .reshard import ReshardError
from .respclient import RespError
from .readiness import ClusterNotReady
from .passwords import add_password_options, password_from
from .secrets import ClusterSecrets, SecretsError, _write_private


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


def render_remote(st) -> str:
    """The table of `status --secrets`: shards and nodes, streams and their copies, NATS servers; warnings
    for what runs short (a stream on fewer than 3 copies, a server with JetStream off or not answering)."""
    out = ["cluster %s (format %s), NATS %s" % (st.get("cluster_id"), st.get("format"), ",".join(st["nats"])), ""]
    rows = []
    for sh in st["shards"]:
        slots = ",".join("%d-%d" % tuple(r) for r in sh["slots"]) or "-"
        for n in sh["nodes"]:
            rows.append([sh["name"], slots, n["node_id"][:8], n["az"], n["addr"], n["role"], n.get("reported_role"),
                         n["health"], n.get("phase"), n.get("applied"), n.get("lag_ms"), n.get("durability"),
                         n.get("apply_stopped") or n.get("error") or ""])
    out.append(_table(["SHARD", "SLOTS", "NODE", "AZ", "ADDR", "ROLE", "REPORTS", "HEALTH", "PHASE", "APPLIED",
                       "LAG_MS", "DURABILITY", "NOTE"], rows))
    out.append("")
    out.append(_table(["STREAM", "LEADER", "COPIES", "REPLICAS", "MESSAGES", "LAST_SEQ"],
                      [[name, s.get("leader"), s.get("copies_ok"),
                        ",".join("%s%s" % (r["name"], "" if r["current"] and not r["offline"] else
                                           " (offline)" if r["offline"] else " (behind)") for r in s.get("replicas", [])),
                        s.get("messages"), s.get("last_seq")] for name, s in sorted(st["streams"].items())]))
    out.append("")
    out.append(_table(["NATS", "JETSTREAM", "META-LEADER"],
                      [[name, "on" if v["jetstream"] else "OFF", v.get("meta_leader")]
                       for name, v in sorted(st["servers"].items())]))
    out.extend(warnings(st))
    return "\n".join(out)


def warnings(st) -> list:
    lines = []
    for name, s in sorted(st["streams"].items()):
        if "error" in s:
            lines.append("WARNING: stream %s does not answer: %s" % (name, s["error"]))
        elif s.get("copies_ok", 3) < 1 + len(s.get("replicas", [])):
            lines.append("WARNING: stream %s runs on %d of %d copies (%s)" % (
                name, s["copies_ok"], 1 + len(s["replicas"]),
                ", ".join(r["name"] for r in s["replicas"] if not r["current"] or r["offline"])))
    for name, v in sorted(st["servers"].items()):
        if not v["jetstream"]:
            lines.append("WARNING: NATS server %s has JetStream disabled%s: it holds no copy of any stream until "
                         "JetStream is enabled again (a full disk turns it off; free space, then restart it)"
                         % (name, " (%s)" % v["error"] if v.get("error") else ""))
    return lines


def _port_range_arg(text):
    try:
        return parse_port_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_up(args):
    try:
        cluster = LocalCluster.up(args.dir, shards=args.shards, replicas=args.replicas, durability=args.durability,
                                  base_port=args.base_port, journal_backend=args.journal_backend,
                                  timeout_s=args.timeout, log=lambda m: print(m, flush=True),
                                  cluster_mode=not args.no_cluster_mode, tls=args.tls,
                                  partitionable=args.partitionable, extra_server_args=args.server_arg or (),
                                  region_domain=args.region_domain, follow_region=args.follow_region,
                                  port_range=args.port_range)
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
    """How to talk to the cluster with the usual clients (any node's address bootstraps a cluster client): with
    the cluster's password (read from its file, never printed) and, with TLS, its CA."""
    p = cluster.primary(0) or cluster.nodes[0]
    ca = (cluster.manifest.get("tls") or {}).get("ca")
    pw_file = p.entry.get("password_file")
    pw_py = ', password=open("%s").read().strip()' % pw_file if pw_file else ""
    # redis-cli reads REDISCLI_AUTH, which keeps the password out of its argv (`ps`); memtier has only -a
    pw_env = 'REDISCLI_AUTH="$(cat %s)" ' % pw_file if pw_file else ""
    pw_cli = ' -a "$(cat %s)"' % pw_file if pw_file else ""
    if ca:
        return "\n".join([
            "cluster clients, over TLS only (any node bootstraps; they follow MOVED and failovers):",
            f"  valkey-py:  valkey.cluster.ValkeyCluster(host=\"127.0.0.1\", port={p.port}, ssl=True, "
            f"ssl_ca_certs=\"{ca}\"{pw_py})",
            f"  redis-py:   redis.cluster.RedisCluster(host=\"127.0.0.1\", port={p.port}, ssl=True, "
            f"ssl_ca_certs=\"{ca}\"{pw_py})",
            f"  redis-cli:  {pw_env}redis-cli -c --tls --cacert {ca} -p {p.port}",
            f"  memtier:    memtier_benchmark --cluster-mode --tls --cacert {ca} -s 127.0.0.1 -p {p.port}{pw_cli}"])
    return "\n".join([
        "cluster clients (any node bootstraps; they follow MOVED and failovers):",
        f"  valkey-py:  valkey.cluster.ValkeyCluster(host=\"127.0.0.1\", port={p.port}{pw_py})",
        f"  redis-py:   redis.cluster.RedisCluster(host=\"127.0.0.1\", port={p.port}{pw_py})",
        f"  redis-cli:  {pw_env}redis-cli -c -p {p.port}",
        f"  memtier:    memtier_benchmark --cluster-mode -s 127.0.0.1 -p {p.port}{pw_cli}"])


def _admin(args) -> ClusterAdmin:
    """The operations' handle: by --secrets (any hosts) or --dir (a local cluster)."""
    say = lambda m: print(m, flush=True)  # noqa: E731
    if getattr(args, "secrets", None):
        nats = [u for u in (args.nats or "").split(",") if u] or None
        return ClusterAdmin(args.secrets, nats=nats, user=args.user, password=password_from(args), say=say)
    if getattr(args, "dir", None):
        return LocalCluster.load(args.dir).admin(say=say)
    raise ClusterError("name the cluster: --secrets DIR [--nats URLS] (any hosts) or --dir DIR (a local cluster)")


def _cmd_status(args):
    if args.secrets:
        st = asyncio.run(_admin(args).status())
        print(json.dumps(st, indent=2) if args.json else render_remote(st))
        return 0
    cluster = LocalCluster.load(args.dir)
    st = cluster.status()
    if cluster.options.get("journal_backend", "jetstream") != "jetstream":
        # Each node keeps its own journal and no `cluster create` ran: there is no coordination store to ask
        # (asking waited 20 s for a bucket that is never made).
        remote = {"none": "each node keeps a local journal: no coordination store"}
    elif not any(p.alive for p in cluster.nats):
        # (a stopped cluster: waiting 20 s for a connection that cannot come only delays the local view)
        remote = {"error": "no NATS server of this cluster is running"}
    else:
        try:
            remote = asyncio.run(asyncio.wait_for(cluster.admin().status(), 20))
        except Exception as exc:  # noqa: BLE001 - NATS down: the local view is still worth printing
            remote = {"error": str(exc) or type(exc).__name__}
    st["cluster"] = remote
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(render_status(st))
    if "none" in remote:
        print("\n(%s)" % remote["none"])
    elif "error" in remote:
        print("\n(the coordination store does not answer: %s)" % remote["error"])
    else:
        for line in warnings(remote):
            print(line)
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
    if args.secrets:
        try:
            node, seconds = asyncio.run(_admin(args).failover(args.shard, to=args.to, timeout_s=args.timeout))
        except (AdminError, RespError) as exc:
            print(f"failover failed: {exc}", file=sys.stderr)
            return 1
        print(f"shard {args.shard}: primary -> {node[:8]} in {seconds * 1000:.0f} ms")
        return 0
    cluster = LocalCluster.load(args.dir)
    old = cluster.primary(int(args.shard))
    try:
        node, seconds = cluster.failover(shard=int(args.shard), to=args.to, timeout_s=args.timeout)
    except RespError as exc:
        print(f"CLUSTER FAILOVER refused: {exc}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        print(f"failover not completed: {exc}", file=sys.stderr)
        return 1
    print(f"shard {args.shard}: primary {old.name if old else '-'} -> {node.name} ({node.az}) "
          f"in {seconds * 1000:.0f} ms")
    return 0


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
    admin = _admin(args)
    print(f"moving {args.slots} slot(s) from shard {args.source} to shard {args.target}", flush=True)
    try:
        seconds = asyncio.run(admin.reshard(args.slots, args.source, args.target, timeout_s=args.timeout,
                                            progress=_Progress()))
    except (ReshardError, AdminError) as exc:
        print(f"reshard failed: {exc}", file=sys.stderr)
        return 1
    print(f"done in {seconds:.2f}s")
    return 0


def _cmd_rebalance(args):
    admin = _admin(args)
    try:
        seconds = asyncio.run(admin.rebalance(timeout_s=args.timeout, progress=_Progress()))
    except (ReshardError, AdminError) as exc:
        print(f"rebalance failed: {exc}", file=sys.stderr)
        return 1
    print(f"balanced in {seconds:.2f}s")
    return 0


def _cmd_spread_primaries(args):
    try:
        moves = asyncio.run(_admin(args).spread_primaries(timeout_s=args.timeout))
    except (AdminError, RespError) as exc:
        print(f"spread-primaries failed: {exc}", file=sys.stderr)
        return 1
    if not moves:
        print("every shard's primary is in its home AZ")
        return 0
    for shard, from_az, to_az, node, what in moves:
        print(f"shard {shard}: primary in {from_az}, home {to_az}"
              f"{' -> ' + node[:8] if node else ''}: {what}")
    return 0 if all(what.startswith("moved") for *_, what in moves) else 1


def _cmd_add_shard(args):
    cluster = LocalCluster.load(args.dir)
    name = cluster.add_shard(replicas=args.replicas, log=lambda m: print(m, flush=True))
    if not args.no_rebalance:
        _cmd_rebalance(args)
    print(f"shard {name} added")
    return 0


def _cmd_remove_shard(args):
    try:
        if args.secrets:
            victim = asyncio.run(_admin(args).remove_shard(args.shard, timeout_s=args.timeout,
                                                           progress=_Progress()))
            print(f"shard {victim.name} removed; its nodes ({', '.join(n.id[:8] for n in victim.nodes)}) are "
                  f"revoked: stop them")
        else:
            LocalCluster.load(args.dir).remove_shard(args.shard, timeout_s=args.timeout,
                                                     log=lambda m: print(m, flush=True))
    except (ReshardError, AdminError) as exc:
        print(f"remove-shard failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_init(args):
    nats = [u for u in (args.nats or "").split(",") if u]
    password = password_from(args)
    s = ClusterSecrets.init(args.secrets, nats_urls=nats, tls=args.tls, resp_password=password)
    print(f"cluster {s.cluster_id}: secrets in {s.dir} (keep them on the operator's machine, 0700)")
    print(f"  the nodes' password: {os.path.join(s.dir, 'resp.pass')} (put it in each node's config: "
          f"requirepass)")
    if s.tls:
        print(f"  CA: {s.ca_file}; a certificate per host: durakv cluster certs --secrets {args.secrets} "
              f"--name NAME --host IP")
    print(f"  each NATS server's config: durakv cluster nats-config --secrets {args.secrets} --name NAME --az AZ ...")
    return 0


def _cmd_certs(args):
    s = ClusterSecrets(args.secrets)
    cert = s.host_cert(args.name, [h for h in args.host.split(",") if h])
    if args.out:
        os.makedirs(args.out, mode=0o700, exist_ok=True)
        for kind in ("ca", "cert", "key"):
            dst = os.path.join(args.out, {"ca": "ca.crt", "cert": args.name + ".crt", "key": args.name + ".key"}[kind])
            with open(cert[kind], "rb") as f:
                _write_private(dst, f.read())
            cert[kind] = dst
    for kind in ("ca", "cert", "key"):
        print(f"{kind}: {cert[kind]}")
    return 0


def _cmd_nats_config(args):
    s = ClusterSecrets(args.secrets)
    cert = None
    if args.tls_cert:
        cert = {"cert": args.tls_cert, "key": args.tls_key, "ca": args.tls_ca or s.ca_file}
    routes = [r for r in args.routes.split(",") if r]
    region = None
    if args.domain:
        region = {"domain": args.domain, "leaf_listen": args.leaf_listen,
                  "leaf_remotes": [u for u in (args.leaf_remotes or "").split(",") if u], "leaf_creds": args.leaf_creds}
        if region["leaf_remotes"] and not args.leaf_creds:
            print("--leaf-remotes needs --leaf-creds (the region link's credentials: `durakv cluster region-link`)",
                  file=sys.stderr)
            return 2
    text = s.nats_config(args.name, args.az, args.listen, args.client_port, args.cluster_port, routes,
                         args.store_dir, monitor=args.monitor, cert=cert, region=region)
    if args.out:
        _write_private(args.out, text)
        print(f"wrote {args.out} (0600: it holds the route password)")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_issue_node(args):
    from .natsauth import Key, creds_text
    s = ClusterSecrets(args.secrets)
    key = Key.new("user")
    _write_private(args.out, creds_text(s.node_jwt(key.public, args.node_id, args.shard), key.seed))
    print(f"wrote {args.out}: node {args.node_id} of shard {args.shard} (start it with --journal-nats-creds "
          f"{args.out} --shard {args.shard} --node-id {args.node_id})")
    return 0


def _cmd_create(args):
    admin = _admin(args)
    try:
        if args.follow_domain:
            if not (args.source_domain and args.source_nats):
                print("--follow-domain needs --source-domain and --source-nats", file=sys.stderr)
                return 2
            source = ClusterAdmin(args.secrets, nats=args.source_nats.split(","), user=args.user,
                                  password=password_from(args), say=admin.say)
            asyncio.run(admin.create_follower(args.nodes, source, args.follow_domain, args.source_domain,
                                              replicas=args.replicas, durability=args.durability,
                                              lease_ttl_ms=args.lease_ttl_ms, timeout_s=args.timeout))
        else:
            asyncio.run(admin.create(args.nodes, replicas=args.replicas, durability=args.durability,
                                     lease_ttl_ms=args.lease_ttl_ms, timeout_s=args.timeout))
    except (AdminError, ReshardError, SecretsError) as exc:
        print(f"cluster create refused: {exc}", file=sys.stderr)
        return 1
    print("cluster created")
    return 0


def _cmd_region_link(args):
    s = ClusterSecrets(args.secrets)
    shards = [x for x in args.shards.split(",") if x]
    path = s.region_link_creds(args.source_domain, shards, args.domain)
    print(f"wrote {path}: the leafnode link of region {args.domain} to region {args.source_domain} (shards "
          f"{', '.join(shards)}); give it to region {args.domain}'s NATS servers (`nats-config --leaf-creds`)")
    return 0


def _cmd_promote_region(args):
    import json
    admin = _admin(args)
    source = None
    if args.source_dir:
        source = LocalCluster.load(args.source_dir).admin(say=admin.say)
    elif args.source_nats:
        source = ClusterAdmin(args.secrets or LocalCluster.load(args.dir).manifest["secrets"],
                              nats=args.source_nats.split(","), user=args.user, password=password_from(args),
                              say=admin.say)
    try:
        report = asyncio.run(admin.promote_region(source=source, timeout_s=args.timeout))
    except (AdminError, ReshardError) as exc:
        print(f"promote-region refused: {exc}", file=sys.stderr)
        return 1
    for name, shard in sorted(report["shards"].items()):
        print(f"shard {name}: cut at index {shard['cut_index']}, lag at the cut {shard['lag_entries_at_cut']} "
              f"entries" + (" (planned: nothing lost)" if report["mode"] == "planned" else
                            " (as last measured: acknowledged writes in them are lost)"))
    print(json.dumps(report, sort_keys=True))
    return 0


def _cmd_region_gap(args):
    import json
    admin = _admin(args)
    if args.source_dir:
        source = LocalCluster.load(args.source_dir).admin(say=admin.say)
    else:
        source = ClusterAdmin(args.secrets or LocalCluster.load(args.dir).manifest["secrets"],
                              nats=args.source_nats.split(","), user=args.user, password=password_from(args),
                              say=admin.say)

    async def go():
        store = await admin.store()
        try:
            record, _rev = await store.get_region()
        finally:
            await store.nc.close()
        if record is None or record.role != "primary" or not record.cut:
            raise AdminError("this region was not promoted over another (no cut in its region record)")
        return await source.region_gap(record)
    try:
        gap = asyncio.run(go())
    except AdminError as exc:
        print(f"region-gap: {exc}", file=sys.stderr)
        return 1
    for name, g in sorted(gap.items()):
        print(f"shard {name}: the old region has {g['entries_not_taken']} entries beyond the cut at index "
              f"{g['cut_index']} (its last: {g['old_region_last_index']})")
    print(json.dumps(gap, sort_keys=True))
    return 0


def _cmd_region_unpair(args):
    try:
        peer = asyncio.run(_admin(args).unpair_region())
    except AdminError as exc:
        print(f"region-unpair refused: {exc}", file=sys.stderr)
        return 1
    print(f"this region no longer pairs with region {peer}: its nodes take writes without reading its record")
    return 0


def _cmd_add_node(args):
    try:
        name = asyncio.run(_admin(args).add_nodes(args.nodes, shard=args.shard, timeout_s=args.timeout))
    except (AdminError, ReshardError) as exc:
        print(f"add-node refused: {exc}", file=sys.stderr)
        return 1
    print(f"added to shard {name}" + ("" if args.shard is not None else " (a new shard owning no slot: "
                                                                          "`durakv cluster rebalance` gives it its share)"))
    return 0


def _cmd_del_node(args):
    try:
        node = asyncio.run(_admin(args).del_node(args.node))
    except (AdminError, ReshardError) as exc:
        print(f"del-node refused: {exc}", file=sys.stderr)
        return 1
    print(f"node {node.id[:8]} removed and its NATS identity revoked")
    return 0


def _cmd_replace_node(args):
    try:
        new = asyncio.run(_admin(args).replace_node(args.node, args.new, timeout_s=args.timeout))
    except (AdminError, ReshardError) as exc:
        print(f"replace-node failed: {exc}", file=sys.stderr)
        return 1
    print(f"node {args.node} replaced by {new[:8]} at {args.new}")
    return 0


def _target(p, local=True):
    """--secrets/--nats (any hosts) and, for commands a local cluster has too, --dir; the nodes' credentials."""
    g = p.add_argument_group("which cluster")
    g.add_argument("--secrets", default=None, help="the cluster's secrets directory (`durakv cluster init`)")
    g.add_argument("--nats", default=None, help="NATS server URLs, comma-separated (default: the secrets' own)")
    if local:
        g.add_argument("--dir", default=None, help="a local cluster's directory (`durakv cluster up`)")
    a = p.add_argument_group("the nodes' credentials (default: the secrets directory's resp.pass)")
    a.add_argument("--user", default=None, help="ACL user to present to the nodes")
    add_password_options(a)


def build_parser():
    parser = argparse.ArgumentParser(prog="durakv cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)

    # -- any hosts ---------------------------------------------------------------------------------------------
    init = sub.add_parser("init", help="make a cluster's secrets directory: NATS operator, accounts, the "
                                       "operator's identities, route and node passwords (and a CA with --tls)")
    init.add_argument("--secrets", required=True, help="the directory to make (0700)")
    init.add_argument("--nats", default=None, help="the NATS server URLs the operations will use")
    init.add_argument("--tls", action="store_true", help="make a CA: NATS and nodes speak TLS with mutual auth")
    add_password_options(init, who="the nodes'")   # default: a random one
    init.set_defaults(func=_cmd_init)
    certs = sub.add_parser("certs", help="a TLS certificate (server and client) for one host, signed by the CA")
    certs.add_argument("--secrets", required=True)
    certs.add_argument("--name", required=True, help="the certificate's name (e.g. the host's)")
    certs.add_argument("--host", required=True, help="the host's IP addresses and DNS names, comma-separated")
    certs.add_argument("--out", default=None, help="copy ca.crt, NAME.crt and NAME.key into this directory")
    certs.set_defaults(func=_cmd_certs)
    nc = sub.add_parser("nats-config", help="print (or --out) one NATS server's configuration")
    nc.add_argument("--secrets", required=True)
    nc.add_argument("--name", required=True, help="server_name, e.g. nats-az1")
    nc.add_argument("--az", required=True, help="its availability zone (server_tags az:AZ)")
    nc.add_argument("--listen", default="0.0.0.0", help="address clients and routes listen on")
    nc.add_argument("--client-port", type=int, default=4222)
    nc.add_argument("--cluster-port", type=int, default=6222)
    nc.add_argument("--routes", required=True, help="the other servers' HOST:PORT route addresses, comma-separated")
    nc.add_argument("--store-dir", required=True, help="JetStream's directory")
    nc.add_argument("--monitor", default="127.0.0.1:8222", help="HTTP monitoring address (no auth: keep it local)")
    nc.add_argument("--tls-cert", default=None)
    nc.add_argument("--tls-key", default=None)
    nc.add_argument("--tls-ca", default=None)
    nc.add_argument("--out", default=None, help="write it here (0600) instead of printing it")
    nc.add_argument("--domain", default=None, help="this region's JetStream domain (a second region)")
    nc.add_argument("--leaf-listen", default=None, metavar="HOST:PORT",
                    help="a primary region's server: where a follower region's servers connect")
    nc.add_argument("--leaf-remotes", default=None, metavar="URLS",
                    help="a follower region's server: the primary region's nats-leaf:// URLs, comma-separated")
    nc.add_argument("--leaf-creds", default=None, help="the region link's credentials (`durakv cluster region-link`)")
    nc.set_defaults(func=_cmd_nats_config)
    issue = sub.add_parser("issue-node", help="a NATS identity for a node placed by hand (--shard, "
                                              "--journal-nats-creds) instead of by create")
    issue.add_argument("--secrets", required=True)
    issue.add_argument("--shard", required=True)
    issue.add_argument("--node-id", required=True, help="40 hex characters")
    issue.add_argument("--out", required=True, help="the credentials file to write (0600)")
    issue.set_defaults(func=_cmd_issue_node)
    cr = sub.add_parser("create", help="group unassigned nodes into shards (one node per AZ, primaries spread "
                                       "over AZs) and start the cluster")
    _target(cr, local=False)
    cr.add_argument("--replicas", type=int, default=1, help="replicas per shard (each in another AZ)")
    cr.add_argument("--durability", choices=["async", "sync"], default="sync")
    cr.add_argument("--lease-ttl-ms", type=int, default=2000)
    cr.add_argument("--timeout", type=float, default=120.0)
    cr.add_argument("--follow-domain", default=None, metavar="DOMAIN",
                    help="create a follower region with this JetStream domain (docs/multi-az.md, \"A second region\")")
    cr.add_argument("--source-domain", default=None, help="the primary region's JetStream domain")
    cr.add_argument("--source-nats", default=None, help="the primary region's NATS URLs, comma-separated")
    cr.add_argument("nodes", nargs="+", metavar="HOST:PORT")
    cr.set_defaults(func=_cmd_create)
    an = sub.add_parser("add-node", help="add unassigned nodes: replicas of --shard, or a new shard")
    _target(an, local=False)
    an.add_argument("--shard", default=None, help="join this shard as replicas (default: a new shard)")
    an.add_argument("--timeout", type=float, default=120.0)
    an.add_argument("nodes", nargs="+", metavar="HOST:PORT")
    an.set_defaults(func=_cmd_add_node)
    dn = sub.add_parser("del-node", help="remove a replica and revoke its NATS identity")
    _target(dn, local=False)
    dn.add_argument("--node", required=True, help="its node id (a prefix will do)")
    dn.set_defaults(func=_cmd_del_node)
    rn = sub.add_parser("replace-node", help="a dead node's place taken by a new one on another host")
    _target(rn, local=False)
    rn.add_argument("--node", required=True, help="the dead node's id (a prefix will do)")
    rn.add_argument("--timeout", type=float, default=120.0)
    rn.add_argument("new", metavar="HOST:PORT", help="the new, unassigned node")
    rn.set_defaults(func=_cmd_replace_node)

    status = sub.add_parser("status", help="shards, nodes, streams and NATS servers (and, with --dir, the local "
                                           "processes)")
    _target(status)
    status.add_argument("--json", action="store_true", help="JSON instead of a table")
    status.set_defaults(func=_cmd_status)
    rl = sub.add_parser("region-link", help="mint the leafnode link's credentials of a follower region")
    rl.add_argument("--secrets", required=True)
    rl.add_argument("--source-domain", required=True, help="the primary region's JetStream domain")
    rl.add_argument("--domain", required=True, help="the follower region's JetStream domain")
    rl.add_argument("--shards", required=True, help="the shard names, comma-separated (e.g. 0,1,2)")
    rl.set_defaults(func=_cmd_region_link)
    pr = sub.add_parser("promote-region", help="make a follower region the primary region (planned with the old "
                                               "region reachable: nothing lost; else at once, reporting the lag)")
    _target(pr)
    pr.add_argument("--source-nats", default=None, help="the old primary region's NATS URLs: a planned switchover")
    pr.add_argument("--source-dir", default=None, help="the old primary region's local cluster directory: planned")
    pr.add_argument("--timeout", type=float, default=120.0)
    pr.set_defaults(func=_cmd_promote_region)
    rg = sub.add_parser("region-gap", help="after promote-region over a dark region that is back: the entries it "
                                           "had beyond the promoted region's cut, which the promotion lost")
    _target(rg)
    src = rg.add_mutually_exclusive_group(required=True)
    src.add_argument("--source-nats", default=None, help="the old primary region's NATS URLs")
    src.add_argument("--source-dir", default=None, help="the old primary region's local cluster directory")
    rg.set_defaults(func=_cmd_region_gap)
    ru = sub.add_parser("region-unpair", help="the fence's override: this (primary) region forgets a peer region "
                                              "that is gone for good, so its restarted nodes take writes again")
    _target(ru)
    ru.set_defaults(func=_cmd_region_unpair)
    fo = sub.add_parser("failover", help="planned failover: CLUSTER FAILOVER on a replica, wait for the switch")
    _target(fo)
    fo.add_argument("--shard", default="0")
    fo.add_argument("--to", default=None, help="node (a local name like 0-1, or a node id prefix); default: the "
                                               "most caught-up replica")
    fo.add_argument("--timeout", type=float, default=30.0)
    fo.set_defaults(func=_cmd_failover)
    rs = sub.add_parser("reshard", help="move slots (and their keys) from one shard to another, online")
    _target(rs)
    rs.add_argument("--slots", type=int, required=True, help="how many slots to move")
    rs.add_argument("--from", dest="source", required=True, help="source shard (its name: 0, 1, ...)")
    rs.add_argument("--to", dest="target", required=True, help="target shard")
    rs.add_argument("--timeout", type=float, default=600.0,
                    help="give up waiting after this many seconds without progress (no slot handed over, no key "
                         "moved); the nodes finish the move anyway")
    rs.set_defaults(func=_cmd_reshard)
    rb = sub.add_parser("rebalance", help="move slots until every shard owns the same number")
    _target(rb)
    rb.add_argument("--timeout", type=float, default=600.0, help="seconds without progress before giving up")
    rb.set_defaults(func=_cmd_rebalance)
    sp = sub.add_parser("spread-primaries", help="hand each shard's primary back to its home AZ (shard i in AZ i mod "
                                                 "the AZs) by planned failovers: after failovers, at a quiet moment")
    _target(sp)
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds each hand-over may take")
    sp.set_defaults(func=_cmd_spread_primaries)
    rm = sub.add_parser("remove-shard", help="move a shard's slots to the others, remove it, revoke its nodes")
    _target(rm)
    rm.add_argument("--shard", required=True)
    rm.add_argument("--timeout", type=float, default=600.0)
    rm.set_defaults(func=_cmd_remove_shard)

    # -- a local cluster ---------------------------------------------------------------------------------------
    up = sub.add_parser("up", help="a local cluster: start NATS and the durakv nodes, create the cluster, write "
                                   "DIR/manifest.json, wait until serving")
    up.add_argument("--dir", required=True, help="cluster directory (data, logs, manifest, secrets)")
    up.add_argument("--shards", type=int, default=1)
    up.add_argument("--tls", action="store_true",
                    help="serve clients only over TLS (a CA and node certificate are made in DIR/secrets/tls), "
                         "NATS with mutual TLS")
    up.add_argument("--no-cluster-mode", action="store_true",
                    help="nodes without cluster mode (no slots: one shard answered by its primary, replicas READONLY)")
    up.add_argument("--replicas", type=int, default=2, help="replicas per shard (besides the primary)")
    up.add_argument("--durability", choices=["none", "async", "sync"], default="sync")
    up.add_argument("--base-port", type=int, default=None,
                    help="NATS on P..P+8, durakv nodes from P+10 (default: free ports)")
    up.add_argument("--port-range", type=_port_range_arg, default=None, metavar="LOW-HIGH",
                    help="choose every free port this cluster needs, now and later (a moved node, a new shard), "
                         "from LOW..HIGH, e.g. below the kernel's ephemeral range "
                         "(/proc/sys/net/ipv4/ip_local_port_range), where no outgoing connection takes the port of "
                         "a node that is down (default: free ports the kernel picks)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster to serve")
    up.add_argument("--journal-backend", choices=["jetstream", "local"], default="jetstream",
                    help=argparse.SUPPRESS)
    up.add_argument("--partitionable", action="store_true",
                    help="route NATS routes and durakv-to-NATS connections between AZs through a TCP proxy, so "
                         "that `durakv chaos DIR partition --az AZ` can cut an AZ off")
    up.add_argument("--server-arg", action="append", metavar="ARG",
                    help="an extra argument for every durakv node (repeat it: --server-arg=--lease-ttl-ms "
                         "--server-arg=3000)")
    up.add_argument("--region-domain", default=None,
                    help="this cluster's JetStream domain; with it each NATS server gets a leafnode port a follower "
                         "region connects to (docs/multi-az.md, \"A second region\")")
    up.add_argument("--follow-region", default=None, metavar="DIR",
                    help="start a follower region of the local cluster in DIR (started with --region-domain): "
                         "its own NATS with its own domain, mirrors of DIR's shard journals, read-only nodes")
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

    down = sub.add_parser("down", help="stop every process of a local cluster (SIGTERM, then SIGKILL)")
    down.add_argument("--dir", required=True)
    down.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL")
    down.set_defaults(func=_cmd_down)
    ad = sub.add_parser("add-shard", help="a local cluster: start a new shard's nodes, add them, rebalance")
    ad.add_argument("--dir", required=True)
    ad.add_argument("--replicas", type=int, default=None, help="replicas of the new shard (default: as the others)")
    ad.add_argument("--no-rebalance", action="store_true", help="add it owning no slot")
    ad.add_argument("--timeout", type=float, default=600.0)
    ad.set_defaults(func=_cmd_add_shard, secrets=None, nats=None, user=None, password=None, pass_file=None)
    return parser


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ClusterError, ProcessError, KeyError, AdminError, SecretsError) as exc:
        print(f"durakv cluster {args.action}: {exc}", file=sys.stderr)
        return 1
