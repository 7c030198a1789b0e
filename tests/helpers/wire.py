"""Wire-level helpers shared by the command family tests: raw replies and exact reply bytes."""

import socket

import pytest
import valkey


def raw(client, *args):
    """The reply without valkey-py's per-command response callbacks."""
    conn = client.connection_pool.get_connection("_")
    try:
        conn.send_command(*args)
        return conn.read_response()
    finally:
        client.connection_pool.release(conn)


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def _read_reply(f):
    line = f.readline()
    t = line[:1]
    if t in (b"$", b"=", b"!"):
        n = int(line[1:-2])
        return line if n < 0 else line + f.read(n + 2)
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = int(line[1:-2])
        if n < 0:
            return line
        if t in (b"%", b"|"):
            n *= 2
        return line + b"".join(_read_reply(f) for _ in range(n))
    return line


def _read_typed(f):
    """One reply as a tree that keeps every RESP type: bulk strings as bytes, integers as int, arrays as lists,
    and every other type tagged: ("+", text), ("-", text), ("~", [..]) a set, ("%", [[k, v], ..]) a map,
    (",", text) a double, ("#", bool), ("_",) RESP3's null, ("$-1",) / ("*-1",) RESP2's null bulk / array."""
    line = f.readline()
    t, body = line[:1], line[1:-2]
    if t in (b"+", b"-", b",", b"("):
        return (t.decode(), body)
    if t == b":":
        return int(body)
    if t == b"#":
        return ("#", body == b"t")
    if t == b"_":
        return ("_",)
    if t in (b"$", b"=", b"!"):
        n = int(body)
        if n < 0:
            return ("$-1",)
        data = f.read(n + 2)[:-2]
        return data if t == b"$" else (t.decode(), data)
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = int(body)
        if n < 0:
            return ("*-1",)
        if t in (b"%", b"|"):
            return (t.decode(), [[_read_typed(f), _read_typed(f)] for _ in range(n)])
        items = [_read_typed(f) for _ in range(n)]
        return items if t == b"*" else (t.decode(), items)
    raise ValueError(f"not a RESP reply: {line!r}")


class TypedConnection:
    """One socket to a server, in RESP2 or (after HELLO 3) RESP3; call() returns the reply as _read_typed's
    tree, so two servers' replies compare on their RESP types too (a status is not a bulk, a set not an array)."""

    def __init__(self, port, protocol=2, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.f = self.sock.makefile("rb")
        if protocol == 3:
            self.call("HELLO", "3")

    def call(self, *args):
        self.sock.sendall(_encode(args))
        return _read_typed(self.f)

    def close(self):
        self.f.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def wire(client, *args):
    """The exact bytes of the reply to one command, sent with the client's protocol."""
    return wire_replies(client, [args])[0]


def wire_replies(client, commands):
    """The exact bytes of the replies to `commands` (each a list of arguments), sent together on one new
    connection with the client's protocol."""
    kw = client.connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"]), timeout=10) as s:
        f = s.makefile("rb")
        if kw.get("protocol") == 3:
            s.sendall(_encode(["HELLO", "3"]))
            _read_reply(f)
        s.sendall(b"".join(_encode(c) for c in commands))
        return [_read_reply(f) for _ in commands]


def is_resp3(client) -> bool:
    return client.connection_pool.connection_kwargs.get("protocol") == 3


def err(client, *args):
    with pytest.raises(valkey.ResponseError) as info:
        raw(client, *args)
    return str(info.value)


resp3 = is_resp3


# Error codes valkey-py leaves on the text (it strips "ERR " and the codes it maps to exception classes).
KEPT_CODES = ("WRONGTYPE", "INVALIDOBJ", "NOGROUP", "BUSYGROUP")


def error_of(client, *args) -> str:
    """The full error text (with its 'ERR ' prefix) of a command that must fail."""
    with pytest.raises(valkey.ResponseError) as exc:
        client.execute_command(*args)
    text = str(exc.value)
    return text if text.split(" ", 1)[0] in KEPT_CODES else "ERR " + text


def sync_stream(port, host="127.0.0.1"):
    """A SYNC connection, as Valkey's test suite attaches one: (socket, next_command), the RDB payload read
    past; next_command() reads the next propagated command (its name lower-cased), keep-alive PINGs skipped."""
    s = socket.create_connection((host, port), timeout=10)
    f = s.makefile("rb")
    s.sendall(b"SYNC\r\n")
    header = f.readline()
    f.read(int(header[1:]))

    def next_command():
        while True:
            line = f.readline()
            while line == b"\n":        # keep-alive newlines before the payload
                line = f.readline()
            argv = []
            for _ in range(int(line[1:])):
                n = int(f.readline()[1:])
                argv.append(f.read(n + 2)[:-2])
            if argv != [b"ping"]:       # the stream's keep-alive, every repl-ping-replica-period seconds
                return [argv[0].lower()] + argv[1:]
    return s, next_command
