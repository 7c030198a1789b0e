"""OBJECT, MEMORY, SLOWLOG, LATENCY: real server (valkey-py) plus unit checks of the monitors."""

import time
from collections import deque

import pytest
import valkey

from durakv.commands import introspection, load_all
from durakv.commands.introspection import LatencySeries, Monitors, latency_graph_text
from durakv.commands.registry import TABLE
from durakv.keyspace import Keyspace, ZSet
from durakv.keyspace.encoding import EncodingRules
from durakv.keyspace.encoding import encoding_of as _encoding_of

load_all()


def _err(fn, *args):
    with pytest.raises(valkey.ResponseError) as exc:
        fn(*args)
    return str(exc.value)


@pytest.fixture
def restore_config(r):
    """Puts back the introspection settings a test changes on the shared server."""
    yield r
    r.config_set("slowlog-log-slower-than", "10000")
    r.config_set("slowlog-max-len", "128")
    r.config_set("latency-monitor-threshold", "0")
    r.config_set("maxmemory-policy", "noeviction")
    r.execute_command("SLOWLOG", "RESET")
    r.execute_command("LATENCY", "RESET")


# -- OBJECT ----------------------------------------------------------------------------------------

def test_object_encoding_strings(rr):
    rr.set("i", "12345")
    rr.set("neg", "-9223372036854775808")
    rr.set("big", "9223372036854775808")
    rr.set("lead0", "0123")
    rr.set("e", "x" * 44)
    rr.set("raw", "x" * 45)
    enc = lambda k: rr.execute_command("OBJECT", "ENCODING", k)  # noqa: E731
    assert enc("i") == b"int"
    assert enc("neg") == b"int"
    assert enc("big") == b"embstr"
    assert enc("lead0") == b"embstr"
    assert enc("e") == b"embstr"
    assert enc("raw") == b"raw"
    assert enc("missing") is None


def test_object_encoding_collections(r):
    enc = lambda k: r.execute_command("OBJECT", "ENCODING", k)  # noqa: E731
    r.rpush("l", *range(10))
    assert enc("l") == b"listpack"
    r.rpush("biglist", *["v" * 100] * 100)  # > 8 KB of listpack
    assert enc("biglist") == b"quicklist"
    r.sadd("ints", *range(512))
    assert enc("ints") == b"intset"
    r.sadd("ints", 512)
    assert enc("ints") == b"hashtable"
    r.sadd("small", "a", "b", 1)
    assert enc("small") == b"listpack"
    r.sadd("longmember", "a" * 65)
    assert enc("longmember") == b"hashtable"
    r.zadd("z", {"a": 1, "b": 2})
    assert enc("z") == b"listpack"
    r.zadd("zbig", {f"m{i}": i for i in range(129)})
    assert enc("zbig") == b"skiplist"
    r.zadd("zlong", {"m" * 65: 1})
    assert enc("zlong") == b"skiplist"
    r.hset("h", mapping={"f": "v"})
    assert enc("h") == b"listpack"
    r.hset("hbig", mapping={f"f{i}": i for i in range(513)})  # Valkey 8.0: hash-max-listpack-entries 512
    assert enc("hbig") == b"hashtable"
    r.hset("hlong", "f", "v" * 65)
    assert enc("hlong") == b"hashtable"


def encoding_of(value):
    """The encoding a value would have on a key no write ever reported (content decides)."""
    return _encoding_of(EncodingRules(), Keyspace(1).dbs[0], b"k", value)


def test_encoding_of_unit():
    assert encoding_of(b"-1") == b"int"
    assert encoding_of(b"-0") == b"embstr"
    assert encoding_of(b"+1") == b"embstr"
    assert encoding_of(deque([b"1"] * 4000)) == b"listpack"   # 2 bytes per small int entry
    assert encoding_of(deque([b"1"] * 5000)) == b"quicklist"
    z = ZSet()
    z.add(b"a", 1.0)
    assert encoding_of(z) == b"listpack"


