"""The one small blocking RESP client of the tools and the control plane: a socket, encode_command, hiredis.

The rest of protocol/ is sans-IO; this module is its one exception, kept here because everything that talks
RESP from outside a server (cluster/ control code, tools/, scripts/) sits above protocol/ and needs the same
few things: send a command, read its reply (errors as RespError), pipeline, and read a SYNC's RDB payload,
which is not a RESP value (`$<len>\\r\\n<bytes>` with no CRLF after it). It never runs on the server's event
loop. Application-level clients (cluster redirects, retries, connection pools) use valkey-py instead.
"""

import socket

import hiredis

from .resp import encode_command

RECV_BYTES = 65536
EOF_MARK_BYTES = 40          # the random mark that ends a diskless sync's payload (replication.c)


class RespError(Exception):
    """An error reply (-ERR ...)."""


class RespClient:
    """One blocking connection. execute(*args) sends a command and returns its reply (RESP2 as the server
    sends it: bytes, ints, lists; an error reply raises RespError). `ssl_context`: connect over TLS
    (`server_hostname` defaults to host). A socket timeout raises TimeoutError and keeps a partly read reply:
    read() may be called again."""

    def __init__(self, host="127.0.0.1", port=6379, timeout_s=2.0, ssl_context=None, server_hostname=None):
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.reader = hiredis.Reader(replyError=RespError)
        self._raw = bytearray()     # received, not yet given to hiredis (read_payload reads from it)
        self._payload_size = None   # the length read_payload found in its header, until it has all of it

    # -- sending and reading -------------------------------------------------------------------------------
    def send(self, *args):
        """Sends one command without reading its reply (pipelining)."""
        self.sock.sendall(encode_command(args))

    def send_many(self, commands):
        """Sends several commands in one write."""
        self.sock.sendall(b"".join(encode_command(c) for c in commands))

    def _recv(self) -> bytes:
        data = self.sock.recv(RECV_BYTES)
        if not data:
            raise ConnectionError("connection closed by server")
        return data

    def read(self):
        """The next reply; an error reply is returned as a RespError value, not raised."""
        if self._raw:
            self.reader.feed(bytes(self._raw))
            self._raw.clear()
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            self.reader.feed(self._recv())

    def execute(self, *args):
        """Sends a command and returns its reply; an error reply raises RespError."""
        self.send(*args)
        reply = self.read()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def pipeline(self, commands) -> list:
        """Sends the commands in one write and returns their replies in order (error replies as values)."""
        commands = list(commands)
        self.send_many(commands)
        return [self.read() for _ in commands]

    def _raw_line(self, kind: bytes, caller: str) -> bytes:
        """The next line read off the socket without the RESP reader (what follows it is not RESP: a SYNC's
        payload), after any keep-alive newlines the server sends while it prepares it; it must start with
        `kind`; an error reply raises RespError. A timeout consumes nothing: call again."""
        if self.reader.has_data():
            raise RuntimeError(f"{caller} with a reply unread")
        raw = self._raw
        while True:
            while raw[:1] == b"\n":
                del raw[:1]
            nl = raw.find(b"\r\n")
            if nl >= 0:
                break
            raw += self._recv()
        line = bytes(raw[:nl])
        del raw[:nl + 2]
        if line[:1] == b"-":
            raise RespError(line[1:].decode("utf-8", "replace"))
        if line[:1] != kind:
            raise ConnectionError("unexpected reply %r where %r was due" % (line[:64], kind))
        return line

    def read_payload(self) -> bytes:
        """The bulk payload that answers SYNC (the RDB file): `$<len>\\r\\n` and len bytes with no CRLF after
        them, after any keep-alive newlines. Only right after that command, with nothing else unread. A timeout
        keeps what was read: call it again."""
        if self._payload_size is None:
            self._payload_size = int(self._raw_line(b"$", "read_payload")[1:])
        raw = self._raw
        size = self._payload_size
        while len(raw) < size:
            raw += self._recv()
        payload = bytes(raw[:size])
        del raw[:size]                       # what follows (a replica's command stream) is RESP again
        self._payload_size = None
        return payload

    def read_line(self) -> bytes:
        """The next simple-string reply read as a line, without the RESP reader: for PSYNC's +FULLRESYNC, after
        which the payload follows on the same bytes (read_payload_into). Keep-alive newlines are skipped; an
        error reply raises RespError."""
        return self._raw_line(b"+", "read_line")[1:]

    def read_payload_into(self, write) -> int:
        """As read_payload, for a payload of any size: its bytes go to write(chunk) as they arrive, never all in
        memory, whether sized (`$<len>`) or diskless (`$EOF:<40-byte mark>`, the bytes up to the mark, as a
        primary sends them to a replica that announced `capa eof`). Returns the payload's size."""
        header = self._raw_line(b"$", "read_payload_into")
        raw = self._raw
        if header.startswith(b"$EOF:"):
            mark = header[5:]
            if len(mark) != EOF_MARK_BYTES:
                raise ConnectionError("bad EOF mark in %r" % header[:64])
            size = 0
            while True:
                end = raw.find(mark)
                if end >= 0:
                    write(bytes(raw[:end]))
                    del raw[:end + len(mark)]
                    return size + end
                keep = len(raw) - (len(mark) - 1)     # what cannot be the start of the mark
                if keep > 0:
                    write(bytes(raw[:keep]))
                    size += keep
                    del raw[:keep]
                raw += self._recv()
        left = size = int(header[1:])
        while left:
            if not raw:
                raw += self._recv()
            chunk = bytes(raw[:left])
            del raw[:len(chunk)]
            write(chunk)
            left -= len(chunk)
        return size

    # -- conveniences ----------------------------------------------------------------------------------------
    def ping(self) -> bool:
        return self.execute("PING") == b"PONG"

    def settimeout(self, timeout_s):
        self.sock.settimeout(timeout_s)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def command(host, port, *args, timeout_s=2.0, ssl_context=None):
    """One command on a connection of its own: its reply (an error reply raises RespError)."""
    with RespClient(host, port, timeout_s, ssl_context=ssl_context) as c:
        return c.execute(*args)
