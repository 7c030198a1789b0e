"""One semantics, two implementations: the compiled core (fastpath/_core.c) against the pure-Python pipeline.

Two durakv servers run side by side in `sync` mode on the local journal, one with the compiled core and one
with DURAKV_PURE_PYTHON=1, in three shapes (MODES): standalone; a one-node cluster (the router's slot check:
CROSSSLOT where a command's keys are in different slots, the cluster-only rules); and with output limits
configured (client-output-buffer-limit for plain clients, which sends the core's flush to the Python one, and
a client-held-replies-limit of one byte, which stops reading a client at every held reply until its commit).

Hypothesis draws command sequences over a few keys (every fast command with its options and edge arguments:
wrong types, wrong arity, huge and negative numbers, past and future expiry, mixed case, commands the core leaves to the pipeline in between) and sends each one pipelined in one write, in RESP2
or RESP3, to both. Compared afterwards: every reply, the journal's effects (the whole sequence of commands
both journals hold, decoded; relative expiry times within a tolerance), the dirty-key count
(rdb_changes_since_last_save), commandstats calls / rejected / failed, keyspace hits and misses, the
dataset's memory estimate, and the keyspace itself (TYPE, DUMP and PTTL of every key).
"""

import re
import socket

import pytest
from hypothesis import example, HealthCheck, given, settings
from hypothesis import strategies as st

from durakv import fastpath
from durakv.journal.codec import decode_payload
from durakv.journal.walscan import iter_entries
from durakv.protocol.resp import encode_command

from helpers.wire import _read_reply as read_reply

pytestmark = pytest.mark.skipif(fastpath.core is None, reason="needs the compiled core (pip install with gcc)")

KEYS = [b"k0", b"k1", b"k2", b"{k}3", b"{k}4"]   # (the last two share a slot: multi-key commands in cluster mode)
MODES = {
    "standalone": [],
    "cluster": ["--cluster-enabled", "yes"],
    "limits": ["--client-output-buffer-limit", "normal 64mb 32mb 60", "--client-held-replies-limit", "1"],
}
NUMBERS = [b"0", b"1", b"-1", b"10", b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808",
           b"01", b"-0", b" 1", b"+1", b"1.5", b"abc", b"", b"100000000000000000000"]
TTL_TOLERANCE_MS = 5000


def _mixed_case(draw, name):
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    return bytes(c - 32 if f and 97 <= c <= 122 else c for c, f in zip(name, flips))