def test_object_refcount(rr):
    rr.set("shared", "100")
    rr.set("notshared", "10000")
    rr.set("s", "hello")
    rr.rpush("l", "a")
    assert rr.execute_command("OBJECT", "REFCOUNT", "shared") == 2147483647
    assert rr.execute_command("OBJECT", "REFCOUNT", "notshared") == 1
    assert rr.execute_command("OBJECT", "REFCOUNT", "s") == 1
    assert rr.execute_command("OBJECT", "REFCOUNT", "l") == 1
    assert rr.execute_command("OBJECT", "REFCOUNT", "missing") is None


def test_object_idletime_and_freq_policies(restore_config):
    r = restore_config
    r.set("k", "v")
    assert r.execute_command("OBJECT", "IDLETIME", "k") in (0, 1)   # the LRU clock may turn a second meanwhile
    assert r.execute_command("OBJECT", "IDLETIME", "missing") is None
    assert _err(r.execute_command, "OBJECT", "FREQ", "k") == (
        "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching "
        "between policies at runtime LRU and LFU data will take some time to adjust.")
    r.config_set("maxmemory-policy", "allkeys-lfu")
    r.set("f", "v")
    assert r.execute_command("OBJECT", "FREQ", "f") == 5     # LFU_INIT_VAL, OBJECT does not touch
    assert r.execute_command("OBJECT", "FREQ", "f") == 5
    r.get("f")
    assert r.execute_command("OBJECT", "FREQ", "f") == 6     # the first access always counts
    assert r.execute_command("OBJECT", "FREQ", "missing") is None
    assert _err(r.execute_command, "OBJECT", "IDLETIME", "f") == (
        "An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between "
        "policies at runtime LRU and LFU data will take some time to adjust.")
    r.config_set("maxmemory-policy", "allkeys-lru")
    r.set("g", "v")
    r.get("g")
    assert r.execute_command("OBJECT", "IDLETIME", "g") in (0, 1)


