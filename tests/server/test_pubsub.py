"""Pub/sub (RESP2 and RESP3), PUBSUB introspection, subscribed-mode limits and keyspace notifications."""

import time

import pytest
import valkey

from conftest import wait_until
from test_blocking import Err, Push, raw_clients, wait_blocked

CONTEXT_ERR = ("Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed "
               "in this context")


@pytest.fixture
def raw(shared_server):
    yield from raw_clients(shared_server.port)


@pytest.fixture
def notify(r):
    """Keyspace notifications on for the test, off afterwards (the server is shared)."""
    def enable(flags):
        r.config_set("notify-keyspace-events", flags)
    yield enable
    r.config_set("notify-keyspace-events", "")


def next_message(p, timeout=5.0):
    """The next non-confirmation message of a valkey-py PubSub (polls until the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if m is not None:
            return m
    raise TimeoutError("no pub/sub message")


def collect(p, n, timeout=5.0):
    return [next_message(p, timeout) for _ in range(n)]


def wait_subscribers(r, channel, n):
    wait_until(lambda: dict(r.pubsub_numsub(channel))[channel.encode()] == n, 10, what="subscribers")


# -- basics ------------------------------------------------------------------------------------------

def test_subscribe_publish_valkey_py(rr):
    p = rr.pubsub()
    try:
        p.subscribe("news", "sport")
        assert p.get_message(timeout=2) == {"type": "subscribe", "pattern": None, "channel": b"news", "data": 1}
        assert p.get_message(timeout=2) == {"type": "subscribe", "pattern": None, "channel": b"sport", "data": 2}
        assert rr.publish("news", "hello") == 1
        assert rr.publish("nobody", "x") == 0
        assert next_message(p) == {"type": "message", "pattern": None, "channel": b"news", "data": b"hello"}
        p.unsubscribe("news")
        assert p.get_message(timeout=2) == {"type": "unsubscribe", "pattern": None, "channel": b"news",
                                            "data": 1}
        assert rr.publish("news", "gone") == 0
        assert rr.publish("sport", "goal") == 1
        assert next_message(p)["data"] == b"goal"
    finally:
        p.close()


def test_pattern_subscriptions_and_exact_receiver_count(rr):
    p = rr.pubsub()
    q = rr.pubsub()
    try:
        p.psubscribe("news.*", "n*")
        p.subscribe("news.tech")
        q.subscribe("news.tech")
        for _ in range(3):
            assert p.get_message(timeout=2)["type"] in ("psubscribe", "subscribe")
        assert q.get_message(timeout=2)["type"] == "subscribe"
        # one per matching subscription: 2 channel subscribers + 2 matching patterns
        assert rr.publish("news.tech", "ai") == 4
        got = collect(p, 3)
        assert sorted((m["type"], m["pattern"]) for m in got) == [
            ("message", None), ("pmessage", b"n*"), ("pmessage", b"news.*")]
        assert all(m["channel"] == b"news.tech" and m["data"] == b"ai" for m in got)
        assert next_message(q)["data"] == b"ai"
        assert rr.publish("nothing", "x") == 1  # only "n*"
        assert next_message(p) == {"type": "pmessage", "pattern": b"n*", "channel": b"nothing", "data": b"x"}
        p.punsubscribe("n*")
        assert p.get_message(timeout=2) == {"type": "punsubscribe", "pattern": None, "channel": b"n*", "data": 2}
        assert rr.publish("nothing", "y") == 0
    finally:
        p.close()
        q.close()


def test_wire_format_resp2_and_resp3(raw, r):
    c2 = raw()
    c2.send("SUBSCRIBE", "a", "b")
    assert c2.read() == [b"subscribe", b"a", 1]
    assert c2.read() == [b"subscribe", b"b", 2]
    c3 = raw(3)
    c3.send("PSUBSCRIBE", "a*")
    first = c3.read()
    assert isinstance(first, Push) and first == [b"psubscribe", b"a*", 1]
    wait_subscribers(r, "a", 1)
    assert r.publish("a", "m") == 2
    assert c2.read() == [b"message", b"a", b"m"]
    msg = c3.read()
    assert isinstance(msg, Push) and msg == [b"pmessage", b"a*", b"a", b"m"]
    # unsubscribing from everything confirms each channel, then the count reaches 0
    c2.send("UNSUBSCRIBE")
    assert [c2.read(), c2.read()] == [[b"unsubscribe", b"a", 1], [b"unsubscribe", b"b", 0]]
    # not subscribed any more: confirmations with a count of 0, as Valkey 7.2 and 8.0.2+ (not -NOSUB)
    assert c2.call("UNSUBSCRIBE") == [b"unsubscribe", None, 0]
    c2.send("UNSUBSCRIBE", "x", "y")
    assert [c2.read(), c2.read()] == [[b"unsubscribe", b"x", 0], [b"unsubscribe", b"y", 0]]
    assert c2.call("PUNSUBSCRIBE") == [b"punsubscribe", None, 0]
    assert c2.call("SUNSUBSCRIBE", "s") == [b"sunsubscribe", b"s", 0]
    assert c2.call("GET", "x") is None  # normal mode again
    fresh3 = raw(3)
    reply = fresh3.call("UNSUBSCRIBE")
    assert isinstance(reply, Push) and reply == [b"unsubscribe", None, 0]


def test_unsubscribe_all_with_nothing_of_that_kind_replies_null_channel(raw):
    c = raw()
    c.send("PSUBSCRIBE", "p*")
    assert c.read() == [b"psubscribe", b"p*", 1]
    assert c.call("UNSUBSCRIBE") == [b"unsubscribe", None, 1]
    assert c.call("SUNSUBSCRIBE") == [b"sunsubscribe", None, 0]
    assert c.call("PUNSUBSCRIBE", "nope") == [b"punsubscribe", b"nope", 1]
    assert c.call("PUNSUBSCRIBE") == [b"punsubscribe", b"p*", 0]
    c3 = raw(3)
    c3.send("SUBSCRIBE", "x")
    c3.read()
    assert c3.call("PUNSUBSCRIBE") == Push([b"punsubscribe", None, 1])


def test_subscribed_mode_limits_in_resp2(raw, r):
    c = raw()
    c.send("SUBSCRIBE", "ch")
    assert c.read() == [b"subscribe", b"ch", 1]
    err = c.call("GET", "k")
    assert isinstance(err, Err) and str(err) == "ERR " + CONTEXT_ERR.format("get")
    err = c.call("CLIENT", "ID")
    assert isinstance(err, Err) and str(err) == "ERR " + CONTEXT_ERR.format("client|id")
    # an arity error is still reported as such
    err = c.call("GET")
    assert isinstance(err, Err) and "wrong number of arguments" in str(err)
    assert c.call("PING") == [b"pong", b""]
    assert c.call("PING", "hi") == [b"pong", b"hi"]
    c.send("PSUBSCRIBE", "x*")
    assert c.read() == [b"psubscribe", b"x*", 2]
    # RESET leaves subscribed mode
    assert c.call("RESET") == "RESET"
    assert c.call("PING") == "PONG"
    assert r.publish("ch", "after reset") == 0


def test_resp3_subscribed_client_can_run_any_command(raw, r):
    c = raw(3)
    c.send("SUBSCRIBE", "ch")
    assert c.read() == Push([b"subscribe", b"ch", 1])
    r.set("k", "v")
    assert c.call("GET", "k") == b"v"
    assert c.call("PING") == "PONG"
    r.publish("ch", "hello")
    assert c.read() == Push([b"message", b"ch", b"hello"])


def test_message_to_own_connection_in_resp3_comes_after_the_reply(raw):
    # Valkey 8.0.1 (checked against its binary; pubsub.tcl: "published message comes after the publish
    # command's response"): the reply first, then the message
    c = raw(3)
    c.send("SUBSCRIBE", "self")
    c.read()
    c.send_many(("PING",), ("PUBLISH", "self", "me"))
    assert c.read() == "PONG"
    assert c.read() == 1
    assert c.read() == Push([b"message", b"self", b"me"])


def test_pubsub_introspection(r, raw):
    a, b = raw(), raw()
    a.send("SUBSCRIBE", "news", "sport")
    a.read(), a.read()
    b.send("SUBSCRIBE", "news")
    b.read()
    b.send("PSUBSCRIBE", "n*", "s*")
    b.read(), b.read()
    b.send("SSUBSCRIBE", "shard1")
    assert b.read() == [b"ssubscribe", b"shard1", 1]
    assert sorted(r.pubsub_channels()) == [b"news", b"sport"]
    assert r.pubsub_channels("n*") == [b"news"]
    assert r.pubsub_numsub("news", "sport", "none") == [(b"news", 2), (b"sport", 1), (b"none", 0)]
    assert r.pubsub_numpat() == 2
    assert r.execute_command("PUBSUB", "SHARDCHANNELS") == [b"shard1"]
    assert r.execute_command("PUBSUB", "SHARDNUMSUB", "shard1", "x") == [b"shard1", 1, b"x", 0]
    with pytest.raises(valkey.ResponseError, match="unknown subcommand or wrong number of arguments for "
                                                   "'CHANNELS'. Try PUBSUB HELP."):
        r.execute_command("PUBSUB", "CHANNELS", "a", "b")
    with pytest.raises(valkey.ResponseError, match="unknown subcommand 'NOPE'. Try PUBSUB HELP."):
        r.execute_command("PUBSUB", "NOPE")
    assert r.execute_command("PUBSUB", "HELP")[0].startswith(b"PUBSUB <subcommand>")
    info = r.info("stats")
    assert info["pubsub_channels"] == 2 and info["pubsub_patterns"] == 2
    assert r.info("clients")["pubsub_clients"] == 2
    lines = {int(x["id"]): x for x in r.client_list()}
    bid = [x for x in lines.values() if x["psub"] == "2"][0]
    assert bid["sub"] == "1" and bid["ssub"] == "1" and "P" in bid["flags"]
    assert len(r.client_list(_type="pubsub")) == 2
    a.close()
    b.close()
    wait_until(lambda: r.pubsub_numpat() == 0 and r.pubsub_channels() == [], 10, what="cleanup on disconnect")


def test_shard_channels(raw, r):
    c = raw()
    c.send("SSUBSCRIBE", "s1", "s2")
    assert c.read() == [b"ssubscribe", b"s1", 1]
    assert c.read() == [b"ssubscribe", b"s2", 2]
    p = raw()
    p.send("PSUBSCRIBE", "*")
    p.read()
    assert r.execute_command("SPUBLISH", "s1", "hi") == 1  # patterns do not see shard messages
    assert c.read() == [b"smessage", b"s1", b"hi"]
    assert r.publish("s1", "plain") == 1  # a plain channel of the same name: only the pattern
    assert p.read() == [b"pmessage", b"*", b"s1", b"plain"]
    assert c.call("SUNSUBSCRIBE", "s1") == [b"sunsubscribe", b"s1", 1]
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("SSUBSCRIBE", "x")
    with pytest.raises(valkey.ResponseError, match="SSUBSCRIBE isn't allowed for a DENY BLOCKING client"):
        pipe.execute()


# -- keyspace notifications ----------------------------------------------------------------------------

def test_keyspace_notifications_for_common_events(r, notify):
    notify("KEA")
    p = r.pubsub()
    try:
        p.psubscribe("__keyevent@0__:*")
        p.get_message(timeout=2)
        r.set("k", "v")
        r.set("t", "v", ex=100)
        r.incr("n")
        r.lpush("l", "a")
        r.rpop("l")
        r.hset("h", "f", "v")
        r.sadd("s", "m")
        r.spop("s")
        r.zadd("z", {"a": 1})
        r.zincrby("z", 2, "a")
        r.expire("k", 100)
        r.persist("k")
        r.rename("k", "k2")
        r.delete("k2", "missing")
        got = [(m["channel"], m["data"]) for m in collect(p, 18)]
        assert got == [(b"__keyevent@0__:" + event, key) for event, key in [
            (b"set", b"k"), (b"set", b"t"), (b"expire", b"t"), (b"incrby", b"n"), (b"lpush", b"l"),
            (b"rpop", b"l"), (b"del", b"l"), (b"hset", b"h"), (b"sadd", b"s"), (b"spop", b"s"), (b"del", b"s"),
            (b"zadd", b"z"), (b"zincr", b"z"), (b"expire", b"k"), (b"persist", b"k"), (b"rename_from", b"k"),
            (b"rename_to", b"k2"), (b"del", b"k2")]]
        assert p.get_message(timeout=0.05) is None
    finally:
        p.close()


def test_keyspace_channel_and_class_filter(r, notify):
    notify("Kl")  # keyspace channel, list events only
    p = r.pubsub()
    try:
        p.subscribe("__keyspace@0__:mylist")
        p.get_message(timeout=2)
        r.set("mylist-not", "x")
        r.rpush("mylist", "a", "b")
        r.lpop("mylist")
        assert collect(p, 2) == [
            {"type": "message", "pattern": None, "channel": b"__keyspace@0__:mylist", "data": b"rpush"},
            {"type": "message", "pattern": None, "channel": b"__keyspace@0__:mylist", "data": b"lpop"}]
        r.delete("mylist")  # generic class is off: nothing
        r.rpush("mylist", "c")
        assert next_message(p)["data"] == b"rpush"
    finally:
        p.close()


def test_expired_event_from_active_expiry(r, notify):
    notify("Ex")
    p = r.pubsub()
    try:
        p.subscribe("__keyevent@0__:expired")
        p.get_message(timeout=2)
        r.set("short", "v", px=30)
        m = next_message(p, timeout=10)
        assert m["channel"] == b"__keyevent@0__:expired" and m["data"] == b"short"
        assert r.exists("short") == 0
    finally:
        p.close()


def test_expired_event_from_lazy_expiry_and_no_del(r, notify):
    notify("Egx")
    r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    p = r.pubsub()
    try:
        p.psubscribe("__keyevent@0__:*")
        p.get_message(timeout=2)
        r.set("lazy", "v", px=1)
        m = next_message(p)
        assert (m["channel"], m["data"]) == (b"__keyevent@0__:expire", b"lazy")  # SET .. PX: generic class
        wait_until(lambda: r.pttl("lazy") == -2, 5, what="expired")  # PTTL itself expires it lazily
        m = next_message(p)
        assert (m["channel"], m["data"]) == (b"__keyevent@0__:expired", b"lazy")
        r.set("other", "x")
        r.delete("other")
        m = next_message(p)
        assert (m["channel"], m["data"]) == (b"__keyevent@0__:del", b"other")
    finally:
        r.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        p.close()


def test_notifications_for_served_blocked_pop(r, notify, raw):
    notify("KEA")
    p = r.pubsub()
    c = raw()
    try:
        p.psubscribe("__keyevent@0__:*")
        p.get_message(timeout=2)
        c.send("BLPOP", "jobs", "0")
        wait_blocked(r, 1)
        r.rpush("jobs", "j1")
        assert c.read() == [b"jobs", b"j1"]
        got = [(m["channel"], m["data"]) for m in collect(p, 3)]
        assert got == [(b"__keyevent@0__:rpush", b"jobs"), (b"__keyevent@0__:lpop", b"jobs"),
                       (b"__keyevent@0__:del", b"jobs")]
    finally:
        p.close()


def test_notify_config_validation(r):
    with pytest.raises(valkey.ResponseError, match="Invalid event class character"):
        r.config_set("notify-keyspace-events", "KEQ")
    assert r.config_get("notify-keyspace-events")["notify-keyspace-events"] == ""


def test_new_and_keymiss_events(r, notify):
    notify("Enm")
    p = r.pubsub()
    try:
        p.psubscribe("__keyevent@0__:*")
        p.get_message(timeout=2)
        r.set("fresh", "1")
        r.set("fresh", "2")       # exists: no "new"
        r.get("absent")           # read miss
        r.rpush("fresh-list", "x")
        got = [(m["channel"], m["data"]) for m in collect(p, 3)]
        assert got == [(b"__keyevent@0__:new", b"fresh"), (b"__keyevent@0__:keymiss", b"absent"),
                       (b"__keyevent@0__:new", b"fresh-list")]
        assert p.get_message(timeout=0.05) is None
    finally:
        p.close()


def test_publish_is_not_journaled():
    from helpers.replay import run_and_replay
    replies, effects = run_and_replay([["SET", "k", "v"], ["PUBLISH", "ch", "m"], ["SPUBLISH", "s", "m"]])
    assert replies[1:] == [0, 0]
    assert effects == [(0, (b"SET", b"k", b"v"))]


def test_config_get_answers_event_flags_as_valkey_writes_them(r):
    # Valkey's pubsub unit "Keyspace notifications: test CONFIG GET/SET of event flags"
    try:
        for given, shown in (("gxE", "gxE"), ("KA", "AK"), ("EA", "AE"), ("$lshzxeKEtm", "$lshzxetKEm"), ("", "")):
            assert r.config_set("notify-keyspace-events", given)
            assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": shown}
    finally:
        r.config_set("notify-keyspace-events", "")


def test_messages_to_self_follow_the_reply_that_published_them(raw):
    # Valkey's pubsub unit: "publish to self inside multi / inside script", "unsubscribe inside multi, and
    # publish to self" (RESP3): the client's own messages come after the EXEC / EVAL / PUBLISH reply
    c = raw(resp=3)
    assert c.call("SUBSCRIBE", "foo") == Push([b"subscribe", b"foo", 1])
    for cmd in (["MULTI"], ["PING", "abc"], ["PUBLISH", "foo", "bar"], ["PUBLISH", "foo", "vaz"], ["PING", "def"]):
        c.send(*cmd)
    c.send("EXEC")
    assert [c.read() for _ in range(5)] == ["OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED"]
    assert c.read() == [b"abc", 1, 1, b"def"]
    assert c.read() == Push([b"message", b"foo", b"bar"])
    assert c.read() == Push([b"message", b"foo", b"vaz"])
    c.send("EVAL", "redis.call('publish','foo','x') return 'bla'", "0")
    assert c.read() == b"bla"
    assert c.read() == Push([b"message", b"foo", b"x"])
    assert c.call("PUBLISH", "foo", "y") == 1
    assert c.read() == Push([b"message", b"foo", b"y"])
