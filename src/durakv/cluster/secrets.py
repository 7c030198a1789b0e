"""The operator's directory of one cluster: its NATS trust chain, the operator's own identities, the route
password and the RESP password, and (with TLS) its CA. Made once by `durakv cluster init --secrets DIR`; every
`durakv cluster` operation reads it. It never leaves the operator's machine: the NATS servers get a
configuration made from it (`durakv cluster nats-config`), the nodes get their JWT from `cluster create`.

    DIR/                       0700
      cluster.json             the cluster's id, format, NATS URLs, account public keys, revocations
      keys/operator.nk         the operator's seed (signs the account JWTs)        0600
      keys/account.nk          the DURAKV account's seed                           0600
      keys/signing.nk          the DURAKV account's signing key (signs user JWTs)   0600
      keys/system.nk           the SYS account's seed                              0600
      operator.creds           the operator tools' NATS user (DURAKV account)      0600
      system.creds             the operator tools' NATS user in SYS (monitoring, account updates)  0600
      route.pass               what NATS servers present to each other on routes   0600
      resp.pass                the cluster's password for clients and tools (the default user's)  0600
      tls/                     ca.crt, ca.key, <host>.crt/.key (with --tls)

Nothing here is logged or printed; files are written 0600 before their content.
"""

import json
import os
import secrets as _random
import time

from . import natsauth
from .natsauth import Key
from .passwords import SecretsError, new_password

FORMAT = 2            # the cluster format this version writes and reads (cluster/versioning in docs/operations.md)
ACCOUNT = "DURAKV"
UNIQUE_TAG = "az:"     # NATS server tag prefix: JetStream places a stream's replicas in distinct AZs
SYSTEM = "SYS"


