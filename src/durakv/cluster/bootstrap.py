"""Bringing a local cluster up: ports, `LocalCluster.up` (each node's command line and config file: nodeargs.py).

`up` is a launcher on top of the operator's operations (cluster/admin.py), not a second implementation: it
makes the cluster's secrets (cluster/secrets.py) in DIR/secrets, starts three NATS servers in operator mode
(one per AZ) and the durakv nodes, unassigned, then runs `create` with the layout it chose (shard k's primary
in AZ k mod 3, its replicas in the next AZs). Everything starts detached (own sessions, logs in DIR/logs) and
DIR/manifest.json records it (cluster/manifest.py); a port another program takes between choosing and binding
it moves that process to another free port. Every wait is a poll with a deadline. `LocalCluster.up`
(cluster/local.py) calls `up` here with its own class: this module makes a cluster and holds no state of one, so
it is a procedure, not a part a LocalCluster holds.

Locked like any layout durakv makes: NATS asks every client for a JWT of the cluster's operator and every
route for the route password (with --tls, certificates of the cluster's CA too), and the nodes ask for the
cluster's password (DIR/secrets/resp.pass), which is in each node's config file (0600), never in its argv.
"""

import asyncio
import logging
import os
import time

from .manifest import MANIFEST_VERSION, ClusterError, manifest_path
from .nats_procs import NatsCluster
from .nodeargs import durakv_argv, layout_azs, node_config_text, shard_flags
from .processes import ProcessError, check_port_range, free_ports, port_is_free
from .proxyctl import choose_proxy_ports
from .readiness import ClusterNotReady
from .secrets import ClusterSecrets, _write_private
from .settings import NONE_REFUSED

log = logging.getLogger("durakv.cluster")


PORT_ATTEMPTS = 3


def _port_clash(log_text: str) -> bool:
    """Whether a process's log says it could not bind its port (taken after it was chosen as free)."""
    text = log_text.lower()
    return "address already in use" in text or "errno 98" in text or "already in use" in text


