"""Generic key commands: DEL UNLINK EXISTS TYPE TOUCH RENAME RENAMENX COPY MOVE KEYS SCAN RANDOMKEY,
EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME PERSIST; glob matching and the
reusable scan cursor machinery."""

import random
from collections import deque

import pytest

from durakv import messages
from durakv.commands.session import Session
from durakv.keyspace import Keyspace, ZSet
from durakv.keyspace.glob import compile_glob, glob_match
from durakv.commands.scanning import parse_scan_options
from durakv.keyspace.scan import ScanCursors, parse_cursor
from durakv.errors import CommandError
from durakv.protocol.resp import ErrorReply
from helpers.replay import NOW, Direct, apply_effects, dump, run_and_replay
from helpers.wire import error_of, raw

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


# -- DEL / UNLINK / EXISTS / TOUCH / TYPE ---------------------------------------------------------

def test_del_unlink_exists(rr):
    rr.mset({"a": "1", "b": "2", "c": "3"})
    assert rr.exists("a", "a", "b", "missing") == 3
    assert rr.delete("a", "a", "missing") == 1
    assert rr.exists("a") == 0
    assert rr.unlink("b", "c", "b") == 2
    assert rr.exists("b", "c") == 0
    assert rr.delete("nothing") == 0
    rr.rpush("list", "x")
    rr.hset("hash", "f", "v")
    assert rr.delete("list", "hash") == 2
    assert error_of(rr, "DEL") == "ERR wrong number of arguments for 'del' command"


def test_touch_and_type(rr):
    rr.set("s", "v")
    rr.rpush("l", "x")
    rr.hset("h", "f", "v")
    assert rr.touch("s", "l", "missing", "s") == 3
    assert rr.type("s") == b"string"
    assert rr.type("l") == b"list"
    assert rr.type("h") == b"hash"
    assert rr.type("missing") == b"none"
    assert raw(rr, "TYPE", "s") in (b"string", "string")


def test_type_of_every_value_kind():
    run = Direct()
    db = run.db()
    zs = ZSet()
    zs.add(b"m", 1.0)
    db.data.update({b"s": b"v", b"h": {b"f": b"v"}, b"l": deque([b"x"]), b"set": {b"m"}, b"z": zs})
    assert [run("TYPE", k) for k in ("s", "h", "l", "set", "z", "none")] == \
        ["string", "hash", "list", "set", "zset", "none"]


def test_del_does_not_count_expired_keys():
    run = Direct()
    run("SET", "a", "1", "PX", 100)
    run("SET", "b", "2")
    run.now += 100
    assert run("EXISTS", "a", "b") == 1
    run("SET", "a", "1", "PX", 100)
    run.now += 100
    assert run("DEL", "a", "b") == 1
    # The expired key is reported as a server deletion (UNLINK: lazyfree-lazy-expire), then the explicit DEL names only b.
    assert run.effects[-2:] == [(0, (b"UNLINK", b"a")), (0, (b"DEL", b"b"))]


# -- RENAME / RENAMENX ------------------------------------------------------------------------

def test_rename(rr):
    rr.set("a", "1", ex=100)
    assert rr.rename("a", "b") is True
    assert rr.exists("a") == 0
    assert rr.get("b") == b"1"
    assert 99 <= rr.ttl("b") <= 100          # the TTL moves with the value
    rr.set("c", "3", ex=500)
    assert rr.rename("b", "c") is True       # overwrites, and c's own TTL goes with its old value
    assert rr.get("c") == b"1"
    assert 99 <= rr.ttl("c") <= 100
    rr.set("d", "4")
    rr.rename("d", "c")
    assert rr.ttl("c") == -1
    assert error_of(rr, "RENAME", "missing", "x") == "ERR no such key"
    assert error_of(rr, "RENAME", "missing", "missing") == "ERR no such key"
    assert rr.rename("c", "c") is True
    assert rr.get("c") == b"4"
    rr.rpush("list", "x", "y")
    assert rr.rename("list", "list2") is True
    assert rr.lrange("list2", 0, -1) == [b"x", b"y"]


def test_renamenx(rr):
    rr.set("a", "1")
    rr.set("b", "2")
    assert rr.renamenx("a", "b") is False
    assert rr.get("a") == b"1"
    assert rr.renamenx("a", "c") is True
    assert rr.get("c") == b"1"
    assert rr.exists("a") == 0
    assert rr.renamenx("c", "c") is False
    assert error_of(rr, "RENAMENX", "missing", "x") == "ERR no such key"


# -- COPY / MOVE -------------------------------------------------------------------------------

