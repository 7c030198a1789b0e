"""Stream commands against a real server (valkey-py, RESP2 and RESP3), the blocking protocol of XREAD /
XREADGROUP, effect determinism (replay_util), snapshots of streams and consumer groups, and kill -9
recovery of consumer group state."""

import glob
import random

import pytest
import valkey

from conftest import wait_until
from helpers.wire import error_of as err, raw, resp3
from helpers.replay import apply_effects, run_and_replay
from durakv.commands.base import Blocked
from helpers.replay import Direct
from durakv.errors import CommandError
from durakv.keyspace import Keyspace
from durakv.keyspace.stream import Stream
from durakv.protocol.resp import ErrorReply, NullArray
from durakv.snapshot.format import iter_commands

T0 = 1_700_000_000_000


# -- helpers ------------------------------------------------------------------------------------


def ids_of(entries):
    return [e[0] for e in entries]


class Local(Direct):
    """A pipeline on an in-process keyspace with a settable clock (T0), and its session's context."""

    def __init__(self, now=T0):
        super().__init__(now, seed=3)

    @property
    def ctx(self):
        return self.s.ctx


# -- XADD / XLEN / XRANGE / XREVRANGE ----------------------------------------------------------------

def test_xadd_explicit_and_auto_ids(rr):
    assert raw(rr, "XADD", "s", "1-1", "f", "v") == b"1-1"
    assert raw(rr, "XADD", "s", "1-*", "f", "v") == b"1-2"
    assert raw(rr, "XADD", "s", "2", "f", "v") == b"2-0"
    assert raw(rr, "XADD", "s", "5-*", "f", "v") == b"5-0"
    auto = raw(rr, "XADD", "s", "*", "a", "1", "b", "2")
    ms, seq = auto.split(b"-")
    assert int(ms) > 1_600_000_000_000 and int(seq) >= 0
    assert raw(rr, "XLEN", "s") == 5
    assert raw(rr, "TYPE", "s") in (b"stream", "stream")
    assert rr.type("s") == b"stream"
    rr.set("str", "x")
    assert raw(rr, "SCAN", "0", "TYPE", "stream")[1] == [b"s"]
    assert raw(rr, "XLEN", "nokey") == 0
    assert err(rr, "XADD", "s", "1-1", "f", "v") == \
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    assert err(rr, "XADD", "s", "3-*", "f", "v") == \
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    assert err(rr, "XADD", "z", "0-0", "f", "v") == "ERR The ID specified in XADD must be greater than 0-0"
    assert raw(rr, "EXISTS", "z") == 0
    assert raw(rr, "XADD", "z", "0-*", "f", "v") == b"0-1"
    assert err(rr, "XADD", "s", "abc", "f", "v") == "ERR Invalid stream ID specified as stream command argument"
    assert err(rr, "XADD", "s", "1-x", "f", "v") == "ERR Invalid stream ID specified as stream command argument"
    assert err(rr, "XADD", "s", "+", "f", "v") == "ERR Invalid stream ID specified as stream command argument"
    assert err(rr, "XADD", "s", "*", "f") == "ERR wrong number of arguments for 'xadd' command"
    assert err(rr, "XADD", "s", "*", "f", "v", "g") == "ERR wrong number of arguments for 'xadd' command"
    assert err(rr, "XADD", "str", "*", "f", "v").startswith("WRONGTYPE")


def test_xadd_nomkstream_and_exhausted(rr):
    assert raw(rr, "XADD", "s", "NOMKSTREAM", "*", "f", "v") is None
    assert raw(rr, "EXISTS", "s") == 0
    assert raw(rr, "XADD", "s", "18446744073709551615-18446744073709551614", "f", "v") == \
        b"18446744073709551615-18446744073709551614"
    assert raw(rr, "XADD", "s", "NOMKSTREAM", "*", "f", "v") == b"18446744073709551615-18446744073709551615"
    assert err(rr, "XADD", "s", "*", "f", "v") == \
        "ERR The stream has exhausted the last possible ID, unable to add more items"
    assert err(rr, "XADD", "t", "18446744073709551616-0", "f", "v") == \
        "ERR Invalid stream ID specified as stream command argument"