@st.composite
def commands(draw):
    key = st.sampled_from(KEYS)
    value = st.one_of(st.sampled_from(NUMBERS), st.binary(max_size=20))
    kind = draw(st.integers(0, 23))
    if kind == 0:
        args = [b"set", draw(key), draw(value)]
        opts = draw(st.lists(st.sampled_from([
            [b"NX"], [b"XX"], [b"GET"], [b"KEEPTTL"], [b"EX", b"1000"], [b"PX", b"900000"],
            [b"EXAT", b"4102444800"], [b"PXAT", b"4102444800000"], [b"EXAT", b"1"], [b"PXAT", b"5"],
            [b"EX", b"0"], [b"EX", b"-5"], [b"PX", b"abc"], [b"EX"], [b"BOGUS"], [b"ex", b"9223372036854775807"],
            [b"px", b"9223372036854775807"], [b"nx"], [b"get"]]), max_size=3))
        for o in opts:
            args += o
    elif kind == 1:
        args = [b"get", draw(key)] + draw(st.sampled_from([[], [], [b"extra"]]))
    elif kind == 2:
        args = [b"mget"] + draw(st.lists(key, min_size=0, max_size=4))
    elif kind == 3:
        pairs = draw(st.lists(st.tuples(key, value), min_size=0, max_size=3))
        args = [b"mset"] + [x for p in pairs for x in p] + draw(st.sampled_from([[], [], [b"odd"]]))
    elif kind == 4:
        args = [draw(st.sampled_from([b"incr", b"decr"])), draw(key)]
    elif kind == 5:
        args = [draw(st.sampled_from([b"incrby", b"decrby"])), draw(key), draw(st.sampled_from(NUMBERS))]
    elif kind == 6:
        args = [draw(st.sampled_from([b"del", b"unlink"]))] + draw(st.lists(key, min_size=0, max_size=3))
    elif kind == 7:
        args = [b"exists"] + draw(st.lists(key, min_size=0, max_size=3))
    elif kind == 8:
        args = [draw(st.sampled_from([b"ttl", b"pttl"])), draw(key)]
    elif kind == 9:
        args = [b"ping"] + draw(st.sampled_from([[], [b"hello"], [b"a", b"b"]]))
    elif kind == 10:
        args = [b"echo"] + draw(st.sampled_from([[b"x"], [], [b"a", b"b"]]))
    elif kind == 11:   # another type at a key: the core must leave WRONGTYPE and the overwrite to the pipeline
        args = draw(st.sampled_from([[b"hset", draw(key), b"f", b"v"], [b"rpush", draw(key), b"a"],
                                     [b"sadd", draw(key), b"m"]]))
    elif kind == 12:   # expiry set by commands the core does not run
        args = draw(st.sampled_from([[b"expire", draw(key), b"1000"], [b"pexpireat", draw(key), b"1"],
                                     [b"persist", draw(key)], [b"pexpire", draw(key), b"0"],
                                     [b"hpexpireat", draw(key), b"4102444800000", b"FIELDS", b"1", b"f"],
                                     [b"hpexpireat", draw(key), b"1", b"FIELDS", b"1", b"f"]]))
    elif kind == 13:
        args = [b"append", draw(key), draw(value)]
    elif kind == 14:
        args = [b"select", draw(st.sampled_from([b"0", b"1"]))]
    elif kind == 15:
        args = [b"incrbyfloat", draw(key), b"1.5"]
    elif kind == 16:
        args = [b"getset", draw(key), draw(value)]
    elif kind == 17:
        args = [b"strlen", draw(key)]
    elif kind == 18:
        args = [b"hget", draw(key), draw(st.sampled_from([b"f", b"g"]))] + draw(st.sampled_from([[], [], [b"x"]]))
    elif kind == 19:
        pairs = draw(st.lists(st.tuples(st.sampled_from([b"f", b"g", b"h"]), value), min_size=0, max_size=3))
        args = [b"hset", draw(key)] + [x for p in pairs for x in p] + draw(st.sampled_from([[], [], [b"odd"]]))
    elif kind == 20:
        args = [draw(st.sampled_from([b"lpush", b"rpush"])), draw(key)] + draw(st.lists(value, max_size=3))
    elif kind == 21:
        args = [draw(st.sampled_from([b"lpop", b"rpop"])), draw(key)] + draw(
            st.sampled_from([[], [], [b"2"], [b"0"], [b"-1"], [b"x"]]))
    elif kind == 22:
        args = [b"sadd", draw(key)] + draw(st.lists(st.sampled_from([b"1", b"2", b"a", b"b" * 70]), max_size=4))
    else:   # reads of the collections the core does not run, so encodings and contents show
        args = draw(st.sampled_from([[b"hgetall", draw(key)], [b"lrange", draw(key), b"0", b"-1"],
                                     [b"smembers", draw(key)], [b"object", b"encoding", draw(key)]]))
    args[0] = _mixed_case(draw, args[0])
    return args


class Peer:
    """One server and a raw socket to it (replies read as RESP, errors as values)."""

    def __init__(self, srv):
        self.srv = srv
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
        self.file = self.sock.makefile("rb")
        self.journal_seen = 0

    def send(self, cmds):
        self.sock.sendall(b"".join(encode_command(c) for c in cmds))
        return [read_reply(self.file) for _ in cmds]

    def call(self, *args):
        return self.send([list(args)])[0]

    def info(self, section):
        raw = self.call(b"info", section.encode())
        text = raw.split(b"\r\n", 1)[1][:-2]   # the exact reply bytes: a bulk string's header, then its body
        out = {}
        for line in text.decode().splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def new_effects(self):
        """The effects journaled since the last call, decoded: [(db_id, argv)]."""
        upto = int(self.info("durability")["journal_commit_index"])
        effects = []
        for entry in iter_entries(self.srv.data_dir, after=self.journal_seen, upto=upto):
            effects.extend((db, [bytes(a) for a in argv]) for db, argv in decode_payload(entry.payload))
        self.journal_seen = upto
        return effects

    def close(self):
        self.file.close()
        self.sock.close()


