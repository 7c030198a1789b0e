"""Bloom filters as valkey-bloom 1.0.1 serves them (issue 30, part 2), over real sockets with valkey-py and raw RESP:
every BF.* command with its replies and error texts, the module's number parsing, scaling and NONSCALING, BF.INFO,
the bf.* configs and their bounds, TYPE / OBJECT ENCODING / MEMORY USAGE / COPY / RENAME / MOVE / expiry /
DUMP / RESTORE / DEBUG DIGEST-VALUE, keyspace events, MODULE LIST / COMMAND INFO / ACL CAT, the effects in the
replication stream (deterministic: a creation carries its seed; only added items are journaled), and a filter's
bytes after a restart from the journal and from a snapshot.

Where the module is the reference, its behaviour is from its source (src/bloom/command_handler.rs, utils.rs,
lib.rs, configs.rs) and documentation (valkey-doc topics/bloomfilters.md: a default filter is 384 bytes and
scales to 26214300 items)."""


import pytest
import valkey

from conftest import wait_until
from durakv.keyspace import bloom as B
from durakv.keyspace import rdbvalue
from helpers.wire import TypedConnection, sync_stream


def typed(port, *args, protocol=2):
    with TypedConnection(port, protocol) as c:
        return c.call(*args)


def error(client, *args) -> str:
    """The whole error text of a command that must fail (db 0), its prefix as sent (ERR, BUSYKEY, WRONGTYPE)."""
    reply = typed(client.connection_pool.connection_kwargs["port"], *args)
    assert isinstance(reply, tuple) and reply[0] == "-", reply
    return reply[1].decode()


# -- commands ---------------------------------------------------------------------------------------------------

def test_add_exists_card_and_defaults(r):
    assert r.execute_command("BF.ADD", "k", "a") == 1
    assert r.execute_command("BF.ADD", "k", "a") == 0
    assert r.execute_command("BF.MADD", "k", "a", "b", "c") == [0, 1, 1]
    assert r.execute_command("BF.EXISTS", "k", "b") == 1
    assert r.execute_command("BF.EXISTS", "k", "nope") == 0
    assert r.execute_command("BF.MEXISTS", "k", "a", "nope", "c") == [1, 0, 1]
    assert r.execute_command("BF.CARD", "k") == 3
    # a missing key: 0, never an error (BF.INFO is the only read that errors)
    assert r.execute_command("BF.EXISTS", "none", "a") == 0
    assert r.execute_command("BF.MEXISTS", "none", "a", "b") == [0, 0]
    assert r.execute_command("BF.CARD", "none") == 0
    assert error(r, "BF.INFO", "none") == "ERR not found"
    # the module's defaults: capacity 100, 0.01, expansion 2, tightening 0.5, 384 bytes, 26214300 at most
    assert r.execute_command("BF.INFO", "k") == [
        b"Capacity", 100, b"Size", 384, b"Number of filters", 1, b"Number of items inserted", 3,
        b"Error rate", b"0.01", b"Expansion rate", 2, b"Tightening ratio", b"0.5",
        b"Max scaled capacity", 26214300]


def test_info_reply_types_and_fields(shared_server):
    port = shared_server.port
    typed(port, "FLUSHALL")
    typed(port, "BF.RESERVE", "ns", "0.001", "1000", "NONSCALING")
    typed(port, "BF.ADD", "sc", "x")
    # labels are status replies, the error rate a double (a bulk string in RESP2), NONSCALING's expansion null
    assert typed(port, "BF.INFO", "ns") == [("+", b"Capacity"), 1000, ("+", b"Size"), 2062,
                                            ("+", b"Number of filters"), 1, ("+", b"Number of items inserted"), 0,
                                            ("+", b"Error rate"), b"0.001", ("+", b"Expansion rate"), ("$-1",)]
    assert typed(port, "BF.INFO", "sc", protocol=3)[8:] == [("+", b"Error rate"), (",", b"0.01"),
                                                            ("+", b"Expansion rate"), 2,
                                                            ("+", b"Tightening ratio"), (",", b"0.5"),
                                                            ("+", b"Max scaled capacity"), 26214300]
    assert typed(port, "BF.INFO", "ns", "EXPANSION", protocol=3) == ("_",)
    for field, value in (("capacity", 1000), ("SIZE", 2062), ("Filters", 1), ("items", 0), ("error", b"0.001")):
        assert typed(port, "BF.INFO", "ns", field) == value
    for field in ("TIGHTENING", "MAXSCALEDCAPACITY", "nosuch", "Capacityx"):
        assert typed(port, "BF.INFO", "ns", field) == ("-", b"ERR invalid information value")
    assert typed(port, "BF.INFO", "sc", "tightening") == b"0.5"
    assert typed(port, "BF.INFO", "sc", "maxscaledcapacity") == 26214300
    assert typed(port, "BF.INFO", "sc", "EXPANSION") == 2