def test_object_help_and_errors(rr):
    help_lines = rr.execute_command("OBJECT", "HELP")
    assert help_lines[0] in (b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                             "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
    assert help_lines[-2:] in ([b"HELP", b"    Print this help."], ["HELP", "    Print this help."])
    assert len(help_lines) == 15
    assert _err(rr.execute_command, "OBJECT", "NOPE", "k") == "unknown subcommand 'NOPE'. Try OBJECT HELP."
    assert _err(rr.execute_command, "OBJECT", "ENCODING") == \
        "wrong number of arguments for 'object|encoding' command"
    rr.set("k", "v")
    assert rr.type("k") == b"string"


def test_object_does_not_reveal_expired_keys(r):
    r.execute_command("SET", "gone", "v", "PX", "1")
    time.sleep(0.01)
    assert r.execute_command("OBJECT", "ENCODING", "gone") is None


# -- MEMORY ----------------------------------------------------------------------------------------

def test_memory_usage(rr):
    rr.set("s", "x" * 1000)
    used = rr.execute_command("MEMORY", "USAGE", "s")
    assert isinstance(used, int) and used > 1000
    rr.rpush("l", *[f"item{i}" for i in range(100)])
    assert rr.execute_command("MEMORY", "USAGE", "l") > 100 * 5
    all_samples = rr.execute_command("MEMORY", "USAGE", "l", "SAMPLES", "0")
    assert all_samples > 100 * 5
    assert rr.execute_command("MEMORY", "USAGE", "missing") is None
    assert _err(rr.execute_command, "MEMORY", "USAGE", "s", "SAMPLES", "-1") == "syntax error"
    assert _err(rr.execute_command, "MEMORY", "USAGE", "s", "SAMPLES", "x") == \
        "value is not an integer or out of range"
    assert _err(rr.execute_command, "MEMORY", "USAGE", "s", "FOO") == "syntax error"
    assert _err(rr.execute_command, "MEMORY", "USAGE", "s", "SAMPLES") == "syntax error"


def test_memory_usage_samples_unit():
    h = {b"f%d" % i: b"x" * (i * 10) for i in range(50)}
    few = introspection.memory_usage(b"h", h, 1)
    every = introspection.memory_usage(b"h", h, None)
    assert every > few  # later fields are longer: a full sample sees them
    assert introspection.memory_usage(b"h", h, 5) == introspection.estimate_key(b"h", h)


def test_memory_stats_shapes(r, r3):
    r.set("a", "1")
    stats = r.execute_command("MEMORY", "STATS")
    # RESP2: a flat array of name, value pairs.
    assert isinstance(stats, list) and len(stats) % 2 == 0
    names = stats[0::2]
    assert names[:3] == [b"peak.allocated", b"total.allocated", b"startup.allocated"]
    fields = dict(zip(names, stats[1::2]))
    assert fields[b"keys.count"] == 1
    assert fields[b"db.0"][0] == b"overhead.hashtable.main"
    assert isinstance(fields[b"dataset.percentage"], bytes)
    m = r3.execute_command("MEMORY", "STATS")
    assert isinstance(m, dict)
    assert isinstance(m[b"dataset.percentage"], float)
    assert isinstance(m[b"db.0"], dict) and m[b"db.0"][b"overhead.hashtable.main"] > 0
    assert m[b"total.allocated"] >= 0 and m[b"peak.allocated"] >= m[b"total.allocated"]


def test_memory_doctor_malloc_purge_help(rr):
    text = rr.execute_command("MEMORY", "DOCTOR")
    text = text if isinstance(text, (bytes, str)) else str(text)
    text = text.decode() if isinstance(text, bytes) else text
    assert text.startswith("Hi Sam, this instance is empty or is using very little memory")
    assert rr.execute_command("MEMORY", "MALLOC-STATS") == b"Stats not supported for the current allocator"
    assert rr.execute_command("MEMORY", "PURGE") in (b"OK", "OK", True)
    lines = rr.execute_command("MEMORY", "HELP")
    assert len(lines) == 1 + 11 + 2


# -- SLOWLOG ---------------------------------------------------------------------------------------

def test_slowlog_records_every_command_at_zero(restore_config, shared_server):
    r = restore_config
    r.config_set("slowlog-log-slower-than", "0")
    r.execute_command("SLOWLOG", "RESET")
    r.execute_command("CLIENT", "SETNAME", "slowpoke")
    r.set("foo", "bar")
    entries = r.execute_command("SLOWLOG", "GET")
    # Newest first: SET, CLIENT SETNAME, SLOWLOG RESET (the GET itself is logged after it answers).
    assert [e[3] for e in entries] == [[b"SET", b"foo", b"bar"], [b"CLIENT", b"SETNAME", b"slowpoke"],
                                       [b"SLOWLOG", b"RESET"]]
    eid, ts, usec, argv, addr, name = entries[0]
    assert eid == entries[1][0] + 1 == entries[2][0] + 2
    assert abs(ts - time.time()) < 60
    assert isinstance(usec, int) and usec >= 0
    assert addr.startswith(b"127.0.0.1:")
    assert name == b"slowpoke"
    assert entries[1][5] == b"slowpoke"  # the entry is made after the command ran
    assert entries[2][5] == b""
    assert r.execute_command("SLOWLOG", "LEN") == 4


def test_slowlog_trims_arguments(restore_config):
    r = restore_config
    r.config_set("slowlog-log-slower-than", "0")
    r.execute_command("SLOWLOG", "RESET")
    r.sadd("set", *range(3, 34))
    r.set("k", "a" * 200)
    entries = r.execute_command("SLOWLOG", "GET", "2")
    assert entries[0][3] == [b"SET", b"k", b"a" * 128 + b"... (72 more bytes)"]
    args = entries[1][3]
    assert len(args) == 32
    assert args[:3] == [b"SADD", b"set", b"3"]
    assert args[30] == b"31"
    assert args[31] == b"... (2 more arguments)"


def test_slowlog_redacts_secrets_and_skips_exec(restore_config):
    r = restore_config
    r.config_set("slowlog-log-slower-than", "0")
    r.execute_command("SLOWLOG", "RESET")
    with pytest.raises(valkey.exceptions.ValkeyError):  # WRONGPASS
        r.execute_command("AUTH", "someone", "secret")
    r.config_set("requirepass", "")
    with r.pipeline(transaction=True) as p:
        p.set("tx", "1")
        p.incr("tx")
        p.execute()
    entries = r.execute_command("SLOWLOG", "GET", "-1")
    argvs = [e[3] for e in entries]
    assert [b"AUTH", b"(redacted)", b"(redacted)"] in argvs
    assert [b"CONFIG", b"SET", b"requirepass", b"(redacted)"] in argvs
    assert [b"SET", b"tx", b"1"] in argvs and [b"INCRBY", b"tx", b"1"] in argvs
    assert not any(a[0].upper() == b"EXEC" for a in argvs)
    assert [b"MULTI"] in argvs


def test_slowlog_threshold_disable_and_max_len(restore_config):
    r = restore_config
    r.config_set("slowlog-log-slower-than", "0")
    r.config_set("slowlog-max-len", "10")
    for _ in range(30):
        r.ping()
    assert r.execute_command("SLOWLOG", "LEN") == 10
    r.config_set("slowlog-max-len", "3")
    assert r.execute_command("SLOWLOG", "LEN") <= 3
    r.config_set("slowlog-log-slower-than", "-1")
    r.execute_command("SLOWLOG", "RESET")
    for _ in range(5):
        r.ping()
    assert r.execute_command("SLOWLOG", "LEN") == 0
    r.config_set("slowlog-log-slower-than", "100000000")
    r.ping()
    assert r.execute_command("SLOWLOG", "LEN") == 0
    r.config_set("slowlog-log-slower-than", "0")
    r.config_set("slowlog-max-len", "0")
    r.ping()
    assert r.execute_command("SLOWLOG", "LEN") == 0


def test_slowlog_get_count_and_errors(restore_config):
    r = restore_config
    r.config_set("slowlog-log-slower-than", "0")
    r.execute_command("SLOWLOG", "RESET")
    for i in range(15):
        r.set(f"k{i}", i)
    assert len(r.execute_command("SLOWLOG", "GET")) == 10
    assert len(r.execute_command("SLOWLOG", "GET", "-1")) == r.execute_command("SLOWLOG", "LEN") - 1
    assert r.execute_command("SLOWLOG", "GET", "0") == []
    assert len(r.execute_command("SLOWLOG", "GET", "3")) == 3
    assert _err(r.execute_command, "SLOWLOG", "GET", "-2") == "count should be greater than or equal to -1"
    assert _err(r.execute_command, "SLOWLOG", "GET", "x") == "count should be greater than or equal to -1"
    assert _err(r.execute_command, "SLOWLOG", "GET", "1", "2") == \
        "unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP."
    assert _err(r.execute_command, "SLOWLOG", "LEN", "1") == "wrong number of arguments for 'slowlog|len' command"
    assert _err(r.execute_command, "SLOWLOG", "FOO") == "unknown subcommand 'FOO'. Try SLOWLOG HELP."
    assert r.execute_command("SLOWLOG", "RESET") in (b"OK", "OK", True)
    lines = r.execute_command("SLOWLOG", "HELP")
    assert len(lines) == 1 + 9 + 2


def test_slowlog_resp3_shape(r3):
    try:
        r3.config_set("slowlog-log-slower-than", "0")
        r3.execute_command("SLOWLOG", "RESET")
        r3.set("a", "b")
        entry = r3.execute_command("SLOWLOG", "GET", "1")[0]
        assert isinstance(entry, list) and len(entry) == 6
        assert entry[3] == [b"SET", b"a", b"b"]
    finally:
        r3.config_set("slowlog-log-slower-than", "10000")
        r3.execute_command("SLOWLOG", "RESET")


def test_monitors_unit_record_and_fast_command():
    m = Monitors()
    assert m.threshold_us == 10000
    m._on_config_set("latency-monitor-threshold", 1)
    assert m.threshold_us == 1000
    m._on_config_set("commandlog-execution-slower-than", -1)  # CONFIG SET slowlog-log-slower-than
    assert m.threshold_us == 1000
    m._on_config_set("latency-monitor-threshold", 0)
    assert m.threshold_us == introspection._NEVER
    m._on_config_set("latency-monitor-threshold", 5)
    m.record(None, TABLE[b"get"], [b"get", b"k"], 7000)
    m.record(None, TABLE[b"keys"], [b"keys", b"*"], 9000)
    m.record(None, TABLE[b"keys"], [b"keys", b"*"], 4000)  # under the threshold
    assert set(m.latency_events) == {"fast-command", "command"}
    assert m.latency_events["fast-command"].max == 7
    assert list(m.latency_events["command"].samples)[-1][1] == 9
    assert len(m.slowlog) == 0  # the slow log is off (-1)


def test_latency_series_merges_same_second_and_keeps_160():
    s = LatencySeries()
    s.add(100, 5)
    s.add(100, 3)
    s.add(100, 9)
    assert list(s.samples) == [[100, 9]]
    for t in range(200):
        s.add(1000 + t, t)
    assert len(s.samples) == 160 and s.max == 199
    assert s.samples[0][0] == 1040


def test_expire_cycle_latency_sample():
    ks = Keyspace(clock_ms=lambda: 1_000_000)
    m = Monitors(ks)
    m._on_config_set("latency-monitor-threshold", 2)
    ticks = iter(range(0, 1000))
    fake = lambda: next(ticks) * 0.005  # noqa: E731 - every call is 5 ms later
    db = ks.dbs[0]
    db.data[b"k"] = b"v"
    db.set_expire(b"k", 1)
    assert ks.active_expire_cycle(25.0, fake) == 1
    assert "expire-cycle" in m.latency_events
    assert m.latency_events["expire-cycle"].max >= 5


def test_latency_graph_text_renders_like_valkey():
    s = LatencySeries()
    s.add(100, 10)
    s.add(101, 20)
    s.add(102, 40)
    text = latency_graph_text("command", s, 102)
    lines = text.split("\n")
    assert lines[0] == "command - high 40 ms, low 10 ms (all time high 40 ms)"
    assert lines[1] == "-" * 80
    assert lines[2:6] == ["  #", "  |", " o|", "_||"]
    assert lines[6] == "   "       # label margin
    assert lines[7:9] == ["210", "sss"]


# -- LATENCY ---------------------------------------------------------------------------------------

def test_latency_monitor_end_to_end(restore_config):
    r = restore_config
    r.execute_command("LATENCY", "RESET")
    assert r.execute_command("LATENCY", "LATEST") == []
    doctor = r.execute_command("LATENCY", "DOCTOR")
    assert b"Latency monitoring is disabled" in doctor
    r.config_set("latency-monitor-threshold", "100")
    r.execute_command("DEBUG", "SLEEP", "0.15")
    latest = r.execute_command("LATENCY", "LATEST")
    assert len(latest) == 1
    event, ts, last, worst = latest[0]
    assert event == b"command" and last >= 150 and worst >= last and abs(ts - time.time()) < 60
    history = r.execute_command("LATENCY", "HISTORY", "command")
    assert len(history) == 1 and history[0][1] == last
    assert r.execute_command("LATENCY", "HISTORY", "nothing") == []
    graph = r.execute_command("LATENCY", "GRAPH", "command")
    assert graph.startswith(b"command - high %d ms" % last)
    assert _err(r.execute_command, "LATENCY", "GRAPH", "nothing") == "No samples available for event 'nothing'"
    doctor = r.execute_command("LATENCY", "DOCTOR")
    assert b"1. command: 1 latency spikes" in doctor and b"Here is some advice for you" in doctor
    assert r.execute_command("LATENCY", "RESET", "nothing") == 0
    assert r.execute_command("LATENCY", "RESET", "COMMAND") == 1
    assert r.execute_command("LATENCY", "LATEST") == []
    assert r.execute_command("LATENCY", "RESET") == 0
    lines = r.execute_command("LATENCY", "HELP")
    assert len(lines) == 1 + 14 + 2
    assert _err(r.execute_command, "LATENCY", "HISTORY") == "wrong number of arguments for 'latency|history' command"


def test_latency_threshold_config_roundtrip(restore_config):
    r = restore_config
    assert r.config_get("latency-monitor-threshold") == {"latency-monitor-threshold": "0"}
    r.config_set("latency-monitor-threshold", "7")
    assert r.config_get("latency-monitor-threshold") == {"latency-monitor-threshold": "7"}
    with pytest.raises(valkey.ResponseError):
        r.config_set("latency-monitor-threshold", "-1")


def test_latency_doctor_resp3_is_verbatim(r3):
    text = r3.execute_command("LATENCY", "DOCTOR")
    assert "Latency monitoring is disabled" in str(text)
