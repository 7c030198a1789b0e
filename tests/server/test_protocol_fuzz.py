"""Random and damaged RESP frames against real servers, authenticated and not (hypothesis, bounded).

After every example the fuzzing connection must have been closed by the server once it sent EOF (nothing
hangs), any protocol error it got must be one of Valkey's texts, and a separate client must get PONG
within 2 s and read back a key written before the run. The long run is scripts/fuzz_protocol.py."""

import re
import socket
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ServerProcess
from durakv.protocol.resp import encode_command

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores

PASSWORD = "fuzzpw"
# A liveness bound, not a speed check: the server must still answer, on a loaded 2-core CI box too.
PING_BOUND_S = 10.0
CLOSE_BOUND_S = 5.0
PROTOCOL_ERROR = re.compile(
    rb"-ERR Protocol error: (too big inline request|too big mbulk count string|invalid multibulk length|"
    rb"unauthenticated multibulk length|unauthenticated bulk length|too big bulk count string|"
    rb"invalid bulk length|unbalanced quotes in request|"
    rb"expected '\$', got '[\x00-\xff]')\r\n", re.DOTALL)
# (Valkey quotes the offending type byte raw, whatever its value, so the reply can carry any byte there.)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """{"open": server without requirepass, "auth": server with it}, each holding the key `known`."""
    started = {}
    try:
        for name, args in (("open", []), ("auth", ["--requirepass", PASSWORD])):
            srv = ServerProcess(tmp_path_factory.mktemp("fuzz-" + name), args=args)
            started[name] = srv
            srv.start(password=PASSWORD if args else None)
            checker = srv.client(password=PASSWORD if args else None, socket_timeout=PING_BOUND_S,
                                 socket_connect_timeout=PING_BOUND_S)
            checker.set("known", "value")
            srv.checker = checker
        yield started
    finally:
        for srv in started.values():
            if getattr(srv, "checker", None) is not None:
                srv.checker.close()
            srv.stop()


# Commands whose damaged forms cannot reach the key `known` (no template names it) nor stop the server.
_X = st.binary(min_size=0, max_size=12)
_TEMPLATES = [
    st.just([b"PING"]), st.tuples(st.just(b"ECHO"), _X).map(list),
    st.tuples(st.just(b"SET"), st.sampled_from([b"f:1", b"f:2"]), _X).map(list),
    st.just([b"GET", b"f:1"]), st.just([b"INCR", b"f:n"]),
    st.tuples(st.just(b"HSET"), st.just(b"f:h"), _X, _X).map(list),
    st.tuples(st.just(b"LPUSH"), st.just(b"f:l"), _X).map(list), st.just([b"DEL", b"f:1"]),
    st.just([b"MULTI"]), st.just([b"EXEC"]), st.just([b"HELLO", b"3"]), st.just([b"SELECT", b"1"]),
    st.just([b"AUTH", PASSWORD.encode()]), st.just([b"AUTH", b"wrong"]), st.just([b"RESET"]),
]
command_st = st.one_of(*_TEMPLATES)


def _inline(args):
    return b" ".join(args) + b"\r\n"


_SPECIAL = [
    b"*2147483647\r\n", b"*4294967295\r\n", b"*1048577\r\n", b"*1\r\n*2147483647\r\n", b"*1\r\n~2147483647\r\n",
    b"*1\r\n>2147483647\r\n", b"*1\r\n$2147483647\r\n", b"*1\r\n$536870913\r\n", b"*11\r\n", b"*1\r\n$16385\r\n",
    b"*-1\r\n", b"*-5\r\n", b"*0\r\n", b"*1\r\nX\r\n", b"*1\r\n+x\r\n", b"*1\r\n:5\r\n", b"*1\r\n$-1\r\n",
    b"*1\r\n_\r\n", b"*1\r\n\x00\r\n", b"\x00\r\n", b'GET "a\r\n', b"*" + b"9" * 70000, b"$" + b"9" * 70000,
    b"G" * 70000, b"*1\r\n$" + b"9" * 70000, b"\r\n", b"\n",
]


@st.composite
def frame_st(draw):
    kind = draw(st.sampled_from(["valid", "inline", "damaged", "damaged", "special", "junk", "binary"]))
    if kind == "valid":
        return encode_command(draw(command_st))
    if kind == "inline":
        return _inline(draw(command_st))
    if kind == "special":
        return draw(st.sampled_from(_SPECIAL))
    if kind == "junk":
        return draw(st.binary(max_size=40)) + b"\r\n"
    if kind == "binary":
        return draw(st.binary(max_size=200))
    blob = bytearray(encode_command(draw(command_st)))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(blob) - 1))
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "count"]))
        if op == "flip":
            blob[i] = draw(st.integers(0, 255))
        elif op == "insert":
            blob[i:i] = draw(st.sampled_from([b"*", b"$", b"+", b":", b"-", b"\r\n", b"\r", b"\0", b"9999999999"]))
        elif op == "delete":
            del blob[i]
        elif op == "truncate":
            del blob[i:]
        else:
            blob[1:2] = draw(st.sampled_from([b"2147483647", b"-1", b"0", b"1048576", b"11"]))
        if not blob:
            break
    return bytes(blob)


def _exchange(port, chunks):
    """Sends the chunks, then EOF; returns what came back. The server must close within the bound."""
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_BOUND_S) as s:
        try:
            for chunk in chunks:
                s.sendall(chunk)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return b""  # the server refused and closed while we were still sending
        out = b""
        deadline = time.monotonic() + CLOSE_BOUND_S
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return out
            except socket.timeout:
                break
            if not chunk:
                return out
            out += chunk
        raise AssertionError(f"the server did not close the connection {CLOSE_BOUND_S} s after EOF; "
                             f"got {out[:200]!r}")


@settings(max_examples=300, deadline=timedelta(seconds=15), suppress_health_check=[HealthCheck.too_slow,
                                                                                    HealthCheck.data_too_large])
@given(mode=st.sampled_from(["open", "auth-first", "unauthenticated"]),
       frames=st.lists(frame_st(), min_size=1, max_size=6), data=st.data())
def test_fuzzed_frames_never_hang_or_lose_data(servers, mode, frames, data):
    srv = servers["open" if mode == "open" else "auth"]
    stream = b"".join(frames)
    if mode == "auth-first":
        stream = encode_command([b"AUTH", PASSWORD.encode()]) + stream
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=3))))
    chunks = [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)]) if a < b]
    out = _exchange(srv.port, chunks)
    errors = re.findall(rb"-ERR Protocol error[^\r\n]*\r\n", out)
    assert len(errors) <= 1, out
    for line in errors:
        assert PROTOCOL_ERROR.fullmatch(line), line
    assert srv.checker.ping()      # within the checker's socket timeout (PING_BOUND_S)
    assert srv.checker.get("known") == b"value"
    assert srv.proc.poll() is None
