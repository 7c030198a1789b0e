"""WriteTracker: group commit of effects into journal entries, the commit index, and the uncommitted keys.

Effects of all commands executed in one event-loop iteration form one batch, appended to the journal as one
entry (group commit). In `sync` mode a reply is held until the entry holding its effects is committed, and a
read of a key with an uncommitted write is held until that write commits. In `async` mode replies leave at
once; the lag is the age of the oldest uncommitted batch, and above `durability-buffer-ms` writes are refused
until it falls.

Indices: the tracker issues one append per batch, in order, so the entry index of a batch is known when the
batch is opened; replies are tagged with it and released when the commit index reaches it. Up to `window`
batches are being appended at once: the journal's `max_appends_in_flight` (1 when it has none), less while
the journal's round trips show entries queueing (WINDOW_QUEUED_MIN/MAX); what arrives while the window is full
joins the open batch, which leaves when the oldest completes. The journal
acknowledges appends in order only (the contiguous prefix), so the commit index never skips a batch. A
journal with append_notify (the local one) reports each append through a callback in the iteration that
completes it (the JetStream one in the iteration that read the answer); the others through the awaitable of
append(), whose done callback runs one iteration later.

Bounds (docs/design.md "Bounds on the write path"): a journal entry holds at most the journal's `max_entry_bytes`.
The encoded size of the open batch is counted as effects join it; an effect that would take it past the
limit seals it and hands it to the journal at once, window or not (the backend queues what it cannot send
yet), and a new batch opens behind it. One command whose effects alone exceed the limit is carried in
continuation parts (journal/codec.py encode_parts): n consecutive entries whose indices are given out
together, and the command's ticket is the last part's, so its reply waits for every part.

The indices here are the tracker's own: a JetStream writer that steps over a deposed primary's entries gets
stream sequences ahead of them. The appends' answers say where each batch landed; journal_index() turns a
tracker index into the journal's (WAIT compares it with the replicas' applied journal positions).

A journal that takes longer than `stall_ms` (config journal-append-stall-ms) to acknowledge its oldest
append calls on_stall(age_ms) once (a shard primary steps down rather than keep a lease while nothing
commits); 0 turns that off. `oldest_append_age_ms()` is that age for INFO. The tracker
keeps its owner (durability.Durability) current: committed, assigned, pending (a sync write is uncommitted)
and refusing (writes must ask refuse_writes()), and calls owner.on_commit(index) after each commit.
"""

import asyncio
import bisect
import collections
import functools
import logging
import time

from .. import messages
from ..journal import codec

log = logging.getLogger("durakv.durability")

RETRY_MIN_S = 0.1    # first retry of a failed journal; doubling up to
RETRY_MAX_S = 5.0
# The retry's no-op entry (a PING) is padded to the size of the largest entry that failed, and to at least this:
# a bare PING fits in the few bytes a full disk leaves in the journal's last page, so the journal "persisted
# again", the next write failed again, and every such round reloaded the dataset from disk. As Valkey clears its
# AOF write error only once its pending buffer is written, writes resume once an entry of their size fits.
# At most PROBE_MAX_BYTES: the retries go on every few seconds while the disk stays full, and writing (then
# cutting) an entry as large as a journal entry may be (16 MiB) each time would be the outage's largest cost.
PROBE_MIN_BYTES = 64 * 1024
PROBE_MAX_BYTES = 1024 * 1024
# debug-ack-before-commit: how late each batch is appended. Long enough that a kill always finds acknowledged
# writes unappended even when a loaded machine stalls the writers for a few hundred milliseconds.
ACK_BEFORE_COMMIT_DELAY_S = 0.5
# Group commit with one append in flight (the local journal): when an append completes, the batch gathered
# meanwhile holds only the writers the previous commit did not answer; the ones it just answered come back
# one round trip later. Waiting for them (at most this long, and half the commit's own time) makes one fsync
# of both groups instead of two alternating half-size ones, as redis-server's appendfsync always gets by
# fsyncing once per event-loop iteration. The same when the first of a commit's answered writers opens the
# next batch. Polled each loop iteration (call_soon), not a timer: the loop's
# timers count whole milliseconds.
COALESCE_MAX_S = 0.0005
# The window of appends in flight adapts to the journal's latency (journals that take more than one: JetStream),
# as TCP Vegas adapts its congestion window: each commit's round trip against the least one seen lately (the
# journal's latency when nothing queues) tells how many of the appends in flight wait in a queue rather than
# travel: in_flight * (1 - base / rtt). Above WINDOW_QUEUED_MAX the window shrinks by one, below
# WINDOW_QUEUED_MIN it grows by one (if it held batches back meanwhile), at most once per round trip. A window
# that only grows fills NATS with small entries when it is short of CPU: each entry costs its servers a Raft
# round, two fsyncs each and their wake-ups whatever its size (docs/commit-path.md), so past the point where
# entries queue, a smaller window makes fewer, larger ones at the same latency.
WINDOW_QUEUED_MIN = 1.0
WINDOW_QUEUED_MAX = 3.0
BASE_RTT_PERIOD_S = 5.0     # the least round trip is the least of this period's and the one before


