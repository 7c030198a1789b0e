"""The pipeline's gate on a shard member: a primary serves only while its lease is valid by its own clock (the
renewer thread's hooks publish it), a replica only while it is close enough to the journal."""

import logging

from .. import messages
from ..cluster.store import NatsStore
from ..logs import Recurring
from .clock import monotonic_ms

log = logging.getLogger("durakv.replication")


class LeaseGate:
    """The lease holder and the gate the pipeline checks in admission for every command path: `node.lease`, and
    the pipeline's `gate` (server.py installs it; the compiled core calls its `fast_serving()`).

    Owns `valid_until_ms` (the lease's end on the monotonic clock: the renewer's thread publishes it, the failover
    controller sets it through the node's `lease_valid_until_ms`, a failed journal ends it), whether the lease
    lapsed while this node was primary, and the counts INFO shows (`lapses`, `refusals`).

    Handed the node (its `role`, `shard`, `epoch`, `renewer`, server config and `nats_connect`), the Follower (a
    replica serves only while close enough to the journal), the Handover (its hold) and the RegionRole (its
    fence); `handover` and `region_role` are also the gate's attributes the pipeline and INFO read.

    Offers the gate's interface (commands/pipeline.py): `checks_stale`, `is_replica()`, `serving_error(write)`,
    `fast_serving()`, `lease_valid(now_ms)`; the renewer's hooks (`open_renewer_store`, `publish`,
    `renew_stall_limit_ms`); and `end()` (stop serving now)."""

    checks_stale = False    # the pipeline gate checks only commands touching data against serving_error

    def __init__(self, node, follower, handover, region_role):
        self.node = node
        self.server = node.server
        self.follower = follower
        self.handover = handover
        self.region_role = region_role
        self.valid_until_ms = 0
        self.lapses = 0                 # times this primary began refusing commands because its lease lapsed
        self.refusals = 0               # commands refused for that reason
        self._lapsed = False
        self._lapse_log = Recurring(log)

    async def open_renewer_store(self):
        """The lease renewer's own NATS connection and lease bucket (run on its thread's loop): a connection
        served by the event loop would wait for the loop, which is what the thread is there to avoid."""
        nc = await self.node.nats_connect("-lease")
        try:
            return await NatsStore(nc).open_leases()
        except BaseException:
            await nc.close()
            raise

    def publish(self, valid_until_ms):
        """Called on the renewer's thread when a renewal landed: the gate (serving_error) serves until then."""
        self.valid_until_ms = valid_until_ms

    def end(self):
        """The lease ends now by this node's clock (a failed journal: the primary steps down)."""
        self.valid_until_ms = 0

    def renew_stall_limit_ms(self):
        """How long the event loop may show no sign of life while the renewer still renews: the configured bound,
        but never less than a script may hold the loop by design (busy-reply-threshold) plus one lease."""
        cfg = self.server.config
        return max(cfg["lease-renew-max-loop-stall-ms"], cfg["busy-reply-threshold"] + cfg["lease-ttl-ms"])

    def is_replica(self) -> bool:
        return self.node.role != "primary"

    def lease_valid(self, now_ms) -> bool:
        """The lease rule, written once: a primary serves until its lease's end by its own clock (the renewer
        publishes the end: publish). serving_error and fast_serving both ask it."""
        return now_ms <= self.valid_until_ms

    def fast_serving(self) -> bool:
        """The gate's answer to the compiled core (fastpath/_core.c cluster_entry, per keyed command): whether a
        command touching data passes this gate now with nothing to do but serve it: a primary (its lease valid
        now, not coming back from a lapse, whose end serving_error logs) that no planned hand-over holds.
        Anything else is for the pipeline's admission, which asks serving_error."""
        return (self.node.role == "primary" and self.handover.holding is None and not self._lapsed
                and self.region_role.fence is None and self.lease_valid(monotonic_ms()))

    def serving_error(self, write):
        """Error text if this node must not serve a command touching data now: a primary whose lease is
        past due by its own clock, or writes during a planned hand-over; a replica too far behind the journal
        (replica-max-lag-ms), or cut off from it with replica-serve-stale-data no."""
        node = self.node
        if node.role != "primary":
            follower = self.follower
            if follower.apply_stopped is not None:
                return messages.REPLICA_APPLY_STOPPED.format(follower.apply_stopped)
            behind_ms = follower.behind_ms()
            if behind_ms:
                bound = self.server.config["replica-max-lag-ms"]
                if bound and behind_ms > bound:
                    return messages.REPLICA_BEHIND.format(behind_ms)
            if not self.server.config["replica-serve-stale-data"] and not follower.link_up():
                return messages.MASTERDOWN_STALE
            return None
        fence = self.region_role.fence
        if write and fence is not None:
            # an old primary region (replaced, fenced, or restarted and not yet sure it was not): reads go on,
            # writes are refused (region_role.py)
            return messages.REGION_FENCED.format(fence)
        now_ms = monotonic_ms()
        if not self.lease_valid(now_ms):
            self._refuse_for_lease(now_ms)
            return messages.LEASE_EXPIRED
        if self._lapsed:
            self._lapsed = False
            self._lapse_log.clear("lapsed", "primary of shard %s (epoch %d): lease renewed, serving again",
                                  node.shard, node.epoch)
        return None

    def _refuse_for_lease(self, now_ms):
        """A primary refuses a command because its lease lapsed: counted, and logged when it starts (with why, as
        far as this node knows), then as a count every 10 s, and once more when it serves again."""
        self.refusals += 1
        if not self._lapsed:
            self._lapsed = True
            self.lapses += 1
        r = self.node.renewer
        if r is None or not r.granted:
            cause = "its renewals are not running"
        elif r.stalled_ms:
            cause = "renewals paused: the event loop showed no sign of life for %d ms" % r.stalled_ms
        elif r.failures:
            cause = "%d renewals in a row failed, the last with %s" % (r.failures, r.last_error)
        else:
            cause = "its last renewal landed too late"
        self._lapse_log("lapsed", "primary of shard %s (epoch %d): lease lapsed %d ms ago by this node's clock (%s); "
                        "refusing commands that touch data until it is renewed", self.node.shard,
                        self.node.epoch, now_ms - self.valid_until_ms, cause)
