"""Set commands against a real server (valkey-py, RESP2 and RESP3), exact wire shapes, effect
determinism (journal replay) and the random-member sampler."""

import random
from collections import Counter

import pytest

from durakv.commands import sets as sets_module
from helpers.replay import execute, make_pipeline
from durakv.commands.session import Session
from durakv.keyspace import Keyspace
from helpers.replay import apply_effects, dump, run_and_replay
from test_hashes import WRONGTYPE, NULL_BULK, err, is_resp3, local, raw, wire

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


def sm(client, key):
    return set(raw(client, "SMEMBERS", key))


def members(n, prefix="m"):
    return [f"{prefix}{i}".encode() for i in range(n)]


# -- SADD / SREM / SCARD / SISMEMBER / SMISMEMBER / SMEMBERS -------------------------------------------


def test_sadd_srem_scard(rr):
    assert rr.sadd("s", "a", "b", "a") == 2
    assert rr.sadd("s", "b", "c") == 1
    assert rr.sadd("s", "c") == 0
    assert rr.scard("s") == 3
    assert rr.srem("s", "a", "zz", "a") == 1
    assert rr.srem("nokey", "a") == 0
    assert rr.srem("s", "zz") == 0
    assert rr.scard("s") == 2
    assert rr.srem("s", "b", "c", "d") == 2
    assert rr.exists("s") == 0
    assert rr.scard("s") == 0


def test_sismember_smismember(rr):
    rr.sadd("s", "a", "b")
    assert raw(rr, "SISMEMBER", "s", "a") == 1
    assert raw(rr, "SISMEMBER", "s", "z") == 0
    assert raw(rr, "SISMEMBER", "nokey", "a") == 0
    assert raw(rr, "SMISMEMBER", "s", "a", "z", "b") == [1, 0, 1]
    assert raw(rr, "SMISMEMBER", "nokey", "a", "b") == [0, 0]
    assert wire(rr, "SMISMEMBER", "s", "z", "a") == b"*2\r\n:0\r\n:1\r\n"


def test_smembers_and_shape(rr):
    ms = members(300)
    rr.sadd("s", *ms)
    assert sorted(raw(rr, "SMEMBERS", "s")) == sorted(ms)
    resp3 = is_resp3(rr)
    assert wire(rr, "SMEMBERS", "nokey") == (b"~0\r\n" if resp3 else b"*0\r\n")
    rr.sadd("one", "x")
    assert wire(rr, "SMEMBERS", "one") == (b"~1\r\n" if resp3 else b"*1\r\n") + b"$1\r\nx\r\n"


def test_binary_members(r):
    m = b"\x00\r\n\xff"
    assert r.sadd("s", m, b"") == 2
    assert r.sismember("s", m) and r.sismember("s", b"")
    assert sorted(raw(r, "SMEMBERS", "s")) == [b"", m]


# -- SRANDMEMBER -----------------------------------------------------------------------------------------


def test_srandmember_without_count(rr):
    assert rr.srandmember("nokey") is None
    assert wire(rr, "SRANDMEMBER", "nokey") == NULL_BULK[is_resp3(rr)]
    rr.sadd("s", "a", "b", "c")
    assert {rr.srandmember("s") for _ in range(100)} == {b"a", b"b", b"c"}
    assert rr.scard("s") == 3
    big = members(1000)
    rr.sadd("big", *big)
    got = {rr.srandmember("big") for _ in range(200)}
    assert got <= set(big) and len(got) > 100


