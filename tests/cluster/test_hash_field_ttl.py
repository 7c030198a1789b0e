"""Hash field expiration (Valkey 9.0's HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT HTTL HPTTL HEXPIRETIME HPEXPIRETIME
HPERSIST HGETEX HSETEX HGETDEL; issue 19 part 2). Before, every one of them was an unknown command.

Replies, errors and keyspace events are compared with the Valkey 9.1.2 binary (the `valkey91` fixture): the same
commands go to both. Fields whose TTL passed are made with active expiry off (DEBUG SET-ACTIVE-EXPIRE 0) and a
TTL of 1 ms, polled until both servers hide them: Valkey 9.1.2 keeps such a field stored (HLEN counts it, the
key exists) until active expiry removes it, and durakv does the same. The journal and replicas are checked by
what they rebuild: effects replayed where nothing expires, a kill -9 and restart of a sync-mode server, a
shard replica, and durakv as a replica of the 9.1.2 binary (its RDB_TYPE_HASH_2 and its command stream).
"""

import shlex
import time

import pytest
import valkey

from conftest import wait_until
from helpers.replay import Direct, apply_effects
from durakv.keyspace import Keyspace, rdbvalue
from durakv.recovery import pipeline_apply_fn
from durakv.snapshot.format import load_snapshot, snapshot_path, write_snapshot

FAR = 4102444800000          # 2100-01-01 in ms: an absolute TTL both servers report the same
NOW = 1_700_000_000_000


# -- the same commands to durakv and to Valkey 9.1.2 -------------------------------------------------------

def _call(c, args):
    try:
        return c.execute_command(*args)
    except valkey.ResponseError as exc:
        return ("error", str(exc))


_UNORDERED = {"hkeys", "hvals"}


def _norm(args, reply):
    """Orders what a hashtable-encoded hash returns in its own iteration order (HKEYS, HVALS, HSCAN, a whole
    HRANDFIELD)."""
    name = args[0].lower()
    if name in _UNORDERED and isinstance(reply, list):
        return sorted(reply)
    if name == "hscan" and isinstance(reply, (list, tuple)) and len(reply) == 2:
        page = reply[1]
        return reply[0], sorted(page.items()) if isinstance(page, dict) else sorted(page)
    if name == "hrandfield" and len(args) == 3 and int(args[2]) >= 100 and isinstance(reply, list):
        return sorted(reply)
    if name == "hgetall" and isinstance(reply, dict):
        return sorted(reply.items())
    return reply


def _wait_hidden(clients, key, fields):
    """Polls until every client's server reports each field as gone (HTTL -2): their TTL has passed."""
    def hidden():
        return all(c.execute_command("HTTL", key, "FIELDS", len(fields), *fields) == [-2] * len(fields)
                   for c in clients)
    wait_until(hidden, 10, what="fields %r of %r to expire" % (fields, key))


def run_both(dk, vk, script):
    """Runs script (one command a line; `HIDDEN key field ...` polls until those fields expired on both) on
    both servers; returns the lines whose replies differ."""
    diffs = []
    for line in script.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        args = shlex.split(line)
        if args[0] == "HIDDEN":
            _wait_hidden((dk, vk), args[1], args[2:])
            continue
        got, want = _norm(args, _call(dk, args)), _norm(args, _call(vk, args))
        if got != want:
            diffs.append((line, got, want))
    return diffs


@pytest.fixture
def pair(shared_server, valkey91, request):
    """(durakv client, Valkey 9.1.2 client), both flushed, active expiry off on both while the test runs."""
    protocol = getattr(request, "param", 2)
    dk = shared_server.client(protocol=protocol)
    vk = valkey91.client(protocol=protocol)
    for c in (dk, vk):
        c.flushall()
        c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    yield dk, vk
    for c in (dk, vk):
        c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        c.flushall()
        c.close()


