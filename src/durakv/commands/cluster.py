"""CLUSTER commands, ASKING, READONLY, READWRITE.

The topology they describe is the server's current routing snapshot (ctx.services.cluster.routing(): the coordination
store's topology on a JetStream shard, a one-shard topology for a one-node cluster on the local journal); the
replies are built by routing/views.py exactly as Valkey 8.0 builds them. FAILOVER asks the coordination store
for a planned failover to this replica.
"""

from .. import messages
from ..errors import CommandError
from ..protocol.resp import OK, Raw
from ..routing import key_slot
from ..routing import views
from .base import syntax_error
from .registry import READS_ALL, command


def _cluster(ctx):
    """(ClusterRouting, topology) or the error Valkey answers with cluster support disabled."""
    routing = ctx.services.cluster.routing()
    if routing is None:
        raise CommandError(messages.CLUSTER_DISABLED)
    topology = routing.view()
    if topology is None:
        raise CommandError(messages.CLUSTERDOWN_STATE)
    return routing, topology


def _verbatim(ctx, text: bytes):
    """addReplyVerbatim: a RESP3 verbatim string ('txt'), a bulk string in RESP2."""
    if ctx.resp3:
        return Raw(b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text))
    return text


def _endpoint(ctx):
    return ctx.services.config["cluster-preferred-endpoint-type"]


@command("cluster|slots")
def cluster_slots(ctx, args):
    routing, topology = _cluster(ctx)
    return views.cluster_slots(topology, tls=ctx.client.tls, endpoint=_endpoint(ctx), offsets=routing.offsets())


@command("cluster|shards")
def cluster_shards(ctx, args):
    routing, topology = _cluster(ctx)
    return views.cluster_shards(topology, endpoint=_endpoint(ctx), offsets=routing.offsets())


@command("cluster|nodes")
def cluster_nodes(ctx, args):
    routing, topology = _cluster(ctx)
    return _verbatim(ctx, views.cluster_nodes(topology, routing.myself_id, tls=ctx.client.tls))


@command("cluster|replicas")
def cluster_replicas(ctx, args):
    routing, topology = _cluster(ctx)
    return views.cluster_replicas(topology, args[2], routing.myself_id, tls=ctx.client.tls)


@command("cluster|slaves")
def cluster_slaves(ctx, args):
    return cluster_replicas(ctx, args)


@command("cluster|info")
def cluster_info(ctx, args):
    routing, topology = _cluster(ctx)
    return _verbatim(ctx, views.cluster_info(topology, routing.myself_id, state_ok=routing.router.healthy))


@command("cluster|myid")
def cluster_myid(ctx, args):
    routing = ctx.services.cluster.routing()
    if routing is None:
        node_id = ctx.services.cluster.node_id()   # a JetStream shard member without cluster mode still has an id
        if node_id is None:
            raise CommandError(messages.CLUSTER_DISABLED)
        return node_id.encode()
    return views.cluster_myid(routing.myself_id)


@command("cluster|myshardid")
def cluster_myshardid(ctx, args):
    routing, topology = _cluster(ctx)
    return views.cluster_myshardid(topology, routing.myself_id)


@command("cluster|keyslot")
def cluster_keyslot(ctx, args):
    # answered outside cluster mode too: Valkey 9.1 computes a key's slot without a cluster
    return key_slot(args[2])


@command("cluster|countkeysinslot", reads_data=READS_ALL)
def cluster_countkeysinslot(ctx, args):
    _cluster(ctx)
    slot = views.countkeysinslot_slot(args[2])
    index = ctx.db.slots   # a cluster node keeps one (O(1), as Valkey's per-slot dicts); else a scan
    return index.count(slot) if index is not None else len(views.keys_in_slot(ctx.db.data, slot))


@command("cluster|getkeysinslot", reads_data=READS_ALL)
def cluster_getkeysinslot(ctx, args):
    _cluster(ctx)
    slot, count = views.getkeysinslot_args(args[2], args[3])
    index = ctx.db.slots
    return index.keys(slot, count) if index is not None else views.keys_in_slot(ctx.db.data, slot, count)


