"""A tiny blocking RESP client for the local cluster tooling, and how the tooling reads a node's INFO.

INFO field names differ across builds (EPOCH_FIELDS, APPLIED_FIELDS, LAG_FIELDS: newest first); first_field
picks the first a node reports. MASTER_ROLES are the names INFO replication gives a primary.
"""

import socket

import hiredis

from ..protocol.resp import encode_command
from .tls import client_context

MASTER_ROLES = ("master", "primary")

# INFO field names, newest first: the jetstream/replication work names them durakv_epoch, journal_applied_index
# and replica_lag_ms; older builds may only have some of them.
EPOCH_FIELDS = ("durakv_epoch", "epoch")
APPLIED_FIELDS = ("journal_applied_index", "applied_index")
LAG_FIELDS = ("replica_lag_ms", "lag_ms")


class RespError(Exception):
    """An error reply (-ERR ...)."""


class RespClient:
    """One blocking connection: execute(*args) sends a command and returns its reply (RESP2, hiredis parsing).
    `tls_ca`: connect over TLS, verifying the server against that CA file."""

    def __init__(self, host="127.0.0.1", port=6379, timeout_s=2.0, tls_ca=None):
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca:
            sock = client_context(tls_ca).wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.reader = hiredis.Reader(replyError=RespError)

    def execute(self, *args):
        self.sock.sendall(encode_command(args))
        while True:
            reply = self.reader.gets()
            if reply is not False:
                if isinstance(reply, RespError):
                    raise reply
                return reply
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by server")
            self.reader.feed(data)

    def ping(self) -> bool:
        return self.execute("PING") == b"PONG"

    def info(self, *sections) -> dict:
        return parse_info(self.execute("INFO", *sections))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _value(text):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_info(raw) -> dict:
    """INFO text -> {section (lower case): {field: value}}; numbers become int/float."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    sections = {}
    current = sections.setdefault("", {})
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = sections.setdefault(line[1:].strip().lower(), {})
            continue
        key, sep, val = line.partition(":")
        if sep:
            current[key] = _value(val)
    if not sections[""]:
        del sections[""]
    return sections


def first_field(fields, names, default=None):
    for n in names:
        if n in fields:
            return fields[n]
    return default