SCRIPTS = {
    "hexpire": """
        HSET h a 1 b 2 c 3
        OBJECT ENCODING h
        HEXPIRE h 100 FIELDS 2 a b
        OBJECT ENCODING h
        HEXPIRE h 100 NX FIELDS 1 a
        HEXPIRE h 100 XX FIELDS 1 c
        HEXPIRE h 200 GT FIELDS 2 a c
        HEXPIRE h 50 LT FIELDS 2 a c
        HEXPIRE h 50 lt FIELDS 3 a c zz
        HTTL h FIELDS 4 a b c zz
        HPEXPIREAT h 4102444800000 FIELDS 1 b
        HPEXPIRETIME h FIELDS 2 b zz
        HEXPIRETIME h FIELDS 2 b zz
        HEXPIREAT h 4102444800 GT FIELDS 2 b b
        HPEXPIREAT h 4102444800000 NX FIELDS 1 c
        HEXPIRE h 0 FIELDS 1 zz
        HEXPIRE h 0 FIELDS 2 b b
        HGETALL h
        HLEN h
        HEXPIREAT h 9223372036854775 FIELDS 1 a
        HPEXPIREAT h 9223372036854775807 FIELDS 1 a
        HPEXPIRETIME h FIELDS 1 a
        HPEXPIREAT h 1 FIELDS 2 a c
        EXISTS h
        HEXPIRE nokey 10 FIELDS 2 a b
        HEXPIRE nokey 0 FIELDS 1 a
        SET s x
        HEXPIRE s 10 FIELDS 1 a
        HSET fields a 1
        HEXPIRE fields 10 FIELDS 1 a
        HTTL fields FIELDS 1 a
    """,
    "hexpire_errors": """
        HSET h a 1
        HEXPIRE h 100 FIELDS 2 a
        HEXPIRE h 100 FIELDS 1 a b
        HEXPIRE h 100 FIELDS 0
        HEXPIRE h 100 FIELDS 0 a
        HEXPIRE h 100 FIELDS -1 a
        HEXPIRE h 100 FIELDS x a
        HEXPIRE h 100 FIELD 1 a
        HEXPIRE h 100 NX 1 a
        HEXPIRE h 100 FIELDS
        HEXPIRE h 50 NX XX FIELDS 1 a
        HEXPIRE h 50 GT LT FIELDS 1 a
        HEXPIRE h 50 NX NX FIELDS 1 a
        HEXPIRE h 40 GT XX FIELDS 1 a
        HEXPIRE h 200 GT XX FIELDS 1 a
        HEXPIRE h 50 foo FIELDS 1 a
        HEXPIRE h -1 FIELDS 1 a
        HPEXPIRE h -5 FIELDS 1 a
        HPEXPIREAT h -1 FIELDS 1 a
        HEXPIRE h abc FIELDS 1 a
        HEXPIRE h 9999999999999999 FIELDS 1 a
        HEXPIRE h 9223372036854775 FIELDS 1 a
        HEXPIREAT h 9223372036854776 FIELDS 1 a
        HPEXPIRE h 9223372036854775807 FIELDS 1 a
        HEXPIRE nokey -1 FIELDS 2 a b
        HEXPIRE nokey 100 bad FIELDS 1 a
        SET s x
        HEXPIRE s -1 FIELDS 1 a
        HEXPIRE s abc FIELDS 1 a
        HEXPIRE s 10 FIELDS 2 a
    """,
    "httl_hpersist": """
        HSET h a 1 b 2
        HPEXPIREAT h 4102444800000 FIELDS 1 a
        HTTL h FIELDS 3 a b zz
        HPEXPIRETIME h FIELDS 3 a b zz
        HEXPIRETIME h FIELDS 1 a
        HTTL nokey FIELDS 2 a b
        HTTL h FIELDS 0
        HTTL h FIELDS 2 a
        HTTL h FIELDS 1 a b
        HTTL h FIELDS a
        HTTL h FIELDS x a
        HTTL h FIELDS -1 a
        HTTL h NOFIELDS 1 a
        HTTL h FIELD x a
        HPERSIST h FIELDS 3 a b zz
        HPERSIST h FIELDS 3 a b zz
        HPERSIST nokey FIELDS 1 a
        HPERSIST h FIELD 1 a
        HPERSIST h FIELD x a
        HPERSIST h FIELDS x a
        HPERSIST h FIELDS 2 a
        HPERSIST h FIELDS -1 a
        HEXPIRE h 100 FIELDS 2 b b
        HPERSIST h FIELDS 2 b b
        SET s x
        HTTL s FIELDS 1 a
        HTTL s FIELDS 2 a
        HPERSIST s FIELDS 1 a
        HPERSIST s FIELDS 2 a
    """,
    "hgetex": """
        HSET h a 1 b 2
        HGETEX h FIELDS 2 a zz
        HGETEX h EX 100 FIELDS 2 a zz
        HTTL h FIELDS 2 a b
        HGETEX h PERSIST FIELDS 2 a b
        HTTL h FIELDS 1 a
        HGETEX h PXAT 4102444800000 FIELDS 1 b
        HPEXPIRETIME h FIELDS 1 b
        HGETEX h EXAT 4102444800 FIELDS 1 a
        HPEXPIRETIME h FIELDS 1 a
        HGETEX h EX 10 EX 10 FIELDS 1 a
        HGETEX h persist persist FIELDS 1 a
        HGETEX h EX 0 FIELDS 2 a a
        HGETALL h
        HGETEX h EXAT 1 FIELDS 1 b
        EXISTS h
        HGETEX nokey EX 10 FIELDS 1 a
        HSET h a 1
        HGETEX h EX 10 PX 10 FIELDS 1 a
        HGETEX h EX 10 PERSIST FIELDS 1 a
        HGETEX h PX 10 PERSIST FIELDS 1 a
        HGETEX h EX abc FIELDS 1 a
        HGETEX h EX -1 FIELDS 1 a
        HGETEX h foo FIELDS 1 a
        HGETEX h EX FIELDS 1 a
        HGETEX h KEEPTTL FIELDS 1 a
        HGETEX h NX FIELDS 1 a
        HGETEX h FIELDS 2 a
        HGETEX h FIELDS 0 a
        HGETEX h FIELDS x a
        HGETEX h a b c
        HGETEX h PX 9223372036854775807 FIELDS 1 a
        HGETEX h EXAT 9223372036854775 FIELDS 1 a
        HGETEX h FIELDS 1 FIELDS
        SET s x
        HGETEX s EX -1 FIELDS 1 a
        HGETEX s EX abc FIELDS 1 a
        HSET fields a 1
        HGETEX fields FIELDS 1 a
    """,
    "hsetex": """
        HSETEX h FIELDS 2 a 1 b 2
        OBJECT ENCODING h
        HSETEX h EX 100 FIELDS 1 a 10
        OBJECT ENCODING h
        HTTL h FIELDS 2 a b
        HSETEX h KEEPTTL FIELDS 1 a 11
        HTTL h FIELDS 1 a
        HSETEX h FIELDS 1 a 12
        HTTL h FIELDS 1 a
        HSETEX h PXAT 4102444800000 FIELDS 2 a 1 b 2
        HPEXPIRETIME h FIELDS 2 a b
        HSETEX h EXAT 4102444800 FIELDS 1 c 3
        HPEXPIRETIME h FIELDS 1 c
        HSETEX h NX FIELDS 1 z 1
        HSETEX h XX FIELDS 1 z 1
        HSETEX nokey XX FIELDS 1 a 1
        HSETEX nokey FXX FIELDS 1 a 1
        HSETEX nokey FNX FIELDS 1 a 1
        HSETEX h FNX FIELDS 2 new 1 a 2
        HSETEX h FNX FIELDS 2 new 1 new2 2
        HSETEX h FXX FIELDS 2 a 1 missing 2
        HSETEX h FXX FIELDS 2 a 5 b 6
        HSETEX nokey2 NX FNX PX 100000 FIELDS 2 a 1 b 2
        HTTL nokey2 FIELDS 2 a b
        HSETEX h EX 10 EX 20 FIELDS 1 a 1
        HTTL h FIELDS 1 a
        HSETEX h NX NX FIELDS 1 a b
        HSETEX h KEEPTTL KEEPTTL FIELDS 1 a b
        HSETEX h FIELDS 2 a 1 a 2
        HGETALL h
        HSETEX h PX 0 FIELDS 2 a 1 zz 2
        HGETALL h
        HSETEX h FNX PX 0 FIELDS 1 b 1
        HSETEX nokey3 EXAT 1 FIELDS 1 a 1
        EXISTS nokey3
        HSETEX h PXAT 1 FIELDS 3 b 1 c 1 new2 1
        EXISTS h
        HSETEX h FIELDS 1 FIELDS FIELDS
        HGETALL h
    """,
    "hsetex_errors": """
        HSET h a 1
        HSETEX h FIELDS 1 a
        HSETEX h FIELDS 1 a b c
        HSETEX h EX 10 FIELDS 1 a 1 extra
        HSETEX h EX 10 PX 10 FIELDS 1 a b
        HSETEX h NX XX FIELDS 1 a b
        HSETEX h FNX FXX FIELDS 1 a b
        HSETEX h PERSIST FIELDS 1 a b
        HSETEX h EX -1 FIELDS 1 a b
        HSETEX h NX EX -1 FIELDS 1 a b
        HSETEX h XX EX -1 FIELDS 1 a b
        HSETEX h FNX EX -1 FIELDS 1 a b
        HSETEX h foo FIELDS 1 a b
        HSETEX h KEEPTTL EX 10 FIELDS 1 a b
        HSETEX h NX FNX EX 10 KEEPTTL FIELDS 1 a 1
        HSETEX h FIELDS 0 a b
        HSETEX h FIELDS x a b
        HSETEX h a b c d
        HSETEX h GET FIELDS 1 a b
        HSETEX h PX 9223372036854775807 FIELDS 1 a 1
        HSETEX h EX 9223372036854775 FIELDS 1 a 1
        HSETEX h PXAT 9223372036854775807 FIELDS 1 a 1
        SET s x
        HSETEX s FIELDS 1 a b
        HSETEX s EX -1 FIELDS 1 a b
        HSET fields a 1
        HSETEX fields FIELDS 1 a 2
    """,
    "hgetdel": """
        HSET h a 1 b 2 c 3
        HGETDEL h FIELDS 2 a zz
        HGETALL h
        HGETDEL h FIELDS 3 b b c
        EXISTS h
        HGETDEL nokey FIELDS 2 a b
        HSET h a 1
        HGETDEL h FIELDS 0 a
        HGETDEL h FIELDS x a
        HGETDEL h FIELDS -1 a
        HGETDEL h FIELD 1 a
        HGETDEL h FIELD x a
        HGETDEL h FIELDS 2 a
        SET s x
        HGETDEL s FIELDS 1 a
        HGETDEL s FIELDS 2 a
        HGETDEL s FIELD 1 a
        HSET fields a 1
        HGETDEL fields FIELDS 1 a
    """,
    "expired_fields_are_hidden": """
        HSET h a 1 b 2 c 3
        HPEXPIRE h 1 FIELDS 2 a b
        HIDDEN h a b
        HLEN h
        HGETALL h
        HKEYS h
        HVALS h
        HEXISTS h a
        HEXISTS h c
        HGET h a
        HMGET h a b c
        HSTRLEN h a
        HSTRLEN h c
        HTTL h FIELDS 3 a b c
        HPTTL h FIELDS 1 a
        HSCAN h 0
        HRANDFIELD h 100
        HRANDFIELD h -3
        HRANDFIELD h -3 WITHVALUES
        HRANDFIELD h
        HGETEX h FIELDS 2 a c
        RPUSH l 1
        SORT l BY nosort GET h->a GET h->c
        EXISTS h
        TYPE h
        OBJECT ENCODING h
        HSET g x 1
        HPEXPIRE g 1 FIELDS 1 x
        HIDDEN g x
        EXISTS g
        TYPE g
        DBSIZE
        HLEN g
        HGETALL g
        HRANDFIELD g
        HRANDFIELD g 5
        HRANDFIELD g -5
        KEYS g
    """,
    "writes_over_expired_fields": """
        HSET h a 1 b 2 c 3 d 4 e 5 f 6 g 7 n 10 m 1.5 k 1 w 1
        HPEXPIRE h 1 FIELDS 10 a b c d e f n m k w
        HIDDEN h a b c d e f n m k w
        HDEL h a
        HLEN h
        HGETDEL h FIELDS 1 b
        HLEN h
        HEXPIRE h 0 FIELDS 1 c
        HLEN h
        HSETEX h PX 0 FIELDS 1 d x
        HLEN h
        HGETEX h PX 0 FIELDS 1 e
        HLEN h
        HEXPIRE h 100 FIELDS 1 f
        HPERSIST h FIELDS 1 f
        HTTL h FIELDS 1 f
        HSETEX h NX FIELDS 1 f 1
        HSETEX h FNX FIELDS 1 f 1
        HSETEX h FXX FIELDS 1 f 1
        HSETEX h XX FIELDS 1 f 1
        HTTL h FIELDS 1 f
        HSETNX h f 9
        HINCRBY h n 5
        HTTL h FIELDS 1 n
        HINCRBYFLOAT h m 2
        HTTL h FIELDS 1 m
        HSETEX h KEEPTTL FIELDS 1 k kept
        HTTL h FIELDS 1 k
        HSET h w new x new
        HTTL h FIELDS 1 w
        HLEN h
        HGETALL h
        HSET k a 1
        HPEXPIRE k 1 FIELDS 1 a
        HIDDEN k a
        HSETEX k NX FIELDS 1 a 1
        HSETNX k a 2
        HGETALL k
        HSET j a 1 b 1
        HEXPIRE j 100 FIELDS 1 a
        HINCRBY j a 5
        HINCRBYFLOAT j a 0.5
        HTTL j FIELDS 1 a
        HSET j a 1
        HTTL j FIELDS 1 a
    """,
    "rename_copy_move_swapdb": """
        HSET h a 1 b 2
        HPEXPIREAT h 4102444800000 FIELDS 1 a
        RENAME h h2
        HPEXPIRETIME h2 FIELDS 2 a b
        COPY h2 h3
        HPEXPIRETIME h3 FIELDS 2 a b
        HPERSIST h3 FIELDS 1 a
        HPEXPIRETIME h2 FIELDS 1 a
        MOVE h2 5
        HPEXPIRETIME h2 FIELDS 1 a
        SELECT 5
        HPEXPIRETIME h2 FIELDS 2 a b
        SELECT 0
        COPY h3 h2 DB 5
        SWAPDB 0 5
        HPEXPIRETIME h2 FIELDS 1 a
        SWAPDB 0 5
        HSET h4 a 1
        HEXPIRE h4 100 FIELDS 1 a
        SET h4 plain
        HSET h4 a 1
        HTTL h4 FIELDS 1 a
        HSET h5 a 1
        HEXPIRE h5 100 FIELDS 1 a
        DEL h5
        HSET h5 a 1
        HTTL h5 FIELDS 1 a
        HSET h6 a 1
        HEXPIRE h6 100 FIELDS 1 a
        RENAME h2 h6
        HTTL h6 FIELDS 1 a
        FLUSHDB
        HSET h6 a 1
        HTTL h6 FIELDS 1 a
    """,
    "dump_restore": """
        HSET h a 1 b 2
        HPEXPIREAT h 4102444800000 FIELDS 1 a
        HSET p a 1
        HPEXPIRE p 1 FIELDS 1 a
        HIDDEN p a
    """,
}


