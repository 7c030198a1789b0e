"""TLS material of a cluster: one CA, and a certificate per host that its NATS server and durakv node present,
both as servers and as clients (mutual TLS: NATS verifies every client's and route's certificate).

Made with the openssl command line (Debian's openssl; the tool an operator would use), kept in a directory of
the operator's: ca.crt and ca.key (the CA everyone verifies against), and <name>.crt / <name>.key per host
(subject alternative names: the host's addresses and names). Clients of the cluster need only ca.crt
(memtier_benchmark --tls --cacert ca.crt, valkey-py ssl=True, ssl_ca_certs=ca.crt), plus a certificate of their
own where the server asks for one (tls-auth-clients yes). Key files are 0600.

`make_certs(dir)` is the local launcher's shortcut: DIR/tls with a CA and one certificate named `node` for
127.0.0.1 and localhost, which every local process presents.
"""

import ipaddress
import os
import re
import shutil
import ssl
import subprocess

from .processes import ProcessError

DAYS = 825
# ECDSA P-256 keys, not RSA: making an RSA-2048 key took 0.09-0.36 s of CPU per key on the 2-core machine against
# under 10 ms for P-256, and a TLS handshake's signature 0.77 ms against 0.03 ms (`openssl speed rsa2048
# ecdsap256`); every client this project documents (NATS, valkey-py, redis-cli, memtier, GLIDE, the Prometheus
# exporter) accepts them.
KEY_ARGS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


def tls_dir(cluster_dir) -> str:
    return os.path.join(os.path.abspath(str(cluster_dir)), "tls")


def paths(cluster_dir, name="node") -> dict:
    d = tls_dir(cluster_dir)
    return {"ca": os.path.join(d, "ca.crt"), "ca_key": os.path.join(d, "ca.key"),
            "cert": os.path.join(d, f"{name}.crt"), "key": os.path.join(d, f"{name}.key")}


def _openssl():
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ProcessError("TLS needs the openssl command (Debian: apt-get install openssl)")
    return openssl


def _run(args, cwd):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ProcessError("openssl %s failed: %s" % (args[1], proc.stderr.strip()[-500:]))


def make_ca(d, subject="durakv cluster CA") -> dict:
    """The CA in directory d (made once; reused when it exists): {"ca", "ca_key"}."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    ca, ca_key = os.path.join(d, "ca.crt"), os.path.join(d, "ca.key")
    if not (os.path.exists(ca) and os.path.exists(ca_key)):
        old = os.umask(0o077)
        try:
            _run([_openssl(), "req", "-x509", *KEY_ARGS, "-nodes", "-days", str(DAYS), "-subj",
                  "/CN=" + subject, "-keyout", ca_key, "-out", ca], d)
        finally:
            os.umask(old)
        os.chmod(ca_key, 0o600)
    return {"ca": ca, "ca_key": ca_key}


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def issue_cert(d, name, hosts) -> dict:
    """A certificate signed by d's CA for `hosts` (IP addresses and DNS names), usable as a server and a client
    certificate: {"ca", "cert", "key"} (made once; reused when it exists)."""
    if not _NAME.match(name):
        raise ValueError("certificate name %r: letters, digits, '.', '-', '_'" % name)
    ca = make_ca(d)
    cert, key = os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")
    if os.path.exists(cert) and os.path.exists(key):
        return {"ca": ca["ca"], "cert": cert, "key": key}
    sans = []
    for h in hosts:
        try:
            sans.append("IP:%s" % ipaddress.ip_address(h))
        except ValueError:
            if not re.match(r"[A-Za-z0-9.-]{1,253}\Z", h):
                raise ValueError("host %r is neither an IP address nor a DNS name" % h) from None
            sans.append("DNS:%s" % h)
    if not sans:
        raise ValueError("a certificate needs at least one host")
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n" % ",".join(sans))
    csr = os.path.join(d, f"{name}.csr")
    openssl = _openssl()
    old = os.umask(0o077)
    try:
        _run([openssl, "req", *KEY_ARGS, "-nodes", "-subj", "/CN=%s" % hosts[0], "-keyout", key,
              "-out", csr], d)
        _run([openssl, "x509", "-req", "-in", csr, "-CA", ca["ca"], "-CAkey", ca["ca_key"], "-CAcreateserial",
              "-days", str(DAYS), "-extfile", ext, "-out", cert], d)
    finally:
        os.umask(old)
    os.chmod(key, 0o600)
    for leftover in (csr, ext):
        os.unlink(leftover)
    return {"ca": ca["ca"], "cert": cert, "key": key}


def make_certs(cluster_dir) -> dict:
    """The local launcher's CA and one certificate for 127.0.0.1 and localhost, in DIR/tls: {"ca", "ca_key",
    "cert", "key"}."""
    d = tls_dir(cluster_dir)
    issued = issue_cert(d, "node", ["127.0.0.1", "localhost"])
    return {**issued, "ca_key": os.path.join(d, "ca.key")}


def client_context(ca_file, cert_file=None, key_file=None) -> ssl.SSLContext:
    """What a client of the cluster (and durakv's own tooling) verifies servers with, presenting its own
    certificate when given (NATS and durakv nodes with tls-auth-clients ask for one)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def node_client_context(config) -> ssl.SSLContext:
    """How a node reaches another node over TLS (slot migration, MIGRATE in a TLS cluster): the peer verified
    against the cluster's CA (tls-ca-cert-file / tls-ca-cert-dir; the system's CAs only when neither is set) and
    its name checked against the address it is reached at; this node's own certificate presented, as Valkey
    presents tls-cert-file when it has no tls-client-cert-file, so a peer that asks clients for certificates
    (tls-auth-clients yes, Valkey's default) accepts it."""
    ctx = ssl.create_default_context(cafile=config["tls-ca-cert-file"] or None,
                                     capath=config["tls-ca-cert-dir"] or None)
    if config["tls-cert-file"]:
        ctx.load_cert_chain(config["tls-cert-file"], config["tls-key-file"] or None,
                            password=config["tls-key-file-pass"] or None)
    return ctx