def test_copy_same_db(rr):
    rr.set("a", "1", ex=100)
    assert rr.copy("a", "b") is True
    assert rr.get("b") == b"1"
    assert 99 <= rr.ttl("b") <= 100
    rr.set("c", "x")
    assert rr.copy("a", "c") is False
    assert rr.get("c") == b"x"
    assert rr.copy("a", "c", replace=True) is True
    assert rr.get("c") == b"1"
    assert rr.copy("missing", "d") is False
    assert rr.exists("d") == 0
    assert error_of(rr, "COPY", "a", "a") == "ERR source and destination objects are the same"
    assert error_of(rr, "COPY", "a", "b", "FOO") == messages.SYNTAX
    assert error_of(rr, "COPY", "a", "b", "DB") == messages.SYNTAX
    assert error_of(rr, "COPY", "a", "b", "DB", "x") == messages.NOT_INTEGER
    assert error_of(rr, "COPY", "a", "b", "DB", 16) == "ERR DB index is out of range"
    assert error_of(rr, "COPY", "a", "b", "DB", -1) == "ERR DB index is out of range"
    assert error_of(rr, "COPY", "a", "b", "DB", 2 ** 31) == messages.NOT_INTEGER


def test_copy_is_deep(rr):
    rr.rpush("l", "a", "b")
    rr.hset("h", mapping={"f": "v"})
    assert rr.copy("l", "l2") is True
    assert rr.copy("h", "h2") is True
    rr.rpush("l2", "c")
    rr.hset("h2", "g", "w")
    assert rr.lrange("l", 0, -1) == [b"a", b"b"]
    assert rr.hgetall("h") == {b"f": b"v"}
    assert rr.lrange("l2", 0, -1) == [b"a", b"b", b"c"]


def test_copy_deep_for_every_kind():
    run = Direct()
    db = run.db()
    zs = ZSet()
    zs.add(b"m", 1.0)
    db.data.update({b"h": {b"f": b"v"}, b"l": deque([b"x"]), b"set": {b"m"}, b"z": zs})
    for key in ("h", "l", "set", "z"):
        assert run("COPY", key, key + "2") == 1
        original, copied = db.data[key.encode()], db.data[(key + "2").encode()]
        assert copied is not original and type(copied) is type(original)
    db.data[b"z2"].add(b"n", 2.0)
    assert len(zs) == 1 and len(db.data[b"z2"]) == 2


def test_copy_to_other_db(shared_server):
    c = shared_server.client()
    c.flushall()
    try:
        c.set("a", "1", ex=100)
        assert c.copy("a", "a", destination_db=3) is True
        assert c.copy("a", "a", destination_db=3) is False
        c.execute_command("SELECT", 3)
        assert c.get("a") == b"1"
        assert 99 <= c.ttl("a") <= 100
        c.set("a", "other")
        c.execute_command("SELECT", 0)
        assert c.copy("a", "a", destination_db=3, replace=True) is True
        c.execute_command("SELECT", 3)
        assert c.get("a") == b"1"
    finally:
        c.flushall()
        c.close()


def test_move(shared_server):
    c = shared_server.client()
    c.flushall()
    try:
        c.set("a", "1", ex=100)
        assert c.move("a", 1) is True
        assert c.exists("a") == 0
        assert c.move("a", 1) is False            # missing
        c.set("a", "again")
        assert c.move("a", 1) is False            # present in the target db
        assert c.get("a") == b"again"
        assert error_of(c, "MOVE", "a", 0) == "ERR source and destination objects are the same"
        assert error_of(c, "MOVE", "a", 16) == "ERR DB index is out of range"
        assert error_of(c, "MOVE", "a", "x") == messages.NOT_INTEGER
        c.execute_command("SELECT", 1)
        assert c.get("a") == b"1"
        assert 99 <= c.ttl("a") <= 100
    finally:
        c.flushall()
        c.close()


def test_move_and_copy_keep_memory_accounting():
    run = Direct()
    run("SET", "a", "x" * 1000)
    before = run.ks.used_bytes
    assert before > 1000
    assert run("MOVE", "a", 2) == 1
    assert run.ks.used_bytes == before
    run.s.db_id = 2
    run.d.new_context(run.s)
    assert run("COPY", "a", "b", "DB", 5) == 1
    assert run.ks.used_bytes > 2 * 1000
    assert run("MOVE", "a", 0) == 1
    assert run("DEL", "a") == 0


def test_cross_db_writes_invalidate_watch():
    run = Direct()
    watcher = Session()
    run.d.new_context(watcher)
    watcher.db_id = 3
    run.d.watch(watcher, 3, b"k")
    run("SET", "k", "v")
    assert run("MOVE", "k", 3) == 1
    assert watcher.watch_broken
    run.d.unwatch_all(watcher)
    run.d.watch(watcher, 4, b"c")
    run("SET", "src", "v")
    assert run("COPY", "src", "c", "DB", 4) == 1
    assert watcher.watch_broken


