"""Protocol hardening against a running server (issue 9, items 2, 3 and 8): every malformed request gets
Valkey's exact reply and a close, is refused at its header before more is read, and never stalls, floods
the log or takes down another client. Raw sockets send the bytes; a separate valkey-py client checks that
the server keeps answering within a bound."""

import os
import select
import signal
import socket
import time

import pytest

from conftest import wait_until

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores

PASSWORD = "pw"
# A liveness bound, not a speed check: the server must still answer, on a loaded 2-core CI box too.
PING_BOUND_S = 10.0


def exchange(port, payload, timeout_s=5.0, then=None, after=b""):
    """Sends payload; once the reply holds `after`, sends `then` (unless the server has closed already).
    Returns (reply bytes, closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(payload)
        out = b""
        if then is not None:
            deadline = time.monotonic() + timeout_s
            while after not in out and time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = s.recv(65536)
                if not chunk:
                    return out, True
                out += chunk
            s.sendall(then)
        rest, closed = read_until_closed(s, timeout_s)
        return out + rest, closed


def read_until_closed(s, timeout_s):
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return out, False
        except ConnectionResetError:
            return out, True
        if not chunk:
            return out, True
        out += chunk
    return out, False


def assert_serving(srv, password=None):
    """Another client gets PONG within the bound and reads back the known key."""
    with srv.client(password=password, socket_timeout=PING_BOUND_S, socket_connect_timeout=PING_BOUND_S) as c:
        assert c.ping()       # within the socket timeout (PING_BOUND_S)
        assert c.get("known") == b"value"


@pytest.fixture(params=["authenticated", "before-auth"])
def target(request, server_factory):
    """(server, password): without requirepass every client is authenticated; with it, the raw
    connections below are not."""
    if request.param == "authenticated":
        srv, password = server_factory(), None
    else:
        srv, password = server_factory("--requirepass", PASSWORD, password=PASSWORD), PASSWORD
    with srv.client(password=password) as c:
        c.set("known", "value")
    return srv, password


def assert_no_traceback(srv):
    log = srv.read_log()
    assert "Traceback" not in log and "Fatal error on transport" not in log, log[-3000:]


# -- item 1 of the brief: a wrong type byte must not loop forever -----------------------------------
def test_wrong_type_byte_is_answered_and_the_server_keeps_serving(target):
    srv, password = target
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"*1\r\nX\r\n")
        assert_serving(srv, password)   # while that connection is still open
        assert read_until_closed(s, 5) == (b"-ERR Protocol error: expected '$', got 'X'\r\n", True)
    assert_serving(srv, password)
    # And it still stops on SIGTERM (it ignored it while spinning).
    os.kill(srv.proc.pid, signal.SIGTERM)
    srv.proc.wait(timeout=10)
    assert_no_traceback(srv)


# -- item 2: limits at the header, before anything else is read ----------------------------------
def test_huge_multibulk_counts_are_refused_at_once(target):
    srv, password = target
    for payload in (b"*2147483648\r\n", b"*4294967295\r\n", b"*99999999999\r\n"):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)   # and close: freeing what hiredis preallocated stalled seconds
            assert read_until_closed(s, 5) == (b"-ERR Protocol error: invalid multibulk length\r\n", True)
        assert_serving(srv, password)
    # INT_MAX itself is a count Valkey accepts from an authenticated client (not before AUTH): nothing is
    # allocated for it, the server waits for the arguments while serving the others.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"*2147483647\r\n")
        assert_serving(srv, password)
        if password is not None:
            assert read_until_closed(s, 5) == (b"-ERR Protocol error: unauthenticated multibulk length\r\n", True)
    # Three at once, as the issue found (PING waited 23.7 s).
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=5) for _ in range(3)]
    for s in socks:
        s.sendall(b"*2147483647\r\n")
    for s in socks:
        s.close()
    assert_serving(srv, password)
    # A nested one never reaches an allocation either.
    assert exchange(srv.port, b"*1\r\n*2147483647\r\n") == (
        b"-ERR Protocol error: expected '$', got '*'\r\n", True)
    assert_no_traceback(srv)


def test_unauthenticated_limits_apply_at_the_header(server_factory):
    srv = server_factory("--requirepass", PASSWORD, password=PASSWORD)
    with srv.client(password=PASSWORD) as c:
        c.set("known", "value")
    # Only the header is sent: the answer must not wait for the rest.
    assert exchange(srv.port, b"*11\r\n") == (b"-ERR Protocol error: unauthenticated multibulk length\r\n", True)
    assert exchange(srv.port, b"*1\r\n$16385\r\n") == (b"-ERR Protocol error: unauthenticated bulk length\r\n",
                                                       True)
    assert exchange(srv.port, b"*2\r\n$4\r\nAUTH\r\n$99999\r\n") == (
        b"-ERR Protocol error: unauthenticated bulk length\r\n", True)
    # Within the limits, an unauthenticated request is parsed and refused by the command layer.
    out, closed = exchange(srv.port, b"*10\r\n$4\r\nAUTH\r\n" + b"$1\r\na\r\n" * 9
                           + b"*2\r\n$4\r\nAUTH\r\n$16384\r\n" + b"x" * 16384 + b"\r\n*1\r\n$4\r\nQUIT\r\n")
    assert (out, closed) == (b"-ERR syntax error\r\n"
                             b"-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n", True)
    # A failed AUTH in the same read does not lift them; RESET puts them back.
    out, closed = exchange(srv.port, b"*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n*11\r\n", then=b"$1\r\n",
                           after=b"disabled.\r\n")
    assert out == (b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
                   b"-ERR Protocol error: unauthenticated multibulk length\r\n")
    assert closed
    out, closed = exchange(srv.port, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*1\r\n$5\r\nRESET\r\n*11\r\n",
                           then=b"$1\r\n", after=b"+RESET\r\n")
    assert out == b"+OK\r\n+RESET\r\n-ERR Protocol error: unauthenticated multibulk length\r\n"
    assert closed
    # A correct one does, for the rest of the same read.
    out, closed = exchange(srv.port, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*12\r\n$4\r\nMSET\r\n"
                           + b"$1\r\nk\r\n$1\r\nv\r\n" * 5 + b"$1\r\nk\r\n" + b"*1\r\n$4\r\nQUIT\r\n")
    assert (out, closed) == (b"+OK\r\n-ERR wrong number of arguments for 'mset' command\r\n+OK\r\n", True)
    assert_serving(srv, PASSWORD)


def test_bulk_length_over_proto_max_bulk_len_is_refused_at_the_header(server_factory):
    srv = server_factory("--proto-max-bulk-len", "1mb")
    with srv.client() as c:
        c.set("known", "value")
    assert exchange(srv.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n") == (
        b"-ERR Protocol error: invalid bulk length\r\n", True)
    out, closed = exchange(srv.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048576\r\n" + b"x" * 1048576 + b"\r\n"
                           + b"*1\r\n$4\r\nQUIT\r\n")
    assert (out, closed) == (b"+OK\r\n+OK\r\n", True)
    assert_serving(srv)


# -- item 3: every header and inline line is capped ----------------------------------------------
@pytest.mark.parametrize("prefix, reply", [
    (b"*", b"-ERR Protocol error: too big mbulk count string\r\n"),
    (b"*2\r\n$3\r\nGET\r\n$", b"-ERR Protocol error: too big bulk count string\r\n"),
    (b"GET ", b"-ERR Protocol error: too big inline request\r\n"),
])
def test_endless_lines_are_cut_at_64k(target, prefix, reply):
    srv, password = target
    sent = 0
    step = 4096
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(prefix)
        # Before, all of it was buffered (an endless one grew RSS to 347 MB). Each step waits briefly for
        # the answer so that the server closes with nothing unread (which would reset the connection).
        while sent < 256 * 1024:
            s.sendall(b"9" * step)
            sent += step
            if select.select([s], [], [], 0.05)[0]:
                break
        assert read_until_closed(s, 5) == (reply, True)
    assert sent <= 64 * 1024 + 2 * step
    assert_serving(srv, password)


# -- item 8: wrong element types, negative counts ---------------------------------------------------
@pytest.mark.parametrize("payload, reply", [
    (b"*1\r\n$-1\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*2\r\n$3\r\nGET\r\n$-1\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n:5\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
    (b"*1\r\n+x\r\n", b"-ERR Protocol error: expected '$', got '+'\r\n"),
    (b"*2\r\n$4\r\nECHO\r\n-err\r\n", b"-ERR Protocol error: expected '$', got '-'\r\n"),
    (b"*1\r\n$4\r\nPING\r\n*1\r\n_\r\n", b"+PONG\r\n-ERR Protocol error: expected '$', got '_'\r\n"),
])
def test_non_bulk_elements_are_protocol_errors(target, payload, reply):
    srv, password = target
    if password is not None and payload.startswith(b"*1\r\n$4\r\nPING"):
        reply = reply.replace(b"+PONG", b"-NOAUTH Authentication required.")
    assert exchange(srv.port, payload) == (reply, True)
    assert_serving(srv, password)
    assert_no_traceback(srv)


def test_counts_below_one_are_skipped(target):
    srv, password = target
    pong = b"+PONG\r\n" if password is None else b"-NOAUTH Authentication required.\r\n"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(b"*-1\r\n*-5\r\n*0\r\n*1\r\n$4\r\nPING\r\n")
        s.settimeout(5)
        out = b""
        while len(out) < len(pong):
            chunk = s.recv(100)
            assert chunk, "closed"
            out += chunk
        assert out == pong
        s.sendall(b"*0\r\n*1\r\n$4\r\nQUIT\r\n")   # still open: the skipped requests were no errors
        assert read_until_closed(s, 5) == (b"+OK\r\n", True)
    assert_serving(srv, password)


# -- item 8 (logging) / brief item 5 ------------------------------------------------------------------
def _protocol_error_count(srv, password):
    with srv.client(password=password) as c:
        return c.info("stats")["protocol_errors"]


def test_protocol_errors_are_counted_and_logged_rate_limited(server_factory):
    srv = server_factory("--requirepass", PASSWORD, "--loglevel", "debug", password=PASSWORD)
    n = 40
    for i in range(n):
        assert exchange(srv.port, b"*1\r\n:%d\r\n" % i)[0] == b"-ERR Protocol error: expected '$', got ':'\r\n"
    wait_until(lambda: _protocol_error_count(srv, PASSWORD) == n, 10, what="protocol_errors counted")
    lines = [ln for ln in srv.read_log().splitlines() if "Protocol error" in ln]
    assert 1 <= len(lines) <= 3, lines   # one a second at most (the burst takes well under 2 s)
    assert " D durakv.server: Protocol error (Protocol error: expected '$', got ':') from client: id=" in lines[0]
    # A later one, a second on, is logged again and says how many were left out.

    def counted_line_logged():
        exchange(srv.port, b"*1\r\n+x\r\n")
        return any("more since the last such line, not logged" in ln for ln in srv.read_log().splitlines())
    wait_until(counted_line_logged, 10, interval_s=0.05, what="a line counting the suppressed errors")
    assert_no_traceback(srv)


def test_protocol_errors_are_not_logged_at_notice(server_factory):
    srv = server_factory("--requirepass", PASSWORD, password=PASSWORD)
    for junk in (b"*1\r\nX\r\n", b"*1\r\n$-1\r\n", b"*1\r\n:5\r\n", b"*11\r\n", b'GET "unbalanced\r\n'):
        assert exchange(srv.port, junk)[0].startswith(b"-ERR Protocol error: ")
    wait_until(lambda: _protocol_error_count(srv, PASSWORD) == 5, 10, what="protocol_errors counted")
    log = srv.read_log()
    assert "rotocol error" not in log, log[-2000:]
    assert_no_traceback(srv)
