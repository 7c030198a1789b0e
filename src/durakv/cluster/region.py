"""A second region: a follower cluster that mirrors the primary region's shard journals (docs/multi-az.md, "A
second region").

Region B is a NATS cluster of its own under the SAME operator and account (the same secrets directory), with
its OWN JetStream domain, joined to region A by a leafnode link that authenticates with a credentials file
(natsauth.region_link_permissions: only what the mirrors carry crosses). Why not one supercluster over
gateways: a supercluster has one JetStream meta group over both regions, so with region A dark (half of the
meta peers or more) region B loses the meta quorum and can neither create nor change a stream, which
promotion needs. Two domains have two meta groups; each region keeps its own.

Each shard stream `DURAKV_SHARD_<n>` of A has a mirror of the same name in B (`mirror.external.api =
$JS.<domain A>.API`). A mirror keeps A's sequence numbers and headers (measured on nats-server 2.15.1: after
a purge on A too), so a journal index means the same entry in both regions and B's nodes follow the mirror
with the replica's own code (replication/follow.py). B's nodes read the `region` record of their own
coordination store: a follower region's node never takes a lease (ClusterNode.ineligible), so it stays a
replica and answers writes -READONLY, as a Valkey replica does.

The same shard layout (slot ranges per shard, in order) is required in both regions: `check_same_layout`
refuses a difference with the reason, at follower setup.
"""

import json

from . import natsnames as nn

ROLES = ("primary", "follower", "fenced")
MAX_CUT_SHARDS = 1024
MAX_REGION_DOC = 4096   # bytes: data from NATS is untrusted and bounded before it is parsed


class RegionError(ValueError):
    pass


class RegionRecord:
    """This region's role in a pair: `role` (primary | follower | fenced: a primary region that a planned
    switchover fenced), its own JetStream `domain`, the `peer_domain` (the region it follows, or its follower)
    and the `epoch` (raised by each promotion). `cut`: {shard: the last journal index this region took from
    the old primary region} once promoted, to count later what the old region had beyond it."""

    __slots__ = ("role", "domain", "peer_domain", "epoch", "cut")

    def __init__(self, role, domain, peer_domain="", epoch=1, cut=None):
        if role not in ROLES:
            raise RegionError("region role %r is not one of %s" % (role, ", ".join(ROLES)))
        self.role = role
        self.domain = nn.check_domain(domain)
        self.peer_domain = nn.check_domain(peer_domain) if peer_domain else ""
        if role == "follower" and not self.peer_domain:
            raise RegionError("a follower region names the domain it follows")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 1 <= epoch < 2 ** 53:
            raise RegionError("region epoch %r is not an integer >= 1" % (epoch,))
        self.epoch = epoch
        cut = dict(cut or {})
        if len(cut) > MAX_CUT_SHARDS or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                 for v in cut.values()):
            raise RegionError("the region record's cut is not {shard: index}")
        self.cut = {nn.check_shard_name(k): v for k, v in cut.items()}

    @property
    def follower(self) -> bool:
        return self.role == "follower"

    def to_json(self) -> bytes:
        doc = {"role": self.role, "domain": self.domain, "peer_domain": self.peer_domain, "epoch": self.epoch}
        if self.cut:
            doc["cut"] = self.cut
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw) -> "RegionRecord":
        if len(raw) > MAX_REGION_DOC:
            raise RegionError("the region record is %d bytes (at most %d)" % (len(raw), MAX_REGION_DOC))
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise RegionError("the region record is not JSON: %s" % exc) from None
        if not isinstance(doc, dict):
            raise RegionError("the region record is not an object")
        try:
            cut = doc.get("cut") or {}
            if not isinstance(cut, dict):
                raise RegionError("the region record's cut is not an object")
            return cls(doc.get("role"), doc.get("domain"), doc.get("peer_domain") or "", doc.get("epoch", 1), cut)
        except ValueError as exc:
            raise RegionError(str(exc)) from None


def fence_reason(own, peer, peer_read) -> str:
    """Why a node of the region `own` (its record) must not take writes, or None. peer: the peer region's record
    as last read (None: absent or never read); peer_read: whether it was read since this node started.

    - a region a planned switchover fenced;
    - a primary region whose peer was promoted over it (the peer's epoch is higher and it is primary): an old
      primary region that comes back after a disaster promotion;
    - a primary region with a peer whose record this node has not read since it started: a node restarting
      after a power cut does not take writes until it knows whether it was replaced."""
    if own is None:
        return None
    if own.role == "fenced":
        return "region %s was fenced by a switchover to region %s (region epoch %d)" % (own.domain, own.peer_domain,
                                                                                     own.epoch)
    if own.role != "primary" or not own.peer_domain:
        return None
    if not peer_read:
        return "region %s has not read region %s's record since this node started" % (own.domain, own.peer_domain)
    if peer is not None and peer.role == "primary" and peer.epoch > own.epoch:
        return "region %s was promoted over region %s (region epoch %d > %d)" % (peer.domain, own.domain, peer.epoch,
                                                                               own.epoch)
    return None