def _write_private(path, text):
    """Writes a secret: created 0600 (never world-readable, not even for a moment), replaced atomically."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode() if isinstance(text, str) else text)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


class ClusterSecrets:
    def __init__(self, dir):
        self.dir = os.path.abspath(str(dir))
        try:
            self.meta = json.loads(_read(os.path.join(self.dir, "cluster.json")))
        except FileNotFoundError:
            raise SecretsError("%s is not a cluster's secrets directory (no cluster.json): make one with "
                               "`durakv cluster init --secrets %s`" % (self.dir, self.dir)) from None
        if self.meta.get("format") != FORMAT:
            raise SecretsError("%s holds a cluster of format %r; this durakv reads format %d"
                               % (self.dir, self.meta.get("format"), FORMAT))

    # -- making ------------------------------------------------------------------------------------------------
    @classmethod
    def init(cls, dir, nats_urls=(), tls=False, resp_password=None) -> "ClusterSecrets":
        """Makes the directory (refuses to overwrite one): new keys, the operator's identities, passwords."""
        dir = os.path.abspath(str(dir))
        if os.path.exists(os.path.join(dir, "cluster.json")):
            raise SecretsError("%s already holds a cluster's secrets" % dir)
        os.makedirs(os.path.join(dir, "keys"), mode=0o700, exist_ok=True)
        os.chmod(dir, 0o700)
        keys = {name: Key.new(kind) for name, kind in (("operator", "operator"), ("account", "account"),
                                                      ("signing", "account"), ("system", "account"))}
        for name, key in keys.items():
            _write_private(os.path.join(dir, "keys", name + ".nk"), key.seed + b"\n")
        _write_private(os.path.join(dir, "route.pass"), new_password() + "\n")
        _write_private(os.path.join(dir, "resp.pass"), (resp_password or new_password()) + "\n")
        meta = {"format": FORMAT, "cluster_id": _random.token_hex(20), "created": int(time.time()),
                "nats": list(nats_urls), "tls": bool(tls), "operator": keys["operator"].public,
                "account": keys["account"].public, "system_account": keys["system"].public,
                "revocations": {}}
        _write_private(os.path.join(dir, "cluster.json"), json.dumps(meta, indent=2) + "\n")
        s = cls(dir)
        s._mint_operator_users()
        if tls:
            from .tls import make_ca
            make_ca(os.path.join(dir, "tls"))
        return s

    def _mint_operator_users(self):
        for fname, account, signer, perms in (
                ("operator.creds", self.account_public, self._key("signing"), natsauth.operator_permissions()),
                ("system.creds", self.system_public, self._key("system"), natsauth.system_permissions())):
            user = Key.new("user")
            jwt = natsauth.user_jwt(signer, account, user.public, fname.split(".")[0], perms)
            _write_private(os.path.join(self.dir, fname), natsauth.creds_text(jwt, user.seed))

    def region_link_creds(self, source_domain, shards, follower_domain=None) -> str:
        """The credentials file of the leafnode link from a follower region to `source_domain`'s region (made
        again for each shard list, 0600, in this directory: it is a secret like operator.creds)."""
        path = os.path.join(self.dir, "region-link-%s.creds" % natsauth.nn.check_domain(source_domain))
        user = Key.new("user")
        jwt = natsauth.user_jwt(self._key("signing"), self.account_public, user.public, "region-link-" + source_domain,
                                natsauth.region_link_permissions(source_domain, shards, follower_domain))
        _write_private(path, natsauth.creds_text(jwt, user.seed))
        return path

    def save(self):
        _write_private(os.path.join(self.dir, "cluster.json"), json.dumps(self.meta, indent=2) + "\n")

    # -- what it holds -----------------------------------------------------------------------------------------
    def _key(self, name) -> Key:
        return Key(_read(os.path.join(self.dir, "keys", name + ".nk")).encode())

    @property
    def cluster_id(self) -> str:
        return self.meta["cluster_id"]

    @property
    def account_public(self) -> str:
        return self.meta["account"]

    @property
    def system_public(self) -> str:
        return self.meta["system_account"]

    @property
    def nats_urls(self) -> list:
        return list(self.meta.get("nats") or [])

    @property
    def tls(self) -> bool:
        return bool(self.meta.get("tls"))

    @property
    def operator_creds(self) -> str:
        return os.path.join(self.dir, "operator.creds")

    @property
    def system_creds(self) -> str:
        return os.path.join(self.dir, "system.creds")

    @property
    def route_password(self) -> str:
        return _read(os.path.join(self.dir, "route.pass")).strip()

    @property
    def resp_password(self) -> str:
        return _read(os.path.join(self.dir, "resp.pass")).strip()

    @property
    def tls_dir(self) -> str:
        return os.path.join(self.dir, "tls")

    @property
    def ca_file(self):
        return os.path.join(self.tls_dir, "ca.crt") if self.tls else None

    def host_cert(self, name, hosts) -> dict:
        """{"ca", "cert", "key"} for one host (its NATS server and durakv node), made on first use."""
        if not self.tls:
            raise SecretsError("this cluster was made without --tls")
        from .tls import issue_cert
        return issue_cert(self.tls_dir, name, list(hosts))

    def operator_cert(self) -> dict:
        """The operator tools' client certificate (NATS verifies every client's)."""
        return self.host_cert("operator", ["durakv-operator"])

    # -- JWTs --------------------------------------------------------------------------------------------------
    def operator_jwt(self) -> str:
        return natsauth.operator_jwt(self._key("operator"), self.system_public)

    def account_jwts(self) -> dict:
        """{account public key: JWT} of both accounts, the DURAKV one with its current revocations."""
        op = self._key("operator")
        return {self.system_public: natsauth.account_jwt(op, self.system_public, SYSTEM, jetstream=False),
                self.account_public: natsauth.account_jwt(op, self.account_public, ACCOUNT, jetstream=True,
                                                          signing_keys=[self._key("signing").public],
                                                          revocations=self.meta.get("revocations"))}

    def node_jwt(self, node_public: str, node_id: str, shard) -> str:
        """A node's identity for `shard` (its permissions: natsauth.node_permissions)."""
        if not node_public.startswith("U"):
            raise SecretsError("%r is not a node's public nkey" % node_public)
        issued = self.meta.setdefault("issued", {}).setdefault(node_id, [])
        if node_public not in issued:
            issued.append(node_public)
            self.save()
        return natsauth.user_jwt(self._key("signing"), self.account_public, node_public,
                                 "node %s shard %s" % (node_id, shard), natsauth.node_permissions(shard, node_id))

    def issued_keys(self, node_id) -> list:
        """The public keys this directory issued a node identity to, for node_id (a prefix of it will do)."""
        return [k for nid, keys in (self.meta.get("issued") or {}).items() if nid.startswith(node_id) for k in keys]

    def revoke(self, user_public: str) -> str:
        """Revokes a user (a dead machine's node) from now on; returns the DURAKV account's new JWT, which the
        caller pushes to the servers (cluster/admin.py)."""
        self.meta.setdefault("revocations", {})[user_public] = int(time.time())
        self.save()
        return self.account_jwts()[self.account_public]

    # -- NATS server configuration ----------------------------------------------------------------------------
    def nats_config(self, name, az, host, client_port, cluster_port, routes, store_dir, monitor=None,
                    cert=None, client_advertise=None, cluster_advertise=None, max_payload=None,
                    region=None) -> str:
        """A NATS server's whole configuration in operator mode: JetStream with fsync before ack, placement by
        AZ tag, routes with a password (and mutual TLS with cert), clients only with a JWT of this cluster (and
        a certificate of its CA with cert). routes: [host:port] of the other servers. monitor: host:port of the
        HTTP monitoring endpoint (keep it on loopback: it has no authentication). The text holds the route
        password: write it 0600.

        region (docs/multi-az.md, "A second region"): {"domain": its JetStream domain, "leaf_listen": host:port
        where a follower region's servers connect (region A), "leaf_remotes": [url] of region A's leafnode ports
        with "leaf_creds", the link's credentials file (region B)}. Each region is its own route cluster with its
        own JetStream domain and meta group; they meet only over the leafnode link."""
        q = json.dumps
        region = region or {}
        pw = self.route_password
        route_urls = ["nats-route://route:%s@%s" % (pw, r) for r in routes]
        tls = ""
        if cert:
            tls = ("tls {\n  cert_file: %s\n  key_file: %s\n  ca_file: %s\n  verify: true\n  timeout: 5\n}\n"
                   % (q(cert["cert"]), q(cert["key"]), q(cert["ca"])))
        preload = "\n".join("  %s: %s" % (k, v) for k, v in self.account_jwts().items())
        out = [
            "# durakv cluster %s: NATS server %s in %s (made by `durakv cluster nats-config`; holds the route "
            "password: keep it 0600)" % (self.cluster_id[:12], name, az),
            "server_name: %s" % q(name),
            "listen: %s" % q("%s:%d" % (host, client_port)),
        ]
        if monitor:
            out.append("http: %s" % q(monitor))
        out += ["server_tags: [%s]" % q(UNIQUE_TAG + az)]
        if client_advertise:
            out.append("client_advertise: %s" % q(client_advertise))
        out += [
            "# one journal entry is one message: allow big batches (NATS's ceiling is 64 MB)" if max_payload else "",
            "max_payload: %d" % max_payload if max_payload else "",
            "# clients: only identities this cluster's operator signed (operator mode)",
            "operator: %s" % self.operator_jwt(),
            "system_account: %s" % self.system_public,
            "# planned maintenance: `nats-server --signal ldm=<pid>` (SIGUSR2) hands the Raft leaderships over,",
            "# then the server leaves after this long (30 s is NATS's minimum)",
            "lame_duck_duration: \"30s\"",
            "lame_duck_grace_period: \"2s\"",
            "resolver: {\n  type: full\n  dir: %s\n  allow_delete: false\n  interval: \"2m\"\n  timeout: \"1.9s\"\n}"
            % q(os.path.join(store_dir, "jwt")),
            "resolver_preload: {\n%s\n}" % preload,
            tls.rstrip("\n"),
            "jetstream {",
            "  store_dir: %s" % q(store_dir),
            "  # fsync every write before it is acknowledged (the default syncs every 2 minutes and loses",
            "  # acknowledged writes on a coordinated power failure: Jepsen NATS 2.12.1, nats-server #7564)",
            "  sync_interval: always",
            "  # never place two replicas of a stream on servers with the same az: tag",
            "  unique_tag: %s" % q(UNIQUE_TAG),
            ("  # this region's own JetStream (its own meta group); the other region's API is $JS.<domain>.API"
             "\n  domain: %s" % q(region["domain"])) if region.get("domain") else "",
            "}",
            self._leafnode_config(region),
            "cluster {",
            # two regions' route clusters must not share a name (a leafnode between equal names is a loop)
            "  name: %s" % q("durakv-" + self.cluster_id[:12] + (
                "-" + region["domain"] if region.get("domain") else "")),
            "  listen: %s" % q("%s:%d" % (host, cluster_port)),
        ]
        if cluster_advertise:
            out.append("  advertise: %s" % q(cluster_advertise))
        out += [
            "  # a server joins the routes only with this password%s" % (" and a certificate of the cluster's CA"
                                                                      if cert else ""),
            "  authorization {\n    user: route\n    password: %s\n    timeout: 5\n  }" % q(pw),
        ]
        if cert:
            out.append("  tls {\n    cert_file: %s\n    key_file: %s\n    ca_file: %s\n    verify: true\n"
                       "    timeout: 5\n  }" % (q(cert["cert"]), q(cert["key"]), q(cert["ca"])))
        out += ["  routes: [", *("    %s" % q(u) for u in route_urls), "  ]", "}"]
        return "\n".join(line for line in out if line != "") + "\n"

    def _leafnode_config(self, region) -> str:
        """The leafnode block of a region's NATS server: region A listens (a link must present a JWT of this
        cluster's account, as every client does: operator mode has no anonymous leafnode); region B dials out
        with the link's credentials file, bound to the DURAKV account. Without either: no leafnode port."""
        q = json.dumps
        lines = []
        if region.get("leaf_listen"):
            lines.append("  # a follower region's servers connect here with the region link's JWT (no open port)")
            lines.append("  listen: %s" % q(region["leaf_listen"]))
        if region.get("leaf_remotes"):
            lines.append("  remotes: [\n    {\n      urls: [%s]\n      credentials: %s\n      account: %s\n"
                         "    }\n  ]" % (", ".join(q(u) for u in region["leaf_remotes"]), q(region["leaf_creds"]),
                                        q(self.account_public)))
        if not lines:
            return ""
        return "leafnodes {\n%s\n}" % "\n".join(lines)