def up(cluster_cls, dir, shards=1, replicas=2, durability="sync", base_port=None, journal_backend="jetstream",
       timeout_s=60.0, extra_server_args=(), log=None, cluster_mode=True, tls=False,
       partitionable=False, env=None, password=None, region_domain=None, follow_region=None, port_range=None):
    """Start NATS (az1..az3) and shards x (1 + replicas) durakv nodes; return once the cluster serves.

    Ports with base_port P: NATS on P..P+8 (clients, routes, monitoring), durakv nodes from P+10;
    else free ports: from port_range (low, high) when given, kept in the manifest for every port the cluster
    chooses later (a moved node, a new shard), else from the kernel's ephemeral range. A directory whose
    previous cluster is fully stopped is reused with its data.
    On a readiness timeout the processes stay up (manifest written) and ClusterNotReady is raised.
    partitionable: every connection into a NATS node from another AZ goes through the partition proxy
    (cluster/netproxy.py), so `durakv chaos partition` can cut an AZ off. env: extra environment variables
    of the durakv nodes (kept in the manifest, so restarts get them too). password: the nodes' password
    (None: a new random one, in DIR/secrets/resp.pass; "" only for the test harness, whose tests talk to
    each node directly on 127.0.0.1: NATS stays locked whatever it is).
    region_domain: this cluster's JetStream domain, with a leafnode port on each NATS server for a follower
    region (docs/multi-az.md, "A second region"). follow_region: the directory of a running local cluster
    started with a region_domain; this one becomes its follower region: the same secrets (operator and
    account), NATS servers of its own dialing the source's leafnode ports with the region link's
    credentials, each shard journal a mirror, every node a read-only replica. Its shard count must give
    the same slot layout as the source's (refused with the difference before anything starts)."""
    dir = os.path.abspath(str(dir))
    say = log or (lambda msg: None)
    if port_range is not None:
        try:
            port_range = check_port_range(port_range)
        except ValueError as exc:
            raise ClusterError(str(exc)) from None
    if durability == "none" and journal_backend == "jetstream":
        raise ClusterError("--durability none: " + NONE_REFUSED)
    if shards < 1 or replicas < 0:
        raise ClusterError("need --shards >= 1 and --replicas >= 0")
    if os.path.exists(manifest_path(dir)):
        old = cluster_cls.load(dir)
        running = [p.name for p in old.processes if old.launcher.live_pid(p)]
        if running:
            raise ClusterError(f"a cluster is already running in {dir} ({', '.join(running)}); "
                               f"stop it with `durakv cluster down --dir {dir}`")
        if old.nodes and all(os.path.exists(os.path.join(p.dir, "cluster", "member.json")) for p in old.nodes):
            # A stopped cluster: every process again as it was (same ports, same data, same identities).
            say(f"starting the stopped cluster in {dir} again")
            old.launcher.start_nodes([p.name for p in old.processes if p.kind != "proxy"], timeout_s=timeout_s)
            return old.readiness.wait_ready(timeout_s)
    follow = None
    if follow_region is not None:
        follow, secrets_dir = _follow_plan(cluster_cls, follow_region, shards, region_domain)
        region_domain = follow["domain"]
    os.makedirs(os.path.join(dir, "logs"), exist_ok=True)
    nodes_per_shard = 1 + replicas
    n_durakv = shards * nodes_per_shard
    if follow is None:
        secrets_dir = os.path.join(dir, "secrets")
    if os.path.exists(os.path.join(secrets_dir, "cluster.json")):
        secrets = ClusterSecrets(secrets_dir)
    else:
        secrets = ClusterSecrets.init(secrets_dir, tls=tls, resp_password=password or None)
    certs = secrets.host_cert("node", ["127.0.0.1", "localhost"]) if tls else None
    proxy_ports = choose_proxy_ports(base_port, port_range) if partitionable else None
    if follow is not None:
        nats_region = {"domain": region_domain, "leaf_remotes": follow["leaf_urls"],
                       "leaf_creds": secrets.region_link_creds(follow["peer_domain"],
                                                               [n for n, _s in follow["source_layout"]],
                                                               region_domain)}
    elif region_domain:
        nats_region = {"domain": region_domain, "leaf_listen": True}
    else:
        nats_region = None
    nats = NatsCluster(dir, base_port=base_port, tls=certs, proxy=proxy_ports, secrets=secrets, region=nats_region,
                       port_range=port_range, exclude=_proxy_port_set(proxy_ports))
    nats.check_ports()
    if base_port:
        durakv_ports = [base_port + 10 + k for k in range(n_durakv)]
        busy = [p for p in durakv_ports if not port_is_free(p)]
        if busy:
            raise ClusterError(f"port(s) {busy} already in use")
    else:
        durakv_ports = free_ports(n_durakv, exclude=set(nats.ports) | _proxy_port_set(proxy_ports),
                                  port_range=port_range)
    # each node's --metrics-port (free ones; a clash at bind time moves it as it moves the client port)
    metrics_ports = free_ports(n_durakv, exclude=set(nats.ports) | _proxy_port_set(proxy_ports) | set(durakv_ports),
                               port_range=port_range)
    manifest = {"version": MANIFEST_VERSION, "dir": dir, "created": time.time(),
                "options": {"shards": shards, "replicas": replicas, "durability": durability,
                            "base_port": base_port, "journal_backend": journal_backend,
                            "cluster_mode": bool(cluster_mode and journal_backend == "jetstream"),
                            "tls": bool(tls), "partitionable": bool(partitionable)},
                "env": dict(env or {}),
                "tls": certs, "secrets": secrets_dir, "password": password != "",
                "nats_servers": "", "processes": []}
    if region_domain:
        # (only in a region's manifest: a cluster without a second region keeps its options as they were)
        manifest["options"]["region_domain"] = region_domain
    if port_range is not None:
        manifest["options"]["port_range"] = list(port_range)
    if follow_region:
        manifest["options"]["follow_region"] = os.path.abspath(str(follow_region))
    cluster = cluster_cls(dir, manifest)
    for attempt in range(PORT_ATTEMPTS):
        say(f"starting NATS: {', '.join(f'{n.name} ({n.az}) {n.url}' for n in nats.nodes)}")
        try:
            if proxy_ports:
                cluster.partition.start(nats, proxy_ports, exclude=set(durakv_ports) | set(metrics_ports))
                say(f"partition proxy on 127.0.0.1:{cluster.partition.entry().ports['control']} (control): NATS routes and "
                    f"durakv-to-NATS connections between AZs go through it")
            for n in nats.nodes:
                n.start()
                manifest["processes"].append({
                    "kind": "nats", "name": n.name, "az": n.az, "ports": n.ports, "pid": n.pid,
                    "start_time": n.start_time, "dir": n.store_dir, "log": n.log_path, "argv": n.argv,
                    "config": n.config_path, "go_procs": n.go_procs})
            manifest["nats_servers"] = nats.servers
            secrets.meta["nats"] = nats.urls
            secrets.save()
            cluster.save()
            t0 = time.monotonic()
            nats.wait_ready(timeout_s)
            say(f"NATS ready in {time.monotonic() - t0:.2f}s, JetStream meta leader {nats.meta_leader()}")
            break
        except ProcessError as exc:
            nats.stop()
            cluster.partition.stop()
            # Free ports are chosen before the processes bind them; another program may take one in between.
            clash = any(_port_clash(n.read_log()) for n in nats.nodes)
            if base_port or not clash or attempt == PORT_ATTEMPTS - 1:
                raise
            say(f"a NATS port was taken meanwhile ({exc}); choosing other ports")
            manifest["processes"] = []
            node_ports = set(durakv_ports) | set(metrics_ports)
            proxy_ports = choose_proxy_ports(None, port_range, exclude=node_ports) if partitionable else None
            nats = NatsCluster(dir, base_port=None, tls=certs, proxy=proxy_ports, secrets=secrets,
                               region=nats_region, port_range=port_range,
                               exclude=node_ports | _proxy_port_set(proxy_ports))
        except BaseException:
            nats.stop()
            cluster.partition.stop()
            raise

    cluster_mode = manifest["options"]["cluster_mode"]
    k = 0
    layout = []
    for shard in range(shards):
        layout.append([])
        for i, az in enumerate(layout_azs(shard, nodes_per_shard)):
            name = f"{shard}-{i}"
            node_dir = os.path.join(dir, "nodes", name)
            os.makedirs(node_dir, exist_ok=True)
            conf = os.path.join(node_dir, "durakv.conf")
            _write_private(conf, node_config_text(manifest["password"] and secrets.resp_password))
            argv = durakv_argv(durakv_ports[k], node_dir, cluster.partition.node_nats_servers(az), az, durability,
                               journal_backend, extra_server_args, cluster_mode=cluster_mode, tls=certs,
                               metrics_port=metrics_ports[k], config_file=conf)
            manifest["processes"].append({
                "kind": "durakv", "name": name, "node_id": None, "shard": shard, "index": i, "az": az,
                "ports": {"client": durakv_ports[k], "metrics": metrics_ports[k]}, "pid": None,
                "start_time": None, "dir": node_dir,
                "log": os.path.join(dir, "logs", f"{name}.log"), "argv": argv,
                "tls_ca": certs["ca"] if certs else None,
                "password_file": os.path.join(secrets_dir, "resp.pass") if manifest["password"] else None})
            layout[-1].append(name)
            k += 1
    for p in cluster.nodes:
        cluster.launcher.spawn(p)
    cluster.save()
    t0 = time.monotonic()
    _wait_ready_moving_clashes(cluster, timeout_s, cluster.nodes, single_master=False)
    if journal_backend != "jetstream":
        # each node keeps its own journal: standalone masters, nothing to create
        return cluster.readiness.wait_ready(max(1.0, timeout_s - (time.monotonic() - t0)), cluster.nodes)
    say(f"durakv nodes answering in {time.monotonic() - t0:.2f}s; creating the cluster")
    admin = cluster.admin(say=say)
    groups = [["127.0.0.1:%d" % cluster.get(name).port for name in names] for names in layout]
    create_kw = dict(replicas=replicas, durability=durability, timeout_s=timeout_s, layout_given=True,
                     **shard_flags(extra_server_args))
    try:
        if follow is not None:
            # the same operation as on any hosts (`cluster create --follow-domain`)
            source = cluster_cls.load(follow_region).admin(say=say)
            asyncio.run(admin.create_follower(groups, source, follow["domain"], follow["peer_domain"],
                                              source_layout=follow["source_layout"], **create_kw))
        else:
            asyncio.run(admin.create(groups, **create_kw))
    except Exception as exc:  # noqa: BLE001 - reported with the processes left running, as a timeout is
        raise ClusterNotReady("cluster create failed: %s\nprocesses are left running; stop them with `durakv "
                              "cluster down --dir %s`" % (exc, dir)) from None
    for p in cluster.nodes:
        p.entry["node_id"] = cluster.node_id_of(p)
    cluster.save()
    cluster.readiness.wait_ready(max(1.0, timeout_s - (time.monotonic() - t0)), cluster.nodes)
    say(f"durakv nodes ready in {time.monotonic() - t0:.2f}s")
    return cluster