async def read_peer_region(nc, domain, node_id, timeout_s=2.0):
    """The region record of the region `domain` (RegionRecord, or None when it has none), read over the region
    link with a plain request whose answer comes on natsnames.REGION_REPLY (what the link and a node's
    permissions allow). Raises TimeoutError when the region does not answer, RegionError on a bad answer."""
    import asyncio
    import base64
    import os
    reply = "%s.%s" % (nn.REGION_REPLY % node_id, os.urandom(8).hex())
    sub = await nc.subscribe(reply, max_msgs=1)
    try:
        await nc.publish(nn.region_record_get(domain), json.dumps({"last_by_subj": nn.kv_subject(nn.KEY_REGION)}
                                                                   ).encode(), reply=reply)
        msg = await asyncio.wait_for(sub.next_msg(timeout=timeout_s), timeout_s + 1.0)
    except Exception as exc:  # noqa: BLE001 - nats-py's own timeout types: all mean no answer
        raise TimeoutError("region %s did not answer: %r" % (domain, exc)) from None
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # noqa: BLE001 - it may be gone already (max_msgs)
            pass
    if len(msg.data) > 4 * MAX_REGION_DOC:
        raise RegionError("region %s's answer is %d bytes" % (domain, len(msg.data)))
    try:
        answer = json.loads(msg.data)
    except ValueError:
        raise RegionError("region %s's answer is not JSON" % domain) from None
    if not isinstance(answer, dict):
        raise RegionError("region %s's answer is not an object" % domain)
    if answer.get("error"):
        if (answer["error"] or {}).get("code") == 404:
            return None
        raise RegionError("region %s answered %s" % (domain, answer["error"]))
    try:
        raw = base64.b64decode((answer.get("message") or {}).get("data") or "")
    except (ValueError, TypeError):
        raise RegionError("region %s's record is not base64" % domain) from None
    if not raw:
        return None     # deleted
    return RegionRecord.from_json(raw)


async def mark_primary(store, domain, peer_domain):
    """The source region's record once it has a follower (role primary, region epoch 1): from then on its nodes
    read the follower's record, which is how a promotion fences them. An existing record is kept."""
    current, rev = await store.get_region()
    if current is None:
        await store.put_region(RegionRecord("primary", domain, peer_domain, 1), rev)
        return RegionRecord("primary", domain, peer_domain, 1)
    return current


def shard_layout(topology) -> list:
    """[(shard name, ((first, last), ...)), ...] of a topology: what must be the same in both regions."""
    return [(sh.name, tuple(tuple(r) for r in sh.slots)) for sh in topology.shards]


def _ranges(slots) -> str:
    return ",".join("%d-%d" % (a, b) for a, b in slots) or "no slots"


def check_same_layout(source, follower) -> None:
    """Raises RegionError naming the first difference between two layouts (shard_layout's form): a follower
    region applies each shard's journal to the slots that shard owns, so its shards must own the same slots."""
    if len(source) != len(follower):
        raise RegionError("the shard layouts differ: the source region has %d shard(s) (%s), this region %d (%s); "
                          "a follower region needs the same shards with the same slots"
                          % (len(source), "; ".join("%s: %s" % (n, _ranges(s)) for n, s in source), len(follower),
                             "; ".join("%s: %s" % (n, _ranges(s)) for n, s in follower)))
    for (name_a, slots_a), (name_b, slots_b) in zip(source, follower):
        if name_a != name_b or tuple(slots_a) != tuple(slots_b):
            raise RegionError("the shard layouts differ: shard %s owns slots %s in the source region but shard %s "
                              "owns %s here; a follower region needs the same shards with the same slots"
                              % (name_a, _ranges(slots_a), name_b, _ranges(slots_b)))


async def make_mirrors(js, shards, source_domain, replicas):
    """Creates in this region (js: its JetStream context) a mirror of each shard stream of the source region,
    with the same name; an existing mirror of the same source is kept. A stream of that name that is not such
    a mirror is refused (it would be another cluster's journal)."""
    from nats.js.api import ExternalStream, StorageType, StreamConfig, StreamSource
    from nats.js.errors import NotFoundError
    api = nn.region_api(source_domain)
    for shard in shards:
        stream = nn.journal_stream(shard)
        try:
            info = await js.stream_info(stream)
        except NotFoundError:
            info = None
        if info is not None:
            mirror = info.config.mirror
            ext = getattr(mirror, "external", None) if mirror is not None else None
            if mirror is None or mirror.name != stream or getattr(ext, "api", None) != api:
                raise RegionError("stream %s already exists in this region and is not a mirror of %s's: refusing to "
                                  "follow into it" % (stream, source_domain))
            continue
        await js.add_stream(StreamConfig(
            name=stream, storage=StorageType.FILE, num_replicas=replicas, allow_direct=True, deny_delete=True,
            mirror=StreamSource(name=stream, external=ExternalStream(api=api))))


def mirror_lag(info):
    """(entries the mirror knows it lacks, ms since it last heard from the source or None) of a stream's info;
    (0, None) for a stream that mirrors nothing. The lag is the source's own count as of the last delivery: with
    the source dark it stays as last measured."""
    mirror = getattr(info, "mirror", None)
    if mirror is None:
        return 0, None
    active = getattr(mirror, "active", None)
    return int(mirror.lag or 0), (None if active is None or active < 0 else active // 1_000_000)
