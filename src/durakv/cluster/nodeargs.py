"""What a local cluster's durakv node is started with: its command line, its config file, its AZ in the layout.

Both bringing a cluster up (bootstrap.py) and adding a shard to it (shards.py) start nodes this way; keeping it
here, below both, is what lets neither import the other.
"""

import sys

from .nats_procs import AZS


def node_config_text(password, tls=None, nats_ca=None):
    """A node's config file: what must not be in its argv (the password) and its TLS files."""
    from ..config import quote_config_value
    lines = ["# durakv local cluster node (made by `durakv cluster up`; holds the cluster's password: 0600)"]
    if password:
        lines.append("requirepass %s" % quote_config_value(password))
    return "\n".join(lines) + "\n"


def durakv_argv(port, node_dir, nats_servers, az, durability, journal_backend, extra=(), cluster_mode=True, tls=None,
                metrics_port=0, config_file=None):
    """The command line of one node (unassigned: `cluster create` gives it its shard). tls ({"cert", "key",
    "ca"}): clients only over TLS (on `port`), NATS too, with the same certificate as its client certificate;
    metrics_port: its own Prometheus metrics (server/metrics.py), 0 for none."""
    if tls:
        ports = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", tls["cert"], "--tls-key-file",
                 tls["key"], "--tls-ca-cert-file", tls["ca"], "--tls-auth-clients", "no",
                 "--journal-nats-tls-ca-file", tls["ca"], "--journal-nats-tls-cert-file", tls["cert"],
                 "--journal-nats-tls-key-file", tls["key"]]
    else:
        ports = ["--port", str(port)]
    return [sys.executable, "-m", "durakv", "server"] + ([config_file] if config_file else []) + ports + [
        "--bind", "127.0.0.1", "--dir", node_dir, "--journal-backend", journal_backend,
        "--journal-nats-servers", nats_servers, "--availability-zone", az, "--durability", durability,
        "--cluster-enabled", "yes" if cluster_mode else "no"] + (
        ["--metrics-port", str(metrics_port)] if metrics_port else []) + list(extra)


def shard_flags(extra_server_args) -> dict:
    """The shard settings the nodes' extra arguments name (--lease-ttl-ms, --durability-buffer-ms): what `create`
    stores as every shard's, as the first node's flags once were."""
    out = {}
    args = list(extra_server_args)
    for flag, key in (("--lease-ttl-ms", "lease_ttl_ms"), ("--durability-buffer-ms", "durability_buffer_ms")):
        for i, a in enumerate(args):
            if a == flag and i + 1 < len(args):
                out[key] = int(args[i + 1])
            elif a.startswith(flag + "="):
                out[key] = int(a.split("=", 1)[1])
    return out


def layout_azs(shard, nodes_per_shard):
    """The AZs of a shard's nodes, primary first: shard k's primary in AZ k mod 3, its replicas in the next ones,
    as the managed services spread primaries (one AZ's power cut takes at most a third of them)."""
    return [AZS[(shard + i) % len(AZS)] for i in range(nodes_per_shard)]
