"""Issue 20: replies and INFO fields found different from Valkey 8.0.1, each compared at test time with the real
Valkey 9.1.2 server (the `valkey91` fixture): EXEC rejected (EXECABORT inside MULTI or not, the reason without
`ERR `), a -0 score in a listpack, INFO memory's lazyfree fields, OBJECT IDLETIME under every non-LFU policy,
the Lua VM's figure in INFO memory, and INFO stats' eventloop_* fields."""

import socket

import pytest

from conftest import wait_until
from helpers.wire import _encode, _read_reply, raw


def replies(port, *commands):
    """The exact bytes of each reply to commands sent one after the other on one fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        f = s.makefile("rb")
        out = []
        for command in commands:
            s.sendall(_encode(command))
            out.append(_read_reply(f))
        return out


@pytest.fixture
def both(r, valkey91):
    """(durakv client, Valkey 9.1.2 client), both flushed, RESP2."""
    oracle = valkey91.client()
    oracle.flushall()
    yield r, oracle
    oracle.close()


def ports(both):
    return [c.connection_pool.connection_kwargs["port"] for c in both]


def same_replies(both, *commands):
    ours, theirs = (replies(p, *commands) for p in ports(both))
    assert ours == theirs
    return ours


# -- EXEC rejected ------------------------------------------------------------------------------------

def test_exec_with_arguments_aborts_inside_multi_or_not(both):
    out = same_replies(both, ["EXEC", "x"], ["MULTI"], ["SET", "k", "1"], ["EXEC", "x"], ["EXEC"], ["GET", "k"])
    assert out[0] == b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
    assert out[3] == out[0] and out[4] == b"-ERR EXEC without MULTI\r\n" and out[5] == b"$-1\r\n"


def test_exec_rejected_outside_multi_discards_the_watches(both):
    # execCommandAbort -> discardTransaction -> unwatchAllKeys: the WATCH before it no longer aborts a MULTI
    for c in both:
        c.set("w", "0")
    script = (["WATCH", "w"], ["EXEC", "x"], ["MULTI"], ["SET", "w", "mine"], ["EXEC"])
    ports_ = ports(both)
    results = []
    for port, c in zip(ports_, both):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            f = s.makefile("rb")
            out = []
            for i, command in enumerate(script):
                if i == 2:
                    c.set("w", "someone else")          # would break a watch still held
                s.sendall(_encode(command))
                out.append(_read_reply(f))
        results.append((out, c.get("w")))
    assert results[0] == results[1]
    assert results[0][0][-1] == b"*1\r\n+OK\r\n" and results[0][1] == b"mine"


def test_exec_rejected_counts_as_execabort_in_errorstats(both):
    for c in both:
        c.config_resetstat()
    same_replies(both, ["EXEC", "x"], ["MULTI"], ["EXEC", "x"])
    ours, theirs = (c.info("errorstats") for c in both)
    assert ours == theirs == {"errorstat_EXECABORT": {"count": 2}}
    ours, theirs = (c.info("commandstats")["cmdstat_exec"] for c in both)
    assert ours["rejected_calls"] == theirs["rejected_calls"] == 2


# -- a -0 score ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", [2, 3])
def test_a_minus_zero_score_in_a_listpack_reads_back_as_zero(shared_server, valkey91, protocol):
    with shared_server.client(protocol=protocol) as ours, valkey91.client(protocol=protocol) as theirs:
        for c in (ours, theirs):
            c.flushall()
        commands = (["ZADD", "z", "-0.0", "m"], ["ZSCORE", "z", "m"], ["ZMSCORE", "z", "m"],
                    ["ZRANGE", "z", "0", "-1", "WITHSCORES"], ["ZSCAN", "z", "0"],
                    ["ZADD", "z", "INCR", "-0", "n"],        # the reply is the sum, -0; what is kept is 0
                    ["ZSCORE", "z", "n"], ["ZADD", "src", "0", "x"],
                    ["ZUNIONSTORE", "dst", "1", "src", "WEIGHTS", "-1"], ["ZSCORE", "dst", "x"])
        proto = [["HELLO", "3"]] if protocol == 3 else []
        ours_out, theirs_out = (replies(c.connection_pool.connection_kwargs["port"], *proto, *commands)[len(proto):]
                                for c in (ours, theirs))
        assert ours_out == theirs_out
        assert b"-0" not in ours_out[1] and b"-0" in ours_out[5]


def test_a_skiplist_keeps_the_sign_of_a_zero_score(both):
    try:
        for c in both:
            c.config_set("zset-max-listpack-entries", 0)
        out = same_replies(both, ["ZADD", "z", "-0.0", "m"], ["OBJECT", "ENCODING", "z"], ["ZSCORE", "z", "m"])
        assert out[1:] == [b"$8\r\nskiplist\r\n", b"$2\r\n-0\r\n"]
        for c in both:
            c.config_set("zset-max-listpack-entries", 128)
        # ZRANGESTORE into a small set converts it to a listpack: the sign is lost there
        out = same_replies(both, ["ZRANGESTORE", "d", "z", "0", "-1"], ["OBJECT", "ENCODING", "d"],
                           ["ZSCORE", "d", "m"])
        assert out[1:] == [b"$8\r\nlistpack\r\n", b"$1\r\n0\r\n"]
    finally:
        for c in both:
            c.config_set("zset-max-listpack-entries", 128)


# -- INFO memory --------------------------------------------------------------------------------------

def _section_fields(client, section):
    text = raw(client, "INFO", section).decode()
    return [line.split(":", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]


def test_info_memory_ends_with_the_lazyfree_fields(both):
    ours, theirs = (_section_fields(c, "memory") for c in both)
    assert ours[-2:] == theirs[-2:] == ["lazyfree_pending_objects", "lazyfreed_objects"]
    r = both[0]
    r.sadd("big", *range(1000))
    r.unlink("big")
    info = r.info("memory")
    assert info["lazyfree_pending_objects"] == 0 and info["lazyfreed_objects"] == 0   # freed at once


# -- OBJECT IDLETIME ----------------------------------------------------------------------------------

@pytest.fixture
def policy(both):
    """set(name): maxmemory-policy name on both servers, noeviction again afterwards."""
    def set_(name):
        for c in both:
            c.config_set("maxmemory-policy", name)
    yield set_
    set_("noeviction")


@pytest.mark.parametrize("name", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_object_idletime_is_tracked_under_every_non_lfu_policy(both, policy, name):
    policy(name)
    for c in both:
        c.set("a", "1")
        c.rpush("l", "x")
        c.set("read", "1")
        c.copy("a", "a2")
    # two seconds pass on both LRU clocks: durakv's is moved ahead (DEBUG LRU-CLOCK-ADVANCE) instead of slept
    # for; Valkey 9.1.2 has no such hook, so its own clock is polled until it has turned twice
    ours, oracle = both
    ours.execute_command("DEBUG", "LRU-CLOCK-ADVANCE", "2")
    wait_until(lambda: oracle.object("idletime", "a") >= 2, 10, interval_s=0.1, what="Valkey's LRU clock, 2 s on")
    for c in both:
        c.get("read")
    # whole seconds of an LRU clock the cron ticks (10 times a second): 2 or 3 (more on a loaded machine), a key
    # just read 0 or 1
    for c in both:
        idle = [c.object("idletime", k) for k in ("a", "l", "a2", "read")]
        assert all(2 <= i <= 5 for i in idle[:3]) and idle[3] <= 1, idle
    for port in ports(both):   # CLIENT NO-TOUCH: a GET leaves it alone, OBJECT IDLETIME still answers it
        out = replies(port, ["CLIENT", "NO-TOUCH", "on"], ["GET", "a"], ["OBJECT", "IDLETIME", "a"])
        assert out[:2] == [b"+OK\r\n", b"$1\r\n1\r\n"] and 2 <= int(out[2][1:]) <= 5, out
    # RESTORE ... IDLETIME sets it under any non-LFU policy (objectSetLRUOrLFU)
    for port, c in zip(ports(both), both):
        out = replies(port, ["RESTORE", "r", "0", c.dump("a"), "IDLETIME", "1000"], ["OBJECT", "IDLETIME", "r"])
        # the LRU clock may turn between the two commands (the cron ticks it; a loaded machine more than once)
        assert out[0] == b"+OK\r\n" and 1000 <= int(out[1][1:]) <= 1003, out


def test_the_compiled_core_keeps_access_times_as_the_python_path(r):
    """GET, MGET, HGET, INCR, SET and MSET run in fastpath/_core.c: each stamps the key's access time as
    Keyspace.lookup / Context.store do; EXISTS and TTL do not (they peek); a CLIENT NO-TOUCH session's GET does
    not either."""
    assert r.info("server")["durakv_core"] == "compiled"
    keys = ("get", "mget", "hget", "incr", "set", "mset", "exists", "ttl", "notouch", "idle")
    for k in keys:
        r.set(k, "1") if k != "hget" else r.hset(k, "f", "v")
    r.execute_command("DEBUG", "LRU-CLOCK-ADVANCE", "2")     # every key 2 s idle, without sleeping
    ran = r.info("server")["durakv_core_commands"]
    r.get("get")
    r.mget("mget")
    r.hget("hget", "f")
    r.incr("incr")
    r.set("set", "2")
    r.mset({"mset": "2"})
    r.exists("exists")
    r.ttl("ttl")
    port = r.connection_pool.connection_kwargs["port"]
    assert replies(port, ["CLIENT", "NO-TOUCH", "on"], ["GET", "notouch"]) == [b"+OK\r\n", b"$1\r\n1\r\n"]
    assert r.info("server")["durakv_core_commands"] >= ran + 8        # they ran on the compiled core
    idle = {k: r.object("idletime", k) for k in keys}
    assert [k for k in keys if idle[k] <= 1] == ["get", "mget", "hget", "incr", "set", "mset"], idle
    assert all(2 <= idle[k] <= 5 for k in ("exists", "ttl", "notouch", "idle")), idle


def test_object_idletime_under_an_lfu_policy_is_an_error(both, policy):
    for c in both:
        c.set("a", "1")
    policy("allkeys-lfu")
    out = same_replies(both, ["OBJECT", "IDLETIME", "a"], ["OBJECT", "IDLETIME", "missing"])
    assert out[0].startswith(b"-ERR An LFU maxmemory policy is selected, idle time not tracked.")
    assert out[1] == b"$-1\r\n"


# -- the Lua VM's figure ------------------------------------------------------------------------------

VM_FIELDS = ("used_memory_lua", "used_memory_vm_eval", "used_memory_vm_functions")


def test_lua_vm_memory_is_the_vms_own_before_and_after_a_script(server_factory, valkey91):
    """Valkey's VMs exist from start-up: ~30 KB each before any script and after a small one. durakv's prelude
    (its sandbox and API, C code in Valkey) is not counted: before, a fresh VM's figure; after, scripts move it."""
    srv = server_factory()
    c = srv.client()
    with valkey91.client() as oracle:
        theirs = oracle.info("memory")
        before = c.info("memory")
        for f in VM_FIELDS:
            assert 0 < before[f] < 2 * theirs[f], (f, before[f], theirs[f])
        assert before["used_memory_vm_total"] == before["used_memory_vm_eval"] + before["used_memory_vm_functions"]
        assert c.eval("return 1", 0) == oracle.eval("return 1", 0) == 1
        after = c.info("memory")
        assert 0 < after["used_memory_lua"] < 2 * oracle.info("memory")["used_memory_lua"]
        assert after["used_memory_lua"] == after["used_memory_vm_eval"]
    # what scripts make the VM hold shows
    for i in range(50):     # each cached script keeps its 2 KB constant in the VM
        assert c.eval("return '%s%d'" % ("x" * 2000, i), 0).endswith(b"%d" % i)
    grown = c.info("memory")["used_memory_lua"]
    assert grown > after["used_memory_lua"] + 50_000, (grown, after["used_memory_lua"])
    assert c.script_flush()
    assert c.info("memory")["used_memory_lua"] == before["used_memory_lua"]   # a new VM, as Valkey's reset