# -- expiry ---------------------------------------------------------------------------------

def test_expire_basic(rr):
    assert rr.expire("missing", 100) is False
    rr.set("k", "v")
    assert rr.ttl("k") == -1
    assert rr.pttl("k") == -1
    assert rr.expiretime("k") == -1
    assert rr.pexpiretime("k") == -1
    assert rr.ttl("missing") == -2
    assert rr.pttl("missing") == -2
    assert rr.expiretime("missing") == -2
    assert rr.pexpiretime("missing") == -2
    assert rr.expire("k", 100) is True
    assert 99 <= rr.ttl("k") <= 100
    assert rr.pexpire("k", 50000) is True
    assert 49000 <= rr.pttl("k") <= 50000
    assert rr.expireat("k", 4_000_000_000) is True
    assert rr.expiretime("k") == 4_000_000_000
    assert rr.pexpiretime("k") == 4_000_000_000_000
    assert rr.pexpireat("k", 4_000_000_000_123) is True
    assert rr.pexpiretime("k") == 4_000_000_000_123
    assert rr.expiretime("k") == 4_000_000_000
    assert rr.persist("k") is True
    assert rr.persist("k") is False
    assert rr.persist("missing") is False
    assert rr.ttl("k") == -1


def test_expire_in_the_past_deletes(rr):
    for args in (("EXPIRE", -1), ("PEXPIRE", -1), ("EXPIRE", 0), ("EXPIREAT", 1), ("PEXPIREAT", 1)):
        rr.set("k", "v")
        assert raw(rr, args[0], "k", args[1]) == 1, args
        assert rr.exists("k") == 0, args
    assert raw(rr, "EXPIRE", "k", -1) == 0  # missing key


def test_expire_options(rr):
    rr.set("k", "v")
    assert rr.expire("k", 100, xx=True) is False      # no TTL yet
    assert rr.expire("k", 100, gt=True) is False      # no TTL counts as infinite
    assert rr.expire("k", 100, nx=True) is True
    assert rr.expire("k", 200, nx=True) is False
    assert rr.expire("k", 50, gt=True) is False
    assert rr.expire("k", 200, gt=True) is True
    assert 199 <= rr.ttl("k") <= 200
    assert rr.expire("k", 300, lt=True) is False
    assert rr.expire("k", 150, lt=True) is True
    assert 149 <= rr.ttl("k") <= 150
    assert rr.expire("k", 120, xx=True) is True
    assert raw(rr, "EXPIRE", "k", 110, "XX", "LT") == 1
    assert raw(rr, "EXPIRE", "k", 500, "xx", "gt") == 1
    assert 499 <= rr.ttl("k") <= 500
    rr.set("p", "v")
    assert rr.expire("p", 100, lt=True) is True       # LT with no TTL sets it
    rr.set("q", "v")
    assert rr.expire("q", -5, gt=True) is False        # GT against infinite: refused, key kept
    assert rr.exists("q") == 1


def test_expire_errors(rr):
    rr.set("k", "v")
    nxx = "ERR NX and XX, GT or LT options at the same time are not compatible"
    for opts in (("NX", "XX"), ("NX", "GT"), ("LT", "NX"), ("nx", "xx", "gt", "lt")):
        assert error_of(rr, "EXPIRE", "k", 10, *opts) == nxx
    assert error_of(rr, "EXPIRE", "k", 10, "GT", "LT") == "ERR GT and LT options at the same time are not compatible"
    assert error_of(rr, "EXPIRE", "k", 10, "FOO") == "ERR Unsupported option FOO"
    assert error_of(rr, "PEXPIRE", "k", 10, "NX", "bar") == "ERR Unsupported option bar"
    # Options are checked before the number.
    assert error_of(rr, "EXPIRE", "k", "x", "FOO") == "ERR Unsupported option FOO"
    assert error_of(rr, "EXPIRE", "k", "x") == messages.NOT_INTEGER
    assert error_of(rr, "EXPIRE", "k", "1.5") == messages.NOT_INTEGER
    assert error_of(rr, "EXPIRE", "k", 2 ** 62) == "ERR invalid expire time in 'expire' command"
    assert error_of(rr, "EXPIRE", "k", -(2 ** 62)) == "ERR invalid expire time in 'expire' command"
    assert error_of(rr, "EXPIREAT", "k", 2 ** 62) == "ERR invalid expire time in 'expireat' command"
    assert error_of(rr, "PEXPIRE", "k", 2 ** 63 - 1) == "ERR invalid expire time in 'pexpire' command"
    assert error_of(rr, "EXPIRE", "missing", 2 ** 62) == "ERR invalid expire time in 'expire' command"
    assert rr.ttl("k") == -1
    assert raw(rr, "PEXPIREAT", "k", 2 ** 63 - 1) == 1
    assert rr.pexpiretime("k") == 2 ** 63 - 1
    assert error_of(rr, "EXPIRE", "k") == "ERR wrong number of arguments for 'expire' command"


