"""The compiled core against the pure-Python pipeline on a real two-shard cluster (JetStream, sync).

The standalone and one-node shapes of tests/server/test_fastpath_differential.py never send a key to a shard
that does not own it, and never run with a lapsed lease. Here two clusters of two shards run side by side, one
whose nodes have the compiled core and one whose nodes run DURAKV_PURE_PYTHON=1, and the same pipelined batches
go to shard 0's primary of each:

- keys of both shards: the core's slot admission (cluster_admits) must hand a key of the other shard to the
  pipeline, which answers MOVED; hash tags, CROSSSLOT for keys in two slots, keyless commands;
- the same batch while every NATS server of the cluster is paused, so the primary's lease lapses: the core asks
  the gate (fast_serving) and the pipeline refuses with the lease error, for every command that touches data.

Replies are compared byte for byte after the addresses in MOVED are replaced by the shard they name (the two
clusters listen on different ports), then the keyspace of both shards (DUMP and PTTL of every key).
"""

import re
import socket

import pytest

from conftest import wait_until
from helpers.wire import _encode, _read_reply
from durakv import fastpath
from durakv.routing import key_slot

pytestmark = pytest.mark.skipif(fastpath.core is None, reason="needs the compiled core (pip install with gcc)")

LEASE = b"-CLUSTERDOWN The primary's lease expired; it is not serving until it is renewed\r\n"


def _key_in(prefix, lo, hi):
    for i in range(100000):
        k = b"%s%d" % (prefix, i)
        if lo <= key_slot(k) <= hi:
            return k
    raise AssertionError("no key")


# shard "0" owns slots 0..8191 and shard "1" 8192..16383 (cluster up splits them as valkey-cli does)
OWN = _key_in(b"own", 0, 8191)
OWN2 = _key_in(b"mine", 0, 8191)
OTHER = _key_in(b"other", 8192, 16383)
TAG = next(t for t in (b"{t%d}" % i for i in range(1000)) if key_slot(t) <= 8191)
TAGGED = [TAG + b"a", TAG + b"b"]
OTHER_TAG = next(t for t in (b"{u%d}" % i for i in range(1000)) if key_slot(t) > 8191)
KEYS = [OWN, OWN2, OTHER] + TAGGED + [OTHER_TAG + b"a"]


def _batch():
    """Every command the core may run (GET SET MGET MSET INCR INCRBY DECR DECRBY DEL UNLINK EXISTS TTL PTTL HSET
    HGET LPUSH RPUSH LPOP RPOP SADD PING ECHO), on an owned key, a key of the other shard, same-slot and
    cross-slot pairs, with options and wrong types; and a few the core leaves to the pipeline between them."""
    o, o2, x = OWN, OWN2, OTHER
    a, b = TAGGED
    xa = OTHER_TAG + b"a"
    return [
        [b"SET", o, b"1"], [b"SET", x, b"1"], [b"GET", o], [b"GET", x], [b"SET", o, b"2", b"GET"],
        [b"SET", o2, b"v", b"PX", b"900000"], [b"SET", x, b"v", b"NX"], [b"INCR", o], [b"INCR", x],
        [b"INCRBY", o, b"10"], [b"DECRBY", x, b"3"], [b"DECR", o], [b"INCR", o2],
        [b"MGET", a, b], [b"MGET", o, o2], [b"MGET", o, x], [b"MSET", a, b"1", b], [b"MSET", a, b"1", b, b"2"],
        [b"MSET", o, b"1", x, b"2"], [b"MSET", xa, b"9"], [b"EXISTS", a, b, a], [b"EXISTS", o, x],
        [b"TTL", o2], [b"PTTL", o], [b"PTTL", x], [b"HSET", b"h" + TAG, b"f", b"v"], [b"HGET", b"h" + TAG, b"f"],
        [b"HSET", xa, b"f", b"v"], [b"HGET", o, b"f"], [b"LPUSH", TAG + b"l", b"1", b"2"],
        [b"RPUSH", TAG + b"l", b"3"], [b"LPOP", TAG + b"l"], [b"RPOP", TAG + b"l"], [b"RPOP", xa],
        [b"SADD", TAG + b"s", b"m", b"n", b"m"], [b"SADD", x, b"m"], [b"PING"], [b"ECHO", b"hi"],
        [b"GET", b"no-such-" + TAG], [b"APPEND", o2, b"x"], [b"STRLEN", x], [b"DBSIZE"],
        [b"DEL", a, b], [b"DEL", o, x], [b"UNLINK", a], [b"GET", o], [b"SET", o, b"back"], [b"GET", o],
    ]