@pytest.mark.parametrize("pair", [2, 3], ids=["resp2", "resp3"], indirect=True)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_replies_match_valkey(pair, name):
    dk, vk = pair
    assert run_both(dk, vk, SCRIPTS[name]) == []


def test_dump_restore_with_valkey(pair):
    """DUMP of a hash with field TTLs is Valkey 9's RDB_TYPE_HASH_2 (RDB 80) both ways: each server restores the
    other's payload with the same values and TTLs, a field whose TTL passed included (kept, hidden)."""
    dk, vk = pair
    assert run_both(dk, vk, SCRIPTS["dump_restore"]) == []
    for src, dst in ((dk, vk), (vk, dk)):
        for key in ("h", "p"):
            payload = src.dump(key)
            assert payload[0] == 22 and payload[-10:-8] == b"\x50\x00"    # RDB_TYPE_HASH_2, version 80
            assert dst.restore(key + ":copy", 0, payload)
    assert run_both(dk, vk, """
        HPEXPIRETIME h:copy FIELDS 2 a b
        HGETALL h:copy
        HLEN p:copy
        HGETALL p:copy
        HTTL p:copy FIELDS 1 a
        OBJECT ENCODING h:copy
        EXISTS p:copy
        HPERSIST h:copy FIELDS 1 a
    """) == []
    # a hash without TTLs is RDB 10 as before (Redis 7 and Valkey 8 restore it)
    dk.execute_command("HSET", "plain", "a", "1")
    assert dk.dump("plain")[-10:-8] == b"\x0a\x00"
    assert vk.restore("plain", 0, dk.dump("plain")) and vk.hgetall("plain") == {b"a": b"1"}