@command("cluster|links")
def cluster_links(ctx, args):
    _cluster(ctx)
    return views.cluster_links(())


@command("cluster|failover")
def cluster_failover(ctx, args):
    if ctx.services.cluster.routing() is None and ctx.services.cluster.node_id() is None:
        raise CommandError(messages.CLUSTER_DISABLED)     # before the arguments, as clusterCommand checks
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"FORCE", b"TAKEOVER")):
        raise syntax_error()
    return ctx.services.cluster.request_failover()


@command("cluster|reset")
def cluster_reset(ctx, args):
    _cluster(ctx)
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"HARD", b"SOFT")):
        raise syntax_error()
    # A node forgets its cluster view in Valkey; here the view is the coordination store's, not the node's.
    raise CommandError(messages.CLUSTER_RESET_UNSUPPORTED)


# Valkey 9.1.2's clusterCommandHelp + clusterCommandExtendedHelp (every subcommand has a handler here)
_CLUSTER_HELP = [
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "MYSHARDID",
    "    Return the node's shard id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@bus-port[,hostname]> <flags> <primary> <pings> <pongs> <epoch> <link> <slot> ...",
    "REPLICAS <node-id>",
    "    Return <node-id> replicas.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, primary and replicas IP addresses, ports and ids",
    "SLOT-STATS",
    "    Return an array of slot usage statistics for slots assigned to the current node.",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "ADDSLOTS <slot> [<slot> ...]",
    "    Assign slots to current node.",
    "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Assign slots which are between <start-slot> and <end-slot> to current node.",
    "BUMPEPOCH",
    "    Advance the cluster config epoch.",
    "COUNT-FAILURE-REPORTS <node-id>",
    "    Return number of failure reports for <node-id>.",
    "DELSLOTS <slot> [<slot> ...]",
    "    Delete slots information from current node.",
    "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
    "FAILOVER [FORCE|TAKEOVER]",
    "    Promote current replica node to being a master.",
    "FORGET <node-id>",
    "    Remove a node from the cluster.",
    "FLUSHSLOTS",
    "    Delete current node own slots information.",
    "MEET <ip> <port> [<bus-port>]",
    "    Connect nodes into a working cluster.",
    "REPLICATE <node-id>",
    "    Configure current node as replica to <node-id>.",
    "RESET [HARD|SOFT]",
    "    Reset current node (default: soft).",
    "SET-CONFIG-EPOCH <epoch>",
    "    Set config epoch of current node.",
    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
    "    Set slot state.",
    "SAVECONFIG",
    "    Force saving cluster configuration on disk.",
    "LINKS",
    "    Return information about all network links between this node and its peers.",
    "    Output format is an array where each array element is a map containing attributes of a link",
    ("MIGRATESLOTS SLOTSRANGE start-slot end-slot [start-slot end-slot ...] NODE node-id "
     "[SLOTSRANGE start-slot end-slot [start-slot end-slot ...] NODE node-id ...]"),
    "    Migrate the specified slot ranges from this node to the specified node.",
    "CANCELSLOTMIGRATIONS ALL",
    "    Cancel all migrations.",
    "GETSLOTMIGRATIONS",
    "    Get information about ongoing and recently finished slot imports and exports.",
]


@command("cluster|help")
def cluster_help(ctx, args):
    _cluster(ctx)            # Valkey answers "cluster support disabled" first, for HELP too
    return ["CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"] + _CLUSTER_HELP + [
        "HELP", "    Print this help."]


@command("asking")
def asking(ctx, args):
    if ctx.services.cluster.routing() is None:
        raise CommandError(messages.CLUSTER_DISABLED)
    ctx.client.asking = True
    return OK


@command("readonly")
def readonly(ctx, args):
    # Valkey 9 accepts READONLY / READWRITE without cluster mode too: a client with CLIENT CAPA redirect reads
    # on a standalone replica only in READONLY mode (its writes get -REDIRECT either way).
    ctx.client.readonly_mode = True
    return OK


@command("readwrite")
def readwrite(ctx, args):
    ctx.client.readonly_mode = False
    return OK