def test_arity_errors_name_the_command_as_declared(r):
    for args in (("BF.ADD",), ("BF.ADD", "k"), ("bf.add", "k", "a", "b"), ("BF.MADD", "k"), ("BF.EXISTS", "k"),
                 ("bf.exists", "k", "a", "b"), ("BF.MEXISTS", "k"), ("BF.CARD",), ("bf.card", "k", "x"),
                 ("BF.RESERVE", "k", "0.01"), ("BF.RESERVE", "k", "0.01", "10", "EXPANSION", "2", "x"),
                 ("BF.INFO",), ("BF.INFO", "k", "CAPACITY", "x"), ("BF.INSERT",), ("BF.LOAD", "k"),
                 ("BF.INSERT", "k", "ITEMS"), ("BF.INSERT", "k", "CAPACITY"), ("BF.INSERT", "k", "ERROR"),
                 ("BF.INSERT", "k", "SEED"), ("BF.INSERT", "k", "VALIDATESCALETO")):
        name = args[0].upper()
        assert error(r, *args) == f"ERR wrong number of arguments for '{name}' command", args
    assert r.keys() == []


def test_wrongtype(r):
    r.set("s", "v")
    for args in (("BF.ADD", "s", "a"), ("BF.MADD", "s", "a"), ("BF.EXISTS", "s", "a"), ("BF.MEXISTS", "s", "a"),
                 ("BF.CARD", "s"), ("BF.INFO", "s"), ("BF.RESERVE", "s", "0.01", "10"), ("BF.INSERT", "s"),
                 ("BF.LOAD", "s", "x")):
        assert error(r, *args).startswith("WRONGTYPE"), args
    r.execute_command("BF.ADD", "b", "x")
    assert error(r, "GET", "b").startswith("WRONGTYPE")
    assert error(r, "LPUSH", "b", "x").startswith("WRONGTYPE")


def test_reserve(r):
    assert r.execute_command("BF.RESERVE", "r", "0.001", "1000") == b"OK"
    assert error(r, "BF.RESERVE", "r", "0.01", "10") == "ERR item exists"
    assert r.execute_command("BF.INFO", "r", "CAPACITY") == 1000
    assert r.execute_command("BF.CARD", "r") == 0
    assert r.execute_command("BF.RESERVE", "e", "0.1", "10", "expansion", "4") == b"OK"
    assert r.execute_command("BF.INFO", "e", "EXPANSION") == 4
    assert r.execute_command("BF.RESERVE", "n", "0.1", "10", "nonscaling") == b"OK"
    assert r.execute_command("BF.INFO", "n", "EXPANSION") is None
    for args, text in ((("x", "abc", "10"), "ERR bad error rate"), (("x", "0", "10"), "ERR (0 < error rate range < 1)"),
                       (("x", "1", "10"), "ERR (0 < error rate range < 1)"), (("x", "nan", "10"), "ERR (0 < error rate range < 1)"),
                       (("x", "-0.5", "10"), "ERR (0 < error rate range < 1)"), (("x", " 0.1", "10"), "ERR bad error rate"),
                       (("x", "0.1", "0"), "ERR (capacity should be larger than 0)"),
                       (("x", "0.1", "-5"), "ERR bad capacity"), (("x", "0.1", "abc"), "ERR bad capacity"),
                       (("x", "0.1", "9223372036854775808"), "ERR bad capacity"), (("x", "0.1", "1_0"), "ERR bad capacity"),
                       (("x", "0.1", "10", "EXPANSION", "0"), "ERR bad expansion"),
                       (("x", "0.1", "10", "EXPANSION", "4294967296"), "ERR bad expansion"),
                       (("x", "0.1", "10", "EXPANSION", "-1"), "ERR bad expansion"),
                       (("x", "0.1", "10", "NONSCALING", "2"), "ERR ERROR"), (("x", "0.1", "10", "FOO"), "ERR ERROR"),
                       (("x", "0.1", "10", "EXPANSION"), "ERR ERROR"),
                       (("x", "0.001", "100000000000"), "ERR operation exceeds bloom object memory limit")):
        assert error(r, "BF.RESERVE", *args) == text, args
    assert r.exists("x") == 0
    # Rust's number syntax: a '+' sign, leading zeros and exponents are numbers
    assert r.execute_command("BF.RESERVE", "rust", "1e-2", "+0100", "EXPANSION", "+007") == b"OK"
    assert r.execute_command("BF.INFO", "rust", "CAPACITY") == 100
    assert r.execute_command("BF.INFO", "rust", "EXPANSION") == 7
    assert r.execute_command("BF.INFO", "rust", "ERROR") == b"0.01"


