"""NATS identities of a durakv cluster: NATS's operator mode, with JWTs.

Why operator mode (and not users listed in each server's config): a node gets its identity when
`durakv cluster create` (or `add-node`) assigns it to a shard, and the identity's permissions name that shard.
With JWTs the NATS servers need to know only the operator and the accounts; a user's JWT, signed by the
account's signing key, carries its permissions and is checked by whichever server the user connects to. So a
node or an operator tool gets an identity without any NATS server's configuration changing, and a dead
machine's identity is revoked by pushing the account's new JWT to the servers (`$SYS.REQ.CLAIMS.UPDATE`).

The trust chain: operator key -> signs the operator JWT (self) and the account JWTs (SYS, for the servers'
own traffic and monitoring requests; DURAKV, with JetStream, where everything of durakv lives); the DURAKV
account's signing key -> signs the user JWTs. A node makes its own key pair at first start and never sends the
seed anywhere: `cluster create` mints a JWT for its public key and hands the node that JWT, which is no secret
without the seed (a server asks the client to sign a nonce).

Least privilege (`node_permissions`): a node may publish only to its own shard's journal subject, its own
shard's keys of the coordination bucket (lease, failover, settings, state) and the cluster's `auth` key, and
the JetStream API of its own shard's stream and snapshot bucket; it may read the coordination bucket, and
subscribe only to its own inbox and the bus subjects of its shard. It cannot create, update or delete a
stream, delete a message, or write the topology. What NATS permissions cannot express, and is therefore the
residual risk of a stolen node identity (docs/security.md): purging its own shard's journal and snapshots (a
purge of a prefix, which compacting the journal below a snapshot needs, is the same API as a purge of all),
writing its own shard's journal (any node of a shard may become its primary), forcing a leader election of its
own shard's journal stream (a new primary moves the leader next to itself), and changing the cluster's
users (`auth`: ACL SETUSER on any node applies to every shard, as MemoryDB's ACLs do).

Pure: bytes in, text out (pynacl through `nkeys`, the NATS project's own key library, which nats-py uses to
sign the server's nonce).
"""

import base64
import hashlib
import json
import os
import time

from . import natsnames as nn

KIND_PREFIX = {"operator": 14 << 3, "account": 0, "user": 20 << 3}
JWT_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
NO_LIMIT = -1


class AuthError(ValueError):
    pass


# -- keys -----------------------------------------------------------------------------------------------------

class Key:
    """An nkey pair (or a public key only). `seed` is the secret (bytes, 'S...'); `public` the public key."""

    __slots__ = ("seed", "public", "_kp")

    def __init__(self, seed: bytes = None, public: str = None):
        import nkeys
        self._kp = None
        if seed is not None:
            seed = seed.strip() if isinstance(seed, bytes) else seed.strip().encode()
            try:
                self._kp = nkeys.from_seed(bytearray(seed))
            except Exception as exc:  # noqa: BLE001 - nkeys raises its own error types and binascii's
                raise AuthError("not an nkey seed: %s" % (exc,)) from None
            self.seed = seed
            self.public = self._kp.public_key.decode()
        else:
            self.seed = None
            self.public = public

    @classmethod
    def new(cls, kind: str) -> "Key":
        import nkeys
        return cls(nkeys.encode_seed(os.urandom(32), KIND_PREFIX[kind]))

    @property
    def kind(self) -> str:
        return {"O": "operator", "A": "account", "U": "user"}.get(self.public[:1], "unknown")

    def sign(self, data: bytes) -> bytes:
        if self._kp is None:
            raise AuthError("a public key cannot sign")
        return self._kp.sign(data)

    def verify(self, data: bytes, signature: bytes) -> bool:
        """Whether signature is this public key's ed25519 signature of data. The key's text is base32 of a
        prefix byte, the 32-byte key and a CRC-16 (nkeys' encoding), checked before use."""
        import nacl.exceptions
        import nacl.signing
        import nkeys
        try:
            raw = base64.b32decode(self.public + "=" * (-len(self.public) % 8))
        except (ValueError, TypeError):
            return False
        if len(raw) != 35 or nkeys.crc16_checksum(raw[:-2]) != raw[-2:]:
            return False
        try:
            nacl.signing.VerifyKey(raw[1:33]).verify(data, signature)
            return True
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            return False


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def encode_jwt(issuer: Key, subject: str, name: str, claim_type: str, nats: dict, issued_at: int = None,
               expires: int = 0) -> str:
    """A NATS v2 JWT: header, claims (the registered ones plus `nats`), signed by issuer (ed25519-nkey).
    `jti` is the hash of the registered claims, as nats-io/jwt computes it."""
    base = {"iat": int(time.time()) if issued_at is None else int(issued_at), "iss": issuer.public,
            "name": name, "sub": subject}
    if expires:
        base["exp"] = int(expires)
    ordered = {k: base[k] for k in ("exp", "iat", "iss", "name", "sub") if k in base}
    jti = base64.b32encode(hashlib.new("sha512_256", _json(ordered)).digest()).rstrip(b"=").decode()
    claims = {"jti": jti, **ordered, "nats": {**nats, "type": claim_type, "version": 2}}
    signing_input = "%s.%s" % (_b64(_json(JWT_HEADER)), _b64(_json(claims)))
    return "%s.%s" % (signing_input, _b64(issuer.sign(signing_input.encode())))