@pytest.mark.parametrize("size", [10, 100, 1000])
def test_srandmember_with_count(rr, size):
    ms = members(size)
    rr.sadd("s", *ms)
    assert raw(rr, "SRANDMEMBER", "nokey", "5") == []
    assert raw(rr, "SRANDMEMBER", "s", "0") == []
    for count in (1, 3, size // 2, size - 1):
        got = raw(rr, "SRANDMEMBER", "s", count)
        assert len(got) == count and len(set(got)) == count and set(got) <= set(ms)
    assert sorted(raw(rr, "SRANDMEMBER", "s", size)) == sorted(ms)
    assert sorted(raw(rr, "SRANDMEMBER", "s", size + 5)) == sorted(ms)
    for count in (1, 5, size * 3):
        got = raw(rr, "SRANDMEMBER", "s", -count)
        assert len(got) == count and set(got) <= set(ms)
    assert rr.scard("s") == size


def test_srandmember_reply_is_an_array(rr):
    rr.sadd("s", "x")
    assert wire(rr, "SRANDMEMBER", "s", "1") == b"*1\r\n$1\r\nx\r\n"
    assert wire(rr, "SRANDMEMBER", "s", "-2") == b"*2\r\n$1\r\nx\r\n$1\r\nx\r\n"
    assert wire(rr, "SRANDMEMBER", "nokey", "2") == b"*0\r\n"


def test_srandmember_errors(rr):
    rr.sadd("s", "a")
    assert err(rr, "SRANDMEMBER", "s", "x") == "value is not an integer or out of range"
    assert err(rr, "SRANDMEMBER", "s", "1", "2") == "syntax error"
    assert err(rr, "SRANDMEMBER", "s", str(-2**63)) == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    assert err(rr, "SRANDMEMBER", "nokey", "x") == "value is not an integer or out of range"


# -- SPOP --------------------------------------------------------------------------------------------------


def test_spop_single(rr):
    assert rr.spop("nokey") is None
    assert wire(rr, "SPOP", "nokey") == NULL_BULK[is_resp3(rr)]
    ms = set(members(100))
    rr.sadd("s", *ms)
    popped = [rr.spop("s") for _ in range(100)]
    assert set(popped) == ms and len(popped) == 100
    assert rr.exists("s") == 0
    assert rr.spop("s") is None


def test_spop_with_count(rr):
    ms = set(members(50))
    rr.sadd("s", *ms)
    got = raw(rr, "SPOP", "s", "10")
    assert len(got) == 10 and len(set(got)) == 10 and set(got) <= ms
    assert set(raw(rr, "SMEMBERS", "s")) == ms - set(got)
    got2 = raw(rr, "SPOP", "s", "35")
    assert len(set(got2)) == 35 and not set(got2) & set(got)
    rest = raw(rr, "SPOP", "s", "100")
    assert set(got) | set(got2) | set(rest) == ms and len(rest) == 5
    assert rr.exists("s") == 0
    assert raw(rr, "SPOP", "s", "3") == []
    rr.sadd("t", "a")
    assert raw(rr, "SPOP", "t", "0") == []
    assert rr.scard("t") == 1


def test_spop_count_shape(rr):
    resp3 = is_resp3(rr)
    rr.sadd("s", "x", "y")
    assert wire(rr, "SPOP", "s", "1") in [(b"~1\r\n" if resp3 else b"*1\r\n") + b"$1\r\n%s\r\n" % m
                                           for m in (b"x", b"y")]
    assert wire(rr, "SPOP", "s", "5").startswith(b"~1\r\n" if resp3 else b"*1\r\n")  # takes all
    assert wire(rr, "SPOP", "nokey", "2") == (b"~0\r\n" if resp3 else b"*0\r\n")
    rr.sadd("s", "x")
    assert wire(rr, "SPOP", "s", "0") == (b"~0\r\n" if resp3 else b"*0\r\n")


def test_spop_errors(rr):
    rr.sadd("s", "a")
    assert err(rr, "SPOP", "s", "-1") == "value is out of range, must be positive"
    assert err(rr, "SPOP", "s", "x") == "value is out of range, must be positive"
    assert err(rr, "SPOP", "s", "1", "2") == "syntax error"
    assert rr.scard("s") == 1


# -- SMOVE -------------------------------------------------------------------------------------------------


def test_smove(rr):
    rr.sadd("src", "a", "b")
    rr.sadd("dst", "c")
    assert rr.smove("src", "dst", "a") is True
    assert sm(rr, "src") == {b"b"} and sm(rr, "dst") == {b"a", b"c"}
    assert rr.smove("src", "dst", "zz") is False
    assert raw(rr, "SMOVE", "src", "dst", "b") == 1
    assert rr.exists("src") == 0
    assert raw(rr, "SMOVE", "dst", "new", "c") == 1
    assert sm(rr, "new") == {b"c"}
    rr.sadd("x", "m")
    rr.sadd("y", "m")
    assert raw(rr, "SMOVE", "x", "y", "m") == 1  # already in dst: still removed from src
    assert rr.exists("x") == 0 and sm(rr, "y") == {b"m"}


def test_smove_same_key_and_types(rr):
    rr.sadd("s", "a")
    assert raw(rr, "SMOVE", "s", "s", "a") == 1
    assert raw(rr, "SMOVE", "s", "s", "z") == 0
    assert sm(rr, "s") == {b"a"}
    rr.set("str", "v")
    assert raw(rr, "SMOVE", "nokey", "str", "a") == 0  # a missing source wins over a bad destination
    assert err(rr, "SMOVE", "s", "str", "a") == WRONGTYPE
    assert err(rr, "SMOVE", "str", "s", "a") == WRONGTYPE
    assert sm(rr, "s") == {b"a"}


# -- SINTER / SUNION / SDIFF (+STORE) / SINTERCARD ---------------------------------------------------------------


@pytest.fixture
def abc(rr):
    rr.sadd("a", "1", "2", "3", "4")
    rr.sadd("b", "3", "4", "5")
    rr.sadd("c", "4", "5", "6")
    return rr


def test_set_algebra(abc):
    r = abc
    assert sorted(raw(r, "SINTER", "a", "b")) == [b"3", b"4"]
    assert sorted(raw(r, "SINTER", "a", "b", "c")) == [b"4"]
    assert raw(r, "SINTER", "a", "nokey") == []
    assert sorted(raw(r, "SINTER", "a", "a")) == [b"1", b"2", b"3", b"4"]
    assert sorted(raw(r, "SUNION", "a", "b", "nokey")) == [b"1", b"2", b"3", b"4", b"5"]
    assert raw(r, "SUNION", "nokey") == []
    assert sorted(raw(r, "SDIFF", "a", "b")) == [b"1", b"2"]
    assert sorted(raw(r, "SDIFF", "a", "b", "c", "nokey")) == [b"1", b"2"]
    assert sorted(raw(r, "SDIFF", "a", "nokey")) == [b"1", b"2", b"3", b"4"]
    assert raw(r, "SDIFF", "nokey", "a") == []
    assert raw(r, "SDIFF", "a", "a") == []


def test_set_algebra_shapes(abc):
    r = abc
    resp3 = is_resp3(r)
    set_hdr = b"~" if resp3 else b"*"
    assert wire(r, "SINTER", "a", "c") == set_hdr + b"1\r\n$1\r\n4\r\n"
    assert wire(r, "SINTER", "a", "nokey") == set_hdr + b"0\r\n"
    assert wire(r, "SDIFF", "c", "b") == set_hdr + b"1\r\n$1\r\n6\r\n"
    assert wire(r, "SUNION", "nokey") == set_hdr + b"0\r\n"


def test_set_algebra_wrong_type_anywhere(abc):
    r = abc
    r.set("str", "v")
    for cmd in ("SINTER", "SUNION", "SDIFF"):
        assert err(r, cmd, "a", "str") == WRONGTYPE
        assert err(r, cmd, "nokey", "str") == WRONGTYPE
        assert err(r, cmd + "STORE", "dst", "nokey", "str") == WRONGTYPE
    assert err(r, "SINTERCARD", "2", "nokey", "str") == WRONGTYPE
    assert r.exists("dst") == 0


def test_store_commands(abc):
    r = abc
    assert r.sinterstore("dst", ["a", "b"]) == 2
    assert sm(r, "dst") == {b"3", b"4"}
    assert r.sunionstore("dst", ["a", "c"]) == 6
    assert sm(r, "dst") == {b"1", b"2", b"3", b"4", b"5", b"6"}
    assert r.sdiffstore("dst", ["a", "b"]) == 2
    assert sm(r, "dst") == {b"1", b"2"}
    # the destination may be a source
    assert r.sunionstore("a", ["a", "c"]) == 6
    assert r.scard("a") == 6
    # any type at the destination is overwritten, and its TTL goes
    r.set("str", "v", ex=100)
    assert r.sinterstore("str", ["b", "c"]) == 2
    assert r.type("str") == b"set" and r.ttl("str") == -1


def test_store_empty_result_deletes_destination(abc):
    r = abc
    for cmd in (["SINTERSTORE", "dst", "a", "nokey"], ["SINTERSTORE", "dst", "b", "a", "x"],
                ["SDIFFSTORE", "dst", "b", "b"], ["SUNIONSTORE", "dst", "nokey"],
                ["SDIFFSTORE", "dst", "nokey", "a"]):
        r.sadd("dst", "old")
        assert raw(r, *cmd) == 0
        assert r.exists("dst") == 0
    assert raw(r, "SINTERSTORE", "dst", "a", "nokey") == 0


def test_sintercard(abc):
    r = abc
    assert raw(r, "SINTERCARD", "2", "a", "b") == 2
    assert raw(r, "SINTERCARD", "3", "a", "b", "c") == 1
    assert raw(r, "SINTERCARD", "1", "a") == 4
    assert raw(r, "SINTERCARD", "2", "a", "nokey") == 0
    assert raw(r, "SINTERCARD", "2", "a", "b", "LIMIT", "1") == 1
    assert raw(r, "SINTERCARD", "2", "a", "b", "limit", "0") == 2
    assert raw(r, "SINTERCARD", "2", "a", "b", "LIMIT", "10") == 2
    assert raw(r, "SINTERCARD", "2", "a", "a", "LIMIT", "3") == 3
    assert r.sintercard(2, ["a", "b"], limit=1) == 1


def test_sintercard_errors(abc):
    r = abc
    assert err(r, "SINTERCARD", "0", "a") == "numkeys should be greater than 0"
    assert err(r, "SINTERCARD", "-1", "a") == "numkeys should be greater than 0"
    assert err(r, "SINTERCARD", "x", "a") == "numkeys should be greater than 0"
    assert err(r, "SINTERCARD", "3", "a", "b") == "Number of keys can't be greater than number of args"
    assert err(r, "SINTERCARD", "1", "a", "LIMIT", "-1") == "LIMIT can't be negative"
    assert err(r, "SINTERCARD", "1", "a", "LIMIT", "x") == "LIMIT can't be negative"
    assert err(r, "SINTERCARD", "1", "a", "LIMIT") == "syntax error"
    assert err(r, "SINTERCARD", "1", "a", "b") == "syntax error"


# -- SSCAN -------------------------------------------------------------------------------------------------


def _sscan_all(client, key, *opts):
    cursor, out, calls = "0", [], 0
    while True:
        cursor, items = raw(client, "SSCAN", key, cursor, *opts)
        out.extend(items)
        calls += 1
        if cursor == b"0":
            return out, calls
        assert calls < 10000


def test_sscan(rr):
    assert raw(rr, "SSCAN", "nokey", "0") == [b"0", []]
    rr.sadd("small", "a", "b", "c")
    cursor, items = raw(rr, "SSCAN", "small", "0")
    assert cursor == b"0" and sorted(items) == [b"a", b"b", b"c"]
    ms = members(1000)
    rr.sadd("s", *ms)
    got, calls = _sscan_all(rr, "s", "COUNT", "100")
    assert calls >= 10 and sorted(got) == sorted(ms)
    got, _ = _sscan_all(rr, "s", "MATCH", "m99*")
    assert sorted(got) == sorted([b"m99"] + [b"m99%d" % i for i in range(10)])
    assert rr.sscan("small", 0, match="[ab]") == (0, [m for m in raw(rr, "SMEMBERS", "small") if m in (b"a", b"b")])


def test_sscan_errors(rr):
    rr.sadd("s", "a")
    assert err(rr, "SSCAN", "s", "x") == "invalid cursor"
    assert err(rr, "SSCAN", "s", "0", "NOVALUES") == "NOVALUES option can only be used in HSCAN"
    assert err(rr, "SSCAN", "s", "0", "COUNT", "0") == "syntax error"
    assert err(rr, "SSCAN", "s", "0", "BOGUS") == "syntax error"
    rr.set("str", "v")
    assert err(rr, "SSCAN", "str", "0") == WRONGTYPE


# -- wrong type ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", [
    ["SADD", "k", "m"], ["SREM", "k", "m"], ["SCARD", "k"], ["SISMEMBER", "k", "m"], ["SMISMEMBER", "k", "m"],
    ["SMEMBERS", "k"], ["SRANDMEMBER", "k"], ["SRANDMEMBER", "k", "3"], ["SPOP", "k"], ["SPOP", "k", "2"],
    ["SMOVE", "k", "other", "m"], ["SINTER", "k"], ["SUNION", "k"], ["SDIFF", "k"], ["SINTERCARD", "1", "k"],
    ["SINTERSTORE", "d", "k"], ["SUNIONSTORE", "d", "k"], ["SDIFFSTORE", "d", "k"], ["SSCAN", "k", "0"],
])
def test_wrong_type(r, cmd):
    r.hset("k", "f", "v")
    assert err(r, *cmd) == WRONGTYPE
    assert r.hgetall("k") == {b"f": b"v"}


