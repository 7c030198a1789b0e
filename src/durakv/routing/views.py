"""The replies of the CLUSTER subcommands that describe the topology, as reply values for protocol/resp.py
(bytes = bulk, int = integer, list = array, dict = map, None = null), built as Valkey 8.0 builds them
(cluster.c and cluster_legacy.c). Pure: a Topology and "myself" in, a value out.

CLUSTER NODES and CLUSTER INFO are text (Valkey sends them with addReplyVerbatim: a RESP3 verbatim string of
format "txt", a bulk string in RESP2); these functions return the bytes and the handler picks the encoding.

Valkey 8.0 details kept here:
* Ports follow the asking client's connection (shouldReturnTlsInfo): a TLS client is shown tls-ports, a plain
  one plain ports; tls-cluster only decides for clients without a connection.
* The migrating/importing marks of CLUSTER NODES are on the myself line of every node of the source/target
  shard: Valkey 8.0 replicates CLUSTER SETSLOT to replicas (Redis 7.0 shows them on the primary only).
* CLUSTER SLOTS lists a replica only if it is not failed and its replication offset is not 0.
* CLUSTER SHARDS shows "port" / "tls-port" only when non-zero; "health" is fail / loading (a replica at offset 0) /
  online.
"""

import re

from .. import messages
from ..errors import CommandError
from .decide import endpoint_of
from .slots import SLOTS, key_slot

_ROLE_FLAG = {"primary": "master", "replica": "slave"}
_HEALTH_FLAG = {"pfail": "fail?", "fail": "fail"}


def _offset(node, offsets):
    if offsets is not None:
        live = offsets.get(node.id)
        if live is not None:
            return live
    return node.repl_offset


def _available(node, offsets):
    """isNodeAvailable: a replica CLUSTER SLOTS may send clients to."""
    return node.health != "fail" and _offset(node, offsets) != 0


def _node_entry(node, tls, endpoint):
    if endpoint == "ip":
        head = node.ip.encode()
    elif endpoint == "hostname":
        head = (node.hostname or "?").encode()
    else:
        head = None
    meta = {}
    if endpoint != "ip":
        meta[b"ip"] = node.ip.encode()
    if endpoint != "hostname" and node.hostname:
        meta[b"hostname"] = node.hostname.encode()
    return [head, node.tls_port if tls else node.port, node.id.encode(), meta]


def cluster_slots(topology, tls=False, endpoint="ip", offsets=None) -> list:
    """CLUSTER SLOTS: one entry per run of slots owned by one shard, in slot order:
    [start, end, primary, *available replicas], each node [host, port, id, {ip?, hostname?}].
    `offsets` (node id -> replication offset) overrides the topology's offsets, e.g. with this node's live one."""
    runs = sorted((a, b, sh) for sh in topology.shards for a, b in sh.slots)
    out = []
    for a, b, sh in runs:
        entry = [a, b, _node_entry(sh.primary, tls, endpoint)]
        for r in sh.replicas:
            if _available(r, offsets):
                entry.append(_node_entry(r, tls, endpoint))
        out.append(entry)
    return out


def _shard_node(node, endpoint, offsets):
    d = {b"id": node.id.encode()}
    if node.port:
        d[b"port"] = node.port
    if node.tls_port:
        d[b"tls-port"] = node.tls_port
    d[b"ip"] = node.ip.encode()
    d[b"endpoint"] = endpoint_of(node, endpoint).encode()
    if node.hostname:
        d[b"hostname"] = node.hostname.encode()
    offset = _offset(node, offsets)
    replica = node.role == "replica"
    d[b"role"] = b"replica" if replica else b"master"
    d[b"replication-offset"] = offset
    if node.health == "fail":
        health = b"fail"
    elif replica and offset == 0:
        health = b"loading"
    else:
        health = b"online"
    d[b"health"] = health
    return d