def decode_jwt(token: str, issuer_public: str = None) -> dict:
    """The claims of a JWT, its signature checked against its `iss` (or issuer_public when given)."""
    try:
        head, body, sig = token.strip().split(".")
        header = json.loads(_unb64(head))
        claims = json.loads(_unb64(body))
        signature = _unb64(sig)
    except (ValueError, TypeError) as exc:
        raise AuthError("not a JWT: %s" % exc) from None
    if header.get("alg") != JWT_HEADER["alg"]:
        raise AuthError("JWT algorithm %r is not %s" % (header.get("alg"), JWT_HEADER["alg"]))
    issuer = issuer_public or claims.get("iss")
    if not isinstance(issuer, str) or not Key(public=issuer).verify(("%s.%s" % (head, body)).encode(), signature):
        raise AuthError("the JWT's signature does not verify against %s" % issuer)
    return claims


# -- the claims durakv mints ------------------------------------------------------------------------------------

_UNLIMITED = {"subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT, "imports": NO_LIMIT, "exports": NO_LIMIT,
              "wildcards": True, "conn": NO_LIMIT, "leaf": NO_LIMIT}
_JETSTREAM_UNLIMITED = {"mem_storage": NO_LIMIT, "disk_storage": NO_LIMIT, "streams": NO_LIMIT,
                        "consumer": NO_LIMIT}


def operator_jwt(operator: Key, system_account: str, name="durakv") -> str:
    return encode_jwt(operator, operator.public, name, "operator", {"system_account": system_account})


def account_jwt(operator: Key, account: str, name: str, jetstream: bool, signing_keys=(), revocations=None,
                issued_at=None) -> str:
    limits = dict(_UNLIMITED)
    if jetstream:
        limits.update(_JETSTREAM_UNLIMITED)
    nats = {"limits": limits}
    if signing_keys:
        nats["signing_keys"] = list(signing_keys)
    if revocations:
        nats["revocations"] = {k: int(v) for k, v in sorted(revocations.items())}
    return encode_jwt(operator, account, name, "account", nats, issued_at=issued_at)