# -- effects: replaying the journal rebuilds the same state ---------------------------------------------------------


def effect_names(effects):
    return [argv[0].upper() for _db, argv in effects]


def test_replay_spop():
    big = [str(i) for i in range(3000)]
    replies, effects = run_and_replay([
        ["SADD", "s"] + big,
        ["SPOP", "s"],
        ["SPOP", "s", "5"],
        ["SPOP", "s", "2000"],            # several SREM batches
        ["SREM", "s", "1", "2", "3"],
        ["SADD", "s", "1", "x"],
        ["SPOP", "s"],
        ["SADD", "small", "a", "b", "c"],
        ["SPOP", "small", "3"],           # takes all: DEL
        ["SPOP", "small", "1"],
        ["SADD", "one", "z"],
        ["SPOP", "one"],                  # last member: key deleted by the SREM too
        ["SMEMBERS", "s"],
    ])
    names = effect_names(effects)
    assert b"SPOP" not in names
    assert names.count(b"UNLINK") == 1
    assert effects[names.index(b"UNLINK")][1] == (b"UNLINK", b"small")
    srem_sizes = [len(argv) - 2 for _db, argv in effects if argv[0] == b"SREM"]
    assert srem_sizes[:4] == [1, 5, 1024, 976]
    assert len(replies[-1]) == 3000 - 1 - 5 - 2000 - replies[4] + replies[5] - 1