def test_insert(r):
    assert r.execute_command("BF.INSERT", "i", "ITEMS", "a", "b", "a") == [1, 1, 0]
    assert r.execute_command("BF.INSERT", "empty") == []
    assert r.execute_command("BF.INFO", "empty", "CAPACITY") == 100
    assert r.execute_command("BF.INSERT", "c", "CAPACITY", "1000", "ERROR", "0.001", "EXPANSION", "3",
                             "ITEMS", "x") == [1]
    assert r.execute_command("BF.INFO", "c") [:12] == [b"Capacity", 1000, b"Size", 2062, b"Number of filters", 1,
                                                       b"Number of items inserted", 1, b"Error rate", b"0.001",
                                                       b"Expansion rate", 3]
    # options are for a creation only: an existing filter keeps its own
    assert r.execute_command("BF.INSERT", "c", "CAPACITY", "5", "NONSCALING", "ITEMS", "y") == [1]
    assert r.execute_command("BF.INFO", "c", "CAPACITY") == 1000
    assert error(r, "BF.INSERT", "missing", "NOCREATE", "ITEMS", "a") == "ERR not found"
    assert r.execute_command("BF.INSERT", "c", "NOCREATE", "ITEMS", "z") == [1]
    # NONSCALING: the filter fills, and the first refused item ends the reply with its error. An item the
    # (randomly seeded) full filter already reports present answers 0 without needing room: "c" may be one.
    reply = r.execute_command("BF.INSERT", "n", "CAPACITY", "2", "NONSCALING", "ITEMS", "a", "b", "c", "d")
    assert reply[:2] == [1, 1] and reply[2:-1] in ([], [0]) and isinstance(reply[-1], valkey.ResponseError), reply
    assert str(reply[-1]) == "non scaling filter is full"
    assert r.execute_command("BF.CARD", "n") == 2
    # items the (random-seeded, small) filter does not report present yet
    fresh = [b"new%d" % i for i in range(200) if not r.execute_command("BF.EXISTS", "n", b"new%d" % i)][:2]
    assert error(r, "BF.ADD", "n", fresh[0]) == "ERR non scaling filter is full"
    reply = r.execute_command("BF.MADD", "n", "a", fresh[1], "g")
    assert reply[0] == 0 and str(reply[1]) == "non scaling filter is full" and len(reply) == 2
    # TIGHTENING and SEED (what a replicated creation carries)
    seed = bytes(range(32))
    assert r.execute_command("BF.INSERT", "s", "TIGHTENING", "0.25", "SEED", seed, "ITEMS", "a") == [1]
    assert r.execute_command("BF.INFO", "s", "TIGHTENING") == b"0.25"
    for args, text in ((("ERROR", "2"), "ERR (0 < error rate range < 1)"), (("ERROR", "x"), "ERR bad error rate"),
                       (("TIGHTENING", "1"), "ERR (0 < tightening ratio range < 1)"),
                       (("TIGHTENING", "y"), "ERR bad tightening ratio"), (("SEED", "short"), "ERR invalid seed"),
                       (("CAPACITY", "0"), "ERR (capacity should be larger than 0)"),
                       (("CAPACITY", "-1"), "ERR bad capacity"), (("EXPANSION", "0"), "ERR bad expansion"),
                       (("BOGUS",), "ERR unknown argument received"),
                       (("VALIDATESCALETO", "0"), "ERR (capacity should be larger than 0)"),
                       (("NONSCALING", "VALIDATESCALETO", "100"),
                        "ERR cannot use NONSCALING and VALIDATESCALETO options together"),
                       (("VALIDATESCALETO", "26214301"),
                        "ERR provided VALIDATESCALETO causes bloom object to exceed memory limit"),
                       (("VALIDATESCALETO", "999999999999999999", "EXPANSION", "1"),
                        "ERR provided VALIDATESCALETO causes false positive to degrade to 0")):
        assert error(r, "BF.INSERT", "bad", *args, "ITEMS", "a") == text, args
    assert r.exists("bad") == 0
    assert r.execute_command("BF.INSERT", "v", "VALIDATESCALETO", "26214300") == []
    assert r.execute_command("BF.INFO", "v", "MAXSCALEDCAPACITY") == 26214300