# -- the command table ---------------------------------------------------------------------------------------

HFE_COMMANDS = ("hexpire", "hpexpire", "hexpireat", "hpexpireat", "httl", "hpttl", "hexpiretime", "hpexpiretime",
                "hpersist", "hgetex", "hsetex", "hgetdel")


def _no_prose(docs):
    if isinstance(docs, dict):
        return {k: _no_prose(v) for k, v in docs.items() if k not in (b"summary", b"complexity", b"history")}
    if isinstance(docs, list):
        return [_no_prose(d) for d in docs]
    return docs


@pytest.mark.parametrize("protocol", [2, 3])
def test_command_info_docs_and_getkeys_are_valkey_91s(shared_server, valkey91, protocol):
    """Arity, flags, ACL categories, key specs and the argument grammar (facts dumped from the 9.1.2 binary)."""
    from test_valkey91_commands import _facts, _info, answer
    with shared_server.client(protocol=protocol) as ours, valkey91.client(protocol=protocol) as theirs:
        for name in HFE_COMMANDS:
            assert _info(ours, name) == _info(theirs, name), name
            if protocol == 3:   # maps: the prose (summary, complexity) can be left out
                assert _facts(answer(ours, "COMMAND", "DOCS", name)) == \
                    _facts(answer(theirs, "COMMAND", "DOCS", name)), name
        # an argument's `since` is part of its docs (HPEXPIRE's condition: 9.0.0), of 8.0's commands too
        if protocol == 3:
            assert _no_prose(answer(ours, "COMMAND", "DOCS", "bitcount")) == \
                _no_prose(answer(theirs, "COMMAND", "DOCS", "bitcount"))
        for args in (("HEXPIRE", "k", "1", "FIELDS", "1", "f"), ("HSETEX", "k", "FIELDS", "1", "f", "v"),
                     ("HGETDEL", "k", "FIELDS", "1", "f"), ("HTTL", "k", "FIELDS", "1", "f")):
            assert answer(ours, "COMMAND", "GETKEYSANDFLAGS", *args) == \
                answer(theirs, "COMMAND", "GETKEYSANDFLAGS", *args), args
        assert sorted(answer(ours, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "hash")) == \
            sorted(answer(theirs, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "hash"))


# -- keyspace events --------------------------------------------------------------------------------------