def user_jwt(signer: Key, account: str, user: str, name: str, permissions: dict) -> str:
    """A user of `account`, signed by one of its signing keys (or by the account key itself)."""
    if not user.startswith("U"):
        raise AuthError("%r is not a user public key" % user)
    nats = {**permissions, "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT}
    if signer.public != account:
        nats["issuer_account"] = account
    return encode_jwt(signer, user, name, "user", nats)


def creds_text(jwt: str, seed: bytes) -> str:
    """The standard .creds file (what `nsc` writes and nats-py's user_credentials reads)."""
    seed = seed.decode() if isinstance(seed, bytes) else seed
    return ("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            "-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n" % (jwt.strip(), seed.strip()))


def read_creds(text: str):
    """(jwt, seed) of a .creds file's text."""
    jwt = seed = None
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if "BEGIN NATS USER JWT" in line and i + 1 < len(lines):
            jwt = lines[i + 1]
        if "BEGIN USER NKEY SEED" in line and i + 1 < len(lines):
            seed = lines[i + 1]
    if not jwt or not seed:
        raise AuthError("not a NATS credentials file (no JWT or no seed)")
    return jwt, seed.encode()


# -- permissions -----------------------------------------------------------------------------------------------

def _stream_api(stream: str, purge: bool) -> list:
    """The JetStream API one stream's reader-writer needs: info, reads (direct and by sequence), ordered
    consumers (create/info/delete and their flow control), and purge when `purge`."""
    subjects = ["$JS.API.STREAM.INFO.%s" % stream, "$JS.API.STREAM.MSG.GET.%s" % stream,
                "$JS.API.DIRECT.GET.%s" % stream, "$JS.API.DIRECT.GET.%s.>" % stream,
                "$JS.API.CONSUMER.CREATE.%s" % stream, "$JS.API.CONSUMER.CREATE.%s.>" % stream,
                "$JS.API.CONSUMER.INFO.%s.>" % stream, "$JS.API.CONSUMER.DELETE.%s.>" % stream,
                "$JS.FC.%s.>" % stream]
    if purge:
        subjects.append("$JS.API.STREAM.PURGE.%s" % stream)
    return subjects


def node_permissions(shard, node_id: str) -> dict:
    """What one durakv node of `shard` may do (the module's docstring says why each)."""
    shard = nn.check_shard_name(shard)
    bucket = nn.snapshot_bucket(shard)
    kv_stream = "KV_%s" % nn.LEASES_BUCKET
    # STREAM.NAMES: nats-py's object store finds a bucket's stream by subject (names only, no content)
    pub = [nn.journal_subject(shard), "$JS.API.INFO", "$JS.API.STREAM.NAMES"]
    pub += _stream_api(nn.journal_stream(shard), purge=True)
    # a new primary moves its journal's stream leader to the NATS server it is connected to (JetStream's
    # step-down; journal/jetstream.py lead_here): one route hop less on every commit
    pub += ["$JS.API.STREAM.LEADER.STEPDOWN.%s" % nn.journal_stream(shard)]
    # backup.<shard> and backuprun.<shard>: its scheduled backup (elected through backuprun, and keeping the
    # journal the next backup continues from in backup); it reads its own stream and snapshots for it already
    pub += [nn.kv_subject(k % shard) for k in (nn.KEY_LEASE, nn.KEY_FAILOVER, nn.KEY_SETTINGS, nn.KEY_STATE,
                                               nn.KEY_BACKUP, nn.KEY_BACKUP_RUN)]
    pub += [nn.kv_subject(nn.KEY_AUTH)]
    pub += _stream_api(kv_stream, purge=False)
    pub += ["$O.%s.>" % bucket] + _stream_api("OBJ_%s" % bucket, purge=True)
    bus = [nn.PUBSUB, nn.PUBSUB_SHARD % shard, nn.STATUS % shard, nn.ALIVE]
    pub += bus
    # a second region: the peer region's record (cluster/region.py), read by domain, answered on its own
    # reply subject (the region link allows that prefix, not every node's inbox). A node of any domain may read
    # it: the domain is not known when a node is minted, and it reads no more than its own region's bucket.
    pub += ["$JS.*.API.STREAM.MSG.GET.KV_%s" % nn.LEASES_BUCKET]
    sub = ["%s.>" % nn.inbox_prefix(node_id), "%s.>" % (nn.REGION_REPLY % node_id)] + bus
    return {"pub": {"allow": pub}, "sub": {"allow": sub}}


def operator_permissions() -> dict:
    """An operator tool of the DURAKV account: everything in it (it creates streams, writes the topology)."""
    return {"pub": {"allow": [">"]}, "sub": {"allow": [">"]}}


def region_link_permissions(source_domain, shards, follower_domain=None) -> dict:
    """The leafnode link a follower region's NATS servers open to the primary region (docs/multi-az.md, "A
    second region"). Only what a mirror of the shard journals carries may cross: the consumer API of the
    DURAKV_SHARD_* streams in the source domain (a mirror creates, resets, inspects and deletes its own
    consumer), the deliveries ($JS.M.<id>), the API answers ($JSC.R.<id>) and flow control ($JS.FC.>).
    Nothing else: not the journal subjects (a publish in region B on DURAKV.<n> would otherwise land in region
    A's stream: measured), not the bus, not $KV/$OBJ (NATS itself denies those and $JS.API.> across a leafnode
    between two domains), not another stream's consumers (a consumer on the coordination bucket's stream would
    read it): each shard's stream is named, since a '*' inside a token is no wildcard in NATS. A shard added
    later needs a new link identity. Both directions get the same list: a hub reverses a leafnode user's pub and sub
    (nats-server leafnode.go), and a mirror needs each subject only one way, which its own traffic decides."""
    api = nn.region_api(source_domain)
    subjects = []
    for shard in shards:
        subjects += ["%s.CONSUMER.*.%s" % (api, nn.journal_stream(shard)),
                     "%s.CONSUMER.*.%s.>" % (api, nn.journal_stream(shard))]
    subjects += ["$JS.FC.>", "$JS.M.*", "$JSC.R.*"]
    # each region's nodes read the other's region record (the fence: cluster/region.py), and the answers
    for domain in (source_domain, follower_domain):
        if domain:
            subjects.append(nn.region_record_get(domain))
    subjects.append("%s.>" % (nn.REGION_REPLY % "*")[:-2])
    return {"pub": {"allow": list(subjects)}, "sub": {"allow": list(subjects)}}


def system_permissions() -> dict:
    """The operator's user in the SYS account: the servers' monitoring requests and account JWT updates."""
    return {"pub": {"allow": ["$SYS.REQ.>"]}, "sub": {"allow": ["_INBOX.>", "_INBOX_%s.>" % "sys"]}}