def test_eval_does_not_leak_in_the_lua_stack(r, valkey91):
    """Valkey's scripting unit: 10000 EVALs of one script leave used_memory_lua under 100 KB."""
    with valkey91.client() as oracle:
        for c in (r, oracle):
            c.script_flush()
            c.set("x", 0)
            pipe = c.pipeline(transaction=False)
            for _ in range(10000):
                pipe.eval("return redis.call('incr', KEYS[1])", 1, "x")
            pipe.execute()
            assert c.get("x") == b"10000"
            assert c.info("memory")["used_memory_lua"] < 100 * 1024


# -- INFO stats eventloop_* -----------------------------------------------------------------------------

EVENTLOOP = ["eventloop_cycles", "eventloop_duration_sum", "eventloop_duration_cmd_sum",
             "instantaneous_eventloop_cycles_per_sec", "instantaneous_eventloop_duration_usec"]


def test_eventloop_fields_in_valkeys_section_and_order_and_they_move(both):
    ours, theirs = (_section_fields(c, "stats") for c in both)
    for fields in (ours, theirs):    # in Stats, one block, in Valkey's order
        start = fields.index(EVENTLOOP[0])
        assert fields[start:start + len(EVENTLOOP)] == EVENTLOOP
    # Valkey's fields around the block, where durakv has them, are on the same sides
    start = ours.index(EVENTLOOP[0])
    around = [f for f in theirs if f in ours and f not in EVENTLOOP]
    for f in around:
        assert (ours.index(f) < start) == (theirs.index(f) < theirs.index(EVENTLOOP[0])), f
    for section in ("memory", "server", "clients", "persistence", "replication", "cpu"):
        for c in both:
            assert not [f for f in _section_fields(c, section) if f in EVENTLOOP], section
    r = both[0]
    first = r.info("stats")
    for i in range(100):
        r.set("k%d" % i, i)
    r.execute_command("DEBUG", "SLEEP", "0.05")
    wait_until(lambda: r.info("stats")["instantaneous_eventloop_cycles_per_sec"] > 0, 10,
               what="the instantaneous figures sampled")
    second = r.info("stats")
    assert second["eventloop_cycles"] >= first["eventloop_cycles"] + 100
    assert second["eventloop_duration_sum"] >= first["eventloop_duration_sum"] + 50_000
    assert second["eventloop_duration_cmd_sum"] >= first["eventloop_duration_cmd_sum"] + 50_000
    assert second["instantaneous_eventloop_duration_usec"] > 0