class Events:
    """Keyspace notifications (KEA) of one server, read up to a marker PUBLISH after each command."""

    def __init__(self, client):
        self.c = client
        client.config_set("notify-keyspace-events", "KEA")
        self.p = client.pubsub()
        self.p.psubscribe("__key*__:*")
        self.p.subscribe("marker")
        self.n = 0
        wait_until(lambda: self.p.get_message(timeout=0.1) is None, 10, what="the subscriptions")

    def after(self, args):
        reply = _call(self.c, args)
        self.n += 1
        self.c.publish("marker", self.n)
        return reply, self.until(lambda m: m == ("marker", str(self.n)))

    def until(self, done, timeout_s=10):
        out = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = self.p.get_message(timeout=0.2)
            if m is None or m["type"] not in ("pmessage", "message"):
                continue
            item = (m["channel"].decode(), m["data"].decode() if isinstance(m["data"], bytes) else m["data"])
            if done(item):
                return out
            if not item[0].startswith("marker"):
                out.append(item)
        raise TimeoutError("no end of events; got %r" % out)

    def close(self):
        self.p.close()
        self.c.config_set("notify-keyspace-events", "")


EVENT_SCRIPT = """
    HSET h a 1 b 2 c 3
    HEXPIRE h 100 FIELDS 2 a b
    HEXPIRE h 100 NX FIELDS 1 a
    HPEXPIREAT h 4102444800000 FIELDS 1 c
    HPERSIST h FIELDS 2 a zz
    HPERSIST h FIELDS 1 a
    HEXPIRE h 0 FIELDS 2 a zz
    HGETEX h EX 100 FIELDS 2 b zz
    HGETEX h PERSIST FIELDS 1 b
    HGETEX h PERSIST FIELDS 1 b
    HGETEX h FIELDS 1 b
    HGETEX h PX 0 FIELDS 1 b
    HSETEX h PX 100000 FIELDS 1 a 1
    HSETEX h KEEPTTL FIELDS 1 a 2
    HSETEX h FIELDS 1 a 3
    HSETEX h NX FIELDS 1 a 3
    HSETEX h EX 0 FIELDS 1 a 1
    HGETDEL h FIELDS 1 c
    HSETEX nokey EX 0 FIELDS 1 a 1
    HSET g a 1 b 2
    HEXPIRE g 100 FIELDS 1 a
    HINCRBYFLOAT g a 1.5
    HINCRBY g a 1
    HGETDEL g FIELDS 2 zz b
    HGETDEL g FIELDS 1 a
    HSET k a 1 b 2
    HEXPIRE k 0 FIELDS 2 a b
    HSET k a 1
    HSETEX k PXAT 1 FIELDS 1 a 1
"""


def test_keyspace_events_match_valkey(pair):
    dk, vk = pair
    ev_dk, ev_vk = Events(dk), Events(vk)
    try:
        for line in EVENT_SCRIPT.strip().splitlines():
            args = shlex.split(line.strip())
            got, want = ev_dk.after(args), ev_vk.after(args)
            assert got == want, line
    finally:
        ev_dk.close()
        ev_vk.close()


def test_active_expiry_removes_fields_then_the_hash(shared_server, valkey91):
    """Active expiry (the server's cycle, DEBUG SET-ACTIVE-EXPIRE 1): "hexpired" once per hash and cycle, "del"
    when the last field went; INFO's expired_fields counts the fields, as on Valkey."""
    results = []
    for srv in (shared_server, valkey91):
        c = srv.client()
        c.flushall()
        ev = Events(c)
        try:
            before = c.info("stats")["expired_fields"]
            c.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
            c.execute_command("HPEXPIRE", "h", 30, "FIELDS", 2, "a", "b")
            first = ev.until(lambda m: m == ("__keyevent@0__:hexpired", "h"))
            wait_until(lambda: c.hlen("h") == 1, 10, what="the expired fields removed")
            assert c.hgetall("h") == {b"c": b"3"} and c.info("keyspace")["db0"]["keys_with_volatile_items"] == 0
            c.execute_command("HPEXPIRE", "h", 30, "FIELDS", 1, "c")
            second = ev.until(lambda m: m == ("__keyevent@0__:del", "h"))
            wait_until(lambda: c.exists("h") == 0, 10, what="the emptied hash deleted")
            results.append((first, second, c.info("stats")["expired_fields"] - before))
        finally:
            ev.close()
            c.close()
    dk, vk = results
    assert dk == vk
    assert dk[2] == 3 and dk[1] == [("__keyspace@0__:h", "hexpire"), ("__keyevent@0__:hexpire", "h"),
                                    ("__keyspace@0__:h", "hexpired"), ("__keyevent@0__:hexpired", "h"),
                                    ("__keyspace@0__:h", "del")]


# -- what the journal keeps ----------------------------------------------------------------------------------

def _state(ks):
    """Every database's data, key TTLs and field TTLs."""
    out = {}
    for db in ks.dbs:
        for key, value in db.data.items():
            v = sorted(value.items()) if isinstance(value, dict) else value
            out[(db.id, key)] = (v, db.expires.get(key), sorted(db.hexpires.get(key, {}).items()))
        assert set(db.hexpires) <= set(db.data), "field TTLs of a key that is gone"
    return out


