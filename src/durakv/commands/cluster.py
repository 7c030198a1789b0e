"""CLUSTER commands. FAILOVER: planned failover of a JetStream shard, asked on a replica."""

from ..errors import CommandError
from .base import syntax_error
from .registry import command


@command("cluster|failover")
def cluster_failover(ctx, args):
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"FORCE", b"TAKEOVER")):
        raise syntax_error()
    return ctx.port.request_failover()


@command("cluster|myid")
def cluster_myid(ctx, args):
    node_id = ctx.port.node_id()
    if node_id is None:
        raise CommandError("ERR This instance has cluster support disabled")
    return node_id.encode()
