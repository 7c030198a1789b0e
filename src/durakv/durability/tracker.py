"""WriteTracker: the only place that decides when a reply may leave.

Effects of all commands executed in one event-loop iteration form one batch, appended to the journal as one
entry (group commit). In `sync` mode a reply is held until the entry holding its effects is committed, and a
read of a key with an uncommitted write is held until that write commits. In `async` mode replies leave at
once; the lag is the age of the oldest uncommitted batch, and above `durability-buffer-ms` writes are refused
until it falls. In `none` mode there is no journal.

Indices: the tracker issues one append per batch, in order, so the entry index of a batch is known when the
batch is opened (journal.next_index); replies are tagged with it and released when commit_index reaches it.
"""

import asyncio
import logging
import time

from .. import messages
from ..recovery import encode_effects

log = logging.getLogger("durakv.durability")


class WriteTracker:
    def __init__(self, journal, mode="sync", buffer_ms=10000, loop=None, clock_ms=None):
        self.journal = journal
        self.mode = mode if journal is not None else "none"
        self.buffer_ms = buffer_ms
        self.loop = loop or asyncio.get_event_loop()
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.committed = journal.commit_index if journal is not None else 0
        self.assigned = self.committed      # index of the newest batch handed out
        self._batch = []                    # effects of the open batch
        self._batch_index = 0               # 0 = no open batch
        self._batch_started_ms = 0
        self._uncommitted = {}              # index -> started_ms, for the lag
        self.dirty = {}                     # (db_id, key) -> index of its newest uncommitted write
        self._dirty_by_index = {}           # index -> list of (db_id, key)
        self.waiters = set()                # connections holding replies for a commit
        self.buffer_exceeded_errors = 0
        self.traffic_management_active = False
        self.failed = None                  # the journal failed: no more acknowledgements
        self.commit_listeners = []          # fn(index) after each commit (snapshots, stats)
        self.appended_bytes = 0
        self._in_flight = False

    # -- submitting effects ------------------------------------------------------------------
    def submit(self, effects, keys_of) -> int:
        """Adds a command's effects to the open batch. Returns the index a reply must wait for
        (sync), else 0. keys_of(argv) -> keys touched by an effect."""
        if self.mode == "none" or not effects:
            return 0
        index = self._batch_index
        if not index:
            index = self._open_batch()
        self._batch.extend(effects)
        dirty = self.dirty
        marks = self._dirty_by_index[index]
        for db_id, argv in effects:
            for key in keys_of(argv):
                dk = (db_id, key)
                dirty[dk] = index
                marks.append(dk)
        return index if self.mode == "sync" else 0

    def _open_batch(self):
        self.assigned += 1
        index = self._batch_index = self.assigned
        now = self.clock_ms()
        self._batch_started_ms = now
        self._uncommitted[index] = now
        self._dirty_by_index[index] = []
        self.loop.call_soon(self._close_batch)
        return index

    def read_wait_index(self, db_id, keys) -> int:
        """For a read in sync mode: the index of the newest uncommitted write among keys, or 0."""
        if self.mode != "sync" or self.committed >= self.assigned:
            return 0
        dirty = self.dirty
        best = 0
        for k in keys:
            i = dirty.get((db_id, k), 0)
            if i > best:
                best = i
        return best if best > self.committed else 0

    def barrier_index(self) -> int:
        """For reads that see the whole keyspace (KEYS, SCAN, DBSIZE): wait for everything issued."""
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
            return
        if index <= self.committed:
            return
        self.committed = index
        self._uncommitted.pop(index, None)
        dirty = self.dirty
        for dk in self._dirty_by_index.pop(index, ()):
            if dirty.get(dk) == index:
                del dirty[dk]
        for conn in list(self.waiters):
            conn.on_commit(index)
        for fn in self.commit_listeners:
            fn(index)

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
        if self.journal is None:
            raise ValueError("durability none has no journal; restart with a journal to change it")
        if mode not in ("sync", "async"):
            raise ValueError("live switch is between async and sync")
        self.mode = mode

    def effective(self) -> str:
        return self.mode

    async def drain(self, timeout_s=30.0):
        """Waits until everything issued is committed (shutdown, snapshot)."""
        self._close_batch()
        deadline = time.monotonic() + timeout_s
        while self.committed < self.assigned and self.failed is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.committed >= self.assigned