def _same_reply(a, b, cmd):
    # the exact bytes of both replies; PTTL of a relative expiry within a tolerance (each server's clock)
    if cmd[0].lower() == b"pttl" and a[:1] == b[:1] == b":" and a != b:
        x, y = int(a[1:-2]), int(b[1:-2])
        return x > 0 and y > 0 and abs(x - y) <= TTL_TOLERANCE_MS
    return a == b


def _same_effect(a, b):
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    for x, y in zip(a[1], b[1]):
        if x != y:
            # SET ... PXAT <now + relative>: each server's own clock
            if not (x.isdigit() and y.isdigit() and abs(int(x) - int(y)) <= TTL_TOLERANCE_MS):
                return False
    return True


def _stats(peer):
    stats = peer.info("stats")
    mem = peer.info("memory")
    persistence = peer.info("persistence")
    cmdstats = {k: ",".join(p for p in v.split(",") if not p.startswith("usec")) for k, v in
                peer.info("commandstats").items()}
    return {"hits": stats["keyspace_hits"], "misses": stats["keyspace_misses"],
            "dataset": mem["used_memory_dataset"], "changes": persistence["rdb_changes_since_last_save"],
            "errors": stats.get("total_error_replies"), "cmdstats": cmdstats}


def _keyspace(peer):
    out = {}
    for db in (b"0", b"1"):
        peer.call(b"select", db)
        for k in KEYS:
            ttl = peer.call(b"pttl", k)
            ttl = int(ttl[1:-2]) // TTL_TOLERANCE_MS   # a relative expiry: each server's own clock
            out[(db, k)] = (peer.call(b"type", k), peer.call(b"dump", k), ttl)
    peer.call(b"select", b"0")
    return out


@pytest.fixture(scope="module", params=sorted(MODES))
def peers(tmp_path_factory, request):
    import os
    from conftest import ServerProcess
    servers = []
    try:
        for pure in (False, True):
            env = dict(os.environ)
            env.pop("DURAKV_PURE_PYTHON", None)
            env["PYTHONHASHSEED"] = "0"   # the same set order in both (DUMP of a set lists its members in it)
            if pure:
                env["DURAKV_PURE_PYTHON"] = "1"
            srv = ServerProcess(tmp_path_factory.mktemp("pure" if pure else "compiled"),
                                args=["--durability", "sync"] + MODES[request.param], env=env)
            servers.append(srv)
            srv.start()
        pair = [Peer(s) for s in servers]
        assert pair[0].info("server")["durakv_core"] == "compiled"
        assert pair[1].info("server")["durakv_core"] == "python"
        for p in pair:
            assert p.info("cluster")["cluster_enabled"] == ("1" if request.param == "cluster" else "0")
        yield pair
        for p in pair:
            p.close()
    finally:
        for s in servers:
            s.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(seq=st.lists(commands(), min_size=1, max_size=25), resp3=st.booleans())
