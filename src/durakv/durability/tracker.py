"""WriteTracker: group commit of effects into journal entries, the commit index, and the dirty keys.

Effects of all commands executed in one event-loop iteration form one batch, appended to the journal as one
entry (group commit). In `sync` mode a reply is held until the entry holding its effects is committed, and a
read of a key with an uncommitted write is held until that write commits. In `async` mode replies leave at
once; the lag is the age of the oldest uncommitted batch, and above `durability-buffer-ms` writes are refused
until it falls.

Indices: the tracker issues one append per batch, in order, so the entry index of a batch is known when the
batch is opened; replies are tagged with it and released when the commit index reaches it. The tracker
keeps its owner (durability.Durability) current: committed, assigned, pending (a sync write is uncommitted)
and refusing (writes must ask refuse_writes()), and calls owner.on_commit(index) after each commit.
"""

import asyncio
import logging
import time

from .. import messages
from ..journal.codec import encode_effects

log = logging.getLogger("durakv.durability")


class WriteTracker:
    def __init__(self, journal, owner, mode="sync", buffer_ms=10000, loop=None, clock_ms=None):
        self.journal = journal
        self.owner = owner
        self.mode = mode
        self.buffer_ms = buffer_ms
        self.loop = loop or asyncio.get_event_loop()
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.committed = journal.commit_index
        self.assigned = self.committed      # index of the newest batch handed out
        self._batch = []                    # effects of the open batch
        self._batch_index = 0               # 0 = no open batch
        self._uncommitted = {}              # index -> started_ms, for the lag
        self.dirty = {}                     # (db_id, key) -> index of its newest uncommitted write
        self._dirty_by_index = {}           # index -> list of (db_id, key)
        self.barrier = 0                    # newest uncommitted write whose keys are not known
        self.buffer_exceeded_errors = 0
        self.traffic_management_active = False
        self.failed = None                  # the journal failed: no more acknowledgements
        self.appended_bytes = 0
        self._in_flight = False
        self._publish()

    def _publish(self):
        owner = self.owner
        owner.committed = self.committed
        owner.assigned = self.assigned
        owner.pending = self.mode == "sync" and self.committed < self.assigned
        owner.refusing = self.mode == "async" or self.failed is not None

    # -- submitting effects ------------------------------------------------------------------
    def submit(self, effects, dirty) -> int:
        """Adds a command's effects to the open batch, with the keys they touched (dirty: [(db_id, key)],
        None when unknown). Returns the index the reply must wait for (sync), else 0."""
        if not effects:
            return 0
        index = self._batch_index
        if not index:
            index = self._open_batch()
        self._batch.extend(effects)
        if dirty is None:
            self.barrier = index
        elif dirty:
            marks = self._dirty_by_index[index]
            d = self.dirty
            for dk in dirty:
                d[dk] = index
            marks.extend(dirty)
        return index if self.mode == "sync" else 0

    def _open_batch(self):
        self.assigned += 1
        index = self._batch_index = self.assigned
        self._uncommitted[index] = self.clock_ms()
        self._dirty_by_index[index] = []
        owner = self.owner
        owner.assigned = index
        if self.mode == "sync":
            owner.pending = True
        self.loop.call_soon(self._close_batch)
        return index

    def read_ticket(self, db_id, keys) -> int:
        """For a read in sync mode: the index of the newest uncommitted write among keys (or of a write
        whose keys are unknown), or 0."""
        committed = self.committed
        if self.mode != "sync" or committed >= self.assigned:
            return 0
        best = self.barrier
        dirty = self.dirty
        for k in keys:
            i = dirty.get((db_id, k), 0)
            if i > best:
                best = i
        return best if best > committed else 0

    def barrier_ticket(self) -> int:
        """For reads that see the whole keyspace (KEYS, SCAN, DBSIZE, EXEC, scripts): everything issued."""
        if self.mode != "sync" or self.committed >= self.assigned:
            return 0
        return self.assigned

    def _close_batch(self):
        index = self._batch_index
        if not index or self._in_flight:
            # One append in flight at a time: what arrives meanwhile joins the open batch, which is
            # closed when the append completes (group commit; on JetStream also the fencing rule).
            return
        effects = self._batch
        self._batch = []
        self._batch_index = 0
        payload = encode_effects(effects)
        self.appended_bytes += len(payload)
        self._in_flight = True
        try:
            fut = asyncio.ensure_future(self.journal.append(payload), loop=self.loop)
        except Exception as exc:  # noqa: BLE001 - a closed/failed journal raises at call time
            fut = self.loop.create_future()
            fut.set_exception(exc)
        fut.add_done_callback(lambda f, i=index: self._on_appended(i, f))

    def _on_appended(self, index, fut):
        self._in_flight = False
        if self._batch_index and self.failed is None:
            self._close_batch()  # what gathered during the append leaves now, not an iteration later
        exc = fut.exception()
        if exc is not None:
            # A journal that cannot persist must never acknowledge: hold every later reply and
            # stop accepting writes; the operator sees it in the log and INFO.
            if self.failed is None:
                log.error("journal append of entry %d failed: %r; writes are refused from now on", index, exc)
            self.failed = exc
            self._publish()
            return
        if index <= self.committed:
            return
        self.committed = index
        self._uncommitted.pop(index, None)
        dirty = self.dirty
        for dk in self._dirty_by_index.pop(index, ()):
            if dirty.get(dk) == index:
                del dirty[dk]
        if self.barrier <= index:
            self.barrier = 0
        self._publish()
        self.owner.on_commit(index)

    # -- async mode: lag and backpressure ----------------------------------------------------
    def lag_ms(self) -> int:
        if not self._uncommitted:
            return 0
        oldest = min(self._uncommitted.values()) if len(self._uncommitted) > 1 else next(
            iter(self._uncommitted.values()))
        return max(0, self.clock_ms() - oldest)

    def refuse_writes(self):
        """Error text if writes must be refused now (journal failed, or async buffer exceeded)."""
        if self.failed is not None:
            return "ERR the journal failed; writes are refused: %s" % (self.failed,)
        if self.mode != "async":
            self.traffic_management_active = False
            return None
        if self._uncommitted and self.lag_ms() > self.buffer_ms:
            self.traffic_management_active = True
            self.buffer_exceeded_errors += 1
            return messages.CLUSTERDOWN_DURABILITY.format(self.buffer_ms)
        self.traffic_management_active = False
        return None

    def set_mode(self, mode):
        """Switch between sync and async live. Replies already held keep waiting for their commit;
        nothing is refused or stalled by the switch itself."""
        if mode not in ("sync", "async"):
            raise ValueError("live switch is between async and sync")
        self.mode = mode
        self._publish()

    async def drain(self, timeout_s=30.0):
        """Waits until everything issued is committed (shutdown, snapshot, hand-over)."""
        self._close_batch()
        deadline = time.monotonic() + timeout_s
        while self.committed < self.assigned and self.failed is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.committed >= self.assigned
