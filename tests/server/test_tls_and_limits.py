"""TLS with a generated certificate; limits and malformed input answered with errors while other
clients keep being served."""

import socket
import subprocess

import pytest
import valkey

from conftest import free_port, wait_until


def _make_cert(tmp_path):
    key = tmp_path / "server.key"
    crt = tmp_path / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(crt), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return crt, key


def test_tls_port(server_factory, tmp_path):
    crt, key = _make_cert(tmp_path)
    tls_port = free_port()
    srv = server_factory("--tls-port", str(tls_port), "--tls-cert-file", str(crt), "--tls-key-file", str(key),
                         "--tls-auth-clients", "no")
    c = valkey.Valkey(host="127.0.0.1", port=tls_port, ssl=True, ssl_ca_certs=str(crt), ssl_cert_reqs="required",
                      socket_timeout=10)
    assert c.set("tls", "yes")
    assert c.get("tls") == b"yes"
    c3 = valkey.Valkey(host="127.0.0.1", port=tls_port, ssl=True, ssl_ca_certs=str(crt), protocol=3)
    assert c3.get("tls") == b"yes"
    c.close()
    c3.close()
    # Plain TCP on the normal port still works alongside.
    with srv.client() as plain:
        assert plain.get("tls") == b"yes"
    # A plaintext client on the TLS port is refused without disturbing the server.
    with socket.create_connection(("127.0.0.1", tls_port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        s.settimeout(5)
        try:
            data = s.recv(100)
        except (ConnectionResetError, socket.timeout):
            data = b""
        assert b"PONG" not in data
    with srv.client() as plain:
        assert plain.ping()


def _raw_exchange(port, payload, timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        out = b""
        s.settimeout(timeout)
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out


@pytest.mark.parametrize("payload, expected", [
    (b"*a\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$-2\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b'SET a "unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
])
def test_malformed_input_gets_error_and_close(shared_server, payload, expected):
    other = shared_server.client()
    other.set("alive", "1")
    out = _raw_exchange(shared_server.port, payload)
    assert out == expected
    assert other.get("alive") == b"1"  # everyone else keeps being served
    other.close()


def test_proto_max_bulk_len(server_factory):
    srv = server_factory("--proto-max-bulk-len", "1mb")
    out = _raw_exchange(srv.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n" + b"x" * 100000)
    assert out == b"-ERR Protocol error: invalid bulk length\r\n"
    with srv.client() as c:
        assert c.set("k", "x" * 1000)


def test_big_value_within_limits(shared_server):
    c = shared_server.client()
    value = b"v" * (8 * 1024 * 1024)
    assert c.set("big", value)
    assert c.get("big") == value
    c.close()


def test_unauthenticated_limits(server_factory):
    srv = server_factory("--requirepass", "pw", password="pw")
    out = _raw_exchange(srv.port, b"*20\r\n" + b"$1\r\na\r\n" * 20)
    assert out.startswith(b"-ERR Protocol error: unauthenticated multibulk length")


def test_maxclients(server_factory):
    srv = server_factory("--maxclients", "3")
    held = [srv.client() for _ in range(3)]
    for c in held:
        c.ping()
    out = _raw_exchange(srv.port, b"PING\r\n")
    assert out == b"-ERR max number of clients reached\r\n"
    held[0].close()
    wait_until(lambda: _raw_exchange(srv.port, b"PING\r\n", timeout=0.5).startswith(b"+PONG"), 10,
               what="a slot frees up")
    for c in held[1:]:
        c.close()


def test_pipelining_many_commands_in_one_write(shared_server):
    payload = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n" % (len(k), k)
                       for k in (b"p%d" % i for i in range(2000)))
    payload += b"*2\r\n$3\r\nGET\r\n$5\r\np1999\r\n"
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=10) as s:
        s.sendall(payload)
        expected = b"+OK\r\n" * 2000 + b"$1\r\nv\r\n"
        out = b""
        s.settimeout(10)
        while len(out) < len(expected):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    assert out == expected


def test_inline_commands(shared_server):
    out = _raw_exchange(shared_server.port, b"SET inl 'a b'\r\nGET inl\r\nQUIT\r\n")
    assert out == b"+OK\r\n$3\r\na b\r\n+OK\r\n"


def test_limits_lift_after_auth(server_factory):
    srv = server_factory("--requirepass", "pw", password="pw")
    big = b"v" * 100000
    payload = (b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
               + b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(big), big)
               + b"*13\r\n$4\r\nMSET\r\n" + b"$1\r\na\r\n$1\r\n1\r\n" * 6)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(payload)
        s.settimeout(5)
        out = b""
        while out.count(b"+OK\r\n") < 3:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    assert out == b"+OK\r\n+OK\r\n+OK\r\n"
    with srv.client(password="pw") as c:
        assert c.strlen("big") == 100000