def test_scaling(r):
    """A full sub-filter is followed by one expansion times larger, at error rate * tightening^n."""
    r.execute_command("BF.RESERVE", "s", "0.01", "100")
    items = [b"item-%d" % i for i in range(1000)]
    added = sum(r.execute_command("BF.MADD", "s", *items[i:i + 100]).count(1) for i in range(0, 1000, 100))
    info = dict(zip(*[iter(r.execute_command("BF.INFO", "s"))] * 2))
    assert info[b"Number of items inserted"] == added == r.execute_command("BF.CARD", "s")
    # A few false positives: an item is checked against every sub-filter, at 1% + 0.5% + 0.25% + 0.125% at most,
    # so about 19 of 1000 at worst on average (the seed is random); 50 is far in the tail.
    assert 950 <= added <= 1000
    assert info[b"Number of filters"] == 4 and info[b"Capacity"] == 100 + 200 + 400 + 800
    # the module's memory: object 48 + 4 vector slots * 8, and per filter 208 + its bitmap
    bitmaps = sum(B.bitmap_bytes(100 * 2 ** i, 0.01 * 0.5 ** i) for i in range(4))
    assert info[b"Size"] == 48 + 4 * 8 + 4 * 208 + bitmaps
    assert r.execute_command("BF.MEXISTS", "s", *items) == [1] * 1000


def test_memory_limit_config(r):
    r.config_set("bf.bloom-memory-usage-limit", "383")     # a default filter is 384 bytes
    # the module's fixed seed: with a random one "b" was once a false positive of "a" in the two-item filter
    # below and BF.MADD answered [1, 0]
    r.config_set("bf.bloom-use-random-seed", "no")
    try:
        assert error(r, "BF.ADD", "big", "x") == "ERR operation exceeds bloom object memory limit"
        assert error(r, "BF.INSERT", "big", "ITEMS", "x") == "ERR operation exceeds bloom object memory limit"
        r.execute_command("BF.RESERVE", "small", "0.01", "2")
        assert r.execute_command("BF.MADD", "small", "a", "b") == [1, 1]
        # a second filter would pass the limit: the first item that needs room is refused, the reply stops
        # there. An item the full filter already answers for (a false positive: 1% at this rate) needs none and
        # answers 0, so six items: at least one needs room unless all six are false positives.
        r.config_set("bf.bloom-memory-usage-limit", str(r.execute_command("BF.INFO", "small", "SIZE") + 100))
        reply = r.execute_command("BF.MADD", "small", "c", "d", "e", "f", "g", "h")
        assert str(reply[-1]) == "operation exceeds bloom object memory limit", reply
        assert reply[:-1] == [0] * (len(reply) - 1), reply
        assert r.execute_command("BF.CARD", "small") == 2
        assert r.execute_command("BF.INFO", "small", "MAXSCALEDCAPACITY") == 2
    finally:
        r.config_set("bf.bloom-memory-usage-limit", str(128 * 1024 * 1024))
        r.config_set("bf.bloom-use-random-seed", "yes")