def test_xadd_trim_options_and_errors(rr):
    for i in range(1, 11):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    assert raw(rr, "XADD", "s", "MAXLEN", "5", "11-0", "f", "11") == b"11-0"
    assert ids_of(raw(rr, "XRANGE", "s", "-", "+")) == [b"%d-0" % i for i in range(7, 12)]
    assert raw(rr, "XADD", "s", "MINID", "=", "9", "12-0", "f", "12") == b"12-0"
    assert ids_of(raw(rr, "XRANGE", "s", "-", "+")) == [b"9-0", b"10-0", b"11-0", b"12-0"]
    assert raw(rr, "XADD", "s", "maxlen", "=", "2", "*", "f", "v")
    assert raw(rr, "XLEN", "s") == 2
    assert err(rr, "XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "f", "v") == \
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
    assert err(rr, "XADD", "s", "MAXLEN", "-1", "*", "f", "v") == "ERR The MAXLEN argument must be >= 0."
    assert err(rr, "XADD", "s", "MAXLEN", "x", "*", "f", "v") == "ERR value is not an integer or out of range"
    assert err(rr, "XADD", "s", "MAXLEN", "1", "LIMIT", "-1", "*", "f", "v") == \
        "ERR The LIMIT argument must be >= 0."
    assert err(rr, "XADD", "s", "LIMIT", "10", "*", "f", "v") == \
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
    assert err(rr, "XADD", "s", "MAXLEN", "1", "LIMIT", "10", "*", "f", "v") == \
        "ERR syntax error, LIMIT cannot be used without the special ~ option"
    assert err(rr, "XADD", "s", "MINID", "+", "*", "f", "v") == \
        "ERR Invalid stream ID specified as stream command argument"
    assert raw(rr, "XADD", "s", "MAXLEN", "~", "1", "LIMIT", "10", "*", "f", "v")


def test_xadd_approximate_maxlen_trims_whole_nodes(r):
    # Valkey's "XADD with MAXLEN option and the '~' argument" (100 entries per node).
    p = r.pipeline(transaction=False)
    for j in range(1000):
        p.execute_command("XADD", "s", "MAXLEN", "~", "555", "*", "xitem" if j % 10 else "yitem", j)
    p.execute()
    assert r.xlen("s") == 600
    assert raw(r, "XTRIM", "s", "MAXLEN", "~", "550") == 0  # only whole nodes go
    assert raw(r, "XTRIM", "s", "MAXLEN", "~", "450") == 100
    assert raw(r, "XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "250") == 200  # a 3rd node would pass LIMIT
    assert r.xlen("s") == 300
    assert raw(r, "XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "0") == 300  # LIMIT 0: unlimited
    assert r.xlen("s") == 0 and r.exists("s") == 1


def test_approximate_minid_trims_whole_nodes(r):
    p = r.pipeline(transaction=False)
    for j in range(1, 351):
        p.execute_command("XADD", "s", f"{j}-0", "f", j)
    p.execute()
    assert raw(r, "XTRIM", "s", "MINID", "~", "150") == 100      # node 1-100 only: 101-200 holds 150
    assert raw(r, "XTRIM", "s", "MINID", "150") == 49            # exact
    assert raw(r, "XADD", "s", "MINID", "~", "301", "351-0", "f", "v") == b"351-0"
    assert raw(r, "XRANGE", "s", "-", "+", "COUNT", "1")[0][0] == b"301-0"  # nodes ending before 301 went
    assert r.xlen("s") == 51
    r.rename("s", "t")
    assert r.xlen("t") == 51 and r.type("t") == b"stream"


def test_xrange_xrevrange_shapes(rr):
    raw(rr, "XADD", "s", "1-0", "a", "1")
    raw(rr, "XADD", "s", "1-1", "b", "2", "c", "3")
    raw(rr, "XADD", "s", "2-0", "d", "4")
    full = [[b"1-0", [b"a", b"1"]], [b"1-1", [b"b", b"2", b"c", b"3"]], [b"2-0", [b"d", b"4"]]]
    assert raw(rr, "XRANGE", "s", "-", "+") == full
    assert raw(rr, "XREVRANGE", "s", "+", "-") == full[::-1]
    assert raw(rr, "XRANGE", "s", "1", "1") == full[:2]          # ms-only: 1-0 .. 1-max
    assert raw(rr, "XRANGE", "s", "(1-0", "+") == full[1:]
    assert raw(rr, "XRANGE", "s", "-", "(2-0") == full[:2]
    assert raw(rr, "XRANGE", "s", "(1-0", "(2-0") == full[1:2]
    assert raw(rr, "XRANGE", "s", "(1-0", "(2") == full[1:]   # "(2" is before 2-18446744073709551615
    assert raw(rr, "XREVRANGE", "s", "(2-0", "-") == [full[1], full[0]]
    assert raw(rr, "XRANGE", "s", "-", "+", "COUNT", "2") == full[:2]
    assert raw(rr, "XREVRANGE", "s", "+", "-", "COUNT", "1") == [full[2]]
    assert raw(rr, "XRANGE", "s", "-", "+", "COUNT", "0") is None
    assert raw(rr, "XRANGE", "s", "-", "+", "COUNT", "-3") is None
    assert raw(rr, "XRANGE", "s", "3", "+") == []
    assert raw(rr, "XRANGE", "s", "2", "1") == []
    assert raw(rr, "XRANGE", "nokey", "-", "+") == []
    assert raw(rr, "XRANGE", "nokey", "-", "+", "COUNT", "0") == []
    assert err(rr, "XRANGE", "s", "-", "+", "COUNT") == "ERR syntax error"
    assert err(rr, "XRANGE", "s", "-", "+", "LIMIT", "1") == "ERR syntax error"
    assert err(rr, "XRANGE", "s", "(-", "+") == "ERR Invalid stream ID specified as stream command argument"
    assert err(rr, "XRANGE", "s", "(18446744073709551615-18446744073709551615", "+") == \
        "ERR invalid start ID for the interval"
    assert err(rr, "XRANGE", "s", "-", "(0-0") == "ERR invalid end ID for the interval"
    assert rr.xrange("s", count=1) == [(b"1-0", {b"a": b"1"})]


def test_xdel_xtrim_and_counters(rr):
    for i in range(1, 6):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    assert raw(rr, "XDEL", "s", "2-0", "4", "9-9") == 2
    assert raw(rr, "XDEL", "s", "2-0") == 0
    assert raw(rr, "XDEL", "nokey", "1-0") == 0
    assert raw(rr, "XDEL", "nokey", "bad") == 0
    assert err(rr, "XDEL", "s", "bad") == "ERR Invalid stream ID specified as stream command argument"
    assert ids_of(raw(rr, "XRANGE", "s", "-", "+")) == [b"1-0", b"3-0", b"5-0"]
    info = raw(rr, "XINFO", "STREAM", "s")
    info = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    assert info[b"max-deleted-entry-id"] == b"4-0"
    assert info[b"entries-added"] == 5
    assert info[b"recorded-first-entry-id"] == b"1-0"
    assert raw(rr, "XTRIM", "s", "MINID", "3") == 1
    assert raw(rr, "XTRIM", "s", "MAXLEN", "=", "1") == 1
    assert raw(rr, "XTRIM", "s", "MAXLEN", "5") == 0
    assert raw(rr, "XTRIM", "nokey", "MAXLEN", "0") == 0
    assert err(rr, "XTRIM", "s", "FOO", "5") == "ERR syntax error"
    assert err(rr, "XTRIM", "s", "LIMIT", "5") == \
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
    assert err(rr, "XTRIM", "s", "NOMKSTREAM", "MAXLEN", "1") == "ERR syntax error"
    assert ids_of(raw(rr, "XRANGE", "s", "-", "+")) == [b"5-0"]
    assert raw(rr, "XTRIM", "s", "MAXLEN", "0") == 1
    assert raw(rr, "EXISTS", "s") == 1 and raw(rr, "XLEN", "s") == 0  # an emptied stream stays


def test_xsetid(rr):
    raw(rr, "XADD", "s", "5-0", "f", "v")
    assert err(rr, "XSETID", "nokey", "1-0") == "ERR no such key"
    assert err(rr, "XSETID", "s", "4-0") == \
        "ERR The ID specified in XSETID is smaller than the target stream top item"
    assert err(rr, "XSETID", "s", "9-0", "ENTRIESADDED", "0") == \
        "ERR The entries_added specified in XSETID is smaller than the target stream length"
    assert err(rr, "XSETID", "s", "9-0", "ENTRIESADDED", "-1") == "ERR entries_added must be positive"
    assert err(rr, "XSETID", "s", "9-0", "MAXDELETEDID", "10-0") == \
        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
    assert err(rr, "XSETID", "s", "9-0", "FOO", "1") == "ERR syntax error"
    assert raw(rr, "XSETID", "s", "9-0", "ENTRIESADDED", "7", "MAXDELETEDID", "3-0") in (b"OK", "OK")
    assert err(rr, "XADD", "s", "8-0", "f", "v").startswith("ERR The ID specified in XADD is equal or smaller")
    assert raw(rr, "XADD", "s", "*", "f", "v")
    info = raw(rr, "XINFO", "STREAM", "s")
    info = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    assert info[b"entries-added"] == 8 and info[b"max-deleted-entry-id"] == b"3-0"
    raw(rr, "XTRIM", "s", "MAXLEN", "0")
    assert err(rr, "XSETID", "s", "2-0") == \
        "ERR The ID specified in XSETID is smaller than current max_deleted_entry_id"
    assert raw(rr, "XSETID", "s", "3-0") in (b"OK", "OK")  # an empty stream may go back to max deleted


# -- XREAD ------------------------------------------------------------------------------------------

def test_xread_shapes(rr):
    raw(rr, "XADD", "a", "1-0", "f", "1")
    raw(rr, "XADD", "a", "2-0", "f", "2")
    raw(rr, "XADD", "b", "1-0", "g", "1")
    reply = raw(rr, "XREAD", "COUNT", "1", "STREAMS", "a", "b", "nokey", "0", "0", "0")
    expected = [(b"a", [[b"1-0", [b"f", b"1"]]]), (b"b", [[b"1-0", [b"g", b"1"]]])]
    if resp3(rr):
        assert reply == dict(expected)
    else:
        assert reply == [list(e) for e in expected]
    reply = raw(rr, "XREAD", "STREAMS", "a", "b", "1-0", "$")
    assert reply == ({b"a": [[b"2-0", [b"f", b"2"]]]} if resp3(rr) else [[b"a", [[b"2-0", [b"f", b"2"]]]]])
    assert raw(rr, "XREAD", "STREAMS", "a", "$") is None
    assert raw(rr, "XREAD", "STREAMS", "nokey", "0") is None
    # "+": the last entry of each stream.
    reply = raw(rr, "XREAD", "STREAMS", "a", "b", "+", "+")
    expected = [(b"a", [[b"2-0", [b"f", b"2"]]]), (b"b", [[b"1-0", [b"g", b"1"]]])]
    assert reply == (dict(expected) if resp3(rr) else [list(e) for e in expected])
    assert raw(rr, "XREAD", "BLOCK", "100", "STREAMS", "a", "0-0") is not None  # data present: no wait
    assert raw(rr, "XREAD", "COUNT", "-5", "STREAMS", "a", "1") == (
        {b"a": [[b"2-0", [b"f", b"2"]]]} if resp3(rr) else [[b"a", [[b"2-0", [b"f", b"2"]]]]])


def test_xread_errors(rr):
    raw(rr, "XADD", "a", "1-0", "f", "1")
    rr.set("str", "x")
    assert err(rr, "XREAD", "COUNT", "1", "STREAMS", "a") == \
        "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified."
    assert err(rr, "XREAD", "COUNT", "1", "a", "0") == "ERR syntax error"
    assert err(rr, "XREAD", "GROUP", "g", "c", "STREAMS", "a", "0") == \
        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
    assert err(rr, "XREAD", "NOACK", "STREAMS", "a", "0") == \
        "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
    assert err(rr, "XREAD", "STREAMS", "a", ">") == \
        "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."
    assert err(rr, "XREAD", "BLOCK", "-1", "STREAMS", "a", "0") == "ERR timeout is negative"
    assert err(rr, "XREAD", "BLOCK", "1.5", "STREAMS", "a", "0") == "ERR timeout is not an integer or out of range"
    assert err(rr, "XREAD", "COUNT", "x", "STREAMS", "a", "0") == "ERR value is not an integer or out of range"
    assert err(rr, "XREAD", "STREAMS", "str", "0").startswith("WRONGTYPE")
    assert err(rr, "XREAD", "STREAMS", "a", "x-1") == "ERR Invalid stream ID specified as stream command argument"
    raw(rr, "XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")
    assert err(rr, "XREAD", "STREAMS", "empty", "+") == "ERR the stream last element ID is 0-0"


def test_xread_block_inside_multi_answers_as_timeout(rr):
    raw(rr, "XADD", "a", "1-0", "f", "1")
    conn = rr.connection_pool.get_connection("_")
    try:
        for cmd in (("MULTI",), ("XREAD", "BLOCK", "0", "STREAMS", "a", "$"),
                    ("XREADGROUP", "GROUP", "nog", "c", "BLOCK", "0", "STREAMS", "nokey", ">"),
                    ("XREAD", "BLOCK", "0", "STREAMS", "a", "0"), ("EXEC",)):
            conn.send_command(*cmd)
        for _ in range(4):
            conn.read_response()
        out = conn.read_response(disable_decoding=False)
    finally:
        rr.connection_pool.release(conn)
    assert out[0] is None
    assert "NOGROUP" in str(out[1])
    assert out[2] == ({b"a": [[b"1-0", [b"f", b"1"]]]} if resp3(rr) else [[b"a", [[b"1-0", [b"f", b"1"]]]]])


def test_blocking_protocol_xread():
    """XREAD BLOCK with nothing to read returns Blocked; retry() serves what arrives later ('$' frozen)."""
    loc = Local()
    loc("XADD", "s", "1-0", "f", "v")
    blocked = loc("XREAD", "BLOCK", "1500", "STREAMS", "s", "other", "$", "$")
    assert isinstance(blocked, Blocked)
    assert blocked.keys == [b"s", b"other"] and blocked.timeout_ms == 1500
    assert blocked.timeout_reply is NullArray
    assert blocked.retry(loc.ctx) is None
    loc("XADD", "other", "5-0", "g", "w")
    assert blocked.retry(loc.ctx) == [[b"other", [[b"5-0", (b"g", b"w")]]]]
    loc("XADD", "s", "2-0", "f", "v2")
    assert blocked.retry(loc.ctx) == [[b"s", [[b"2-0", (b"f", b"v2")]]], [b"other", [[b"5-0", (b"g", b"w")]]]]
    # A key turned into another type does not wake XREAD.
    blocked = loc("XREAD", "BLOCK", "0", "STREAMS", "x", "$")
    assert blocked.timeout_ms == 0
    loc("SET", "x", "1")
    assert blocked.retry(loc.ctx) is None
    # "+" is re-evaluated: the last entry once there is one past the current last.
    blocked = loc("XREAD", "BLOCK", "0", "STREAMS", "new", "+")
    assert isinstance(blocked, Blocked)
    loc("XADD", "new", "7-0", "a", "b")
    assert blocked.retry(loc.ctx) == [[b"new", [[b"7-0", (b"a", b"b")]]]]


def test_blocking_protocol_xreadgroup():
    loc = Local()
    loc("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    blocked = loc("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">")
    assert isinstance(blocked, Blocked)
    assert [e[1][:2] for e in loc.effects][-1] == (b"XGROUP", b"CREATECONSUMER")
    assert blocked.retry(loc.ctx) is None
    loc("XADD", "s", "3-0", "f", "v")
    loc.ctx.take_effects()
    assert blocked.retry(loc.ctx) == [[b"s", [[b"3-0", (b"f", b"v")]]]]
    effects = [argv for _db, argv in loc.ctx.take_effects()]
    assert effects == [
        (b"XCLAIM", b"s", b"g", b"alice", b"0", b"3-0", b"TIME", b"%d" % T0, b"RETRYCOUNT", b"1", b"FORCE",
         b"JUSTID", b"LASTID", b"3-0"),
        (b"XGROUP", b"SETID", b"s", b"g", b"3-0", b"ENTRIESREAD", b"1")]
    # The group destroyed while waiting: the retry answers NOGROUP (Valkey re-runs the command).
    blocked = loc("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">")
    assert isinstance(blocked, Blocked)
    loc("XGROUP", "DESTROY", "s", "g")
    with pytest.raises(CommandError) as info:
        blocked.retry(loc.ctx)
    assert info.value.text == "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"


class Parked:
    """A connection of client's pool on which a blocking command is sent now and its reply read later."""

    def __init__(self, client, *args):
        self.client = client
        self.conn = client.connection_pool.get_connection("_")
        self.conn.send_command(*args)
        wait_until(lambda: client.info("clients")["blocked_clients"] >= 1, 10, what="a blocked client")

    def reply(self):
        try:
            return self.conn.read_response()
        finally:
            self.client.connection_pool.release(self.conn)


def test_xread_block_served_by_xadd(rr):
    p = Parked(rr, "XREAD", "BLOCK", "0", "STREAMS", "s", "t", "$", "$")
    rr.set("other", "x")
    rr.execute_command("XADD", "t", "1-0", "f", "v")
    expected = [(b"t", [[b"1-0", [b"f", b"v"]]])]
    assert p.reply() == (dict(expected) if resp3(rr) else [list(e) for e in expected])
    assert rr.info("clients")["blocked_clients"] == 0
    # '$' is the last ID when it blocked: entries added later are served, older ones are not.
    p = Parked(rr, "XREAD", "BLOCK", "0", "STREAMS", "t", "$")
    rr.execute_command("XADD", "t", "2-0", "f", "w")
    got = p.reply()
    assert (got[b"t"] if resp3(rr) else got[0][1]) == [[b"2-0", [b"f", b"w"]]]


def test_xread_block_timeout_and_retyped_key(r):
    assert raw(r, "XREAD", "BLOCK", "30", "STREAMS", "s", "$") is None
    p = Parked(r, "XREAD", "BLOCK", "0", "STREAMS", "s", "0")
    r.set("s", "string")                          # not a stream: stays blocked
    r.delete("s")
    r.execute_command("XADD", "s", "3-0", "f", "v")
    assert p.reply() == [[b"s", [[b"3-0", [b"f", b"v"]]]]]


def test_xreadgroup_block_served_and_pending(rr):
    raw(rr, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    p = Parked(rr, "XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "COUNT", "10", "STREAMS", "s", ">")
    rr.execute_command("XADD", "s", "5-0", "f", "v")
    got = p.reply()
    assert (got[b"s"] if resp3(rr) else got[0][1]) == [[b"5-0", [b"f", b"v"]]]
    assert raw(rr, "XPENDING", "s", "g") == [1, b"5-0", b"5-0", [[b"alice", b"1"]]]


def test_xreadgroup_block_unblocked_with_nogroup(r):
    raw(r, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    p = Parked(r, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    raw(r, "XGROUP", "DESTROY", "s", "g")
    with pytest.raises(valkey.ResponseError) as info:
        p.reply()
    assert str(info.value) == "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
    raw(r, "XGROUP", "CREATE", "s", "g", "$")
    p = Parked(r, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    r.delete("s")
    with pytest.raises(valkey.ResponseError) as info:
        p.reply()
    assert str(info.value).startswith("NOGROUP No such key 's'")


# -- consumer groups --------------------------------------------------------------------------------

def test_xgroup_create_setid_destroy(rr):
    assert err(rr, "XGROUP", "CREATE", "s", "g", "$") == (
        "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the "
        "MKSTREAM option to create an empty stream automatically.")
    assert raw(rr, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") in (b"OK", "OK")
    assert raw(rr, "EXISTS", "s") == 1 and raw(rr, "XLEN", "s") == 0
    assert err(rr, "XGROUP", "CREATE", "s", "g", "$") == "BUSYGROUP Consumer Group name already exists"
    assert raw(rr, "XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "0") in (b"OK", "OK")
    assert err(rr, "XGROUP", "CREATE", "s", "g3", "0", "ENTRIESREAD", "-2") == \
        "ERR value for ENTRIESREAD must be positive or -1"
    assert err(rr, "XGROUP", "CREATE", "s", "g3", "0", "FOO") == \
        "ERR unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP."
    assert err(rr, "XGROUP", "CREATE", "s", "g3", "bad") == \
        "ERR Invalid stream ID specified as stream command argument"
    assert err(rr, "XGROUP", "SETID", "s", "nog", "0") == "NOGROUP No such consumer group 'nog' for key name 's'"
    assert err(rr, "XGROUP", "SETID", "s", "g", "0", "MKSTREAM") == \
        "ERR unknown subcommand or wrong number of arguments for 'SETID'. Try XGROUP HELP."
    assert raw(rr, "XGROUP", "SETID", "s", "g", "5-5", "ENTRIESREAD", "3") in (b"OK", "OK")
    groups = raw(rr, "XINFO", "GROUPS", "s")
    g = groups[0] if resp3(rr) else dict(zip(groups[0][::2], groups[0][1::2]))
    assert g[b"name"] == b"g" and g[b"last-delivered-id"] == b"5-5" and g[b"entries-read"] == 3
    assert raw(rr, "XGROUP", "SETID", "s", "g", "$") in (b"OK", "OK")
    assert raw(rr, "XGROUP", "DESTROY", "s", "g") == 1
    assert raw(rr, "XGROUP", "DESTROY", "s", "g") == 0
    assert err(rr, "XGROUP", "DESTROY", "nokey", "g").startswith("ERR The XGROUP subcommand requires the key")
    assert err(rr, "XGROUP", "DESTROY", "s") == "ERR wrong number of arguments for 'xgroup|destroy' command"
    assert err(rr, "XGROUP", "FOO", "s") == "ERR unknown subcommand 'FOO'. Try XGROUP HELP."
    rr.set("str", "x")
    assert err(rr, "XGROUP", "CREATE", "str", "g", "$", "MKSTREAM").startswith("WRONGTYPE")
    help_lines = raw(rr, "XGROUP", "HELP")
    assert help_lines[0] in (b"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                             "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    assert len(help_lines) == 17


def test_xgroup_consumers(rr):
    raw(rr, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    assert raw(rr, "XGROUP", "CREATECONSUMER", "s", "g", "alice") == 1
    assert raw(rr, "XGROUP", "CREATECONSUMER", "s", "g", "alice") == 0
    assert err(rr, "XGROUP", "CREATECONSUMER", "s", "nog", "bob") == \
        "NOGROUP No such consumer group 'nog' for key name 's'"
    raw(rr, "XADD", "s", "1-0", "f", "v")
    raw(rr, "XADD", "s", "2-0", "f", "v")
    raw(rr, "XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">")
    assert raw(rr, "XGROUP", "DELCONSUMER", "s", "g", "bob") == 2
    assert raw(rr, "XGROUP", "DELCONSUMER", "s", "g", "bob") == 0
    assert raw(rr, "XPENDING", "s", "g")[0] == 0
    consumers = raw(rr, "XINFO", "CONSUMERS", "s", "g")
    c = consumers[0] if resp3(rr) else dict(zip(consumers[0][::2], consumers[0][1::2]))
    assert len(consumers) == 1 and c[b"name"] == b"alice" and c[b"pending"] == 0 and c[b"inactive"] == -1
    assert c[b"idle"] >= 0


def test_xreadgroup_delivery_history_noack(rr):
    for i in range(1, 5):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    reply = raw(rr, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    expected = [[b"1-0", [b"f", b"1"]], [b"2-0", [b"f", b"2"]]]
    assert reply == ({b"s": expected} if resp3(rr) else [[b"s", expected]])
    # The consumer's history from an explicit ID.
    reply = raw(rr, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0")
    assert reply == ({b"s": expected} if resp3(rr) else [[b"s", expected]])
    assert raw(rr, "XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0") == (
        {b"s": []} if resp3(rr) else [[b"s", []]])
    pending = raw(rr, "XPENDING", "s", "g", "-", "+", "10")
    assert [(p[0], p[1], p[3]) for p in pending] == [(b"1-0", b"alice", 2), (b"2-0", b"alice", 2)]
    # A deleted pending entry shows as [id, nil] in the history.
    raw(rr, "XDEL", "s", "1-0")
    reply = raw(rr, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0")
    hist = reply[b"s"] if resp3(rr) else reply[0][1]
    assert hist == [[b"1-0", None], [b"2-0", [b"f", b"2"]]]
    # NOACK: delivered without a PEL entry.
    reply = raw(rr, "XREADGROUP", "GROUP", "g", "bob", "NOACK", "STREAMS", "s", ">")
    got = reply[b"s"] if resp3(rr) else reply[0][1]
    assert ids_of(got) == [b"3-0", b"4-0"]
    summary = raw(rr, "XPENDING", "s", "g")
    assert summary == [2, b"1-0", b"2-0", [[b"alice", b"2"]]]
    assert raw(rr, "XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">") is None
    assert raw(rr, "XREADGROUP", "GROUP", "g", "bob", "BLOCK", "10", "STREAMS", "s", "0") == (
        {b"s": []} if resp3(rr) else [[b"s", []]])  # history is served at once, never blocks
    groups = raw(rr, "XINFO", "GROUPS", "s")
    g = groups[0] if resp3(rr) else dict(zip(groups[0][::2], groups[0][1::2]))
    assert g[b"last-delivered-id"] == b"4-0" and g[b"pending"] == 2 and g[b"consumers"] == 2
    assert g[b"entries-read"] == 4 and g[b"lag"] == 0


def test_xreadgroup_errors(rr):
    raw(rr, "XADD", "s", "1-0", "f", "v")
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    assert err(rr, "XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">") == \
        "NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option"
    assert err(rr, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "nokey", ">") == \
        "NOGROUP No such key 'nokey' or consumer group 'g' in XREADGROUP with GROUP option"
    assert err(rr, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$").startswith(
        "ERR The $ ID is meaningless in the context of XREADGROUP")
    assert err(rr, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "+").startswith(
        "ERR The + ID is meaningless in the context of XREADGROUP")
    assert err(rr, "XREADGROUP", "COUNT", "1", "BLOCK", "1", "STREAMS", "s", ">") == \
        "ERR Missing GROUP option for XREADGROUP"
    assert err(rr, "XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s") == \
        "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified."


def test_xack_and_xpending(rr):
    for i in range(1, 6):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    assert raw(rr, "XPENDING", "s", "g") == [0, None, None, None]
    raw(rr, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
    raw(rr, "XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">")
    assert raw(rr, "XPENDING", "s", "g") == [5, b"1-0", b"5-0", [[b"alice", b"3"], [b"bob", b"2"]]]
    ext = raw(rr, "XPENDING", "s", "g", "-", "+", "10")
    assert [(e[0], e[1], e[3]) for e in ext] == [
        (b"1-0", b"alice", 1), (b"2-0", b"alice", 1), (b"3-0", b"alice", 1), (b"4-0", b"bob", 1), (b"5-0", b"bob", 1)]
    assert all(isinstance(e[2], int) and e[2] >= 0 for e in ext)
    assert ids_of(raw(rr, "XPENDING", "s", "g", "(1-0", "4", "2")) == [b"2-0", b"3-0"]
    assert ids_of(raw(rr, "XPENDING", "s", "g", "-", "+", "10", "bob")) == [b"4-0", b"5-0"]
    assert raw(rr, "XPENDING", "s", "g", "-", "+", "10", "nobody") == []
    assert raw(rr, "XPENDING", "s", "g", "-", "+", "0") == []
    assert raw(rr, "XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10") == []
    assert len(raw(rr, "XPENDING", "s", "g", "IDLE", "0", "-", "+", "10", "alice")) == 3
    assert err(rr, "XPENDING", "s", "g", "-", "+") == "ERR syntax error"
    assert err(rr, "XPENDING", "s", "g", "IDLE", "10", "-", "+") == "ERR syntax error"
    assert err(rr, "XPENDING", "s", "nog") == "NOGROUP No such key 's' or consumer group 'nog'"
    assert err(rr, "XPENDING", "s", "g", "-", "+", "x") == "ERR value is not an integer or out of range"
    assert raw(rr, "XACK", "s", "g", "1-0", "2", "9-0") == 2
    assert raw(rr, "XACK", "s", "g", "1-0") == 0
    assert raw(rr, "XACK", "s", "nog", "1-0") == 0
    assert raw(rr, "XACK", "nokey", "g", "bad") == 0
    assert err(rr, "XACK", "s", "g", "3-0", "bad") == "ERR Invalid stream ID specified as stream command argument"
    assert raw(rr, "XPENDING", "s", "g") == [3, b"3-0", b"5-0", [[b"alice", b"1"], [b"bob", b"2"]]]


def test_xclaim(rr):
    for i in range(1, 5):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    raw(rr, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
    assert raw(rr, "XCLAIM", "s", "g", "bob", "3600000", "1-0") == []     # not idle enough
    assert raw(rr, "XCLAIM", "s", "g", "bob", "0", "1-0") == [[b"1-0", [b"f", b"1"]]]
    ext = raw(rr, "XPENDING", "s", "g", "-", "+", "10")
    assert (ext[0][0], ext[0][1], ext[0][3]) == (b"1-0", b"bob", 2)
    assert raw(rr, "XCLAIM", "s", "g", "bob", "0", "2-0", "JUSTID") == [b"2-0"]
    ext = raw(rr, "XPENDING", "s", "g", "2-0", "2-0", "1")
    assert ext[0][1] == b"bob" and ext[0][3] == 1  # JUSTID does not count a delivery
    assert raw(rr, "XCLAIM", "s", "g", "carol", "0", "3-0", "IDLE", "500000", "RETRYCOUNT", "7", "JUSTID") == \
        [b"3-0"]
    ext = raw(rr, "XPENDING", "s", "g", "3-0", "3-0", "1")
    assert ext[0][1] == b"carol" and ext[0][3] == 7 and ext[0][2] >= 500000
    # FORCE creates a pending entry for an undelivered entry (but not for a missing one).
    assert raw(rr, "XCLAIM", "s", "g", "carol", "0", "4-0", "9-0", "FORCE", "JUSTID") == [b"4-0"]
    assert raw(rr, "XCLAIM", "s", "g", "dave", "0", "9-0", "FORCE") == []
    # LASTID moves the group's last delivered ID forward only.
    raw(rr, "XCLAIM", "s", "g", "carol", "0", "LASTID", "10-0")
    groups = raw(rr, "XINFO", "GROUPS", "s")
    g = groups[0] if resp3(rr) else dict(zip(groups[0][::2], groups[0][1::2]))
    assert g[b"last-delivered-id"] == b"10-0" and g[b"consumers"] == 4
    # A pending entry whose stream entry is gone is dropped.
    raw(rr, "XDEL", "s", "1-0")
    assert raw(rr, "XCLAIM", "s", "g", "carol", "0", "1-0") == []
    assert raw(rr, "XPENDING", "s", "g")[0] == 3
    assert err(rr, "XCLAIM", "s", "nog", "c", "0", "1-0") == "NOGROUP No such key 's' or consumer group 'nog'"
    assert err(rr, "XCLAIM", "nokey", "g", "c", "0", "1-0") == "NOGROUP No such key 'nokey' or consumer group 'g'"
    assert err(rr, "XCLAIM", "s", "g", "c", "x", "1-0") == "ERR Invalid min-idle-time argument for XCLAIM"
    assert err(rr, "XCLAIM", "s", "g", "c", "0", "1-0", "IDLE", "x") == \
        "ERR Invalid IDLE option argument for XCLAIM"
    assert err(rr, "XCLAIM", "s", "g", "c", "0", "1-0", "TIME", "x") == \
        "ERR Invalid TIME option argument for XCLAIM"
    assert err(rr, "XCLAIM", "s", "g", "c", "0", "1-0", "RETRYCOUNT", "x") == \
        "ERR Invalid RETRYCOUNT option argument for XCLAIM"
    assert err(rr, "XCLAIM", "s", "g", "c", "0", "1-0", "BOGUS") == "ERR Unrecognized XCLAIM option 'BOGUS'"


def test_xautoclaim(rr):
    for i in range(1, 8):
        raw(rr, "XADD", "s", f"{i}-0", "f", str(i))
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    raw(rr, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    reply = raw(rr, "XAUTOCLAIM", "s", "g", "bob", "0", "0", "COUNT", "2")
    assert reply == [b"3-0", [[b"1-0", [b"f", b"1"]], [b"2-0", [b"f", b"2"]]], []]
    raw(rr, "XDEL", "s", "4-0")
    reply = raw(rr, "XAUTOCLAIM", "s", "g", "bob", "0", "3-0", "COUNT", "3", "JUSTID")
    assert reply == [b"6-0", [b"3-0", b"5-0"], [b"4-0"]]  # the deleted entry counts against COUNT
    reply = raw(rr, "XAUTOCLAIM", "s", "g", "bob", "0", "(6-0", "JUSTID")
    assert reply == [b"0-0", [b"7-0"], []]
    assert raw(rr, "XAUTOCLAIM", "s", "g", "carol", "3600000", "-")[1] == []
    ext = raw(rr, "XPENDING", "s", "g", "-", "+", "10")
    assert [(e[0], e[1], e[3]) for e in ext] == [
        (b"1-0", b"bob", 2), (b"2-0", b"bob", 2), (b"3-0", b"bob", 1), (b"5-0", b"bob", 1), (b"6-0", b"alice", 1),
        (b"7-0", b"bob", 1)]
    assert err(rr, "XAUTOCLAIM", "s", "g", "c", "0", "0", "COUNT", "0") == "ERR COUNT must be > 0"
    assert err(rr, "XAUTOCLAIM", "s", "g", "c", "x", "0") == "ERR Invalid min-idle-time argument for XAUTOCLAIM"
    assert err(rr, "XAUTOCLAIM", "s", "g", "c", "0", "0", "FOO") == "ERR syntax error"
    assert err(rr, "XAUTOCLAIM", "s", "nog", "c", "0", "0") == "NOGROUP No such key 's' or consumer group 'nog'"


def test_xinfo_stream_and_full(rr):
    assert err(rr, "XINFO", "STREAM", "nokey") == "ERR no such key"
    raw(rr, "XADD", "s", "1-0", "a", "1")
    raw(rr, "XADD", "s", "2-0", "b", "2")
    raw(rr, "XGROUP", "CREATE", "s", "g", "0")
    raw(rr, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", ">")

    def as_map(v):
        return v if resp3(rr) else dict(zip(v[::2], v[1::2]))

    info = as_map(raw(rr, "XINFO", "STREAM", "s"))
    assert list(info) == [b"length", b"radix-tree-keys", b"radix-tree-nodes", b"last-generated-id",
                          b"max-deleted-entry-id", b"entries-added", b"recorded-first-entry-id", b"groups",
                          b"first-entry", b"last-entry"]
    assert info[b"length"] == 2 and info[b"radix-tree-keys"] == 1 and info[b"groups"] == 1
    assert info[b"last-generated-id"] == b"2-0" and info[b"entries-added"] == 2
    assert info[b"first-entry"] == [b"1-0", [b"a", b"1"]] and info[b"last-entry"] == [b"2-0", [b"b", b"2"]]
    full = as_map(raw(rr, "XINFO", "STREAM", "s", "FULL"))
    assert list(full)[-2:] == [b"entries", b"groups"]
    assert full[b"entries"] == [[b"1-0", [b"a", b"1"]], [b"2-0", [b"b", b"2"]]]
    g = as_map(full[b"groups"][0])
    assert list(g) == [b"name", b"last-delivered-id", b"entries-read", b"lag", b"pel-count", b"pending",
                       b"consumers"]
    assert g[b"name"] == b"g" and g[b"entries-read"] == 1 and g[b"lag"] == 1 and g[b"pel-count"] == 1
    assert g[b"pending"][0][0] == b"1-0" and g[b"pending"][0][1] == b"alice" and g[b"pending"][0][3] == 1
    c = as_map(g[b"consumers"][0])
    assert list(c) == [b"name", b"seen-time", b"active-time", b"pel-count", b"pending"]
    assert c[b"name"] == b"alice" and c[b"pel-count"] == 1 and c[b"pending"][0][0] == b"1-0"
    assert c[b"seen-time"] == c[b"active-time"] == g[b"pending"][0][2]
    full1 = as_map(raw(rr, "XINFO", "STREAM", "s", "FULL", "COUNT", "1"))
    assert len(full1[b"entries"]) == 1
    assert err(rr, "XINFO", "STREAM", "s", "FULL", "LIMIT", "1") == \
        "ERR unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP."
    assert err(rr, "XINFO", "STREAM", "s", "PARTIAL") == \
        "ERR unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP."
    # An empty stream.
    raw(rr, "XGROUP", "CREATE", "e", "g", "$", "MKSTREAM")
    info = as_map(raw(rr, "XINFO", "STREAM", "e"))
    assert info[b"length"] == 0 and info[b"first-entry"] is None and info[b"last-entry"] is None
    assert info[b"recorded-first-entry-id"] == b"0-0"
    groups = raw(rr, "XINFO", "GROUPS", "e")
    assert as_map(groups[0])[b"lag"] == 0
    assert err(rr, "XINFO", "CONSUMERS", "e", "nog") == "NOGROUP No such consumer group 'nog' for key name 'e'"
    assert raw(rr, "XINFO", "GROUPS", "s") and len(raw(rr, "XINFO", "HELP")) == 9
    rr.set("str", "x")
    assert err(rr, "XINFO", "GROUPS", "str").startswith("WRONGTYPE")


def test_group_lag_with_tombstones(r):
    for i in range(1, 6):
        raw(r, "XADD", "s", f"{i}-0", "f", "v")
    raw(r, "XGROUP", "CREATE", "s", "g", "0")
    raw(r, "XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", "s", ">")
    g = dict(zip(*[iter(raw(r, "XINFO", "GROUPS", "s")[0])] * 2))
    assert g[b"entries-read"] == 2 and g[b"lag"] == 3
    raw(r, "XDEL", "s", "4-0")  # a tombstone ahead of the group: lag unknown
    g = dict(zip(*[iter(raw(r, "XINFO", "GROUPS", "s")[0])] * 2))
    assert g[b"lag"] is None
    raw(r, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    g = dict(zip(*[iter(raw(r, "XINFO", "GROUPS", "s")[0])] * 2))
    assert g[b"entries-read"] == 5 and g[b"lag"] == 0


# -- determinism of effects -------------------------------------------------------------------------

def _ticking(step):
    t = [T0]

    def clock():
        t[0] += step
        return t[0]
    return clock


def test_replay_xadd_auto_ids_and_trims():
    cmds = [["XADD", "s", "*", "f", str(i)] for i in range(5)]
    cmds += [["XADD", "s", "MAXLEN", "~", "100", "*", "f", str(i)] for i in range(250)]
    cmds += [["XADD", "s", "MINID", "~", "1700000000300", "*", "f", "x"],
             ["XADD", "s", "MAXLEN", "~", "10", "LIMIT", "100", "*", "f", "y"],
             ["XADD", "s", "MAXLEN", "3", "*", "f", "z"],
             ["XADD", "s", "1700000999999-*", "f", "w"],
             ["XADD", "t", "MINID", "5", "1-0", "f", "v"],   # the new entry itself trimmed away
             ["XTRIM", "t", "MAXLEN", "0"],
             ["XADD", "u", "NOMKSTREAM", "*", "f", "v"]]
    replies, effects = run_and_replay(cmds, clock_ms=_ticking(3))
    assert not any(isinstance(r, ErrorReply) for r in replies)
    xadds = [argv for _db, argv in effects if argv[0] == b"XADD"]
    assert all(b"*" not in argv and b"~" not in argv and b"LIMIT" not in argv for argv in xadds)
    assert any(b"MAXLEN" in argv and b"=" in argv for argv in xadds)


def test_replay_xtrim_approximate_and_xdel():
    cmds = [["XADD", "s", f"{i}-1", "f", str(i)] for i in range(1, 400)]
    cmds += [["XDEL", "s", "150-1", "151-1", "999-1"],
             ["XTRIM", "s", "MINID", "~", "250"],
             ["XTRIM", "s", "MAXLEN", "~", "50"],
             ["XTRIM", "s", "MINID", "390"],
             ["XSETID", "s", "500-0", "ENTRIESADDED", "600", "MAXDELETEDID", "400-0"]]
    replies, effects = run_and_replay(cmds)
    assert replies[-5:-1] == [2, 198, 100, 89]
    assert [argv for _db, argv in effects if argv[0] == b"XTRIM"][0][2:] == (b"MINID", b"=", b"201-1")


def test_replay_consumer_groups():
    cmds = [["XADD", "s", f"{i}-0", "f", str(i)] for i in range(1, 21)]
    cmds += [
        ["XGROUP", "CREATE", "s", "g", "0"],
        ["XGROUP", "CREATE", "s", "h", "$", "ENTRIESREAD", "20"],
        ["XGROUP", "CREATE", "m", "g", "$", "MKSTREAM"],
        ["XREADGROUP", "GROUP", "g", "alice", "COUNT", "5", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "bob", "COUNT", "5", "NOACK", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "carol", "COUNT", "4", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"],          # history: counts deliveries
        ["XREADGROUP", "GROUP", "h", "dave", "STREAMS", "s", ">"],           # consumer created, nothing read
        ["XACK", "s", "g", "2-0", "3-0"],
        ["XDEL", "s", "4-0", "12-0"],
        ["XCLAIM", "s", "g", "erin", "0", "1-0", "5-0", "IDLE", "1000", "RETRYCOUNT", "4"],
        ["XCLAIM", "s", "g", "erin", "0", "4-0"],                            # gone: dropped from the PEL
        ["XCLAIM", "s", "g", "erin", "0", "18-0", "FORCE", "JUSTID"],
        ["XCLAIM", "s", "g", "erin", "0", "LASTID", "19-0"],
        ["XAUTOCLAIM", "s", "g", "frank", "0", "0", "COUNT", "3"],
        ["XAUTOCLAIM", "s", "g", "frank", "0", "0", "COUNT", "100", "JUSTID"],
        ["XGROUP", "CREATECONSUMER", "s", "g", "gina"],
        ["XGROUP", "DELCONSUMER", "s", "g", "carol"],
        ["XGROUP", "SETID", "s", "h", "10-0"],
        ["XREADGROUP", "GROUP", "h", "dave", "COUNT", "3", "STREAMS", "s", ">"],
        ["XGROUP", "DESTROY", "s", "h"],
        ["XGROUP", "CREATE", "s", "h", "0"],
        ["XTRIM", "s", "MAXLEN", "5"],
        ["XREADGROUP", "GROUP", "h", "ivan", "STREAMS", "s", ">"],
    ]
    replies, effects = run_and_replay(cmds, clock_ms=_ticking(100))
    errors = [r for r in replies if isinstance(r, ErrorReply)]
    assert not errors, errors
    kinds = {(argv[0], argv[1] if argv[0] == b"XGROUP" else b"") for _db, argv in effects}
    assert (b"XCLAIM", b"") in kinds and (b"XGROUP", b"SETID") in kinds and (b"XGROUP", b"CREATECONSUMER") in kinds
    for _db, argv in effects:
        if argv[0] == b"XCLAIM":
            assert b"TIME" in argv and b"RETRYCOUNT" in argv and b"FORCE" in argv and b"JUSTID" in argv


def test_replay_xautoclaim_with_idle_and_deleted():
    cmds = [["XADD", "s", f"{i}-0", "f", str(i)] for i in range(1, 31)]
    cmds += [["XGROUP", "CREATE", "s", "g", "0"],
             ["XREADGROUP", "GROUP", "g", "a", "COUNT", "10", "STREAMS", "s", ">"],
             ["XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", ">"],
             ["XDEL", "s", "3-0", "7-0", "25-0"],
             ["XAUTOCLAIM", "s", "g", "c", "3000", "0", "COUNT", "5"],
             ["XAUTOCLAIM", "s", "g", "c", "0", "0", "COUNT", "20"],
             ["XAUTOCLAIM", "s", "g", "d", "100", "10-0", "JUSTID"]]
    replies, _effects = run_and_replay(cmds, clock_ms=_ticking(1000))
    assert replies[-3] == [b"0-0", [], [b"3-0", b"7-0", b"25-0"]]  # nothing idle for 3 s yet
    assert len(replies[-2][1]) == 20


# -- snapshots ---------------------------------------------------------------------------------------

def _group_state_commands():
    cmds = [["XADD", "s", f"{i}-0", "f", str(i), "g", "x" * i] for i in range(1, 31)]
    cmds += [
        ["XGROUP", "CREATE", "s", "g", "0"],
        ["XGROUP", "CREATE", "s", "h", "$"],
        ["XREADGROUP", "GROUP", "g", "alice", "COUNT", "12", "STREAMS", "s", ">"],
        ["XREADGROUP", "GROUP", "g", "bob", "COUNT", "5", "STREAMS", "s", ">"],
        ["XGROUP", "CREATECONSUMER", "s", "g", "idle"],
        ["XGROUP", "CREATECONSUMER", "s", "h", "nobody"],
        ["XACK", "s", "g", "2-0", "3-0"],
        ["XCLAIM", "s", "g", "bob", "0", "4-0", "RETRYCOUNT", "9"],
        ["XDEL", "s", "8-0", "14-0", "20-0"],     # pending 8-0 and 14-0 lose their entries
        ["XTRIM", "s", "MAXLEN", "22"],            # pending 1-0 .. 6-0 lose theirs
        ["XADD", "e", "1-0", "f", "v"],
        ["XGROUP", "CREATE", "e", "g", "0"],
        ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "e", ">"],
        ["XTRIM", "e", "MAXLEN", "0"],             # empty stream with an orphan pending entry
        ["XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM"],
        ["XADD", "d", "5-0", "f", "v"],
        ["XDEL", "d", "5-0"],
        ["XSETID", "d", "9-9", "ENTRIESADDED", "12"],
    ]
    return cmds


def test_snapshot_commands_rebuild_streams_exactly():
    loc = Local()
    for c in _group_state_commands():
        assert not isinstance(loc(*c), ErrorReply), c
    ks2 = Keyspace(clock_ms=lambda: T0 + 5000)
    ks2.expire_enabled = False
    apply_effects(ks2, list(iter_commands(loc.ks)))
    for key in (b"s", b"e", b"empty", b"d"):
        a, b = loc.ks.dbs[0].data[key], ks2.dbs[0].data[key]
        assert type(b) is Stream and a == b, key
    orig = loc.ks.dbs[0].data[b"s"]
    orphans = [i for i in orig.groups[b"g"].pel.keys if i not in orig.entries]
    assert [i >> 64 for i in orphans] == [1, 4, 5, 8, 14]  # pending entries whose stream entries are gone
    assert loc.ks.dbs[0].data[b"d"].max_deleted_id == ks2.dbs[0].data[b"d"].max_deleted_id == 5 << 64


def _strip_times(full):
    """XINFO STREAM FULL (RESP3 map) without the soft consumer times."""
    out = dict(full)
    groups = []
    for g in out[b"groups"]:
        g = dict(g)
        g[b"consumers"] = [{k: v for k, v in c.items() if k not in (b"seen-time", b"active-time")}
                           for c in g[b"consumers"]]
        groups.append(g)
    out[b"groups"] = groups
    return out


def _group_state(c):
    state = {}
    for key in ("s", "e", "empty", "d"):
        full = raw(c, "XINFO", "STREAM", key, "FULL", "COUNT", "0")
        state[key] = _strip_times(full)
        state[key + ":groups"] = raw(c, "XINFO", "GROUPS", key)
        for g in raw(c, "XINFO", "GROUPS", key):
            state[key + ":pending:" + g[b"name"].decode()] = raw(c, "XPENDING", key, g[b"name"])
            ext = raw(c, "XPENDING", key, g[b"name"], "-", "+", "1000")
            state[key + ":ext:" + g[b"name"].decode()] = [(e[0], e[1], e[3]) for e in ext]
            state[key + ":consumers:" + g[b"name"].decode()] = [
                (x[b"name"], x[b"pending"]) for x in raw(c, "XINFO", "CONSUMERS", key, g[b"name"])]
        state[key + ":range"] = raw(c, "XRANGE", key, "-", "+")
    return state


def test_consumer_groups_survive_kill9(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client(protocol=3) as c:
        for cmd in _group_state_commands():
            raw(c, *cmd)
        raw(c, "XADD", "auto", "*", "f", "v")
        raw(c, "XADD", "auto", "MAXLEN", "~", "1", "*", "f", "v")
        parked = Parked(c, "XREADGROUP", "GROUP", "h", "waiter", "BLOCK", "0", "STREAMS", "s", ">")
        raw(c, "XADD", "s", "50-0", "served", "to waiter")
        assert parked.reply() == {b"s": [[b"50-0", [b"served", b"to waiter"]]]}
        before = _group_state(c)
        assert [b"50-0", b"waiter", 1] == [before["s:ext:h"][0][0], before["s:ext:h"][0][1],
                                           before["s:ext:h"][0][2]]
        auto = raw(c, "XRANGE", "auto", "-", "+")
    srv.kill()
    srv.start()
    with srv.client(protocol=3) as c:
        assert _group_state(c) == before
        assert raw(c, "XRANGE", "auto", "-", "+") == auto
        assert c.type("s") == b"stream"


def test_snapshot_of_streams_then_restart(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client(protocol=3) as c:
        for cmd in _group_state_commands():
            raw(c, *cmd)
        assert c.save()
        assert glob.glob(str(tmp_path / "data" / "snapshots" / "*.dks"))
        raw(c, "XADD", "s", "100-0", "after", "snapshot")
        raw(c, "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
        before = _group_state(c)
    srv.kill()
    srv.start()
    with srv.client(protocol=3) as c:
        assert _group_state(c) == before


def _group_info(loc, key, group_index=0):
    full = loc("XINFO", "STREAM", key, "FULL")
    g = full[b"groups"][group_index]
    return g[b"entries-read"], g[b"lag"]


def test_group_read_counter_and_lag_like_valkey():
    """Valkey's 'Consumer group read counter and lag sanity' and 'lag with XDELs' cases."""
    loc = Local()
    loc("XGROUP", "CREATE", "e", "g1", "0", "MKSTREAM")
    assert _group_info(loc, "e") == (None, 0)
    loc("XADD", "e", "1-0", "data", "a")
    loc("XDEL", "e", "1-0")
    assert _group_info(loc, "e") == (None, 0)

    for i in range(1, 6):
        loc("XADD", "x", f"{i}-0", "data", "v")
    loc("XGROUP", "CREATE", "x", "g1", "0")
    assert _group_info(loc, "x") == (None, 5)
    loc("XREADGROUP", "GROUP", "g1", "c11", "COUNT", "1", "STREAMS", "x", ">")
    assert _group_info(loc, "x") == (1, 4)
    loc("XREADGROUP", "GROUP", "g1", "c12", "COUNT", "10", "STREAMS", "x", ">")
    assert _group_info(loc, "x") == (5, 0)
    loc("XADD", "x", "6-0", "data", "f")
    assert _group_info(loc, "x") == (5, 1)

    for i in range(1, 6):
        loc("XADD", "y", f"{i}-0", "data", "v")
    loc("XDEL", "y", "3-0")
    loc("XGROUP", "CREATE", "y", "g1", "0")
    loc("XGROUP", "CREATE", "y", "g2", "0")
    assert _group_info(loc, "y") == (None, None)
    for _ in range(3):
        loc("XREADGROUP", "GROUP", "g1", "c11", "COUNT", "1", "STREAMS", "y", ">")
        assert _group_info(loc, "y") == (None, None)
    loc("XREADGROUP", "GROUP", "g1", "c11", "COUNT", "1", "STREAMS", "y", ">")
    assert _group_info(loc, "y") == (5, 0)
    loc("XADD", "y", "6-0", "data", "f")
    assert _group_info(loc, "y") == (5, 1)
    loc("XTRIM", "y", "MINID", "=", "3-0")
    assert _group_info(loc, "y") == (5, 1) and _group_info(loc, "y", 1) == (None, 3)
    loc("XTRIM", "y", "MINID", "=", "5-0")
    assert _group_info(loc, "y") == (5, 1) and _group_info(loc, "y", 1) == (None, 2)


def test_nack_reassignment_after_setid_and_empty_history():
    loc = Local()
    for i in range(1, 5):
        loc("XADD", "ev", f"{i}-0", "f1", "v1")
    loc("XGROUP", "CREATE", "ev", "g1", "$")
    loc("XADD", "ev", "5-0", "f1", "v1")
    assert len(loc("XREADGROUP", "GROUP", "g1", "c1", "STREAMS", "ev", ">")[0][1]) == 1
    loc("XGROUP", "SETID", "ev", "g1", "-")
    assert len(loc("XREADGROUP", "GROUP", "g1", "c2", "STREAMS", "ev", ">")[0][1]) == 5
    pending = loc("XPENDING", "ev", "g1", "-", "+", "10")
    assert [(p[1], p[3]) for p in pending] == [(b"c2", 1)] * 5  # 5-0 moved from c1 to c2, count reset
    assert loc("XPENDING", "ev", "g1") == [5, b"1-0", b"5-0", [[b"c2", b"5"]]]
    # An empty history is reported as an empty list of entries, not as no reply.
    loc("XGROUP", "CREATE", "ev", "g3", "0")
    assert loc("XREADGROUP", "GROUP", "g3", "me", "COUNT", "3", "STREAMS", "ev", "0") == [[b"ev", []]]


def test_xtrim_maxlen_node_granularity_like_valkey():
    """Valkey's 'XTRIM with MAXLEN option basic test' and 'XADD with LIMIT delete entries no more than
    limit' (default 100 entries per node)."""
    loc = Local()
    rng = random.Random(7)
    for j in range(1000):
        loc("XADD", "s", "*", "xitem" if rng.random() < 0.9 else "yitem", j)
    assert loc("XTRIM", "s", "MAXLEN", "666") == 334 and loc("XLEN", "s") == 666
    assert loc("XTRIM", "s", "MAXLEN", "=", "555") == 111
    assert loc("XTRIM", "s", "MAXLEN", "~", "444") == 55 and loc("XLEN", "s") == 500
    assert loc("XTRIM", "s", "MAXLEN", "~", "400") == 100 and loc("XLEN", "s") == 400
    for _ in range(3):
        loc("XADD", "y", "*", "xitem", "v")
    loc("XADD", "y", "MAXLEN", "~", "0", "LIMIT", "1", "*", "xitem", "v")
    assert loc("XLEN", "y") == 4
    # Same IDs, fields and trims replayed from the effects give the same stream.
    ks2 = Keyspace(clock_ms=lambda: T0)
    ks2.expire_enabled = False
    apply_effects(ks2, loc.effects)
    assert ks2.dbs[0].data[b"s"] == loc.ks.dbs[0].data[b"s"]
    assert [n.live for n in ks2.dbs[0].data[b"s"].nodes] == [n.live for n in loc.ks.dbs[0].data[b"s"].nodes]


def test_stream_copy_and_id_list_compaction():
    loc = Local()
    for c in _group_state_commands():
        loc(*c)
    s = loc.ks.dbs[0].data[b"s"]
    dup = s.copy()
    assert dup == s and dup is not s
    loc("XACK", "s", "g", "9-0")
    loc("XADD", "s", "200-0", "f", "v")
    assert dup != s and dup.groups[b"g"].pel.keys != s.groups[b"g"].pel.keys
    # Trimming the head many times keeps the id list compact and ordered.
    for i in range(1, 2001):
        loc("XADD", "big", "MAXLEN", "50", f"{i}-0", "f", "v")
    big = loc.ks.dbs[0].data[b"big"]
    assert len(big) == 50 and big.ids.to_list() == [i << 64 for i in range(1951, 2001)]
    assert len(big.ids.a) <= 2 * 50 + 33
    assert loc("XDEL", "big", "1951-0", "1975-0") == 2
    assert [e[0] for e in loc("XRANGE", "big", "-", "+", "COUNT", "2")] == [b"1952-0", b"1953-0"]


def test_copy_of_a_stream_is_independent(r):
    r.xadd("src-stream", {"a": "1"}, id="1-1")
    r.xgroup_create("src-stream", "g", id="0")
    assert r.copy("src-stream", "dst-stream") == 1
    r.xadd("src-stream", {"b": "2"}, id="2-1")
    assert r.xlen("dst-stream") == 1 and r.xlen("src-stream") == 2
    assert [g["name"] for g in r.xinfo_groups("dst-stream")] in ([b"g"], ["g"])