class Buckets:
    """Counts of observed seconds per upper bound (a Prometheus histogram's buckets, not cumulative), their
    sum and count: plain ints and floats kept by the event loop, copied whole by whoever publishes them."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)    # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds):
        # the first bound >= seconds (the bucket a Prometheus histogram counts it in), found in C: a Python loop
        # over the 16 bounds cost ~2k instructions of every commit
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def copy(self):
        """(bounds, counts, sum, count) as they are now."""
        return self.bounds, list(self.counts), self.sum, self.count


# A journal entry's commit latency (handed to the journal -> acknowledged): a local fsync is sub-millisecond
# to a few ms, a JetStream append over three AZs a few ms to tens.
COMMIT_LATENCY_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                         2.5, 5.0, 10.0)


class WriteTracker:
    """Batches the effects of writes into journal entries and tracks their commits.

    The open batch is the compiled core's contract (fastpath/_core.c tracker_join: a sync write of a pipeline
    joins the batch a write before it opened, in C, with the same steps as `submit`). The tracker keeps these
    public fields current, and the core reads and writes only them:

    batch_index    the open batch's journal index, 0 while none is open
    batch_effects  its effects (a list the core extends)
    batch_bytes    their encoded size so far, batch_db the database of the last one (a change costs a SELECT);
                   kept only while the journal has an entry limit (`max_entry_bytes`), which the core checks
    batch_keys     the (db_id, key) pairs its writes touched (a list the core extends; `uncommitted` maps each
                   to the newest index that wrote it, which the core sets too)
    close_at       0, or the number of effects at which the open batch closes now: it waits for the writers the
                   last commit answered (group commit); the core calls close_batch() once the batch holds them
    close_batch()  closes the open batch (it goes to the journal unless the append window is full)
    open_batch()   opens a batch while none is open (batch_index 0) and returns its index; the core then joins
                   it. It is called only for effects that fit an entry (`max_entry_bytes`): a batch opened
                   for them is never sealed at once

    Sealing a full batch, parts, promised pushes, async mode and feeds stay in `submit`."""

    def __init__(self, journal, owner, mode="sync", buffer_ms=10000, loop=None, clock_ms=None):
        self.journal = journal
        self.owner = owner
        self.mode = mode
        self._buffer_ms = buffer_ms
        self._over_buffer = False           # async: the oldest uncommitted batch is older than buffer_ms
        self._buffer_handle = None          # the timer that looks when it will be
        self.loop = loop or asyncio.get_event_loop()
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.committed = journal.commit_index
        self.assigned = self.committed      # index of the newest batch handed out
        self.batch_effects = []             # effects of the open batch (the class docstring: the core's contract)
        self.batch_index = 0                # 0 = no open batch
        self.batch_bytes = 0                # encoded size of the open batch so far
        self.batch_db = None                # database of its last effect (a change costs a SELECT)
        self.batch_keys = None              # the keys its writes touched (_keys_by_index[batch_index])
        self._last_batch_effects = 0        # effects of the batch appended last
        self._coalesce_handle = None        # the poll of a batch waiting for answered writers (COALESCE_MAX_S)
        self.close_at = 0                   # ... the number of effects that closes it sooner (0: not waiting)
        self._coalesce_until = 0.0          # ... and its deadline (perf_counter s)
        self._answered = 0                  # effects of the last completed append,
        self._answered_s = 0.0              # ... when it completed (perf_counter s),
        self._commit_s = 0.0                # ... and how long it took
        self._sent_s = 0.0                  # when the newest append was handed over (clock_s)
        self.coalesced_batches = 0          # batches that waited so (INFO durability)
        self.clock_s = time.perf_counter    # the group commit's clock (tests inject one)
        self._sent_ms = collections.deque()  # (index, ms, perf_counter s, bytes) of appends handed to the journal,
        # oldest first
        self.commit_latency = None     # Buckets of each entry's commit latency (Durability's: kept across trackers)
        self._journal_delta = 0             # journal index - tracker index of the newest acknowledged batch
        self._delta_changes = []            # [(first tracker index, delta)] where that difference grew
        self._inner_parts = set()           # indices of parts before a command's last part: never a commit point
        self.sealed_batches = 0             # batches closed because the next effect would pass the limit
        self.part_entries = 0               # entries written as continuation parts
        self.stall_ms = 0                   # on_stall after an append unacknowledged this long (0: never)
        self.on_stall = None                # fn(age_ms)
        self.stalls = 0
        self._stall_handle = None
        self._uncommitted = {}              # index -> started_ms, for the lag
        self.uncommitted = {}               # (db_id, key) -> index of its newest uncommitted write
        self._keys_by_index = {}           # index -> list of (db_id, key)
        self.barrier = 0                    # newest uncommitted write whose keys are not known
        self.buffer_exceeded_errors = 0
        self.traffic_management_active = False
        self.failed = None                  # the journal failed: no more acknowledgements
        self.appended_bytes = 0
        self.failed_batches = 0             # appends that failed (INFO durability)
        self.retries = 0                    # probes of a failed journal
        self._probe_bytes = PROBE_MIN_BYTES  # the size of the probe's entry (_probe_entry)
        self._retry_delay_s = RETRY_MIN_S
        self._retry_handle = None
        self._in_flight = 0                 # batches handed to the journal and not yet acknowledged
        self.max_in_flight = max(1, int(getattr(journal, "max_appends_in_flight", 1)))
        self.window = self.max_in_flight    # appends in flight allowed now (adapts: WINDOW_QUEUED_MIN/MAX)
        self._held_back = False             # a batch waited for room since the window last changed
        self._adjust_after = 0              # the window changes again once an entry issued after this commits
        self._base_cur = self._base_prev = float("inf")   # least round trips of this period and the one before
        self._base_period_end = 0.0
        self.window_shrinks = 0             # INFO durability
        self.window_grows = 0
        self._generation = 0                # bumped by _fail: completions of appends issued before are stale
        self.read_waits = 0                 # reads (sync) answered only after a commit: they touched a pending write
        self.ack_before_commit = getattr(owner, "ack_before_commit", False)   # tests only (config.py)
        self._publish()

    def _publish(self):
        owner = self.owner
        owner.committed = self.committed
        owner.assigned = self.assigned
        owner.pending = self.mode == "sync" and self.committed < self.assigned
        # Writes ask refuse_writes() only when it may refuse: a failed journal, or (async) a batch older than
        # the buffer, which a timer notices. Refusing in every async write sent every command of that mode off
        # the pipeline's fast path into full admission (issue 18).
        refusing = self.failed is not None or (self._over_buffer and self.mode == "async")
        if refusing != owner.refusing:   # (written where it changes: Durability.refusing tells the core's state)
            owner.refusing = refusing

    @property
    def buffer_ms(self) -> int:
        return self._buffer_ms

    @buffer_ms.setter
    def buffer_ms(self, value):
        """durability-buffer-ms changed live: the refusal state follows at once."""
        self._buffer_ms = value
        self._check_buffer()

    def _arm_buffer_check(self):
        """Async: a timer for the moment the oldest uncommitted batch passes the buffer (none while it is
        past it: each commit looks again, see _on_appended)."""
        if self.mode != "async" or self._buffer_handle is not None or self._over_buffer or not self._uncommitted:
            return
        oldest_ms = next(iter(self._uncommitted.values()))   # indices are issued in order: the first is oldest
        due_ms = oldest_ms + self._buffer_ms + 1 - self.clock_ms()
        self._buffer_handle = self.loop.call_later(max(0, due_ms) / 1000.0, self._check_buffer)

    def _check_buffer(self):
        if self._buffer_handle is not None:
            self._buffer_handle.cancel()
            self._buffer_handle = None
        over = self.mode == "async" and bool(self._uncommitted) and self.lag_ms() > self._buffer_ms
        if over != self._over_buffer:
            self._over_buffer = over
            if not over:
                self.traffic_management_active = False
            self._publish()
        self._arm_buffer_check()

    # -- submitting effects ------------------------------------------------------------------
    @property
    def max_entry_bytes(self) -> int:
        """The journal's entry limit (0: none); read each time, a JetStream limit comes from its server."""
        return getattr(self.journal, "max_entry_bytes", 0) or 0

    def submit(self, effects, touched) -> int:
        """Adds a command's effects to the open batch, with the keys they touched (touched: [(db_id, key)],
        None when unknown). Returns the index the reply must wait for (sync), else 0."""
        if not effects:
            return 0
        limit = getattr(self.journal, "max_entry_bytes", 0) or 0   # (max_entry_bytes inlined: every write)
        index = self.batch_index
        if limit:
            size, db = codec.effects_size(effects, self.batch_db if index else None)
            if index and self.batch_bytes + size > limit:
                self._seal()
                index = 0
                size, db = codec.effects_size(effects, None)
            if not index and size > limit:
                index = self._submit_parts(effects, limit)
            else:
                if not index:
                    index = self.open_batch()
                self.batch_effects.extend(effects)
                self.batch_bytes += size
                self.batch_db = db
        else:
            if not index:
                index = self.open_batch()
            self.batch_effects.extend(effects)
        if self.close_at and len(self.batch_effects) >= self.close_at:
            self.close_batch()    # the writers the last commit answered are back: one fsync for all
        if touched is None:
            self.barrier = index
        elif touched:
            marks = self._keys_by_index[index]
            d = self.uncommitted
            for dk in touched:
                d[dk] = index
            marks.extend(touched)
        if self.owner.promised_index:
            # pushes raised while these effects were produced were promised the batch open then; a full
            # batch sealed above put the effects in a later one, which they must wait for instead
            self.owner.placed(index)
        if self.mode != "sync" or self.ack_before_commit:
            return 0   # async; or the test-only broken mode, which acknowledges before the commit
        return index

    def _issue(self, count=1):
        """Gives out the next `count` indices (a batch, or the parts of one); returns the last."""
        self.assigned += count
        index = self.assigned
        self._uncommitted[index] = self.clock_ms()   # the lag: a command in parts counts from its last part
        self._keys_by_index[index] = []
        owner = self.owner
        owner.assigned = index
        if self.mode == "sync":
            owner.pending = True
        elif self._buffer_handle is None:
            self._arm_buffer_check()
        return index

    def _submit_parts(self, effects, limit):
        """One command's effects larger than an entry: its parts go to the journal now, in order, behind
        everything handed over before (no batch is open: the caller sealed it). Returns the last part's index."""
        parts = codec.encode_parts(codec.effect_pieces(effects), limit)
        index = self._issue(len(parts))
        first = index - len(parts) + 1
        self.part_entries += len(parts)
        self._inner_parts.update(range(first, index))
        for k, payload in enumerate(parts):
            self._append(first + k, payload)
        return index

    def _seal(self):
        """The open batch is full: it goes to the journal now, even past the window (the backend queues it)."""
        self.sealed_batches += 1
        self._append(*self._take_batch())

    def _take_batch(self):
        """(index, payload) of the open batch, which is closed: the next write opens another."""
        index, effects = self.batch_index, self.batch_effects
        self.batch_effects = []
        self.batch_index = 0
        self.batch_bytes = 0
        self.batch_db = None
        self.batch_keys = None
        self._last_batch_effects = len(effects)
        self.close_at = 0
        if self._coalesce_handle is not None:
            self._coalesce_handle.cancel()
            self._coalesce_handle = None
        return index, codec.encode_effects(effects)

    def _coalesce(self, target):
        """The open batch waits until it holds `target` effects or a deadline after the last commit."""
        self.close_at = target
        self._coalesce_until = self._answered_s + min(COALESCE_MAX_S, self._commit_s / 2)
        self.coalesced_batches += 1
        self._coalesce_handle = self.loop.call_soon(self._close_coalesced)

    def _close_coalesced(self):
        if self.clock_s() < self._coalesce_until:
            self._coalesce_handle = self.loop.call_soon(self._close_coalesced)   # one more loop iteration
            return
        self._coalesce_handle = None
        self.close_at = 0
        if self.failed is None:
            self.close_batch()

    def open_batch(self) -> int:
        """Opens a batch (none is open) and returns its index: the next index, and when it closes (this loop
        iteration's end, or once the writers the last commit answered are back). The compiled core calls it
        for the first write of a batch and then joins it as for any other (the class docstring)."""
        index = self.batch_index = self._issue()
        self.batch_keys = self._keys_by_index[index]
        if self.ack_before_commit:
            # The broken mode (tests only) also appends late, so that a crash always loses acknowledged writes
            self.loop.call_later(ACK_BEFORE_COMMIT_DELAY_S, self.close_batch)
        elif (self._answered > 1 and self.max_in_flight == 1 and not self._in_flight
              and self.clock_s() - self._answered_s < self._commit_s):
            # the first writer back from a commit that answered several: wait for the others (COALESCE_MAX_S)
            self._coalesce(self._answered)
        else:
            self.loop.call_soon(self.close_batch)
        return index

    def next_index(self) -> int:
        """The index that effects submitted right now would get: the open batch's, or the next one. What a
        push derived from effects not submitted yet (a keyspace event raised while its command runs) waits
        for, in either mode."""
        return self.batch_index or self.assigned + 1

    def _late_batch_due(self) -> bool:
        opened_ms = self._uncommitted.get(self.batch_index)
        return opened_ms is None or self.clock_ms() - opened_ms >= ACK_BEFORE_COMMIT_DELAY_S * 1000

    def read_ticket(self, db_id, keys) -> int:
        """For a read in sync mode: the index of the newest uncommitted write among keys (or of a write
        whose keys are unknown), or 0."""
        committed = self.committed
        if self.mode != "sync" or committed >= self.assigned:
            return 0
        best = self.barrier
        uncommitted = self.uncommitted
        for k in keys:
            i = uncommitted.get((db_id, k), 0)
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

    def close_batch(self):
        index = self.batch_index
        if not index or self._in_flight >= self.window:
            # The window is full: what arrives meanwhile joins the open batch, which is closed when the
            # oldest append completes (group commit).
            if index:
                self._held_back = True
            return
        self._append(*self._take_batch())

    def _append(self, index, payload):
        """Hands entry `index` to the journal (its position is fixed by this call: journal contract)."""
        size = len(payload)
        self.appended_bytes += size
        self._in_flight += 1
        self._sent_ms.append((index, self.clock_ms(), self.clock_s(), size))
        self._sent_s = self.clock_s()
        if self.stall_ms and self._stall_handle is None:
            self._stall_handle = self.loop.call_later(self.stall_ms / 1000.0, self._check_stall)
        generation = self._generation
        notify = getattr(self.journal, "append_notify", None)
        try:
            if notify is not None:
                # The local journal calls back in the iteration its batch completes: the replies leave then,
                # not one iteration later as a future's done callback would (issue 18)
                # (a partial, made and called in C, where a lambda was a Python frame more per commit)
                notify(payload, functools.partial(self._on_appended, index, generation))
                return
            fut = asyncio.ensure_future(self.journal.append(payload), loop=self.loop)
        except Exception as exc:  # noqa: BLE001 - a closed/failed journal raises at call time
            fut = self.loop.create_future()
            fut.set_exception(exc)
        fut.add_done_callback(lambda f, i=index, g=generation: self._on_appended(
            i, g, None if f.exception() is not None else f.result(), f.exception()))

    def _adapt_window(self, index, rtt, now):
        """One commit's round trip `rtt` (s): the window follows it (WINDOW_QUEUED_MIN/MAX above)."""
        if now >= self._base_period_end:
            self._base_prev, self._base_cur = self._base_cur, rtt
            self._base_period_end = now + BASE_RTT_PERIOD_S
        elif rtt < self._base_cur:
            self._base_cur = rtt
        if index <= self._adjust_after or rtt <= 0:
            return
        base = min(self._base_prev, self._base_cur)
        queued = (self._in_flight + 1) * (1.0 - base / rtt)
        if queued > WINDOW_QUEUED_MAX and self.window > 1:
            self.window -= 1
            self.window_shrinks += 1
        elif queued < WINDOW_QUEUED_MIN and self.window < self.max_in_flight and self._held_back:
            self.window += 1
            self.window_grows += 1
        else:
            return
        self._held_back = False
        self._adjust_after = self.assigned      # once per round trip: judge the new window by its own entries

    def oldest_append_age_ms(self) -> int:
        """How long the oldest append handed to the journal has waited for its acknowledgement (0: none)."""
        sent = self._sent_ms
        return max(0, self.clock_ms() - sent[0][1]) if sent else 0

    def _check_stall(self):
        self._stall_handle = None
        if not self.stall_ms or not self._sent_ms:
            return
        age_ms = self.oldest_append_age_ms()
        if age_ms < self.stall_ms:
            self._stall_handle = self.loop.call_later((self.stall_ms - age_ms) / 1000.0, self._check_stall)
            return
        self.stalls += 1
        log.error("journal append of entry %d not acknowledged for %d ms (journal-append-stall-ms %d)",
                  self._sent_ms[0][0], age_ms, self.stall_ms)
        if self.on_stall is not None:
            self.on_stall(age_ms)
        else:
            # Nobody to step down: look again one bound later (the age stays in INFO meanwhile).
            self._stall_handle = self.loop.call_later(self.stall_ms / 1000.0, self._check_stall)

    def journal_index(self, index) -> int:
        """The journal's index of tracker index `index` (equal unless the journal stepped over entries of
        others; for an index not acknowledged yet, the least it can be)."""
        for first, delta in reversed(self._delta_changes):
            if index >= first:
                return index + delta
        return index

    def _on_appended(self, index, generation, where, exc):
        """Entry `index` was appended at journal index `where`, or failed with `exc`."""
        if generation != self._generation:
            return  # issued before a failure that already answered for it
        self._in_flight -= 1
        if exc is not None:
            self._fail(index, exc)
            return
        sent = self._sent_ms
        now = self.clock_s()
        commit_s = now - self._sent_s if sent else 0.0
        latency = self.commit_latency
        rtt = None
        while sent and sent[0][0] <= index:
            rtt = now - sent.popleft()[2]
            if latency is not None:
                latency.observe(rtt)
        if rtt is not None and self.max_in_flight > 1:
            self._adapt_window(index, rtt, now)
        if type(where) is int and where - index != self._journal_delta:
            # The journal put this entry further on (it stepped over a deposed writer's entries).
            self._journal_delta = where - index
            self._delta_changes.append((index, self._journal_delta))
        if self._inner_parts and index in self._inner_parts:
            # Not a whole command yet: the commit index (what snapshots and replies go by) waits for its last part.
            self._inner_parts.discard(index)
            return
        answered = self._last_batch_effects
        self._answered, self._answered_s, self._commit_s = answered, now, commit_s
        if self.batch_index and self.failed is None and (not self.ack_before_commit or self._late_batch_due()):
            if self.max_in_flight == 1 and not self.ack_before_commit and answered:
                # the writers just answered are likely to write again: wait for them (COALESCE_MAX_S)
                self._coalesce(len(self.batch_effects) + answered)
            else:
                self.close_batch()  # what gathered during the append leaves now, not an iteration later
        if index <= self.committed:
            return
        self.committed = index
        self._uncommitted.pop(index, None)
        uncommitted = self.uncommitted
        for dk in self._keys_by_index.pop(index, ()):
            if uncommitted.get(dk) == index:
                del uncommitted[dk]
        if self.barrier <= index:
            self.barrier = 0
        owner = self.owner
        if self._over_buffer:
            self._check_buffer()   # the lag fell with this commit, perhaps below the buffer
            self._publish()
        else:
            # _publish's fields that a commit changes, inline (a frame less on every commit): assigned and
            # refusing move only where they are published (_issue, _fail, _probe, _check_buffer)
            owner.committed = index
            owner.pending = self.mode == "sync" and index < self.assigned
        owner.on_commit(index)

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
        self.batch_effects = []
        self.batch_index = 0
        self.batch_bytes = 0
        self.batch_db = None
        self.batch_keys = None
        self.close_at = 0
        if self._coalesce_handle is not None:
            self._coalesce_handle.cancel()
            self._coalesce_handle = None
        self._probe_bytes = min(PROBE_MAX_BYTES, max([PROBE_MIN_BYTES] + [sent[3] for sent in self._sent_ms]))
        self._sent_ms.clear()
        self._inner_parts.clear()
        self.assigned = self.committed     # the journal gives the failed indices again (its contract)
        self._uncommitted.clear()
        self.uncommitted.clear()
        self._keys_by_index.clear()
        self.barrier = 0
        self.failed = exc
        self.failed_batches += 1
        self._check_buffer()    # nothing is uncommitted any more: no buffer to be past
        self._publish()
        self.owner.on_failure(first, exc)
        if self._retry_handle is None and hasattr(self.journal, "resume"):
            self._retry_handle = self.loop.call_later(self._retry_delay_s, self._start_probe)

    def _start_probe(self):
        self._retry_handle = None
        asyncio.ensure_future(self._probe(), loop=self.loop)

    def _probe_entry(self) -> bytes:
        """The retry's entry: PING with a padding argument (replay and replicas answer it and change nothing), as
        large as the largest entry that failed (PROBE_MIN_BYTES to PROBE_MAX_BYTES), within the journal's entry
        limit."""
        size = self._probe_bytes
        limit = self.max_entry_bytes
        if limit:
            size = min(size, limit - 1024)    # (the effect's own framing stays within the limit)
        return codec.encode_effects([(0, (b"PING", b"x" * max(0, size)))])

    async def _probe(self):
        """One retry: the journal takes a no-op entry (PING: replay ignores it) and commits it, or fails again."""
        self.retries += 1
        journal = self.journal
        try:
            if journal.broken:
                await journal.close()
                await journal.open(base_index=self.committed)
            journal.resume()
            index = await journal.append(self._probe_entry())
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
        self._check_buffer()
        self._publish()

    def close(self):
        if self._buffer_handle is not None:
            self._buffer_handle.cancel()
            self._buffer_handle = None
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None
        if self._stall_handle is not None:
            self._stall_handle.cancel()
            self._stall_handle = None

    @property
    def all_committed(self) -> bool:
        """Everything issued is committed (an open batch has its index assigned already)."""
        return self.committed >= self.assigned

    async def drain(self, timeout_s=30.0):
        """Waits until everything issued is committed (shutdown, snapshot, hand-over)."""
        self.close_batch()
        deadline = time.monotonic() + timeout_s
        while not self.all_committed and self.failed is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.all_committed


def failure_reason(exc) -> str:
    """What the operator and the client are told about a journal failure: the OS error if there is one."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    text = getattr(cause, "strerror", None)
    if text and getattr(cause, "filename", None):
        return "%s (%s)" % (text, cause.filename)     # the file the disk refused (errors.with_path)
    return text or str(cause) or type(cause).__name__