def test_configs_bounds_and_effect(r):
    defaults = {b"bf.bloom-capacity": b"100", b"bf.bloom-expansion": b"2", b"bf.bloom-fp-rate": b"0.01",
                b"bf.bloom-tightening-ratio": b"0.5", b"bf.bloom-memory-usage-limit": b"134217728",
                b"bf.bloom-use-random-seed": b"yes", b"bf.bloom-defrag-enabled": b"yes"}
    assert dict(zip(*[iter(r.execute_command("CONFIG", "GET", "bf.*"))] * 2)) == defaults
    bad = {"bf.bloom-capacity": ("0", "argument must be between 1 and 9223372036854775807 inclusive"),
           "bf.bloom-expansion": ("4294967296", "argument must be between 0 and 4294967295 inclusive"),
           "bf.bloom-fp-rate": ("1", "ERR (0 < error rate range < 1)"),
           "bf.bloom-tightening-ratio": ("0", "ERR (0 < tightening ratio range < 1)"),
           "bf.bloom-memory-usage-limit": ("-1", "argument must be between 0 and 9223372036854775807 inclusive"),
           "bf.bloom-use-random-seed": ("maybe", "argument must be 'yes' or 'no'")}
    for name, (value, reason) in bad.items():
        assert error(r, "CONFIG", "SET", name, value) == \
            f"ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"
    assert error(r, "CONFIG", "SET", "bf.bloom-fp-rate", "x") == \
        "ERR CONFIG SET failed (possibly related to argument 'bf.bloom-fp-rate') - Invalid floating-point value"
    try:
        r.config_set("bf.bloom-capacity", "1000")
        r.config_set("bf.bloom-fp-rate", "0.001")
        r.config_set("bf.bloom-expansion", "0")
        r.execute_command("BF.ADD", "cfg", "x")
        assert r.execute_command("BF.INFO", "cfg", "CAPACITY") == 1000
        assert r.execute_command("BF.INFO", "cfg", "ERROR") == b"0.001"
        assert r.execute_command("BF.INFO", "cfg", "EXPANSION") is None
        r.config_set("bf.bloom-expansion", "3")
        r.config_set("bf.bloom-tightening-ratio", "0.75")
        r.execute_command("BF.INSERT", "cfg2", "ITEMS", "x")
        assert r.execute_command("BF.INFO", "cfg2", "TIGHTENING") == b"0.75"
        assert r.execute_command("BF.INFO", "cfg2", "EXPANSION") == 3
        # fixed seed: two filters of the same shape are the same bytes
        r.config_set("bf.bloom-use-random-seed", "no")
        r.execute_command("BF.ADD", "f1", "x")
        r.execute_command("BF.ADD", "f2", "x")
        assert r.dump("f1") == r.dump("f2")
    finally:
        for name, value in defaults.items():
            r.config_set(name.decode(), value.decode())
    r.execute_command("BF.ADD", "r1", "x")
    r.execute_command("BF.ADD", "r2", "x")
    assert r.dump("r1") != r.dump("r2")        # random seeds


# -- the value type among the others ----------------------------------------------------------------------------

def test_type_encoding_memory_copy_rename_move_expiry(r):
    r.execute_command("BF.MADD", "b", "a", "b")
    assert r.type("b") == b"bloomfltr"
    assert r.object("ENCODING", "b") == b"raw"
    assert r.memory_usage("b") >= 384
    assert r.execute_command("COPY", "b", "c") == 1
    assert r.dump("c") == r.dump("b")
    r.execute_command("BF.ADD", "c", "new")     # the copy is its own
    assert r.execute_command("BF.CARD", "b") == 2 and r.execute_command("BF.CARD", "c") == 3
    assert r.rename("c", "d") and r.execute_command("BF.EXISTS", "d", "new") == 1
    assert r.move("d", 3) == 1
    r.execute_command("SELECT", 3)
    assert r.execute_command("BF.EXISTS", "d", "new") == 1
    r.execute_command("SELECT", 0)
    assert r.execute_command("COPY", "b", "e", "DB", "5") == 1
    r.pexpire("b", 50)
    wait_until(lambda: r.exists("b") == 0, 5, what="the filter to expire")
    assert r.execute_command("BF.EXISTS", "b", "a") == 0