def test_ttl_arithmetic_and_lazy_expiry():
    run = Direct()
    run("SET", "k", "v")
    assert run("EXPIRE", "k", 10) == 1
    assert run("PTTL", "k") == 10_000
    assert run("TTL", "k") == 10
    run.now += 1_499
    assert run("PTTL", "k") == 8_501
    assert run("TTL", "k") == 9          # rounded: (8501 + 500) // 1000
    run.now += 2
    assert run("TTL", "k") == 8
    assert run("EXPIRETIME", "k") == (NOW + 10_000) // 1000
    assert run("PEXPIRETIME", "k") == NOW + 10_000
    run.now = NOW + 9_999
    assert run("PTTL", "k") == 1
    assert run("TTL", "k") == 0
    run.now = NOW + 10_000              # the expire time itself: expired
    assert run("TTL", "k") == -2
    assert run("EXISTS", "k") == 0
    assert run.effects[-1] == (0, (b"UNLINK", b"k"))
    assert run.ks.expired_keys == 1


def test_ttl_when_expiry_is_disabled():
    run = Direct()
    run.ks.expire_enabled = False       # a replica / a replay: keys wait for an explicit DEL
    run("SET", "k", "v")
    assert run("PEXPIREAT", "k", 5) == 1
    assert run("EXISTS", "k") == 1
    assert run("PTTL", "k") == 0
    assert run("TTL", "k") == 0
    assert run("PEXPIRETIME", "k") == 5
    assert run("EXPIRE", "k", -10) == 1   # never a DEL here: the time is stored
    assert run("PEXPIRETIME", "k") == NOW - 10_000
    assert run.effects[-1] == (0, (b"PEXPIREAT", b"k", b"%d" % (NOW - 10_000)))


def test_expire_effects():
    run = Direct()
    run("SET", "k", "v")
    run("EXPIRE", "k", 10)
    run("PEXPIRE", "k", 20)
    run("EXPIREAT", "k", 2_000_000_000, "GT")
    run("PEXPIREAT", "k", 2_000_000_000_500)
    run("EXPIRE", "k", 5, "NX")           # refused: no effect
    run("PERSIST", "k")
    run("PERSIST", "k")                   # nothing to remove: no effect
    run("EXPIRE", "k", -1)
    run("EXPIRE", "k", 10)                # missing: no effect
    assert run.effects == [
        (0, (b"SET", b"k", b"v")),
        (0, (b"PEXPIREAT", b"k", b"%d" % (NOW + 10_000))),
        (0, (b"PEXPIREAT", b"k", b"%d" % (NOW + 20))),
        (0, (b"PEXPIREAT", b"k", b"2000000000000")),
        (0, (b"PEXPIREAT", b"k", b"2000000000500")),
        (0, (b"PERSIST", b"k")),
        (0, (b"UNLINK", b"k")),
    ]


# -- KEYS and glob patterns -------------------------------------------------------------------

