"""CLUSTER commands. FAILOVER: planned failover of a JetStream shard, asked on a replica."""

from ..errors import CommandError
from ..protocol.resp import OK
from .base import syntax_error
from .registry import command


@command("cluster|failover")
def cluster_failover(ctx, args):
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"FORCE", b"TAKEOVER")):
        raise syntax_error()
    node = ctx.server.cluster_node if ctx.server is not None else None
    if node is None:
        raise CommandError("ERR This instance has cluster support disabled")
    if node.role == "primary":
        raise CommandError("ERR You should send CLUSTER FAILOVER to a replica")
    return ctx.server.loop.create_task(_request(node))


async def _request(node):
    await node.store.request_failover(node.shard, node.node_id)
    return OK


@command("cluster|myid")
def cluster_myid(ctx, args):
    node = ctx.server.cluster_node if ctx.server is not None else None
    if node is None:
        raise CommandError("ERR This instance has cluster support disabled")
    return node.node_id.encode()
