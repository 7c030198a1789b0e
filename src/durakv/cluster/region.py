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

ROLES = ("primary", "follower")
MAX_REGION_DOC = 4096   # bytes: data from NATS is untrusted and bounded before it is parsed


class RegionError(ValueError):
    pass


class RegionRecord:
    """This region's role in a pair: `role` (primary | follower), its own JetStream `domain`, the `peer_domain`
    it follows (a follower) and the `epoch` (raised by each promotion)."""

    __slots__ = ("role", "domain", "peer_domain", "epoch")

    def __init__(self, role, domain, peer_domain="", epoch=1):
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

    @property
    def follower(self) -> bool:
        return self.role == "follower"

    def to_json(self) -> bytes:
        return json.dumps({"role": self.role, "domain": self.domain, "peer_domain": self.peer_domain,
                           "epoch": self.epoch}, sort_keys=True).encode()

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
            return cls(doc.get("role"), doc.get("domain"), doc.get("peer_domain") or "", doc.get("epoch", 1))
        except ValueError as exc:
            raise RegionError(str(exc)) from None


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