def test_dump_restore_digest(r):
    r.execute_command("BF.INSERT", "b", "CAPACITY", "10", "ITEMS", *[b"i%d" % i for i in range(50)])
    payload = r.dump("b")
    assert payload[0] == 7                                           # RDB_TYPE_MODULE_2
    assert int.from_bytes(payload[2:10], "big") == rdbvalue.module_type_id("bloomfltr", 1)
    assert r.restore("b2", 0, payload) == b"OK"
    assert r.dump("b2") == payload
    assert r.execute_command("BF.INFO", "b2") == r.execute_command("BF.INFO", "b")
    assert r.execute_command("DEBUG", "DIGEST-VALUE", "b", "b2") == [r.execute_command("DEBUG", "DIGEST-VALUE", "b")[0]] * 2
    assert error(r, "RESTORE", "b2", "0", payload) == "BUSYKEY Target key name already exists."
    corrupt = bytearray(payload)
    # the first filter's bytes start at 37 (type, module id, 5 values, the string's opcode and length): its
    # header's bitmap length no longer matches; the CRC is made right again below
    corrupt[38] ^= 0xFF
    body = bytes(corrupt[:-8])
    assert error(r, "RESTORE", "b3", "0", body + rdbvalue.crc64(body).to_bytes(8, "little")) \
        == "ERR Bad data format"
    r.config_set("bf.bloom-memory-usage-limit", str(r.execute_command("BF.INFO", "b", "SIZE") - 1))
    try:
        assert error(r, "RESTORE", "b4", "0", payload) == "ERR Bad data format"
    finally:
        r.config_set("bf.bloom-memory-usage-limit", str(128 * 1024 * 1024))


def test_load_is_the_modules_aof_form(r):
    r.execute_command("BF.INSERT", "src", "CAPACITY", "10", "ITEMS", *[b"i%d" % i for i in range(30)])
    bloom = rdbvalue.load(r.dump("src"))
    data = bloom.to_bincode()
    assert r.execute_command("BF.LOAD", "copy", data) == b"OK"
    assert r.execute_command("BF.MEXISTS", "copy", *[b"i%d" % i for i in range(30)]) == [1] * 30
    assert r.execute_command("BF.CARD", "copy") == r.execute_command("BF.CARD", "src")
    assert error(r, "BF.LOAD", "copy", data) == "BUSYKEY Target key name already exists."
    assert error(r, "BF.LOAD", "x", b"\x05" + data[1:]) == "ERR bloom object decoding failed. Unsupported version"
    assert error(r, "BF.LOAD", "x", data[:40]) == "ERR bloom object decoding failed"
    assert error(r, "BF.LOAD", "x", "") == "ERR bloom object decoding failed"


def test_keyspace_events(r, shared_server):
    r.config_set("notify-keyspace-events", "KEA")
    sub = shared_server.client().pubsub()
    sub.psubscribe("__key*__:*")
    wait_until(lambda: sub.get_message(timeout=0.1) is not None, 5, what="the subscription")
    try:
        def events(*cmd, expect):
            r.execute_command(*cmd)
            got = []
            deadline_msgs = expect
            wait_until(lambda: got.append(sub.get_message(timeout=0.1)) or
                       sum(1 for m in got if m) >= deadline_msgs, 5, what="events of %r" % (cmd,))
            msgs = [m for m in got if m]
            assert sub.get_message(timeout=0.2) is None
            return [(m["channel"], m["data"]) for m in msgs]
        assert events("BF.ADD", "k", "x", expect=4) == [
            (b"__keyspace@0__:k", b"bloom.add"), (b"__keyevent@0__:bloom.add", b"k"),
            (b"__keyspace@0__:k", b"bloom.reserve"), (b"__keyevent@0__:bloom.reserve", b"k")]
        assert events("BF.ADD", "k", "y", expect=2) == [(b"__keyspace@0__:k", b"bloom.add"),
                                                        (b"__keyevent@0__:bloom.add", b"k")]
        assert events("BF.RESERVE", "r", "0.01", "10", expect=2) == [(b"__keyspace@0__:r", b"bloom.reserve"),
                                                                     (b"__keyevent@0__:bloom.reserve", b"r")]
        r.execute_command("BF.ADD", "k", "x")            # nothing added: no event
        r.execute_command("BF.EXISTS", "k", "x")
        assert sub.get_message(timeout=0.3) is None
        # the class is the module's: generic (g), not module (d); "new" comes first for a created key
        r.config_set("notify-keyspace-events", "Kdn")
        r.execute_command("BF.ADD", "k2", "x")
        assert sub.get_message(timeout=0.3)["data"] == b"new"
        assert sub.get_message(timeout=0.3) is None
    finally:
        r.config_set("notify-keyspace-events", "")
        sub.close()