def test_effects_replay_to_the_same_state():
    """Every command's effects, replayed where nothing expires (recovery, replicas), rebuild the same hashes,
    field TTLs (absolute) and all, including writes over fields whose TTL passed but that active expiry had not
    removed yet: HINCRBY counts from 0 there, HSETNX sets, HSETEX KEEPTTL drops the old TTL."""
    d = Direct()
    d("HSET", "h", "a", "1", "b", "2", "c", "3", "n", "10", "m", "1", "k", "1", "w", "1", "x", "1")
    assert d("HEXPIRE", "h", 100, "FIELDS", 2, "a", "b") == [1, 1]
    assert d("HPEXPIRE", "h", 50, "LT", "FIELDS", 2, "a", "c") == [1, 1]
    assert d("HPEXPIRE", "h", 10, "FIELDS", 5, "n", "m", "k", "w", "x") == [1] * 5
    assert d("HSETEX", "s", "EX", 100, "FIELDS", 2, "x", "1", "y", "2") == 1
    assert d("HSETEX", "s", "FNX", "KEEPTTL", "FIELDS", 1, "z", "3") == 1
    assert d("HGETEX", "s", "PX", 500, "FIELDS", 1, "y") == [b"2"]
    assert d("HGETEX", "s", "PERSIST", "FIELDS", 1, "x") == [b"1"]
    assert d("HSET", "g", "f", "1.5", "v", "1") == 2
    assert d("HEXPIRE", "g", 100, "FIELDS", 2, "f", "v") == [1, 1]
    assert d("HINCRBYFLOAT", "g", "f", "1") == b"2.5"           # keeps its TTL, here and on replay
    assert d("HINCRBY", "g", "v", 2) == 3
    d.now += 20                                                 # n m k w x expired, not yet removed
    assert d("HLEN", "h") == 8 and d("HGET", "h", "n") is None
    assert d("HINCRBY", "h", "n", 5) == 5
    assert d("HSETNX", "h", "m", "new") == 1
    assert d("HSETEX", "h", "KEEPTTL", "FIELDS", 2, "k", "kept", "c", "c2") == 1
    assert d("HSET", "h", "w", "new") == 1
    assert d("HDEL", "h", "x", "zz") == 0                       # an expired field is not found
    assert d("HTTL", "h", "FIELDS", 6, "n", "m", "k", "w", "c", "x") == [-1, -1, -1, -1, 0, -2]
    assert d("HEXPIRE", "h", 0, "FIELDS", 2, "b", "x") == [2, -2]
    assert d("HSETEX", "h", "PX", 0, "FIELDS", 1, "zz", "1") == 1
    assert d("HGETDEL", "h", "FIELDS", 2, "w", "x") == [b"new", None]
    d("RENAME", "g", "g2")
    d("COPY", "g2", "g3", "DB", 2)
    d("MOVE", "s", 3)
    d("SWAPDB", 2, 4)
    assert d.ks.dbs[3].hexpires[b"s"] == {b"y": NOW + 500}
    d("HSET", "gone", "a", "1")
    d("HEXPIRE", "gone", 1, "FIELDS", 1, "a")
    d.now += 2000
    ks = d.ks
    assert ks.active_expire_cycle(25.0, time.perf_counter) > 0    # x (in h) and gone's only field
    assert "gone" not in ks.dbs[0].data and b"x" not in ks.dbs[0].data[b"h"]
    d.effects.extend((db_id, ks.deletion_effect(key, reason)) for db_id, key, reason in ks.deleted_by_server)
    ks.deleted_by_server.clear()
    assert (0, (b"HDEL", b"gone", b"a")) in d.effects
    replayed = Keyspace(clock_ms=lambda: d.now)
    replayed.expire_enabled = False
    apply_effects(replayed, d.effects)
    assert _state(replayed) == _state(ks)
    assert sorted(ks.dbs[4].hexpires[b"g3"].items()) == [(b"f", NOW + 100_000), (b"v", NOW + 100_000)]
    assert b"s" not in ks.dbs[3].hexpires and sorted(ks.dbs[3].data[b"s"]) == [b"x", b"z"]   # y expired
    # the effects say absolute times and only what changed
    assert (0, (b"HPEXPIREAT", b"h", b"%d" % (NOW + 100_000), b"FIELDS", b"2", b"a", b"b")) in d.effects
    assert (0, (b"HSET", b"h", b"n", b"5")) in d.effects
    assert (0, (b"HSETEX", b"g", b"KEEPTTL", b"FIELDS", b"1", b"f", b"2.5")) in d.effects


def test_field_heap_drops_stale_entries():
    """A field TTL rewritten over and over leaves stale heap entries; the expire cycle rebuilds the heap once they
    outnumber the live TTLs, even while none is due."""
    d = Direct()
    d("HSET", "h", "a", "1", "b", "2")
    db = d.db()
    for i in range(10000):
        db.set_field_expire(b"h", b"a", FAR + i)
    d("HPEXPIREAT", "h", FAR, "FIELDS", 1, "b")
    assert len(db.hexpiry_heap) == 10001
    d.ks.active_expire_cycle(25.0, time.perf_counter)
    assert sorted(db.hexpiry_heap) == [(FAR, b"h", b"b"), (FAR + 9999, b"h", b"a")]
    assert d("HPEXPIRETIME", "h", "FIELDS", 2, "a", "b") == [FAR + 9999, FAR]


def test_snapshot_keeps_field_ttls(tmp_path):
    d = Direct()
    fields = []
    for i in range(1200):
        fields += [b"f%d" % i, b"v%d" % i]
    d("HSET", "big", *fields)
    d("HPEXPIREAT", "big", FAR, "FIELDS", 600, *[b"f%d" % i for i in range(600)])
    d("HPEXPIREAT", "big", FAR + 1, "FIELDS", 2, "f600", "f601")
    d("HSET", "small", "a", "1", "b", "2")
    d("HPEXPIRE", "small", 1, "FIELDS", 1, "a")
    d("SELECT", 7)
    d("HSETEX", "in7", "PXAT", FAR, "FIELDS", 1, "x", "y")
    d.now += 10                                             # small's a expired: kept, as it is stored
    path = snapshot_path(tmp_path, 3)
    write_snapshot(path, d.ks, 3)
    ks = Keyspace(clock_ms=lambda: d.now)
    assert load_snapshot(path, ks, pipeline_apply_fn(ks)) == 3
    assert _state(ks) == _state(d.ks)
    assert len(ks.dbs[0].hexpires[b"big"]) == 602 and ks.dbs[7].hexpires[b"in7"] == {b"x": FAR}


