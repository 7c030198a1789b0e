"""protocol/client.py, the one blocking RESP client of the tools and the control plane: commands, error replies,
pipelines, and a SYNC's RDB payload followed by the command stream, against a real server; a payload cut by
socket timeouts and keep-alive newlines against a scripted socket."""

import socket
import threading

import pytest

from durakv.keyspace.rdbvalue import load_rdb_file
from durakv.protocol.client import RespClient, RespError, command


def test_execute_pipeline_and_errors(r, shared_server):
    port = shared_server.port
    with RespClient("127.0.0.1", port) as c:
        assert c.ping()
        assert c.execute("SET", "rc:k", b"v\r\n") == b"OK"
        assert c.execute("GET", "rc:k") == b"v\r\n"
        with pytest.raises(RespError) as exc:
            c.execute("INCR", "rc:k")
        assert str(exc.value) == "ERR value is not an integer or out of range"
        replies = c.pipeline([("INCR", "rc:n"), ("LPUSH", "rc:k", "x"), ("GET", "rc:none"), ("MGET", "rc:n")])
        assert replies[0] == 1 and replies[2] is None and replies[3] == [b"1"]
        assert isinstance(replies[1], RespError) and str(replies[1]).startswith("WRONGTYPE ")
        assert c.execute("PING") == b"PONG"     # the connection is in step after the pipeline's error
    assert command("127.0.0.1", port, "GET", "rc:n") == b"1"


def test_sync_payload_then_the_command_stream(r, shared_server):
    r.set("rc:before", "1")
    with RespClient("127.0.0.1", shared_server.port, timeout_s=10) as c:
        c.send("SYNC")
        databases, _libraries = load_rdb_file(c.read_payload())
        assert (b"rc:before", b"1") in [(k, v) for k, v, _ttl in databases.get(0, ())]
        r.set("rc:after", "2")
        seen = []
        while not seen or seen[-1][:2] != [b"set", b"rc:after"]:
            frame = c.read()
            seen.append([frame[0].lower()] + frame[1:])
        assert seen[-1] == [b"set", b"rc:after", b"2"]


class ScriptedPeer:
    """A listening socket that sends `parts` one at a time, each once the test releases it (no sleeps)."""

    def __init__(self, parts):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.parts = parts
        self.go = [threading.Event() for _ in parts]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(1024)         # the SYNC
            for part, go in zip(self.parts, self.go):
                go.wait(10)
                conn.sendall(part)
            conn.recv(1024)         # until the client closes

    def close(self):
        for go in self.go:
            go.set()
        self.listener.close()


def test_payload_read_survives_timeouts_and_keepalives():
    """Keep-alive newlines, then the payload in pieces with no CRLF after it, the stream's first command in the
    same read as its last bytes: every socket timeout on the way keeps what was read."""
    peer = ScriptedPeer([b"\n\n", b"$9\r\nREDI", b"S0011*1\r\n$4", b"\r\nPING\r\n"])
    try:
        with RespClient("127.0.0.1", peer.port, timeout_s=5) as c:
            c.send("SYNC")
            c.settimeout(0.05)
            for go in peer.go[:2]:
                go.set()
                with pytest.raises(TimeoutError):
                    c.read_payload()
            peer.go[2].set()
            c.settimeout(5)
            assert c.read_payload() == b"REDIS0011"
            c.settimeout(0.05)
            with pytest.raises(TimeoutError):
                c.read()
            peer.go[3].set()
            c.settimeout(5)
            assert c.read() == [b"PING"]
    finally:
        peer.close()


def test_payload_error_reply():
    peer = ScriptedPeer([b"\n-NOPERM no SYNC for you\r\n"])
    try:
        with RespClient("127.0.0.1", peer.port, timeout_s=5) as c:
            c.send("SYNC")
            peer.go[0].set()
            with pytest.raises(RespError) as exc:
                c.read_payload()
            assert str(exc.value) == "NOPERM no SYNC for you"
    finally:
        peer.close()