def test_module_list_command_info_acl(r, shared_server):
    assert [b"name", b"bf", b"ver", 10001, b"path", b"/usr/lib/valkey/libvalkey_bloom.so", b"args", []] in \
        r.execute_command("MODULE", "LIST")
    info = typed(shared_server.port, "COMMAND", "INFO", "bf.add", "BF.INFO", "bf.load")
    assert [e[:6] for e in info] == [
        [b"BF.ADD", -1, [("+", b"write"), ("+", b"denyoom"), ("+", b"module"), ("+", b"fast")], 1, 1, 1],
        [b"BF.INFO", -1, [("+", b"readonly"), ("+", b"module"), ("+", b"fast")], 1, 1, 1],
        [b"BF.LOAD", -1, [("+", b"write"), ("+", b"denyoom"), ("+", b"module")], 1, 1, 1]]
    assert info[0][6] == [("+", b"@write"), ("+", b"@fast"), ("+", b"@bloom")]
    assert info[2][6] == [("+", b"@write"), ("+", b"@bloom")]   # a module's categories are its own: no @slow
    r.execute_command("BF.ADD", "stats", "x")
    assert "cmdstat_BF.ADD" in r.info("commandstats")            # named as the module declared it
    assert sorted(typed(shared_server.port, "COMMAND", "LIST", "FILTERBY", "MODULE", "bf")) == sorted(
        [b"BF.ADD", b"BF.MADD", b"BF.EXISTS", b"BF.MEXISTS", b"BF.CARD", b"BF.RESERVE", b"BF.INFO",
         b"BF.INSERT", b"BF.LOAD"])
    assert b"bloom" in r.execute_command("ACL", "CAT")
    assert sorted(r.execute_command("ACL", "CAT", "bloom")) == sorted(
        [b"bf.add", b"bf.madd", b"bf.exists", b"bf.mexists", b"bf.card", b"bf.reserve", b"bf.info", b"bf.insert",
         b"bf.load"])
    r.execute_command("ACL", "SETUSER", "reader", "on", "nopass", "+@all", "-@bloom", "~*")
    try:
        reader = shared_server.client(username="reader", password="x")
        assert reader.get("k") is None
        with pytest.raises(valkey.exceptions.NoPermissionError) as e:
            reader.execute_command("bf.add", "k", "x")
        assert str(e.value) == "User reader has no permissions to run the 'BF.ADD' command"
        reader.close()
    finally:
        r.execute_command("ACL", "DELUSER", "reader")


def test_info_bf_sections(r):
    r.execute_command("BF.ADD", "a", "x")
    r.execute_command("BF.INSERT", "b", "CAPACITY", "1000", "ITEMS", "x", "y")
    info = r.info("bf")
    assert info["bf_bloom_num_objects"] == 2 and info["bf_bloom_num_filters_across_objects"] == 2
    assert info["bf_bloom_num_items_across_objects"] == 3 and info["bf_bloom_capacity_across_objects"] == 1100
    assert info["bf_bloom_total_memory_bytes"] == 384 + r.execute_command("BF.INFO", "b", "SIZE")
    assert info["bf_bloom_defrag_hits"] == 0 and info["bf_bloom_defrag_misses"] == 0
    assert {"name": "bf", "ver": 10001, "api": 1, "filters": 0, "usedby": "[]", "using": "[]",
            "options": "[handle-io-errors]"} in r.info("modules")["modules"]
    assert "bf_bloom_num_objects" not in r.info()


# -- effects ------------------------------------------------------------------------------------------------------

