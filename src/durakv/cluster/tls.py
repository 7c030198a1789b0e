"""TLS material for a local cluster (`durakv cluster up --tls`): a CA and one certificate for 127.0.0.1.

Made with the openssl command line (Debian's openssl; the same tool an operator would use), kept in
DIR/tls/: ca.crt and ca.key (the CA clients verify against), node.crt and node.key (every durakv node and
NATS server presents it; its subject alternative names are 127.0.0.1 and localhost). Clients need only
ca.crt: memtier_benchmark --tls --cacert DIR/tls/ca.crt, valkey-py ssl=True, ssl_ca_certs=DIR/tls/ca.crt.
"""

import os
import shutil
import ssl
import subprocess

from .nats_procs import ProcessError

DAYS = 825


def tls_dir(cluster_dir) -> str:
    return os.path.join(os.path.abspath(str(cluster_dir)), "tls")


def paths(cluster_dir) -> dict:
    d = tls_dir(cluster_dir)
    return {"ca": os.path.join(d, "ca.crt"), "ca_key": os.path.join(d, "ca.key"),
            "cert": os.path.join(d, "node.crt"), "key": os.path.join(d, "node.key")}


def _run(args, cwd):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ProcessError("openssl %s failed: %s" % (args[1], proc.stderr.strip()[-500:]))


def make_certs(cluster_dir) -> dict:
    """The CA and node certificate of the cluster (made once; reused when they exist)."""
    p = paths(cluster_dir)
    if all(os.path.exists(p[k]) for k in ("ca", "cert", "key")):
        return p
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ProcessError("--tls needs the openssl command (Debian: apt-get install openssl)")
    d = tls_dir(cluster_dir)
    os.makedirs(d, exist_ok=True)
    _run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(DAYS), "-subj",
          "/CN=durakv local cluster CA", "-keyout", p["ca_key"], "-out", p["ca"]], d)
    ext = os.path.join(d, "node.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n")
    csr = os.path.join(d, "node.csr")
    _run([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", p["key"],
          "-out", csr], d)
    _run([openssl, "x509", "-req", "-in", csr, "-CA", p["ca"], "-CAkey", p["ca_key"], "-CAcreateserial",
          "-days", str(DAYS), "-extfile", ext, "-out", p["cert"]], d)
    for f in (p["key"], p["ca_key"]):
        os.chmod(f, 0o600)
    return p


def client_context(ca_file) -> ssl.SSLContext:
    """What a client of the cluster (and durakv's own tooling) verifies servers with."""
    return ssl.create_default_context(cafile=ca_file)   # the certificate names 127.0.0.1 and localhost


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
