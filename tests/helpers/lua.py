"""A bare RESP connection for the Lua tests: replies exactly as the server sent them, errors whole
(hiredis.ReplyError with their code), and a checker for (script, reply) vectors taken from Valkey."""

import socket

import hiredis


class RawConn:
    def __init__(self, port, timeout_s=120):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.reader = hiredis.Reader()

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.reader.feed(data)

    def close(self):
        self.sock.close()


def as_vector_reply(reply):
    """A reply in the vectors' notation: errors as ('ERR', full text)."""
    if isinstance(reply, hiredis.ReplyError):
        return ("ERR", str(reply))
    return reply


def mismatches(conn, vectors):
    """(script, expected, got) for every vector the server answers differently (EVAL script 0)."""
    bad = []
    for script, expected in vectors:
        got = as_vector_reply(conn.call("EVAL", script, "0"))
        if got != expected:
            bad.append((script, expected, got))
    return bad