def _follow_plan(cluster_cls, source_dir, shards, domain):
    """What a follower region of the local cluster in source_dir needs: its domain, leafnode URLs and shard
    layout (refused now when this region's shard count would give another layout), and its secrets."""
    from .admin import slot_ranges
    from .region import RegionError, check_same_layout, shard_layout
    source = cluster_cls.load(source_dir)
    peer = source.options.get("region_domain")
    if not peer:
        raise ClusterError("the cluster in %s was started without --region-domain: it has no leafnode port "
                           "for a follower region" % source.dir)
    leaf_urls = ["nats-leaf://127.0.0.1:%d" % p.ports["leaf"] for p in source.nats if "leaf" in p.ports]
    topology = source._store_call(lambda store: store.get_topology())[0]
    if topology is None:
        raise ClusterError("the cluster in %s has no topology yet" % source.dir)
    layout = shard_layout(topology)
    planned = [(str(n), ((a, b),)) for n, (a, b) in enumerate(slot_ranges(shards))]
    try:
        check_same_layout(layout, planned)
    except RegionError as exc:
        raise ClusterError(str(exc)) from None
    domain = domain or (peer + "-follower")
    if domain == peer:
        raise ClusterError("a follower region needs a JetStream domain of its own, not %r" % peer)
    return ({"domain": domain, "peer_domain": peer, "source_layout": layout, "leaf_urls": leaf_urls},
            source.manifest["secrets"])