def test_keys_patterns(rr):
    names = ["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "a[b", "x\\y", "KEY:1", "key:2"]
    rr.mset({n: "1" for n in names})
    def keys(pattern):
        return sorted(k.decode() for k in rr.keys(pattern))
    assert keys("*") == sorted(names)
    assert keys("h?llo") == ["h*llo", "hallo", "hello", "hxllo"]
    assert keys("h*llo") == ["h*llo", "hallo", "heeeello", "hello", "hllo", "hxllo"]
    assert keys("h[ae]llo") == ["hallo", "hello"]
    assert keys("h[^e]llo") == ["h*llo", "hallo", "hxllo"]
    assert keys("h[a-b]llo") == ["hallo"]
    assert keys("h[b-a]llo") == ["hallo"]             # reversed range
    assert keys("h\\*llo") == ["h*llo"]
    assert keys("a\\[b") == ["a[b"]
    assert keys("x\\\\y") == ["x\\y"]
    assert keys("key:*") == ["key:2"]                 # case-sensitive
    assert keys("nomatch*") == []
    assert keys("hello") == ["hello"]


def test_keys_skips_expired_and_empty_key():
    run = Direct()
    run("SET", "a", "1")
    run("SET", "b", "2", "PX", 10)
    run("SET", "", "empty")
    assert sorted(run("KEYS", "*")) == [b"", b"a", b"b"]
    run.now += 10
    assert sorted(run("KEYS", "*")) == [b"", b"a"]
    assert run("KEYS", "?") == [b"a"]
    assert run("KEYS", "**") == [b"a"]                # only a bare "*" matches the empty key


def _stringmatch_reference(pattern: bytes, string: bytes, nocase=False) -> bool:
    """A line-by-line port of Valkey's stringmatchlen_impl (util.c), for cross-checking."""
    def lower(c):
        return c + 32 if 65 <= c <= 90 else c

    def signed(c):
        return c - 256 if c >= 128 else c

    skip = [False]

    def impl(p, s):
        pl, sl = len(pattern) - p, len(string) - s
        while pl and sl:
            c = pattern[p]
            if c == 42:
                while pl and p + 1 < len(pattern) and pattern[p + 1] == 42:
                    p += 1
                    pl -= 1
                if pl == 1:
                    return True
                while sl:
                    if impl(p + 1, s):
                        return True
                    if skip[0]:
                        return False
                    s += 1
                    sl -= 1
                skip[0] = True
                return False
            elif c == 63:
                s += 1
                sl -= 1
            elif c == 91:
                p += 1
                pl -= 1
                not_op = pl > 0 and pattern[p] == 94
                if not_op:
                    p += 1
                    pl -= 1
                match = False
                while True:
                    cur = pattern[p] if pl > 0 else 0
                    if cur == 92 and pl >= 2:
                        p += 1
                        pl -= 1
                        if pattern[p] == string[s]:
                            match = True
                    elif cur == 93 and pl > 0:
                        break
                    elif pl == 0:
                        p -= 1
                        pl += 1
                        break
                    elif pl >= 3 and pattern[p + 1] == 45:
                        start, end, ch = signed(pattern[p]), signed(pattern[p + 2]), signed(string[s])
                        if start > end:
                            start, end = end, start
                        if nocase:
                            start, end, ch = (signed(lower(x & 0xFF)) for x in (start, end, ch))
                        p += 2
                        pl -= 2
                        if start <= ch <= end:
                            match = True
                    elif not nocase:
                        if pattern[p] == string[s]:
                            match = True
                    elif lower(pattern[p]) == lower(string[s]):
                        match = True
                    p += 1
                    pl -= 1
                if not_op:
                    match = not match
                if not match:
                    return False
                s += 1
                sl -= 1
            else:
                if c == 92 and pl >= 2:
                    p += 1
                    pl -= 1
                if nocase:
                    if lower(pattern[p]) != lower(string[s]):
                        return False
                elif pattern[p] != string[s]:
                    return False
                s += 1
                sl -= 1
            p += 1
            pl -= 1
            if sl == 0:
                while pl > 0 and pattern[p] == 42:
                    p += 1
                    pl -= 1
                break
        return pl == 0 and sl == 0

    return impl(0, 0)


def test_glob_known_cases():
    cases = [
        (b"*", b"", False), (b"", b"", True), (b"", b"a", False), (b"*", b"abc", True),
        (b"a*", b"a", True), (b"*a", b"a", True), (b"a*b*c", b"axxbyyc", True), (b"a*b*c", b"abcx", False),
        (b"[", b"a", False), (b"[^", b"a", True), (b"[]", b"]", False), (b"[^]", b"x", True),
        (b"[abc", b"b", True), (b"[a-]x", b"]x", False), (b"[a-]x]", b"bx", False), (b"[a-]]", b"]", True),
        (b"\\", b"\\", True), (b"a\\", b"a\\", True), (b"[\\]]", b"]", True), (b"[\\", b"\\", True),
        (b"?", b"\xff", True), (b"[a-\xff]", b"b", False), (b"[a-\xff]", b"\x00", True),
        (b"[a-\xff]", b"\xff", True), (b"[\x80-\xff]", b"\x90", True),
    ]
    for pattern, subject, want in cases:
        assert glob_match(pattern, subject) is want, (pattern, subject)
        assert _stringmatch_reference(pattern, subject) is want, (pattern, subject)


def test_glob_nocase():
    assert glob_match(b"HeLLo*", b"hello world", nocase=True)
    assert not glob_match(b"HeLLo*", b"hello world")
    assert glob_match(b"[A-C]x", b"bX", nocase=True)
    assert glob_match(b"[^a-c]", b"B", nocase=True) is False
    assert glob_match(b"[\\A]", b"a", nocase=True) is False   # escaped class bytes stay exact
    assert glob_match(b"\\A", b"a", nocase=True) is True


def test_glob_matches_valkey_reference_randomly():
    rng = random.Random(1234)
    alphabet = b"ab*?[]^-\\\x80"
    for _ in range(6000):
        pattern = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
        subject = bytes(rng.choice(b"ab*?[]^-\\\x80\xff") for _ in range(rng.randrange(0, 7)))
        nocase = rng.random() < 0.3
        if nocase:
            pattern = pattern.replace(b"a", b"A", rng.randrange(3))
        want = _stringmatch_reference(pattern, subject, nocase)
        assert glob_match(pattern, subject, nocase) is want, (pattern, subject, nocase)


def test_glob_is_linear_on_abusive_patterns():
    match = compile_glob(b"*a" * 40 + b"b")
    assert match(b"a" * 200_000) is False
    assert compile_glob(b"a*" * 40)(b"a" * 200_000) is True


# -- SCAN ---------------------------------------------------------------------------------------

def test_scan_basic(rr):
    assert raw(rr, "SCAN", 0) == [b"0", []]
    rr.mset({f"k{i}": i for i in range(50)})
    seen = set()
    cursor = 0
    calls = 0
    while True:
        cursor, keys = rr.scan(cursor, count=7)
        assert len(keys) <= 7
        seen.update(keys)
        calls += 1
        if cursor == 0:
            break
    assert seen == {f"k{i}".encode() for i in range(50)}
    assert calls >= 7
    assert set(rr.scan_iter()) == seen
    assert set(rr.scan_iter(match="k1*")) == {b"k1"} | {f"k1{i}".encode() for i in range(10)}
    # Everything fits in COUNT: one call, cursor 0.
    assert rr.scan(0, count=1000)[0] == 0


def test_scan_type_and_errors(rr):
    rr.set("s1", "v")
    rr.set("s2", "v")
    rr.rpush("l1", "x")
    rr.hset("h1", "f", "v")
    assert sorted(rr.scan_iter(_type="string")) == [b"s1", b"s2"]
    assert sorted(rr.scan_iter(_type="LIST")) == [b"l1"]
    assert sorted(rr.scan_iter(_type="hash")) == [b"h1"]
    assert list(rr.scan_iter(_type="stream")) == []
    assert error_of(rr, "SCAN", 0, "TYPE", "foo") == "ERR unknown type name 'foo'"
    assert error_of(rr, "SCAN", "x") == "ERR invalid cursor"
    assert error_of(rr, "SCAN", "-1") == "ERR invalid cursor"
    assert error_of(rr, "SCAN", "18446744073709551616") == "ERR invalid cursor"
    assert raw(rr, "SCAN", "18446744073709551615")[0] == b"0"
    assert error_of(rr, "SCAN", 0, "COUNT", 0) == messages.SYNTAX
    assert error_of(rr, "SCAN", 0, "COUNT", -1) == messages.SYNTAX
    assert error_of(rr, "SCAN", 0, "COUNT", "x") == messages.NOT_INTEGER
    assert error_of(rr, "SCAN", 0, "COUNT") == messages.SYNTAX
    assert error_of(rr, "SCAN", 0, "MATCH") == messages.SYNTAX
    assert error_of(rr, "SCAN", 0, "FOO", "bar") == messages.SYNTAX
    assert error_of(rr, "SCAN", 0, "NOVALUES") == "ERR NOVALUES option can only be used in HSCAN"
    assert error_of(rr, "SCAN", 0, "NOSCORES") == "ERR NOSCORES option can only be used in ZSCAN"


def test_scan_complete_while_keys_change(r):
    total = 2000
    r.mset({f"key:{i}": i for i in range(total)})
    stable = {f"key:{i}".encode() for i in range(total) if i % 3 != 0}
    doomed = [f"key:{i}" for i in range(total) if i % 3 == 0]
    seen = []
    cursor = 0
    added = 0
    while True:
        cursor, keys = r.scan(cursor, count=50)
        seen.extend(keys)
        # Mutate between calls: delete some keys that were present at the start, add new ones.
        if doomed:
            r.delete(*doomed[:20])
            del doomed[:20]
        r.mset({f"new:{added + j}": 1 for j in range(15)})
        added += 15
        if cursor == 0:
            break
    seen_set = set(seen)
    assert stable <= seen_set                             # every key present throughout, at least once
    assert all(k.startswith(b"key:") or k.startswith(b"new:") for k in seen_set)
    for k in seen_set:                                    # deleted keys are never returned after deletion
        assert k in stable or k.startswith(b"new:") or int(k.split(b":")[1]) % 3 == 0
    assert len(seen) <= total + added                     # bounded pages, no runaway duplication


def test_scan_skips_expired_keys():
    run = Direct()
    for i in range(30):
        run("SET", f"k{i}", "v", "PX", 100 if i % 2 else 10_000)
    run.now += 100
    cursor, found = 0, []
    while True:
        cursor, keys = run("SCAN", cursor, "COUNT", 4)
        cursor = int(cursor)
        found.extend(keys)
        if cursor == 0:
            break
    assert sorted(found) == sorted(f"k{i}".encode() for i in range(0, 30, 2))
    assert run.ks.expired_keys == 15
    assert all(not (int(k[1:]) % 2) for k in run.db().data)


def test_scan_is_bounded_per_call_on_a_big_db():
    run = Direct()
    db = run.db()
    for i in range(200_000):
        db.data[b"k%d" % i] = b"v"
    cursor, keys = run("SCAN", 0, "COUNT", 100)
    # whole buckets of the key table, as Valkey's SCAN: up to COUNT, short of it by at most the last bucket's keys
    assert 90 <= len(keys) <= 100 and cursor != b"0"
    cursor, keys = run("SCAN", cursor, "COUNT", 100, "MATCH", "k1*")
    assert len(keys) <= 100


def test_scan_cursor_machinery():
    cursors = ScanCursors(max_scans=2)
    source = {b"k%d" % i: 1 for i in range(1000)}
    assert cursors.page(source, 0, 2000) == (0, list(source))           # fits in COUNT
    assert cursors.page({b"a": 1}, 0, 1, whole_limit=128) == (0, [b"a"])  # compact: whole
    # Three interleaved scans with room for two: the evicted one falls back to a fresh snapshot
    # at the same position and still completes.
    iters = [[0, []] for _ in range(3)]
    while any(it[0] is not None for it in iters):
        for it in iters:
            if it[0] is None:
                continue
            cur, items = cursors.page(source, it[0], 37)
            it[1].extend(items)
            it[0] = cur if cur else None
    for it in iters:
        assert sorted(it[1]) == sorted(source)
    assert len(cursors) <= 2
    # A cursor from another container (or a restarted server) is served from a fresh snapshot.
    cur, items = cursors.page(source, 0, 10)
    other = {b"x%d" % i: 1 for i in range(100)}
    cur2, items2 = cursors.page(other, cur, 10)
    assert items2 == list(other)[10:20]
    assert cursors.page(other, (cur2 & ~0xFFFFFFFF) | 1000, 10) == (0, [])


def test_scan_cursor_bounds_memory():
    cursors = ScanCursors(max_scans=32, max_items=2500)
    source = {i: 1 for i in range(1000)}
    for _ in range(10):
        cursors.page(source, 0, 10)
    assert len(cursors) == 2    # 3 x 1000 items would pass the cap


def test_parse_cursor_and_options():
    assert parse_cursor(b"0") == 0
    assert parse_cursor(b"18446744073709551615") == 2 ** 64 - 1
    assert parse_cursor(b"007") == 7          # strtoull's looser form
    assert parse_cursor(b" 5") == 5
    assert parse_cursor(b"+5") == 5
    for bad in (b"", b"-1", b"x", b"1x", b"18446744073709551616", b"1.0", b" "):
        with pytest.raises(CommandError) as exc:
            parse_cursor(bad)
        assert exc.value.text == "ERR invalid cursor"
    opts = parse_scan_options([b"hscan", b"k", b"0", b"NOVALUES", b"count", b"5", b"match", b"a*"], 3, "hash")
    assert opts.only_keys and opts.count == 5 and opts.match(b"abc") and not opts.match(b"b")
    assert parse_scan_options([b"scan", b"0", b"MATCH", b"*"], 2, "db").match is None
    with pytest.raises(CommandError) as exc:
        parse_scan_options([b"hscan", b"k", b"0", b"TYPE", b"string"], 3, "hash")
    assert exc.value.text == messages.SYNTAX
    assert parse_scan_options([b"zscan", b"k", b"0", b"NOSCORES"], 3, "zset").only_keys


# -- RANDOMKEY ---------------------------------------------------------------------------------

def test_randomkey(rr):
    assert rr.randomkey() is None
    rr.mset({"a": 1, "b": 2, "c": 3})
    got = {rr.randomkey() for _ in range(60)}
    assert got == {b"a", b"b", b"c"}


def test_randomkey_skips_expired():
    run = Direct()
    for i in range(20):
        run("SET", f"gone{i}", "v", "PX", 5)
    run("SET", "live", "v")
    run.now += 5
    assert run("RANDOMKEY") == b"live"
    for _ in range(20):
        assert run("RANDOMKEY") == b"live"
    run("DEL", "live")
    assert run("RANDOMKEY") is None
    assert not run.db().data


# -- determinism: effects replayed give the same state -------------------------------------------

def test_replay_expire_family():
    replies, effects = run_and_replay([
        ["SET", "a", "1"], ["SET", "b", "2"], ["SET", "c", "3"], ["SET", "d", "4"],
        ["EXPIRE", "a", 100],
        ["PEXPIRE", "b", 5000, "NX"],
        ["EXPIREAT", "c", 4_000_000_000],
        ["PEXPIREAT", "d", 4_000_000_000_000, "GT"],
        ["EXPIRE", "d", 10, "LT"],
        ["PERSIST", "c"],
        ["EXPIRE", "b", -1],                 # in the past: DEL
        ["PEXPIREAT", "a", 1],               # in the past: DEL
        ["EXPIRE", "missing", 10],
    ])
    assert not any(isinstance(x, ErrorReply) for x in replies)
    assert (0, (b"UNLINK", b"b")) in effects and (0, (b"UNLINK", b"a")) in effects


def test_replay_rename_copy_move():
    replies, _ = run_and_replay([
        ["SET", "a", "1", "EX", 100],
        ["RENAME", "a", "b"],                # keeps the TTL
        ["SET", "c", "x"],
        ["RENAMENX", "b", "c"],              # refused
        ["RENAMENX", "b", "d"],
        ["RPUSH", "l", "x", "y"],
        ["COPY", "l", "l2"],
        ["COPY", "d", "d", "DB", 3],
        ["COPY", "d", "c", "REPLACE"],
        ["COPY", "d", "e", "DB", 4, "REPLACE"],
        ["MOVE", "l2", 5],
        ["MOVE", "c", 3],
        ["SELECT", 3],
        ["MOVE", "d", 0],                    # d exists in db 0: refused
        ["COPY", "d", "zz", "DB", 0],
        ["DEL", "c", "missing"],
        ["UNLINK", "d"],
    ])
    assert not any(isinstance(x, ErrorReply) for x in replies)
    assert replies[3] == 0 and replies[13] == 0


def test_replay_reads_record_only_lazy_expiry():
    replies, effects = run_and_replay([
        ["SET", "a", "1", "PX", 10],
        ["SET", "b", "2"],
        ["PEXPIREAT", "b", NOW + 5],
        ["SCAN", 0],
        ["RANDOMKEY"],
        ["KEYS", "*"],
        ["TYPE", "a"], ["TTL", "a"], ["EXISTS", "a", "b"], ["TOUCH", "a"],
    ])
    assert replies[3][0] == b"0" and sorted(replies[3][1]) == [b"a", b"b"]   # (in the key table's order)
    assert len(effects) == 3                 # the two SETs and the PEXPIREAT; reads add nothing


def test_lazy_expiry_in_scan_and_randomkey_replays():
    run = Direct()
    for key in ("a", "b", "d"):
        run("SET", key, "1", "PX", 10)
    run("SET", "c", "3")
    run.now += 10
    assert run("SCAN", 0) == [b"0", [b"c"]]
    assert run("RANDOMKEY") == b"c"
    assert sorted(e for e in run.effects if e[1][0] == b"UNLINK") == [
        (0, (b"UNLINK", b"a")), (0, (b"UNLINK", b"b")), (0, (b"UNLINK", b"d"))]
    replica = Keyspace(clock_ms=lambda: NOW)
    replica.expire_enabled = False
    apply_effects(replica, run.effects)
    assert dump(replica) == dump(run.ks)


def test_glob_recursion_cap_as_stringmatchlen():
    """Over 1000 stars before the last token never match (Valkey's nesting guard); a final star is free."""
    from durakv.keyspace.glob import glob_match
    assert glob_match(b"*a" * 1000, b"a" * 1000)
    assert not glob_match(b"*a" * 1001, b"a" * 1001)
    assert glob_match(b"*a" * 1000 + b"*", b"a" * 1001)
    assert not glob_match(b"*?" * 50000, b"a" * 50000)


def test_keys_with_an_abusive_pattern(r):
    r.set("a" * 50000, 1)
    assert r.keys("*?" * 50000) == []


def test_random_keys_of_a_one_key_db():
    """The sampling snapshot is built for a db of one key too (eviction used to find no candidate)."""
    ks = Keyspace(1, rng=random.Random(3))
    db = ks.dbs[0]
    db.data[b"only"] = b"v"
    assert db.random_keys(3, ks.rng) == [b"only"] * 3
    assert ks.evict_one("allkeys-random") == (0, b"only")
    assert not db.data