def test_effects_are_deterministic(r, shared_server):
    """A creation is replicated as the module replicates it (BF.INSERT with its seed), additions as BF.ADD /
    BF.MADD of the items that were added only: a refused item or one already there is not in the stream."""
    sock, next_stream_command = sync_stream(shared_server.port)

    def next_command():
        argv = next_stream_command()
        while argv[0] in (b"select", b"ping"):
            argv = next_stream_command()
        return argv
    try:
        r.execute_command("BF.ADD", "a", "x")
        argv = next_command()
        seed = rdbvalue.load(r.dump("a")).seed
        assert argv == [b"bf.insert", b"a", b"CAPACITY", b"100", b"ERROR", b"0.01", b"TIGHTENING", b"0.5",
                        b"SEED", seed, b"EXPANSION", b"2", b"ITEMS", b"x"]
        r.execute_command("BF.MADD", "a", "x", "y", "z")
        assert next_command() == [b"bf.madd", b"a", b"y", b"z"]
        r.execute_command("BF.ADD", "a", "x")            # nothing added, nothing propagated
        r.execute_command("BF.ADD", "a", "w")
        assert next_command() == [b"bf.add", b"a", b"w"]
        # BF.INSERT on an existing filter: its items only (its options are for a creation, checked on the primary)
        r.execute_command("BF.INSERT", "a", "CAPACITY", "5", "VALIDATESCALETO", "1000", "ITEMS", "w", "v")
        assert next_command() == [b"bf.insert", b"a", b"ITEMS", b"v"]
        r.execute_command("BF.MADD", "a", "u")
        assert next_command() == [b"bf.madd", b"a", b"u"]
        r.execute_command("BF.INSERT", "n", "CAPACITY", "2", "NONSCALING", "ITEMS", "p", "p", "q", "r", "s")
        argv = next_command()      # p added, p there, q added, r refused (full): the creation and p, q
        assert argv[:4] == [b"bf.insert", b"n", b"CAPACITY", b"2"] and argv[-4:] == [b"NONSCALING", b"ITEMS", b"p",
                                                                                       b"q"]
        r.execute_command("BF.RESERVE", "e", "0.001", "50", "NONSCALING")
        argv = next_command()
        assert argv[-1] == b"NONSCALING" and b"ITEMS" not in argv
        # a creation whose items scale it out at once carries the capacity it was created with, not its total
        r.execute_command("BF.INSERT", "grown", "CAPACITY", "2", "ITEMS", *[b"g%d" % i for i in range(20)])
        assert r.execute_command("BF.INFO", "grown", "FILTERS") > 1
        argv = next_command()
        assert argv[:4] == [b"bf.insert", b"grown", b"CAPACITY", b"2"]
    finally:
        sock.close()


def test_restart_replays_the_same_bits(server_factory):
    """sync mode, the local journal: every filter is the same bytes after a restart, random seeds included, and a
    filter whose additions were partly refused has exactly what was acknowledged."""
    srv = server_factory("--durability", "sync")
    c = srv.client()
    c.execute_command("BF.ADD", "rand", "x")
    c.execute_command("BF.MADD", "rand", *[b"i%d" % i for i in range(500)])
    c.execute_command("BF.INSERT", "full", "CAPACITY", "3", "NONSCALING", "ITEMS", *[b"j%d" % i for i in range(10)])
    c.execute_command("BF.MADD", "grown", *[b"g%d" % i for i in range(300)])     # scales out as it is created
    c.config_set("bf.bloom-memory-usage-limit", "1000")
    c.execute_command("BF.RESERVE", "lim", "0.01", "4")
    reply = c.execute_command("BF.MADD", "lim", *[b"k%d" % i for i in range(200)])
    assert str(reply[-1]) == "operation exceeds bloom object memory limit" and len(reply) < 200
    dumps = {k: c.dump(k) for k in ("rand", "full", "lim", "grown")}
    cards = {k: c.execute_command("BF.CARD", k) for k in dumps}
    c.config_set("bf.bloom-memory-usage-limit", str(128 * 1024 * 1024))   # MAXSCALEDCAPACITY depends on it
    infos = {k: c.execute_command("BF.INFO", k) for k in dumps}     # SIZE counts the filter vector's capacity
    assert c.execute_command("BF.INFO", "grown", "FILTERS") == 2
    c.close()
    srv.stop()
    srv.start()
    c = srv.client()     # bf.bloom-memory-usage-limit is back to its default: replay must not add what was refused
    assert {k: c.dump(k) for k in dumps} == dumps
    assert {k: c.execute_command("BF.CARD", k) for k in dumps} == cards
    c.execute_command("SAVE")
    c.close()
    srv.stop()
    srv.start()                                  # from the snapshot (RESTORE payloads) and the journal after it
    c = srv.client()
    assert {k: c.dump(k) for k in dumps} == dumps
    assert {k: c.execute_command("BF.INFO", k) for k in dumps} == infos
    c.close()


def test_no_acknowledged_bloom_write_before_commit_is_visible(server_factory):
    """A read of a filter with an uncommitted addition waits for it (sync): BF.EXISTS after BF.ADD on another
    connection says 1 once it answers."""
    srv = server_factory("--durability", "sync")
    a, b = srv.client(), srv.client()
    for i in range(200):
        assert a.execute_command("BF.ADD", "k", b"x%d" % i) in (0, 1)
        assert b.execute_command("BF.EXISTS", "k", b"x%d" % i) == 1
    a.close()
    b.close()