def _send(port, commands):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(_encode(c) for c in commands))
        f = s.makefile("rb")
        return [_read_reply(f) for _ in commands]


def _normalized(replies, cluster):
    """MOVED/ASK name the owner's address: each cluster's ports are its own, so name the shard instead."""
    shard_of = {p.port: p.shard for p in cluster.nodes}

    def shard(m):
        return b"shard-%s" % str(shard_of.get(int(m.group(1)), "?")).encode()
    return [re.sub(rb"127\.0\.0\.1:(\d+)", shard, r) for r in replies]


def _keyspace(cluster):
    state = {}
    for shard in (0, 1):
        port = cluster.primary(shard).port
        for k in KEYS + [b"h" + TAG, TAG + b"l", TAG + b"s"]:
            if (key_slot(k) <= 8191) == (shard == 0):
                state[k] = _send(port, [[b"DUMP", k], [b"PTTL", k]])
    for k, (dump, pttl) in state.items():
        if pttl.startswith(b":") and int(pttl[1:-2]) > 0:
            state[k] = (dump, b"ttl")     # the two clusters ran the batch moments apart
    return state


def _core_commands(port):
    info = _send(port, [[b"INFO", b"server"]])[0].decode()
    fields = dict(line.split(":", 1) for line in info.splitlines()[1:] if ":" in line)
    return fields["durakv_core"], int(fields.get("durakv_core_commands", "0"))


def test_the_core_and_the_pipeline_agree_on_moved_crossslot_and_a_lapsed_lease(local_cluster):
    # the same set order in both (DUMP of a set lists its members in it)
    compiled = local_cluster(shards=2, replicas=0, durability="sync", env={"PYTHONHASHSEED": "0"})
    pure = local_cluster(shards=2, replicas=0, durability="sync",
                         env={"DURAKV_PURE_PYTHON": "1", "PYTHONHASHSEED": "0"})
    ours, theirs = compiled.primary(0).port, pure.primary(0).port
    kind, ran = _core_commands(ours)
    assert kind == "compiled" and _core_commands(theirs)[0] != "compiled"

    batch = _batch()
    mine, ref = _send(ours, batch), _send(theirs, batch)
    assert _normalized(mine, compiled) == _normalized(ref, pure)
    assert any(r.startswith(b"-MOVED") for r in ref) and any(r.startswith(b"-CROSSSLOT") for r in ref)
    assert _core_commands(ours)[1] > ran          # the owned keys ran on the compiled core
    assert _keyspace(compiled) == _keyspace(pure)

    # every NATS server paused: renewals fail, the lease lapses, and nothing that touches data is served
    lapsed = {}
    for cluster, port in ((compiled, ours), (pure, theirs)):
        for n in cluster.nats:
            cluster.pause(n.name)
        try:
            wait_until(lambda: _send(port, [[b"GET", OWN]]) == [LEASE], 30, what="the primary's lease to lapse")
            lapsed[port] = _send(port, batch)
        finally:
            for n in cluster.nats:
                cluster.resume(n.name)
    assert _normalized(lapsed[ours], compiled) == _normalized(lapsed[theirs], pure)
    assert lapsed[ours].count(LEASE) >= 30 and b"+PONG\r\n" in lapsed[ours]