def _wait_ready_moving_clashes(cluster, timeout_s, procs, single_master=None):
    """wait_ready, but a node that exited because its port was taken meanwhile is started again on another
    free port (its argv, the manifest and, in cluster mode, the topology follow)."""
    for _attempt in range(PORT_ATTEMPTS):
        try:
            return cluster.readiness.wait_ready(timeout_s, procs=procs, single_master=single_master)
        except ClusterNotReady:
            clashed = [p for p in procs if not p.alive and _port_clash(p.log_tail(40))]
            if not clashed:
                raise
            for p in clashed:
                _move_port(cluster, p)
    return cluster.readiness.wait_ready(timeout_s, procs=procs, single_master=single_master)


def _proxy_port_set(proxy_ports) -> set:
    """The partition proxy's listening ports (choose_proxy_ports), which no other process may be given."""
    return {port for links in (proxy_ports or {}).values() for port in links.values()}


def _move_port(cluster, p):
    taken = {port for q in cluster.processes for port in q.ports.values()}
    new, new_metrics = free_ports(2, exclude=taken, port_range=cluster.options.get("port_range"))
    argv = p.entry["argv"]
    flag = "--tls-port" if "--tls-port" in argv else "--port"
    argv[argv.index(flag) + 1] = str(new)
    p.entry["ports"]["client"] = new
    if "metrics" in p.ports and "--metrics-port" in argv:   # it may have been the port that clashed
        argv[argv.index("--metrics-port") + 1] = str(new_metrics)
        p.entry["ports"]["metrics"] = new_metrics
    # (nodes are unassigned until `create`, so no topology names the old port yet)
    cluster.launcher.spawn(p)
    cluster.save()
