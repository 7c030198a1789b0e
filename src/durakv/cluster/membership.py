"""A node's own side of cluster membership: its key pair, its node id, and what `durakv cluster create` (or
`add-node`) told it when it joined, kept in its data directory across restarts (as Valkey keeps nodes.conf).

    DIR/node-id              the 40-hex node id (cluster/identity.py)
    DIR/cluster/node.nk      the node's NATS key pair seed, made at first start; it never leaves this file (0600)
    DIR/cluster/node.creds   the JWT the operator minted for this node's public key, with the seed (0600)
    DIR/cluster/member.json  {"format", "cluster_id", "shard", "nats": [urls]}

A node that has not joined serves `DURAKV IDENTITY` (what `cluster create` needs to place it: its id, AZ,
addresses and public key) and waits; `DURAKV JOIN` (commands/cluster_admin.py) hands it its shard and JWT.
A node started with `--journal-nats-creds FILE` (an identity the operator issued ahead of time,
`durakv cluster issue-node`) and `--shard` is a member from its start.

Secrets are written 0600 before their content and never logged.
"""

import json
import os

from . import natsnames as nn
from .identity import persistent_node_id
from .natsauth import AuthError, Key, creds_text, decode_jwt, read_creds
from .secrets import FORMAT, _write_private


class MembershipError(Exception):
    pass


class Membership:
    def __init__(self, data_dir, configured_node_id=""):
        self.data_dir = os.path.abspath(str(data_dir))
        self.dir = os.path.join(self.data_dir, "cluster")
        self.node_id = persistent_node_id(self.data_dir, configured_node_id)
        self.member = None           # member.json's content once joined
        self._key = None
        try:
            with open(os.path.join(self.dir, "member.json"), encoding="utf-8") as f:
                self.member = json.load(f)
        except FileNotFoundError:
            pass
        except ValueError as exc:
            raise MembershipError("%s is damaged: %s" % (os.path.join(self.dir, "member.json"), exc)) from None

    # -- the key pair ------------------------------------------------------------------------------------------
    @property
    def key(self) -> Key:
        """The node's key pair, made (0600) at first use."""
        if self._key is None:
            path = os.path.join(self.dir, "node.nk")
            try:
                with open(path, "rb") as f:
                    self._key = Key(f.read())
            except FileNotFoundError:
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                key = Key.new("user")
                _write_private(path, key.seed + b"\n")
                self._key = key
            except AuthError as exc:
                raise MembershipError("%s is not an nkey seed: %s" % (path, exc)) from None
        return self._key

    @property
    def public_key(self) -> str:
        return self.key.public

    # -- membership --------------------------------------------------------------------------------------------
    @property
    def joined(self) -> bool:
        return self.member is not None

    @property
    def shard(self):
        return self.member["shard"] if self.member else None

    @property
    def cluster_id(self):
        return self.member["cluster_id"] if self.member else None

    @property
    def nats_servers(self) -> list:
        return list(self.member.get("nats") or []) if self.member else []

    @property
    def creds_path(self) -> str:
        return os.path.join(self.dir, "node.creds")

    def check_join(self, doc: dict):
        """The JOIN document, validated (MembershipError with the reason otherwise)."""
        if not isinstance(doc, dict):
            raise MembershipError("the join document is not an object")
        unknown = set(doc) - {"format", "cluster_id", "shard", "nats", "jwt", "operator"}
        if unknown:
            raise MembershipError("unknown join fields: %s" % ", ".join(sorted(unknown)))
        fmt = doc.get("format")
        if fmt != FORMAT:
            raise MembershipError("the cluster is of format %r and this node (durakv format %d) cannot join it: "
                                  "upgrade or downgrade one of them (docs/operations.md, upgrades)" % (fmt, FORMAT))
        cid = doc.get("cluster_id")
        if not isinstance(cid, str) or not 1 <= len(cid) <= 64:
            raise MembershipError("cluster_id must be a string of 1..64 characters")
        try:
            shard = nn.check_shard_name(doc.get("shard"))
        except ValueError as exc:
            raise MembershipError(str(exc)) from None
        nats = doc.get("nats")
        if (not isinstance(nats, list) or not 1 <= len(nats) <= 64
                or not all(isinstance(u, str) and 0 < len(u) < 512 for u in nats)):
            raise MembershipError("nats must be a list of 1..64 server URLs")
        jwt = doc.get("jwt")
        if not isinstance(jwt, str) or len(jwt) > 16384:
            raise MembershipError("jwt must be a string")
        try:
            claims = decode_jwt(jwt)
        except AuthError as exc:
            raise MembershipError("the JWT does not verify: %s" % exc) from None
        if claims.get("sub") != self.public_key:
            raise MembershipError("the JWT is for %s, not for this node's key %s" % (claims.get("sub"),
                                                                                   self.public_key))
        if self.member is not None and (self.member["cluster_id"] != cid or self.member["shard"] != shard):
            raise MembershipError("this node is already a member of cluster %s (shard %s)"
                                  % (self.member["cluster_id"], self.member["shard"]))
        return {"format": fmt, "cluster_id": cid, "shard": shard, "nats": nats}, jwt

    def join(self, doc: dict):
        """Keeps what JOIN said (fsynced before it returns): the node is a member from now on."""
        member, jwt = self.check_join(doc)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        _write_private(self.creds_path, creds_text(jwt, self.key.seed))
        _write_private(os.path.join(self.dir, "member.json"), json.dumps(member, indent=2) + "\n")
        self.member = member
        return member

    def adopt_creds(self, creds_file, shard, nats_servers):
        """A member by an identity issued ahead of time (--journal-nats-creds): nothing is written."""
        try:
            with open(creds_file, encoding="utf-8") as f:
                read_creds(f.read())
        except OSError as exc:
            raise MembershipError("journal-nats-creds %s: %s" % (creds_file, exc.strerror or exc)) from None
        except AuthError as exc:
            raise MembershipError("journal-nats-creds %s: %s" % (creds_file, exc)) from None
        self.member = {"format": FORMAT, "cluster_id": "", "shard": nn.check_shard_name(shard),
                       "nats": list(nats_servers)}
        self._static_creds = os.path.abspath(creds_file)

    def creds(self) -> str:
        return getattr(self, "_static_creds", None) or self.creds_path