def test_replay_smove_and_stores():
    replies, effects = run_and_replay([
        ["SADD", "a", "1", "2", "3"],
        ["SADD", "b", "2", "3", "4"],
        ["SMOVE", "a", "b", "1"],
        ["SMOVE", "a", "b", "nope"],
        ["SMOVE", "a", "a", "2"],
        ["SMOVE", "b", "c", "4"],
        ["SINTERSTORE", "i", "a", "b"],
        ["SUNIONSTORE", "u", "a", "b", "c"],
        ["SDIFFSTORE", "d", "b", "a"],
        ["SET", "str", "v"],
        ["SUNIONSTORE", "str", "a"],
        ["SINTERSTORE", "i", "a", "nokey"],   # empty: DEL i
        ["SINTERSTORE", "never", "nokey"],    # empty, no destination: nothing
        ["SDIFFSTORE", "a", "a", "b"],        # empty into a source: DEL a
        ["SMEMBERS", "u"],
    ])
    assert replies[2] == 1 and replies[3] == 0 and replies[4] == 1
    assert sorted(replies[-1]) == [b"1", b"2", b"3", b"4"]
    names = effect_names(effects)
    assert names == [b"SADD", b"SADD", b"SMOVE", b"SMOVE", b"SINTERSTORE", b"SUNIONSTORE",
                     b"SDIFFSTORE", b"SET", b"SUNIONSTORE", b"DEL", b"DEL"]
    assert effects[-2][1] == (b"DEL", b"i") and effects[-1][1] == (b"DEL", b"a")