def cluster_shards(topology, endpoint="ip", offsets=None) -> list:
    """CLUSTER SHARDS: per shard {slots: [start, end, ...], nodes: [{id, port, tls-port, ip, endpoint, hostname,
    role, replication-offset, health}, ...]} (primary first)."""
    out = []
    for sh in topology.shards:
        slots = []
        for a, b in sh.slots:
            slots.append(a)
            slots.append(b)
        out.append({b"slots": slots, b"nodes": [_shard_node(n, endpoint, offsets) for n in sh.nodes]})
    return out


def _slot_text(ranges):
    return "".join(" %d" % a if a == b else " %d-%d" % (a, b) for a, b in ranges)


def _node_line(topology, shard, node, myself_id, tls, pong_ms):
    is_me = node.id == myself_id
    flags = []
    if is_me:
        flags.append("myself")
    flags.append(_ROLE_FLAG[node.role])
    if node.health in _HEALTH_FLAG:
        flags.append(_HEALTH_FLAG[node.health])
    port = node.tls_port if tls else node.port
    addr = "%s:%d@%d" % (node.ip, port, node.bus_port)
    if node.hostname:
        addr += "," + node.hostname
    primary = "-" if node.role == "primary" else shard.primary.id
    pong = (pong_ms or {}).get(node.id, 0)
    link = "connected" if is_me or node.health == "online" else "disconnected"
    line = "%s %s %s %s 0 %d %d %s" % (node.id, addr, ",".join(flags), primary, pong, shard.config_epoch, link)
    if node.role == "primary":
        line += _slot_text(shard.slots)
    if is_me:
        line += _migration_text(topology, shard)
    return line


def cluster_nodes(topology, myself_id, tls=False, pong_ms=None) -> bytes:
    """CLUSTER NODES, one line per node ('\\n'-terminated):
    <id> <ip:port@cport[,hostname]> <flags> <primary|-> <ping-sent> <pong-recv> <config-epoch> <link> <slots>...
    and, on the line of myself, [slot->-<node>] / [slot-<-<node>] for slots its shard migrates out / in.
    `pong_ms` (node id -> wall-clock ms the node was last heard from) fills pong-recv; otherwise 0."""
    return "".join(_node_line(topology, sh, node, myself_id, tls, pong_ms) + "\n"
                   for sh in topology.shards for node in sh.nodes).encode()


def cluster_replicas(topology, node_id: bytes, myself_id, tls=False, pong_ms=None) -> list:
    """CLUSTER REPLICAS <node-id>: the CLUSTER NODES line (no newline) of each replica of a primary."""
    node = topology.nodes.get(node_id.decode("utf-8", "replace"))
    if node is None:
        raise CommandError(messages.CLUSTER_UNKNOWN_NODE.format(node_id.decode("utf-8", "replace")))
    if node.role != "primary":
        raise CommandError(messages.CLUSTER_NOT_A_MASTER)
    shard = topology.shard_by_id[node.shard_id]
    return [_node_line(topology, shard, r, myself_id, tls, pong_ms).encode() for r in shard.replicas]


def _migration_text(topology, shard):
    parts = []
    for slot in sorted(topology.migrating):
        src, dst = topology.migrating[slot]
        if src == shard.id:
            parts.append(" [%d->-%s]" % (slot, topology.shard_by_id[dst].primary.id))
        elif dst == shard.id:
            parts.append(" [%d-<-%s]" % (slot, topology.shard_by_id[src].primary.id))
    return "".join(parts)


