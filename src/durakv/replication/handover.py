"""Planned failover on the old primary: hold commands (as Valkey's manual failover pauses them), drain every
write into the journal, then become a replica in place and release the held commands."""

import asyncio
import logging
import time

log = logging.getLogger("durakv.replication")

# A planned hand-over holds commands for at most this long, its drain and the wait for the topology included:
# Valkey's manual failover pauses writes on the old primary for CLUSTER_MF_TIMEOUT * CLUSTER_MF_PAUSE_MULT.
HANDOVER_HOLD_MAX_S = 10.0


class Handover:
    """The planned hand-over's hold, drain and switch to replica: `node.handover`.

    Owns `holding` (None; "writes" while it drains; "data", every command touching data, once the lease is being
    handed over: the pipeline postpones what it holds, as CLIENT PAUSE does) and the hold's deadline. Interface:
    the controller's calls, which the node forwards (`hand_over`, `hold_data`, `end_hold`, `become_replica`),
    and the gate's (`holds`, `hold_state`). It reads the node's server, controller, journal and role, and
    follows the journal through the node's Follower (`follow_from`) once it becomes a replica."""

    def __init__(self, node):
        self.node = node
        self.server = node.server
        self.holding = None
        self._hold_deadline = 0.0       # monotonic s: the hold ends by then whatever happens

    def holds(self, may_replicate, touches_data) -> bool:
        """Whether the hand-over's hold postpones a command (the pipeline asks only while `holding`)."""
        return may_replicate or (touches_data and self.holding == "data")

    async def hand_over(self, keep_lease=None) -> bool:
        """Planned failover, first half: hold writes (Valkey's manual failover pauses them on the old primary:
        the client waits, unanswered), then wait until everything issued is committed. True if it all is:
        only then may this node become a replica in place; otherwise its memory may hold writes whose appends
        are still in flight (a replica following from the commit index would apply them twice) or never land
        (phantom writes), and it must re-execute instead. keep_lease(): renews the lease (the controller's),
        called between slices of the wait so that a long drain does not let a replica take the lease."""
        srv = self.server
        self.holding = "writes"
        started = time.monotonic()
        self._hold_deadline = started + HANDOVER_HOLD_MAX_S
        # No expiry while holding (Valkey's PAUSE_ACTION_EXPIRE): an expired key's DEL is a write, and one
        # issued after the drain would be in memory and never in the journal.
        srv.keyspace.expire_enabled, srv.keyspace.hide_expired = False, True
        node = self.node
        slice_s = node.controller.interval_s if node.controller is not None else 0.2

        async def wait(done):
            """await done(timeout_s) -> bool in slices until True or the hold's deadline, renewing between."""
            while True:
                left_s = self._hold_deadline - time.monotonic()
                if await done(max(0.0, min(left_s, slice_s))):
                    return True
                if time.monotonic() >= self._hold_deadline:
                    return False
                if keep_lease is not None:
                    await keep_lease()

        async def script_ended(timeout_s):
            deadline = time.monotonic() + timeout_s
            while srv.pipeline.busy is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            return srv.pipeline.busy is None

        dur = srv.durability
        # A script past busy-reply-threshold runs on while the loop serves, and its effects are submitted only when
        # it ends: drained before it ends, they would be in this node's memory only (and acknowledged).
        script_done = await wait(script_ended)
        committed = script_done and await wait(lambda timeout_s: dur.drain(timeout_s=timeout_s))
        appended = committed and await wait(lambda timeout_s: node.journal.drain(timeout_s=timeout_s))
        # A failed append leaves its writes in memory and nowhere else, even once the tracker has given those
        # indices up (it then counts as drained) or persists again: this term's memory is not the journal's.
        tracker = dur.tracker
        failed = tracker is not None and (tracker.failed is not None or tracker.failed_batches > 0)
        if failed or not appended:
            log.warning("hand-over: not drained after %.3fs (%s): this node will not become a replica in place",
                        time.monotonic() - started,
                        "an append failed this term: %s" % (tracker.failed,) if failed else
                        "a script is still running" if not script_done else
                        "%d of %d committed" % (dur.committed, dur.assigned) if not committed else
                        "journal appends still queued")
            return False
        return True

    def hold_state(self):
        """(actions, milliseconds left) of the hold as INFO's paused_* fields show it ("write" while it holds
        writes, "all" once reads wait too), or None when nothing is held."""
        if self.holding is None:
            return None
        return ("all" if self.holding == "data" else "write",
                max(0, int((self._hold_deadline - time.monotonic()) * 1000)))

    def hold_data(self):
        """The lease is about to be handed over: the new primary may serve any moment from now, so reads wait
        too (answered afterwards by the replica this node becomes, or its -MOVED)."""
        if self.holding is not None:
            self.holding = "data"

    def end_hold(self):
        """Ends the hand-over's hold: every postponed command runs again from scratch (served, if this node kept
        its lease; -MOVED to the new primary from the replica it became)."""
        if self.holding is None:
            return
        self.holding = None
        if self.node.role == "primary":
            self.server.keyspace.expire_enabled, self.server.keyspace.hide_expired = True, False
        self.server.blocking.resume_postponed()

    async def become_replica(self):
        """Planned failover, second half (after a complete drain): follow the journal from this node's own last
        entry, then let the held commands go once the topology names the new primary."""
        srv, node = self.server, self.node
        try:
            node.role = "replica"
            srv.keyspace.expire_enabled = False
            srv.keyspace.hide_expired = True
            node.journal.stop_writer()
            srv.durability.detach()
            node.applied_index = node.journal.commit_index
            await node.follower.follow_from(node.applied_index)
            node.phase = "following"
            log.info("now a replica of shard %s after handing over at index %d", node.shard, node.applied_index)
            await self._await_other_primary(self._hold_deadline)
        finally:
            self.end_hold()

    async def _await_other_primary(self, deadline_s):
        """Until this node's topology names another primary of its shard (the new primary publishes its
        promotion once it serves), or the deadline: a held write released earlier would pass the slot check
        (the topology still routes it here) and meet -READONLY, which cluster clients do not retry."""
        node = self.node
        if node.routing is None:
            return True     # not cluster mode: a replica answers -READONLY, as a standalone Valkey replica
        while True:
            topology = node.routing.topology
            me = topology.nodes.get(node.node_id) if topology is not None else None
            if me is None or me.role != "primary":
                return True
            if time.monotonic() >= deadline_s:
                log.warning("hand-over: the topology still names this node the primary of shard %s; releasing the "
                            "held commands anyway", node.shard)
                return False
            await asyncio.sleep(0.005)