def test_rdb_payload_and_file_round_trip():
    h = {b"a": b"1", b"long": b"x" * 100, b"n": b"-5"}
    ttls = {b"a": FAR, b"n": 1}
    payload = rdbvalue.dump(h, ttls)
    assert rdbvalue.verify(payload) and payload[0] == rdbvalue.T_HASH_2
    assert rdbvalue.load_with_field_ttls(payload) == (h, ttls)
    with pytest.raises(rdbvalue.RdbError):
        rdbvalue.load(payload)        # a caller that cannot keep the TTLs must not drop them silently
    assert rdbvalue.load_with_field_ttls(rdbvalue.dump(h)) == (h, None)
    data = rdbvalue.rdb_file([(0, [(b"k", h, None, ttls), (b"s", b"v", FAR)]), (3, [(b"k3", h, FAR, {b"a": 7})])])
    assert data.startswith(b"VALKEY080")
    got = {}
    dbs, _libs = rdbvalue.load_rdb_file(data, field_ttls=got)
    assert dbs == {0: [(b"k", h, None), (b"s", b"v", FAR)], 3: [(b"k3", h, FAR)]}
    assert got == {(0, b"k"): ttls, (3, b"k3"): {b"a": 7}}
    assert rdbvalue.rdb_file([(0, [(b"s", b"v", None)])]).startswith(b"REDIS0010")


def test_journal_replay_keeps_field_ttls_as_absolute_times(server_factory):
    """A sync-mode server killed with -9 and restarted on its journal (and on a snapshot plus the journal after
    it) has every hash and field TTL it acknowledged, at the same absolute times, including writes over fields
    that had expired but were not removed yet."""
    srv = server_factory("--durability", "sync")
    c = srv.client()
    c.hset("h", mapping={"a": "1", "b": "2", "c": "3", "f": "1.5"})
    c.execute_command("HEXPIRE", "h", 1000, "FIELDS", 2, "a", "b")
    c.execute_command("HSETEX", "s", "EX", 500, "FIELDS", 2, "x", "1", "y", "2")
    c.execute_command("HGETEX", "s", "PX", 700000, "FIELDS", 1, "y")
    c.execute_command("HEXPIRE", "h", 900, "FIELDS", 1, "f")
    assert c.execute_command("HINCRBYFLOAT", "h", "f", "1") == 2.5
    c.execute_command("HPERSIST", "h", "FIELDS", 1, "b")
    c.copy("h", "h:copy")
    c.rename("s", "s:renamed")
    c.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    c.hset("e", mapping={"n": "10", "m": "1", "k": "1", "j": "1", "keep": "1"})
    c.execute_command("HPEXPIRE", "e", 1, "FIELDS", 4, "n", "m", "k", "j")
    _wait_hidden([c], "e", ["n", "m", "k", "j"])
    assert c.hincrby("e", "n", 5) == 5 and c.hsetnx("e", "m", "new") == 1
    assert c.execute_command("HSETEX", "e", "KEEPTTL", "FIELDS", 1, "k", "kept") == 1
    assert c.execute_command("HINCRBYFLOAT", "e", "j", "2.5") == 2.5

    def state(client):
        out = {}
        for key in (b"h", b"h:copy", b"s:renamed", b"e"):
            fields = sorted(client.hkeys(key))
            out[key] = (sorted(client.hgetall(key).items()),
                        client.execute_command("HPEXPIRETIME", key, "FIELDS", len(fields), *fields))
        return out

    before = state(c)
    assert before[b"e"] == ([(b"j", b"2.5"), (b"k", b"kept"), (b"keep", b"1"), (b"m", b"new"), (b"n", b"5")],
                            [-1] * 5)
    assert before[b"h"][1][0] > 0 and before[b"h"][1][2] == -1
    srv.kill()
    srv.start()
    c = srv.client()
    assert state(c) == before
    # a snapshot, more writes, kill -9: the snapshot's field TTLs and the journal after it
    assert c.bgsave()
    wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, 60, what="the snapshot")
    assert c.info("persistence")["rdb_last_bgsave_status"] == "ok"
    c.execute_command("HPEXPIREAT", "h:copy", FAR, "FIELDS", 1, "c")
    after = state(c)
    srv.kill()
    srv.start()
    c = srv.client()
    assert state(c) == after and after[b"h:copy"][1][2] == FAR    # a b c f


def test_shard_replica_follows_field_ttls(local_cluster):
    """A shard replica applies the primary's effects (it expires nothing itself): the same field TTLs; a field
    whose TTL passed is hidden from its readers at once and gone once the primary's HDEL arrives."""
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    replica = next(p for p in cluster.replicas(0) if p.name != primary.name)
    key = "{t}h"
    with valkey.Valkey(port=primary.port, socket_timeout=30) as c, \
            valkey.Valkey(port=replica.port, socket_timeout=30, single_connection_client=True) as r:
        r.execute_command("READONLY")
        c.hset(key, mapping={"a": "1", "b": "2", "c": "3"})
        c.execute_command("HPEXPIREAT", key, FAR, "FIELDS", 1, "a")
        c.execute_command("HSETEX", key, "EX", 1000, "FIELDS", 1, "b", "20")
        want = c.execute_command("HPEXPIRETIME", key, "FIELDS", 3, "a", "b", "c")
        wait_until(lambda: r.execute_command("HPEXPIRETIME", key, "FIELDS", 3, "a", "b", "c") == want, 30,
                   what="the replica to apply the field TTLs")
        assert r.hgetall(key) == {b"a": b"1", b"b": b"20", b"c": b"3"}
        c.execute_command("HPEXPIRE", key, 300, "FIELDS", 1, "c")
        wait_until(lambda: r.hget(key, "c") is None and r.hlen(key) == 2, 30,
                   what="the expired field hidden, then removed on the replica")
        assert r.hgetall(key) == {b"a": b"1", b"b": b"20"}
        c.execute_command("HPEXPIRE", key, 200, "FIELDS", 2, "a", "b")
        wait_until(lambda: r.exists(key) == 0, 30, what="the emptied hash deleted on the replica")


