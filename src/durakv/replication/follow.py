"""A replica following the journal: applies committed entries in order through the same code as recovery
(expiry off: the primary's DEL effects decide), notices gaps and stalls, and tracks how far behind it is."""

import asyncio
import logging
import time

from ..journal.base import EpochFilter, JournalTruncated
from ..journal.codec import PartAssembler
from ..logs import Recurring
from ..recovery.loading import LoadStopped
from .clock import monotonic_ms
from .promotion import reexec
from .retry import retry_transient

log = logging.getLogger("durakv.replication")


class ApplyStopped(Exception):
    """A replica stopped applying at an entry it could not apply (Follower._stop_applying)."""


class Follower:
    """Following the journal as a replica: `node.follower`.

    Owns the subscription to the journal and how entries become effects: `subscription`, `filter` (the epoch
    filter: a deposed writer's entries are skipped) and `parts` (commands carried in continuation parts apply once
    whole); what it knows of the journal's end (`stream_last`, `known_index`) and since when it has been behind
    it; `applied_at_ms`; `slicer` (while loading: the slices of the loop entries apply in) and the entry being
    applied in slices; the gap, stall and fault-injection holds; `apply_stopped` ("entry N: why" once an entry
    could not be applied: fail closed).

    Handed the node, whose shared position it advances (`applied_index`, `whole_index`, `epoch`, `phase`; it
    reads `role`, `journal`, `nc`), the Members (a replica's status goes out as entries apply) and the Snapshotter
    (forgotten when the dataset is cleared).

    Offers: start-up's `count_journal_to_load()`, `follow_from(index)`, `catch_up()`, `stop()`,
    `clear_dataset()`, `loading_done()`; the control loop's `probe()` and `resubscribe_if_stalled()`; the
    promotion's `apply_entry(entry)`, `unfollow()`, `settle_apply()` and `promoted(index, epoch)`; the
    snapshot's `loaded_snapshot(index, epoch)`; `note_known(index)` (probes, heartbeats), `behind_ms()`,
    `link_up()`, `stall_following(ms)` (DEBUG JOURNAL-FOLLOW-STALL)."""

    def __init__(self, node, members, snapshotter):
        self.node = node
        self.server = node.server
        self.members = members
        self.snapshotter = snapshotter
        self.subscription = None
        self.filter = EpochFilter(0)
        self.parts = PartAssembler()    # commands carried in continuation parts apply once whole
        self.stream_last = 0            # the journal's last index as last seen (probes, catch-up, entries)
        self.known_index = 0            # newest journal index this replica knows exists (probes, heartbeats)
        self.applied_at_ms = 0
        self.apply_stopped = None       # "entry N: why" once an entry could not be applied (fail closed)
        self.slicer = None              # while loading: the slices of the loop the snapshot and entries apply in
        self._behind_since_ms = 0       # mono: since when it has known of entries it has not applied (0: not)
        self._held_entries = None       # fault injection (stall_following): entries held back, in order
        self._gap = None                # (first missing, first received) when the journal skipped entries
        self._apply_errors = 0
        self._in_flight = None          # the task applying an entry in slices
        self._progress_index = -1
        self._progress_at = 0.0
        self._stall_log = Recurring(log)

    async def follow_from(self, after):
        """Follows the journal from entry after+1. Raises JournalTruncated when that entry has been purged (a
        snapshot newer than this node's state let the stream drop it): an ordered consumer would silently
        start at the first entry still there, a gap."""
        journal = self.node.journal
        info = await journal.refresh()
        if info.state.first_seq > after + 1:
            raise JournalTruncated("entry %d was purged (the stream starts at %d)" % (after + 1, info.state.first_seq))
        self.subscription = await journal.follow(after, self._deliver)

    async def count_journal_to_load(self):
        """Start-up: adds the bytes of the entries after the applied index to the load's total (INFO
        loading_total_bytes), estimated from the stream's size per entry (the store does not say where in it
        an index lies)."""
        progress = self.server.load_progress
        if progress is None:
            return
        try:
            state = (await self.node.journal.refresh()).state
        except Exception:  # noqa: BLE001 - only a figure for INFO; following retries its own requests
            return
        ahead = max(0, state.last_seq - max(self.node.applied_index, state.first_seq - 1))
        if state.messages:
            progress.total_bytes += state.bytes * ahead // state.messages

    def clear_dataset(self):
        """Forgets everything loaded (start-up only: nobody is served data yet), to load a newer snapshot."""
        ks = self.server.keyspace
        search = getattr(ks, "search", None)
        if search is not None:
            search.clear_definitions()   # the snapshot carries them again (FT.CREATE)
        for db in ks.dbs:
            db.clear()
        ks.used_bytes = ks.baseline_bytes
        self.node.applied_index = self.node.whole_index = 0
        self.snapshotter.forget()
        self.filter = EpochFilter(0)
        self.parts = PartAssembler()

    def loaded_snapshot(self, index, epoch):
        """A snapshot taken at `index` in `epoch` was loaded: entries apply from index+1, fresh."""
        node = self.node
        node.applied_index = node.whole_index = index
        self.filter = EpochFilter(epoch)
        self.parts = PartAssembler()
        node.epoch = max(node.epoch, epoch)

    def promoted(self, marker_index, epoch):
        """This node appended its epoch marker at `marker_index` and writes the journal from now on: its own
        entries are applied as they are made, and the marker ends any unfinished parts of the deposed primary."""
        node = self.node
        self.filter = EpochFilter(epoch)
        self.parts.reset()
        node.applied_index = node.whole_index = marker_index
        self._behind_since_ms = 0

    def _deliver(self, entry):
        """The journal subscription's callback. Following, an entry is applied at once and whole (readers see
        every command of it or none); while the node loads (start-up's catch-up: nobody reads data, -LOADING),
        it is applied in slices of the loop (`slicer`), so that a large entry does not stop the loop. Returns
        None, or an awaitable the subscription waits for before it delivers the next entry."""
        if self.slicer is None and self._in_flight is None:
            self.apply_entry(entry)
            return None
        return self._deliver_sliced(entry)

    async def _deliver_sliced(self, entry):
        # One entry at a time: a subscription that was replaced (resubscribed after a stall) may have left one
        # half applied, which goes on in its own task (shielded: the old subscription's cancellation must not
        # stop it mid-entry) and is waited for here; a redelivered entry is then skipped by its index.
        await self.settle_apply()
        slicer = self.slicer
        if slicer is None:
            self.apply_entry(entry)
            return
        task = self._in_flight = self.server.loop.create_task(self._apply_sliced(entry, slicer))
        await asyncio.shield(task)

    async def _apply_sliced(self, entry, slicer):
        try:
            await slicer.run(self._entry_steps(entry, sliced=True))
        except LoadStopped:
            pass    # shutting down (catch_up says so to start-up): the entry stays half applied, the process ends
        finally:
            self._in_flight = None

    async def settle_apply(self):
        """Waits until no entry is being applied in slices (before anything else applies or clears entries)."""
        while self._in_flight is not None:
            await asyncio.shield(self._in_flight)

    def apply_entry(self, entry):
        """Applies one journal entry whole (skipped if already applied, or on a primary)."""
        for _ in self._entry_steps(entry, sliced=False):
            pass

    def _entry_steps(self, entry, sliced):
        """Applies one journal entry in order; a generator that yields after each effect when `sliced` (the entry
        decoded one command at a time), else only at its end."""
        node = self.node
        if entry.index <= node.applied_index:
            return  # an ordered consumer restart may resend what we have
        if node.role == "primary":
            return
        if self._held_entries is not None:
            self._held_entries.append(entry)
            self.note_known(entry.index)
            return
        if entry.index != node.applied_index + 1:
            # Entries in between were purged (a consumer that re-created itself starts at the first one left):
            # applying this one would leave a silent gap. Stop here; the stall check reloads from a snapshot.
            if self._gap is None:
                self._gap = (node.applied_index + 1, entry.index)
                log.warning("journal entries %d..%d are gone (purged); not applying past them", node.applied_index + 1,
                            entry.index - 1)
            self.note_known(entry.index)
            return
        if self.apply_stopped is not None:
            self.note_known(entry.index)
            return   # never past an entry that could not be applied: the state after it would be a guess
        ks = self.server.keyspace
        if not entry.payload:
            self.parts.reset()       # an epoch marker: a deposed writer's unfinished parts never complete
        try:
            accepted = self.filter.accept(entry)
            if accepted:
                ks.hide_expired = False  # effects see every stored key, expired or not, as on the primary
                apply = self.server.apply_effect
                try:
                    if sliced:
                        for db_id, argv in self.parts.feed_iter(entry.payload, entry.index):
                            apply(db_id, argv)
                            yield
                    else:
                        for db_id, argv in self.parts.feed(entry.payload, entry.index):
                            apply(db_id, argv)
                finally:
                    ks.hide_expired = True
            else:
                node.epoch = max(node.epoch, self.filter.epoch)
        except Exception as exc:  # noqa: BLE001 - a replica that cannot apply must not serve, nor loop
            self._stop_applying(entry.index, exc)
            return
        node.applied_index = entry.index
        if not self.parts.pending:
            node.whole_index = entry.index
        if entry.index > self.stream_last:
            self.stream_last = entry.index
        self.applied_at_ms = self.server.clock_ms()
        if self._behind_since_ms and node.applied_index >= self.known_index:
            self._behind_since_ms = 0
        progress = self.server.load_progress
        if progress is not None:
            progress.loaded_bytes += len(entry.payload)
        self.members.send_status_soon()
        yield

    def _stop_applying(self, index, exc):
        """Fail closed: entry `index` does not decode or apply (data from NATS is untrusted: a damaged or forged
        entry, or a bug). Applying past it would build a state no primary had, and restarting would meet it
        again (in a loop), so this replica stops applying here for good: it answers reads with an error, says
        so in INFO replication (replica_apply_stopped) and the log, and never takes the lease (the controller
        asks the node's `ineligible`). An operator removes the cause (docs/operations.md) and restarts it."""
        self._apply_errors += 1
        # an INFO value: no comma (valkey-py splits those), no line breaks, bounded
        self.apply_stopped = ("entry %d: %s" % (index, exc)).replace(",", ";").replace("\r", " ").replace("\n", " ")[:300]
        self.node.phase = "apply stopped"
        log.critical("stopped applying the journal at entry %d: %s. This replica serves no data and will not "
                     "become primary until the entry is dealt with (docs/operations.md, \"a replica stopped "
                     "applying\")", index, exc)
        self.server.loop.create_task(self.unfollow())

    def stall_following(self, stall_ms):
        """Fault injection: hold every journal entry that arrives for stall_ms, then apply them in order (a
        replica behind its journal, as after a NATS disruption, without disturbing anything else)."""
        if self.node.role == "primary":
            return False
        if self._held_entries is None:
            self._held_entries = []
        self.server.loop.call_later(stall_ms / 1000.0, self._release_held_entries)
        return True

    def _release_held_entries(self):
        held, self._held_entries = self._held_entries or [], None
        for entry in held:
            self.apply_entry(entry)

    async def catch_up(self, timeout_s=30.0):
        """Waits until everything committed in the stream (as of now) is applied."""
        node = self.node
        # (a node restarting while its shard's new primary moves the stream's leader met a timeout here and did not
        # start: the read is retried while NATS elects, as start-up's other requests are)
        last = await retry_transient("reading the journal's end", node.journal.last_index, timeout_s=timeout_s)
        self.stream_last = last
        self.note_known(last)
        deadline = time.monotonic() + timeout_s
        while node.applied_index < last:
            if self.apply_stopped is not None:
                raise ApplyStopped(self.apply_stopped)
            if time.monotonic() > deadline:
                raise TimeoutError("catch-up stalled at %d of %d" % (node.applied_index, last))
            if self.slicer is not None and self.slicer.stopped():
                raise LoadStopped("the server is shutting down")   # (start-up's catch-up: SHUTDOWN)
            await self.resubscribe_if_stalled()
            await asyncio.sleep(0.002)
        return last

    async def probe(self):
        """A replica's look at its journal's end; returns the stream's info (a follower region's node reads
        what its mirror lacks from it)."""
        journal = self.node.journal
        info = await journal.js.stream_info(journal.stream)
        self.stream_last = info.state.last_seq
        self.note_known(self.stream_last)
        return info

    async def resubscribe_if_stalled(self, stall_s=3.0):
        """An ordered consumer whose NATS server died may stop delivering without an error (seen when a
        whole AZ goes down): if entries are pending and nothing was applied for stall_s, follow again
        from the applied index. Not once applying stopped (fail closed): it would meet the same entry."""
        if self.apply_stopped is not None:
            return
        node = self.node
        if self._gap is not None:
            gap, self._gap = self._gap, None
            await self.unfollow()
            if node.phase != "following":
                raise JournalTruncated("entries %d..%d were purged" % (gap[0], gap[1] - 1))
            log.warning("entries after index %d were purged while this replica was behind; restarting to load the "
                        "newest snapshot", node.applied_index)
            reexec()
        now = time.monotonic()
        if node.applied_index != self._progress_index:
            self._progress_index, self._progress_at = node.applied_index, now
            if self._stall_log.active("stalled"):
                self._stall_log.clear("stalled", "following again at index %d", node.applied_index)
            return
        if self.stream_last <= node.applied_index or now - self._progress_at < stall_s:
            return
        self._stall_log("stalled", "following stalled at index %d of %d; subscribing again", node.applied_index,
                        self.stream_last)
        await self.unfollow()
        self._progress_at = now
        try:
            await self.follow_from(node.applied_index)
        except JournalTruncated:
            if node.phase != "following":
                raise           # start-up loads the newest snapshot instead
            log.warning("entries after index %d were purged while this replica was behind; restarting to load the "
                        "newest snapshot", node.applied_index)
            reexec()
        except Exception as exc:  # noqa: BLE001 - retried on the next stall check
            log.warning("subscribing again failed: %r", exc)

    async def unfollow(self):
        old, self.subscription = self.subscription, None
        if old is not None:
            try:
                await old.unsubscribe()
            except Exception:  # noqa: BLE001 - its connection may be the broken part
                pass

    async def stop(self):
        """Stops following and waits for an entry still being applied in slices: nothing applies after this."""
        await self.unfollow()
        await self.settle_apply()

    def note_known(self, index):
        """The journal holds `index` (a probe of the stream, the primary's heartbeat): track being behind it."""
        if index > self.known_index:
            self.known_index = index
        if self.known_index > self.node.applied_index:
            if not self._behind_since_ms:
                self._behind_since_ms = monotonic_ms()
        else:
            self._behind_since_ms = 0

    def behind_ms(self) -> int:
        return monotonic_ms() - self._behind_since_ms if self._behind_since_ms else 0

    def link_up(self) -> bool:
        """Whether this replica follows the journal now (a subscription that is delivering or has nothing to)."""
        nc = self.node.nc
        return (self.subscription is not None and nc is not None and nc.is_connected
                and not self._stall_log.active("stalled"))