# SET ... GET reads its key as GET does, counting a keyspace hit or miss (the core once counted none)
@example(seq=[[b"GET", b"k0"], [b"SET", b"k0", b"0", b"GET"]], resp3=False)
@example(seq=[[b"SET", b"k0", b"1"], [b"SET", b"k0", b"2", b"NX", b"GET"]], resp3=False)
def test_compiled_core_equals_python_pipeline(peers, seq, resp3):
    compiled, pure = peers
    for p in peers:
        p.send([[b"select", b"1"], [b"flushdb"], [b"select", b"0"], [b"flushdb"], [b"config", b"resetstat"],
                [b"hello", b"3" if resp3 else b"2"]])
        p.new_effects()
    before = [_stats(p) for p in peers]
    assert before[0] == before[1]
    got = compiled.send(seq)
    want = pure.send(seq)
    for cmd, a, b in zip(seq, got, want):
        assert _same_reply(a, b, cmd), (cmd, a, b, seq)
    for p in peers:
        p.send([[b"hello", b"2"], [b"select", b"0"]])
    # keyspace and counters first (reading the keyspace counts as reads: both the same way)
    sa, sb = _stats(compiled), _stats(pure)
    assert sa == sb, seq
    assert _keyspace(compiled) == _keyspace(pure), seq
    ea, eb = compiled.new_effects(), pure.new_effects()
    assert len(ea) == len(eb) and all(_same_effect(x, y) for x, y in zip(ea, eb)), (ea, eb, seq)


def test_core_runs_the_fast_commands(peers):
    """The comparison above means something only if the compiled server really ran them in the core."""
    compiled, _pure = peers
    compiled.send([[b"select", b"0"], [b"flushall"]])
    count = lambda: int(compiled.info("server")["durakv_core_commands"])  # noqa: E731
    before = count()
    compiled.send([[b"SET", b"k0", b"v"], [b"GET", b"k0"], [b"INCR", b"{k}3"], [b"MGET", b"{k}4", b"{k}3"],
                   [b"HSET", b"h", b"f", b"v"], [b"HGET", b"h", b"f"], [b"RPUSH", b"l", b"a"], [b"LPOP", b"l"],
                   [b"SADD", b"s", b"m"]])
    assert count() - before == 9


_INLINE_SAFE = re.compile(rb"[A-Za-z0-9:{}_.+-]+")   # what an inline request carries as is (no quotes, spaces)


def _net(peer):
    stats = peer.info("stats")
    return {k: int(stats[k]) for k in ("total_net_input_bytes", "total_net_output_bytes",
                                       "total_commands_processed")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(seq=st.lists(commands(), min_size=1, max_size=12), cuts=st.lists(st.integers(1, 400), max_size=6),
       inline=st.lists(st.booleans(), min_size=12, max_size=12))
def test_read_callback_equals_python_reads(peers, seq, cuts, inline):
    """The compiled read callback (Core.received) against Connection.read: the same bytes, cut into reads at
    random places (a request split across reads goes on in the Python parser from where the compiled parse
    stopped), some requests inline (the Python parser's from the start): the same replies and the same
    network and command counters."""
    stream = b"".join(b" ".join(c) + b"\r\n" if inline[i] and all(_INLINE_SAFE.fullmatch(a) for a in c)
                      else encode_command(c) for i, c in enumerate(seq))
    chunks, at = [], 0
    for n in cuts:
        if at + n >= len(stream):
            break
        chunks.append(stream[at:at + n])
        at += n
    chunks.append(stream[at:])
    for p in peers:
        p.send([[b"flushall"], [b"config", b"resetstat"]])
    before = [_net(p) for p in peers]
    replies = []
    for p in peers:
        p.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for chunk in chunks:
            p.sock.sendall(chunk)
        replies.append([read_reply(p.file) for _ in seq])
    for cmd, a, b in zip(seq, *replies):
        assert _same_reply(a, b, cmd), (cmd, a, b, chunks)
    after = [_net(p) for p in peers]
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
    # the output count also holds the first INFO's reply, whose figures differ: each counts at least the replies
    sent = sum(map(len, replies[0]))
    for d in delta:
        assert d.pop("total_net_output_bytes") >= sent, (delta, sent)
    assert delta[0] == delta[1], (delta, chunks)


def test_read_callback_times_event_loop_turns(peers):
    """The compiled turn marker (begin_turn / end_turn) keeps INFO's eventloop figures as LoopStats does."""
    compiled, pure = peers
    for p in peers:
        p.call(b"config", b"resetstat")
        for _ in range(20):
            p.call(b"ping")
        stats = p.info("stats")
        assert int(stats["eventloop_cycles"]) >= 20, stats
        assert int(stats["eventloop_duration_sum"]) > 0, stats