def cluster_info(topology, myself_id, state_ok=None, messages_sent=None, messages_received=None) -> bytes:
    """CLUSTER INFO text, Valkey 8.0's fields in its order. `state_ok` defaults to the topology's full-coverage
    state; `messages_sent`/`messages_received` ({type: count}) are listed when non-zero, as Valkey lists its bus
    message counters (durakv has no cluster bus, so normally none)."""
    if state_ok is None:
        state_ok = topology.state_ok()
    assigned = ok = pfail = fail = 0
    for sh in topology.shards:
        count = sum(b - a + 1 for a, b in sh.slots)
        assigned += count
        if sh.primary.health == "fail":
            fail += count
        elif sh.primary.health == "pfail":
            pfail += count
        else:
            ok += count
    me = topology.nodes.get(myself_id)
    my_epoch = topology.shard_by_id[me.shard_id].config_epoch if me is not None else 0
    size = sum(1 for sh in topology.shards if sh.slots)
    lines = ["cluster_state:%s" % ("ok" if state_ok else "fail"),
             "cluster_slots_assigned:%d" % assigned,
             "cluster_slots_ok:%d" % ok,
             "cluster_slots_pfail:%d" % pfail,
             "cluster_slots_fail:%d" % fail,
             "cluster_known_nodes:%d" % len(topology.nodes),
             "cluster_size:%d" % size,
             "cluster_current_epoch:%d" % topology.current_epoch,
             "cluster_my_epoch:%d" % my_epoch]
    for direction, counts in (("sent", messages_sent or {}), ("received", messages_received or {})):
        total = 0
        for kind, count in counts.items():
            if count:
                total += count
                lines.append("cluster_stats_messages_%s_%s:%d" % (kind, direction, count))
        lines.append("cluster_stats_messages_%s:%d" % (direction, total))
    lines.append("total_cluster_links_buffer_limit_exceeded:0")
    return ("\r\n".join(lines) + "\r\n").encode()


def cluster_links(links) -> list:
    """CLUSTER LINKS: one map per cluster-bus link. `links` yields (direction 'to'|'from', node id,
    create_time_ms, events, send_buffer_allocated, send_buffer_used). durakv nodes talk through the coordination
    store, not a node-to-node bus, so a node normally has none and the reply is an empty array."""
    return [{b"direction": direction.encode(), b"node": node_id.encode(), b"create-time": create_time_ms,
             b"events": events.encode(), b"send-buffer-allocated": allocated, b"send-buffer-used": used}
            for direction, node_id, create_time_ms, events, allocated, used in links]


def cluster_myid(myself_id: str) -> bytes:
    return myself_id.encode()


def cluster_myshardid(topology, myself_id: str) -> bytes:
    """CLUSTER MYSHARDID: the 40-hex id of this node's shard."""
    me = topology.nodes.get(myself_id)
    if me is None:
        raise CommandError(messages.CLUSTER_NO_SHARD_ID)
    return me.shard_id.encode()


# ---- COUNTKEYSINSLOT / GETKEYSINSLOT ------------------------------------------------------------------------------

_INT = re.compile(rb"(-?[1-9][0-9]*|0)\Z")


def _long_long(arg: bytes) -> int:
    """getLongLongFromObjectOrReply: a strict 64-bit decimal."""
    if len(arg) > 20 or not _INT.match(arg):
        raise CommandError(messages.NOT_INTEGER)
    value = int(arg)
    if not -(1 << 63) <= value < (1 << 63):
        raise CommandError(messages.NOT_INTEGER)
    return value


def countkeysinslot_slot(slot_arg: bytes) -> int:
    """The slot argument of CLUSTER COUNTKEYSINSLOT, with Valkey's errors."""
    slot = _long_long(slot_arg)
    if not 0 <= slot < SLOTS:
        raise CommandError(messages.CLUSTER_INVALID_SLOT)
    return slot


def getkeysinslot_args(slot_arg: bytes, count_arg: bytes):
    """(slot, count) of CLUSTER GETKEYSINSLOT, with Valkey's errors."""
    slot = _long_long(slot_arg)
    count = _long_long(count_arg)
    if not 0 <= slot < SLOTS or count < 0:
        raise CommandError(messages.CLUSTER_INVALID_SLOT_OR_COUNT)
    return slot, count


def keys_in_slot(keys, slot: int, count: int = -1) -> list:
    """Up to `count` (-1: all) of `keys` (any iterable) that hash to `slot`, in iteration order. A scan: O(keys).
    keyspace.slotindex.SlotIndex answers the same in O(answer) when the database maintains one."""
    out = []
    if count == 0:
        return out
    for k in keys:
        if key_slot(k) == slot:
            out.append(k)
            if len(out) == count:
                break
    return out