def test_replay_no_effect_when_nothing_changes():
    _replies, effects = run_and_replay([
        ["SADD", "s", "a"],
        ["SADD", "s", "a"],
        ["SREM", "s", "zz"],
        ["SREM", "nokey", "a"],
        ["SPOP", "nokey"],
        ["SPOP", "s", "0"],
        ["SMOVE", "s", "s", "a"],
        ["SMOVE", "nokey", "s", "a"],
        ["SRANDMEMBER", "s", "-5"],
    ])
    assert effect_names(effects) == [b"SADD"]


def test_replay_store_after_source_expired():
    clock = [1_700_000_000_000]
    ks = Keyspace(clock_ms=lambda: clock[0], rng=random.Random(1))
    d = make_pipeline(ks)
    session = Session()
    effects = []

    def run(*args):
        reply, eff, _cmd = execute(d, session, [str(a).encode() for a in args])
        effects.extend(eff)
        return reply

    run("SADD", "a", "1", "2")
    run("SADD", "b", "2")
    run("SADD", "c", "2")
    run("SADD", "dst", "old")
    run("PEXPIREAT", "b", clock[0] + 10)
    run("PEXPIREAT", "c", clock[0] + 10)
    clock[0] += 100
    assert run("SINTERSTORE", "dst", "a", "b") == 0   # b expired: empty result
    assert run("SUNIONSTORE", "u", "a", "c") == 2     # c expired
    # each expired source's deletion is journaled before the command that noticed it
    assert [argv for _db, argv in effects[-4:]] == [
        (b"UNLINK", b"b"), (b"DEL", b"dst"), (b"UNLINK", b"c"), (b"SUNIONSTORE", b"u", b"a", b"c")]
    ks2 = Keyspace(clock_ms=lambda: 0, rng=random.Random(2))
    ks2.expire_enabled = False
    apply_effects(ks2, effects)
    assert dump(ks2) == dump(ks)


