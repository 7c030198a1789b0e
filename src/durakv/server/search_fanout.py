"""Cluster mode for the FT.* commands: what valkey-search's coordinator does over gRPC, over RESP.

A search sent to any node answers for the whole cluster: the node sends the query to every other shard's
primary (`FT.SEARCH ... LOCALONLY`, on a connection named FANOUT_CLIENT_NAME so the receiver answers for
itself only), merges the answers with its own and replies. FT.CREATE and FT.DROPINDEX reach every shard the
same way, so each shard's primary journals the definition for its replicas and its restarts.

The exchange runs on a worker thread (Pipeline.off_loop): the client is parked, the loop keeps serving, and the
command finishes on the loop (its local part, the merge and the reply, with the read ticket of that moment).
Inside MULTI/EXEC or a script there is no worker (as valkey-search skips its fan-out there): the command
answers for this node only.
"""

from ..cluster.peers import PeerError, peer_address, peer_credentials
from ..protocol.client import RespClient, RespError

FANOUT_CLIENT_NAME = b"durakv-search-fanout"
FANOUT_TIMEOUT_S = 5.0


def other_primaries(server):
    """(name, host, port, TLS context) of every other shard's primary that owns slots, from the installed
    topology; [] outside cluster mode or with one shard."""
    routing = server.cluster_routing
    topology = routing.topology if routing is not None else None
    if topology is None:
        return []
    mine = topology.nodes.get(routing.myself_id)
    my_shard = mine.shard_id if mine is not None else None
    out = []
    for shard in topology.shards:
        if shard.id == my_shard or not shard.slots:
            continue
        try:
            host, port, ctx = peer_address(server.config, shard.primary)   # TLS whenever this node runs it
        except PeerError:
            continue
        out.append((shard.name, host, port, ctx))
    return out


def exchange(targets, args, db_id, auth):
    """Sends args to every target (in turn: a cluster has few shards) and returns [(name, reply or exception)]."""
    results = []
    for name, host, port, tls in targets:
        try:
            c = RespClient(host, port, timeout_s=FANOUT_TIMEOUT_S, ssl_context=tls)
            try:
                pre = []
                if auth:
                    pre.append((b"AUTH", *auth))
                pre.append((b"CLIENT", b"SETNAME", FANOUT_CLIENT_NAME))
                if db_id:
                    pre.append((b"SELECT", b"%d" % db_id))
                replies = c.pipeline(pre + [tuple(args)])
                for r in replies[:-1]:
                    if isinstance(r, RespError):
                        raise r
                results.append((name, replies[-1]))
            finally:
                c.sock.close()
        except (OSError, RespError, ConnectionError) as exc:
            results.append((name, exc))
    return results


class SearchFanout:
    """ServerCluster's `search_fanout`: off-loop exchange with the other shards, then finish on the loop."""

    def __init__(self, server):
        self.server = server

    def __call__(self, ctx, remote_args, finish):
        """The Deferred the client's reply is, or None when there is nothing to fan out to (one shard, not a
        cluster, a fan-out request itself, MULTI or a script): the caller answers for this node then."""
        server = self.server
        client = ctx.client
        if client is None or client.name == FANOUT_CLIENT_NAME or client.from_primary or ctx.replaying:
            return None
        targets = other_primaries(server)
        if not targets:
            return None
        node = server.cluster_node
        auth = peer_credentials(server.config, getattr(node, "auth", None))   # cluster/peers.py
        db_id = ctx.db.id
        args = list(remote_args)
        return ctx.pipeline.off_loop(ctx, args, [], lambda: exchange(targets, args, db_id, auth), finish)
