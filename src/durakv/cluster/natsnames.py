"""Every name durakv uses in NATS, in one place: streams, subjects, buckets and keys.

The coordination store (cluster/store.py), the journal (journal/jetstream.py names its own stream and
subject: `stream_name`, `subject_name`), the nodes' bus
(replication/bus.py, members.py) and the permissions of each identity (cluster/natsauth.py) all take their
names from here, so a permission can never name a subject the code does not use, or miss one it does.

A shard's name is a NATS subject token and part of stream names: letters, digits, '-' and '_' only.
"""

import re

from ..journal.jetstream import stream_name, subject_name   # the shard's journal: one stream, one subject

# the coordination store: one KV bucket for leases, the topology, shard settings and states, cluster auth
LEASES_BUCKET = "DURAKV_LEASES"
KEY_TOPOLOGY = "topology"          # written by the operator only: members, slots, migrations
KEY_CLUSTER = "cluster"            # written by the operator only: the cluster's id and format version
KEY_AUTH = "auth"                  # cluster-wide users (ACL), changed on any node
KEY_LEASE = "lease.%s"
KEY_FAILOVER = "failover.%s"
KEY_SETTINGS = "settings.%s"
KEY_STATE = "state.%s"             # a shard's own view: its primary, its nodes' health, slots it handed over
# backups (durakv/backup): the journal a backup copies or the next one needs (purges keep it), written by the
# operator's `durakv backup create` and by the node that runs a shard's scheduled backup ...
KEY_BACKUP = "backup.%s"
# ... and which node runs the shard's scheduled backup of a given slot (compare-and-set: one per shard)
KEY_BACKUP_RUN = "backuprun.%s"
# a second region (cluster/region.py): this region's role, its JetStream domain and the region it follows,
# written by the operator only (`cluster up --follow-region`, `create --follow-domain`)
KEY_REGION = "region"
# a node reads the peer region's record over the region link (a plain request whose answer comes back on this
# subject, not on its inbox: the link allows this one prefix, not every node's inbox)
REGION_REPLY = "durakv.regionreply.%s"
# snapshots: one object store bucket per shard, so a node can be allowed its own shard's and no other
SNAPSHOT_BUCKET = "DURAKV_SNAPSHOTS_%s"

# the nodes' bus (NATS core, at most once)
PUBSUB = "durakv.pubsub"           # PUBLISH reaches every node
PUBSUB_SHARD = "durakv.pubsub.%s"  # SPUBLISH the nodes of the channel's shard
STATUS = "durakv.status.%s"        # a shard's heartbeats (applied offsets)
ALIVE = "durakv.alive"             # every node's liveness beat

# each identity's reply subjects start with its own inbox prefix, so it can be allowed to receive its own
# replies and nobody else's
INBOX_PREFIX = "_INBOX_%s"

_SHARD_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


def _token(name, pattern, refusal) -> str:
    """name as a str if it matches pattern (a NATS subject token: letters, digits, '-', '_'), else ValueError."""
    name = str(name)
    if not pattern.match(name):
        raise ValueError(refusal % name)
    return name


def check_shard_name(name) -> str:
    """The shard name as a str, or ValueError: it is a subject token and part of stream and bucket names."""
    return _token(name, _SHARD_NAME, "shard name %r: use 1-64 letters, digits, '-' or '_'")


def journal_stream(shard) -> str:
    return stream_name(check_shard_name(shard))


def journal_subject(shard) -> str:
    return subject_name(check_shard_name(shard))


def snapshot_bucket(shard) -> str:
    return SNAPSHOT_BUCKET % check_shard_name(shard)


_DOMAIN = re.compile(r"[A-Za-z0-9_-]{1,32}\Z")


def check_domain(name) -> str:
    """A JetStream domain as a str, or ValueError: it is a subject token ($JS.<domain>.API)."""
    return _token(name, _DOMAIN, "JetStream domain %r: use 1-32 letters, digits, '-' or '_'")


def region_api(domain) -> str:
    """The JetStream API prefix of another region's domain, as a mirror's `external.api` names it."""
    return "$JS.%s.API" % check_domain(domain)


def region_record_get(domain) -> str:
    """The subject a node asks a region (by domain) for its coordination bucket's message of a key."""
    return "$JS.%s.API.STREAM.MSG.GET.KV_%s" % (check_domain(domain), LEASES_BUCKET)


def kv_subject(key) -> str:
    return "$KV.%s.%s" % (LEASES_BUCKET, key)


def inbox_prefix(identity: str) -> str:
    """The reply-subject prefix of an identity (a node id or an operator tool's name)."""
    if not re.match(r"[A-Za-z0-9_-]{1,64}\Z", identity):
        raise ValueError("identity %r is not a subject token" % identity)
    return INBOX_PREFIX % identity