# -- the random-member sampler ---------------------------------------------------------------------------------------


def test_srandmember_is_uniform_on_a_big_set():
    _ks, run = local()
    n = 500
    run("SADD", "s", *members(n))
    draws = 50 * n
    counts = Counter(run("SRANDMEMBER", "s") for _ in range(draws))
    assert set(counts) == set(members(n))
    chi2 = sum((c - 50) ** 2 / 50 for c in counts.values())
    assert chi2 < 650  # 499 degrees of freedom: p ~ 1e-4 at 650


def test_sampler_stays_exact_through_mixed_writes():
    ks, run = local()
    rng = random.Random(3)
    truth = set(members(2000))
    run("SADD", "s", *truth)
    gone = []  # members removed at some point (SPOP, SREM, SMOVE), candidates to come back
    next_id = 10_000
    revived = checked = 0
    for _step in range(3000):
        op = rng.random()
        if op < 0.4:
            m = run("SPOP", "s")
            assert m in truth
            truth.discard(m)
            gone.append(m)
        elif op < 0.5:
            got = run("SPOP", "s", "3")
            assert len(got) == 3 and set(got) <= truth
            truth.difference_update(got)
            gone.extend(got)
        elif op < 0.65:
            victims = rng.sample(sorted(truth), 3)
            assert run("SREM", "s", *victims, b"not-a-member") == 3
            truth.difference_update(victims)
            gone.extend(victims)
        elif op < 0.7:
            m = rng.choice(sorted(truth))
            assert run("SMOVE", "s", "other", m) == 1
            truth.discard(m)
            gone.append(m)
        elif op < 0.9:
            new = [b"n%d" % (next_id + i) for i in range(3)]
            next_id += 3
            back = rng.sample(gone, min(2, len(gone)))
            expected = len(set(new) | (set(back) - truth))
            revived += len(set(back) - truth)
            assert run("SADD", "s", *new, *back) == expected
            truth.update(new, back)
        else:
            assert run("SRANDMEMBER", "s") in truth
        s = ks.dbs[0].data[b"s"]
        assert s == truth
        sm = sets_module._samplers.get(id(s))
        if sm is not None:  # every member exactly once; the other entries are the remembered stale ones
            checked += 1
            counts = Counter(sm.items)
            assert max(counts.values()) == 1
            assert set(counts) == truth | sm.removed and not truth & sm.removed
    assert revived > 100 and checked > 2500
    # a full drain returns each member exactly once
    drained = [run("SPOP", "s") for _ in range(len(truth))]
    assert sorted(drained) == sorted(truth) and b"s" not in ks.dbs[0].data


def test_sampler_released_with_its_set():
    _ks, run = local()
    run("SADD", "gone", *members(200))
    run("SRANDMEMBER", "gone")
    assert len(sets_module._samplers) >= 1
    before = len(sets_module._samplers)
    run("DEL", "gone")
    assert len(sets_module._samplers) == before - 1


def test_smembers_of_an_intset_is_in_numeric_order(r):
    # Valkey keeps small integer sets as a sorted array (intset), so SMEMBERS answers them in ascending order
    # (valkey-cli's "DUMP RESTORE with -x option" reads "1\n2\n3\n4\n5\n6"); durakv answered in hash order
    r.sadd("set", 6, 1, 3, -4, 2, 5)
    assert r.object("encoding", "set") == b"intset"
    assert r.execute_command("SMEMBERS", "set") == [b"-4", b"1", b"2", b"3", b"5", b"6"]
    assert r.restore("copy", 0, r.dump("set"))
    assert r.execute_command("SMEMBERS", "copy") == [b"-4", b"1", b"2", b"3", b"5", b"6"]
    r.sadd("set", "x")                      # no longer an intset: no order promised
    assert sorted(r.execute_command("SMEMBERS", "set")) == sorted([b"-4", b"1", b"2", b"3", b"5", b"6", b"x"])
