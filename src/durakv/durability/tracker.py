"""WriteTracker: group commit of effects into journal entries, the commit index, and the dirty keys.

Effects of all commands executed in one event-loop iteration form one batch, appended to the journal as one
entry (group commit). In `sync` mode a reply is held until the entry holding its effects is committed, and a
read of a key with an uncommitted write is held until that write commits. In `async` mode replies leave at
once; the lag is the age of the oldest uncommitted batch, and above `durability-buffer-ms` writes are refused
until it falls.

Indices: the tracker issues one append per batch, in order, so the entry index of a batch is known when the
batch is opened; replies are tagged with it and released when the commit index reaches it. Up to the
journal's `max_appends_in_flight` batches (1 when it has none) are being appended at once; what arrives while
that many are in flight joins the open batch, which leaves when the oldest completes. The journal
acknowledges appends in order only (the contiguous prefix), so the commit index never skips a batch. The tracker
keeps its owner (durability.Durability) current: committed, assigned, pending (a sync write is uncommitted)
and refusing (writes must ask refuse_writes()), and calls owner.on_commit(index) after each commit.
"""

import asyncio
import logging
import time

from .. import messages
from ..journal.codec import encode_effects

log = logging.getLogger("durakv.durability")

RETRY_MIN_S = 0.1    # first retry of a failed journal; doubling up to
RETRY_MAX_S = 5.0
ACK_BEFORE_COMMIT_DELAY_S = 0.2   # debug-ack-before-commit: how late each batch is appended


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
        self.failed_batches = 0             # appends that failed (INFO durability)
        self.retries = 0                    # probes of a failed journal
        self._retry_delay_s = RETRY_MIN_S
        self._retry_handle = None
        self._in_flight = 0                 # batches handed to the journal and not yet acknowledged
        self.max_in_flight = max(1, int(getattr(journal, "max_appends_in_flight", 1)))
        self._generation = 0                # bumped by _fail: completions of appends issued before are stale
        self.read_waits = 0                 # reads (sync) answered only after a commit: they touched a pending write
        self.ack_before_commit = getattr(owner, "ack_before_commit", False)   # tests only (config.py)
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
        if self.mode != "sync" or self.ack_before_commit:
            return 0   # async; or the test-only broken mode, which acknowledges before the commit
        return index

    def _open_batch(self):
        self.assigned += 1
        index = self._batch_index = self.assigned
        self._uncommitted[index] = self.clock_ms()
        self._dirty_by_index[index] = []
        owner = self.owner
        owner.assigned = index
        if self.mode == "sync":
            owner.pending = True
        if self.ack_before_commit:
            # The broken mode (tests only) also appends late, so that a crash always loses acknowledged writes
            self.loop.call_later(ACK_BEFORE_COMMIT_DELAY_S, self._close_batch)
        else:
            self.loop.call_soon(self._close_batch)
        return index

    def next_index(self) -> int:
        """The index that effects submitted right now would get: the open batch's, or the next one. What a
        push derived from effects not submitted yet (a keyspace event raised while its command runs) waits
        for, in either mode."""
        return self._batch_index or self.assigned + 1

    def _late_batch_due(self) -> bool:
        opened_ms = self._uncommitted.get(self._batch_index)
        return opened_ms is None or self.clock_ms() - opened_ms >= ACK_BEFORE_COMMIT_DELAY_S * 1000

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
        if best > committed:
            self.read_waits += 1
            return best
        return 0

    def barrier_ticket(self) -> int:
        """For reads that see the whole keyspace (KEYS, SCAN, DBSIZE, EXEC, scripts): everything issued."""
        if self.mode != "sync" or self.committed >= self.assigned:
            return 0
        self.read_waits += 1
        return self.assigned

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _close_batch(self):
        index = self._batch_index
        if not index or self._in_flight >= self.max_in_flight:
            # The window is full: what arrives meanwhile joins the open batch, which is closed when the
            # oldest append completes (group commit).
            return
        effects = self._batch
        self._batch = []
        self._batch_index = 0
        payload = encode_effects(effects)
        self.appended_bytes += len(payload)
        self._in_flight += 1
        try:
            fut = asyncio.ensure_future(self.journal.append(payload), loop=self.loop)
        except Exception as exc:  # noqa: BLE001 - a closed/failed journal raises at call time
            fut = self.loop.create_future()
            fut.set_exception(exc)
        fut.add_done_callback(lambda f, i=index, g=self._generation: self._on_appended(i, g, f))

    def _on_appended(self, index, generation, fut):
        if generation != self._generation:
            return  # issued before a failure that already answered for it
        self._in_flight -= 1
        exc = fut.exception()
        if exc is not None:
            self._fail(index, exc)
            return
        if self._batch_index and self.failed is None and (not self.ack_before_commit or self._late_batch_due()):
            self._close_batch()  # what gathered during the append leaves now, not an iteration later
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

    # -- a journal that cannot persist -------------------------------------------------------
    def _fail(self, index, exc):
        """Entry `index` could not be appended. Nothing from commit_index + 1 on is acknowledged: the batches in
        flight (the journal fails every append after a failed one), the one gathering behind them. Their replies (and the reads that waited on them) are answered
        with an error by the owner, writes are refused, and a probe retries the journal with backoff."""
        if self.failed is None:
            log.error("journal append of entry %d failed: %s; writes are refused until the journal can persist "
                      "again", index, exc)
        first = self.committed + 1
        self._generation += 1               # the other appends in flight fail with this one: answered below
        self._in_flight = 0
        self._batch = []
        self._batch_index = 0
        self.assigned = self.committed     # the journal gives the failed indices again (its contract)
        self._uncommitted.clear()
        self.dirty.clear()
        self._dirty_by_index.clear()
        self.barrier = 0
        self.failed = exc
        self.failed_batches += 1
        self._publish()
        self.owner.on_failure(first, exc)
        if self._retry_handle is None and hasattr(self.journal, "resume"):
            self._retry_handle = self.loop.call_later(self._retry_delay_s, self._start_probe)

    def _start_probe(self):
        self._retry_handle = None
        asyncio.ensure_future(self._probe(), loop=self.loop)

    async def _probe(self):
        """One retry: the journal takes a no-op entry (PING: replay ignores it) and commits it, or fails again."""
        self.retries += 1
        journal = self.journal
        try:
            if journal.broken:
                await journal.close()
                await journal.open(base_index=self.committed)
            journal.resume()
            index = await journal.append(encode_effects([(0, (b"PING",))]))
        except Exception as exc:  # noqa: BLE001 - still failing: try again later, less often
            self.failed = exc
            self._retry_delay_s = min(self._retry_delay_s * 2, RETRY_MAX_S)
            self._retry_handle = self.loop.call_later(self._retry_delay_s, self._start_probe)
            return
        log.warning("the journal persists again (entry %d committed after %d attempt(s)); writes are accepted",
                    index, self.retries)
        self.committed = self.assigned = index
        self.failed = None
        self._retry_delay_s = RETRY_MIN_S
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
            return messages.JOURNAL_FAILED_WRITES.format(failure_reason(self.failed))
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

    def close(self):
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None

    async def drain(self, timeout_s=30.0):
        """Waits until everything issued is committed (shutdown, snapshot, hand-over)."""
        self._close_batch()
        deadline = time.monotonic() + timeout_s
        while self.committed < self.assigned and self.failed is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.committed >= self.assigned


def failure_reason(exc) -> str:
    """What the operator and the client are told about a journal failure: the OS error if there is one."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