def test_replica_of_valkey91_primary(server_factory, valkey91):
    """durakv REPLICAOF the Valkey 9.1.2 binary: the full sync's RDB (VALKEY080, RDB_TYPE_HASH_2) and the command
    stream (what Valkey propagates for HEXPIRE, HSETEX, HGETEX, HPERSIST, HGETDEL and active field expiry)."""
    vk = valkey91.client()
    vk.flushall()
    vk.config_set("repl-diskless-sync-delay", 0)
    vk.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    vk.execute_command("HPEXPIREAT", "h", FAR, "FIELDS", 1, "a")
    srv = server_factory()
    c = srv.client()
    try:
        assert c.execute_command("REPLICAOF", "127.0.0.1", valkey91.port) == b"OK"
        wait_until(lambda: c.execute_command("ROLE")[3] == b"connected" and c.exists("h"), 30,
                   what="the full sync")
        assert c.execute_command("HPEXPIRETIME", "h", "FIELDS", 3, "a", "b", "c") == [FAR, -1, -1]
        vk.execute_command("HEXPIRE", "h", 1000, "NX", "FIELDS", 2, "a", "b")
        vk.execute_command("HSETEX", "s", "FNX", "PXAT", FAR, "FIELDS", 1, "x", "1")
        vk.execute_command("HGETEX", "s", "PERSIST", "FIELDS", 1, "x")
        vk.execute_command("HSETEX", "s", "KEEPTTL", "FIELDS", 1, "y", "2")
        vk.execute_command("HGETDEL", "h", "FIELDS", 1, "c")
        vk.hset("gone", "f", "1")
        vk.execute_command("HPEXPIRE", "gone", 50, "FIELDS", 1, "f")
        vk.set("marker", "1")
        wait_until(lambda: c.get("marker") == b"1", 30, what="the stream applied")
        want = {k: (vk.hgetall(k), vk.execute_command("HPEXPIRETIME", k, "FIELDS", 3, "a", "b", "x"))
                for k in ("h", "s")}
        assert {k: (c.hgetall(k), c.execute_command("HPEXPIRETIME", k, "FIELDS", 3, "a", "b", "x"))
                for k in ("h", "s")} == want
        wait_until(lambda: vk.exists("gone") == 0, 10, what="active expiry on Valkey")
        wait_until(lambda: c.exists("gone") == 0, 30, what="Valkey's deletion applied")
    finally:
        c.execute_command("REPLICAOF", "NO", "ONE")
        vk.config_set("repl-diskless-sync-delay", 5)
        vk.flushall()
        c.close()
        vk.close()


def test_valkey91_replica_loads_durakvs_rdb_with_field_ttls(server_factory, valkey91):
    """The Valkey 9.1.2 binary as a replica of durakv: the full sync's RDB file (VALKEY080, with RDB_TYPE_HASH_2)
    loads there with every field TTL (the stream after it: tests/test_valkey91_words.py)."""
    srv = server_factory()
    c = srv.client()
    c.hset("h", mapping={"a": "1", "b": "2"})
    c.execute_command("HPEXPIREAT", "h", FAR, "FIELDS", 1, "a")
    c.execute_command("HSETEX", "s", "PXAT", FAR + 5, "FIELDS", 2, "x", "1", "y", "2")
    c.set("plain", "v")
    vk = valkey91.client()
    try:
        assert vk.execute_command("REPLICAOF", "127.0.0.1", srv.port) == b"OK"
        wait_until(lambda: vk.get("plain") == b"v", 30, what="the full sync")
        assert vk.execute_command("HPEXPIRETIME", "h", "FIELDS", 2, "a", "b") == [FAR, -1]
        assert vk.execute_command("HPEXPIRETIME", "s", "FIELDS", 2, "x", "y") == [FAR + 5, FAR + 5]
        assert vk.hgetall("h") == {b"a": b"1", b"b": b"2"} and vk.hgetall("s") == {b"x": b"1", b"y": b"2"}
    finally:
        vk.execute_command("REPLICAOF", "NO", "ONE")
        vk.flushall()
        vk.close()


def test_migrate_to_valkey91_keeps_field_ttls(shared_server, valkey91):
    dk = shared_server.client()
    vk = valkey91.client()
    dk.flushall()
    vk.flushall()
    try:
        dk.hset("h", mapping={"a": "1", "b": "2"})
        dk.execute_command("HPEXPIREAT", "h", FAR, "FIELDS", 1, "b")
        assert dk.execute_command("MIGRATE", "127.0.0.1", valkey91.port, "h", 0, 5000) == b"OK"
        assert dk.exists("h") == 0
        assert vk.execute_command("HPEXPIRETIME", "h", "FIELDS", 2, "a", "b") == [-1, FAR]
        assert vk.execute_command("MIGRATE", "127.0.0.1", shared_server.port, "h", 0, 5000) == b"OK"
        assert dk.execute_command("HPEXPIRETIME", "h", "FIELDS", 2, "a", "b") == [-1, FAR]
        assert dk.hgetall("h") == {b"a": b"1", b"b": b"2"}
    finally:
        dk.flushall()
        vk.flushall()
        dk.close()
        vk.close()


def test_fast_commands_see_field_ttls(r):
    """HGET, DEL and SET, which the compiled core runs itself (fastpath/_core.c), on a database with field TTLs:
    HGET skips a field whose TTL passed, DEL and SET drop the key's field TTLs (a hash later copied to that name
    does not get them back)."""
    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        r.hset("h", mapping={"a": "1", "b": "2"})
        r.execute_command("HPEXPIRE", "h", 1, "FIELDS", 1, "a")
        _wait_hidden([r], "h", ["a"])
        assert r.hget("h", "a") is None and r.hget("h", "b") == b"2"
        r.hset("x", "f", "1")
        r.execute_command("HEXPIRE", "x", 100, "FIELDS", 1, "f")
        assert r.delete("x") == 1
        r.hset("src", "f", "1")
        assert r.copy("src", "x")
        assert r.execute_command("HTTL", "x", "FIELDS", 1, "f") == [-1]
        r.hset("y", "f", "1")
        r.execute_command("HEXPIRE", "y", 100, "FIELDS", 1, "f")
        assert r.set("y", "s")
        assert r.info("keyspace")["db0"]["keys_with_volatile_items"] == 1     # h's stored expired field
    finally:
        r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
