"""The TLS material durakv makes (durakv/cluster/tls.py): ECDSA P-256 keys, certificates a client verifies by the
CA and the host's address, key files only the owner reads, and material made once and then reused."""

import os
import socket
import ssl
import subprocess
import threading

from durakv.cluster import tls


def _text(*args):
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_keys_are_p256_and_the_certificate_serves_and_authenticates_a_client(tmp_path):
    d = str(tmp_path / "tls")
    issued = tls.issue_cert(d, "node", ["127.0.0.1", "localhost"])
    for key in (issued["key"], os.path.join(d, "ca.key")):
        assert oct(os.stat(key).st_mode & 0o777) == "0o600", key
        text = _text("pkey", "-in", key, "-noout", "-text")
        assert "ASN1 OID: prime256v1" in text and "NIST CURVE: P-256" in text, text[:200]
    cert = _text("x509", "-in", issued["cert"], "-noout", "-text")
    assert "id-ecPublicKey" in cert and "ecdsa-with-SHA256" in cert
    assert "IP Address:127.0.0.1" in cert and "DNS:localhost" in cert
    assert "TLS Web Server Authentication, TLS Web Client Authentication" in cert
    assert not os.path.exists(os.path.join(d, "node.csr")) and not os.path.exists(os.path.join(d, "node.ext"))

    # a real handshake over a socket pair, both sides verifying: the server asks for the client's certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(issued["cert"], issued["key"])
    server_ctx.load_verify_locations(issued["ca"])
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = tls.client_context(issued["ca"], issued["cert"], issued["key"])
    a, b = socket.socketpair()
    seen = {}

    def serve():
        with server_ctx.wrap_socket(a, server_side=True) as s:
            seen["peer"] = s.getpeercert()
            s.sendall(s.recv(5).upper())
    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="127.0.0.1") as c:
            c.sendall(b"hello")
            assert c.recv(5) == b"HELLO"
    finally:
        t.join(10)
    assert ("commonName", "127.0.0.1") in [kv for rdn in seen["peer"]["subject"] for kv in rdn]

    # a client that trusts another CA refuses the server
    other = tls.make_ca(str(tmp_path / "other"))
    a, b = socket.socketpair()
    t = threading.Thread(target=lambda: _quiet_accept(server_ctx, a))
    t.start()
    try:
        try:
            tls.client_context(other["ca"]).wrap_socket(b, server_hostname="127.0.0.1").close()
            raise AssertionError("a certificate of another CA was accepted")
        except ssl.SSLCertVerificationError:
            pass
    finally:
        b.close()
        t.join(10)


def _quiet_accept(ctx, sock):
    try:
        ctx.wrap_socket(sock, server_side=True).close()
    except (ssl.SSLError, OSError):
        pass
    finally:
        sock.close()


def test_material_is_made_once(tmp_path):
    d = str(tmp_path / "tls")
    first = tls.issue_cert(d, "node", ["127.0.0.1"])
    stat = {p: os.stat(first[p]).st_mtime_ns for p in ("ca", "cert", "key")}
    again = tls.issue_cert(d, "node", ["127.0.0.1"])
    assert again == first and {p: os.stat(first[p]).st_mtime_ns for p in ("ca", "cert", "key")} == stat
    second = tls.issue_cert(d, "machine-b", ["10.0.2.10"])
    assert second["ca"] == first["ca"]
    assert "IP Address:10.0.2.10" in _text("x509", "-in", second["cert"], "-noout", "-text")
