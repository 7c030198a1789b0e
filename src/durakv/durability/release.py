"""Durability: the only place that decides when a reply may leave.

One Durability object lives as long as the process. Its policy is swappable: `attach(journal, mode)` puts a
journal behind it (a WriteTracker batching effects into entries: `sync` or `async`), `detach()` takes it away
(durability `none`, or a replica, which never journals). The pipeline hands it each write's effects with the
keys they touched (`submit`) and asks it whether a read must wait (`read_ticket`, `barrier_ticket`) and
whether writes must be refused now (`refusing`, `refuse_writes`); what it answers is a ticket, 0 meaning
"may leave now", else the journal index the reply waits for.

Each connection has an Outbox: the connection gives it every encoded reply with its ticket, in request
order, and writes what the outbox releases. Replies whose ticket is committed leave at once; the others are
held, and so is everything behind them (request order). A Deferred reply (WAIT, WAITAOF, BGSAVE, CLUSTER
FAILOVER, a served blocked command, a long script) is held the same way until its producer resolves it and
its own index commits. Out-of-band pushes (pub/sub, invalidations, MONITOR) queue behind held replies.

The rule for everything else that leaves: nothing derived from an uncommitted write leaves the process before
that write commits. Every reply, push and replication-stream chunk carries a ticket; a push derived from
effects (a keyspace event, a SYNC feed chunk) carries the index of the batch those effects join
(`push_ticket`, in async mode too: there only the writer's own reply leaves early), an export of the whole
dataset (SYNC's RDB) carries `export_ticket`. A held push whose batch fails to persist is dropped (the write it
describes never happened); a held reply is answered with the journal's error instead. MONITOR is the one
exception: it shows commands as they arrive, as Valkey does (its pushes carry ticket 0). Tracking
invalidations are sent early (ticket 0) on purpose: they carry no value, a client that re-reads is held by
read_ticket until the commit, and holding them could only make them late.
"""

import heapq
import itertools
from operator import attrgetter

from .. import messages
from ..keyspace.db import FeedOnly
from ..protocol.resp import Deferred
from .tracker import COMMIT_LATENCY_BOUNDS, Buckets, WriteTracker, failure_reason


def _no_ticket(*_args):
    return 0


def _no_refusal():
    return None


class Durability:
    # read per batch by the compiled core at their offsets (fastpath/_core.c; `waiting` per held reply); the rest
    # in the dict. `refusing`
    # is an input of the core's decision to run: it is published to the core's state (core_state) where it changes
    __slots__ = ("_refusing", "tracker", "feeds", "needs_touched", "assigned", "committed", "pending", "core_state",
                 "waiting", "__dict__", "__weakref__")

    # What the pipeline calls on every command, bound to the current policy's functions by _use (instance
    # attributes, so no extra call layer): submit(effects, touched) -> ticket, read_ticket(db_id, keys) ->
    # ticket, barrier_ticket() -> ticket, refuse_writes() -> error text or None.

    def __init__(self, loop=None, clock_ms=None):
        self.core_state = None     # the compiled core's state, once a server's pipeline binds it
        self.loop = loop
        self.clock_ms = clock_ms
        self.tracker = None
        self.journal = None
        self.committed = 0
        self.assigned = 0
        self.pending = False       # a sync write is uncommitted: reads may have to wait
        self.needs_touched = False   # a journal is attached: the keys each write touched are wanted
        self._refusing = False     # writes must ask refuse_writes() (async buffer, failed journal)
        self.waiting = set()       # outboxes holding a reply for a commit
        self.commit_latency = Buckets(COMMIT_LATENCY_BOUNDS)   # every tracker's entries (the metrics port)
        self.commit_listeners = []  # fn(index) after each commit (snapshots, stats)
        self.failure_listeners = []  # fn(first_index, exc) after the journal failed to persist from first_index
        self._commit_waiters = []   # heap of (index, seq, fn, failed or None): WAITAOF and the like
        self._seq = itertools.count()
        # debug-ack-before-commit (tests only, refused without DURAKV_TEST_UNSAFE=1): sync replies do not wait
        self.ack_before_commit = False
        self.feeds = []             # fn(effects, ticket) per submit: Valkey replication-stream listeners (SYNC)
        # push_ticket() names the batch open while a command runs, but a command whose effects do not fit in it
        # lands in the next one: what was promised that index is moved to the real one at submit (placed()).
        self.promised_index = 0     # the index push_ticket() handed out since the last submit (0: none)
        self._fresh = []            # what was held with it: (outbox, position, item) or a commit waiter's [index]
        self._use(None)

    # -- the policy ----------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.tracker.mode if self.tracker is not None else "none"

    def attach(self, journal, mode, buffer_ms=10000):
        """Journal every write from now on (`sync` or `async`), numbering after journal.commit_index."""
        if mode not in ("sync", "async"):
            raise ValueError("a journal runs in sync or async mode")
        self.journal = journal
        tracker = WriteTracker(journal, self, mode=mode, buffer_ms=buffer_ms, loop=self.loop, clock_ms=self.clock_ms)
        tracker.commit_latency = self.commit_latency
        self._use(tracker)

    def detach(self):
        """No journal from now on (a replica, or a primary handing over). Replies already committed leave;
        call it only once everything issued is committed (drain first)."""
        tracker = self.tracker
        if tracker is not None:
            tracker.close()
            self.on_commit(tracker.committed)
        self.journal = None
        self._use(None)

    def set_mode(self, mode):
        if self.tracker is None:
            raise ValueError("durability none has no journal; restart with a journal to change it")
        self.tracker.set_mode(mode)

    def add_feed(self, fn):
        """fn(effects, ticket) for every write's effects from now on, as they are submitted; ticket is the index
        of the journal entry they join (0 without a journal): what the feed must hold its output behind."""
        self.feeds.append(fn)
        self._bind_submit()

    def remove_feed(self, fn):
        if fn in self.feeds:
            self.feeds.remove(fn)
            self._bind_submit()

    def _bind_submit(self):
        base = self.tracker.submit if self.tracker is not None else _no_ticket
        feeds = self.feeds
        if not feeds:
            self.submit = base
            return

        def submit(effects, touched):
            journaled = [e for e in effects if type(e[1]) is not FeedOnly]
            # only what Valkey's stream carries alone (a PUBLISH): no journal entry, so nothing to wait for
            ticket = base(journaled, touched) if journaled or not effects else 0
            # The batch these effects joined (the tracker answers 0 in async mode, where the reply leaves at
            # once; the feed still waits for the commit).
            index = self.assigned if self.tracker is not None and effects else 0
            for fn in list(feeds):
                fn(effects, index)
            return ticket
        self.submit = submit

    def _set_refusing(self, on):
        # (the tracker publishes after every batch: the state is written only when the answer changes)
        if on != self._refusing:
            self._refusing = on
            if self.core_state is not None:
                self.core_state.set("refusing", on)
    refusing = property(attrgetter("_refusing"), _set_refusing)   # (a C getter: read per write)

    def bind_core_state(self, state):
        """From now on whether writes are refused is written to `state` too (commands/corestate.py). One core
        per durability layer: a second state is refused."""
        if self.core_state is not None and self.core_state is not state:
            raise ValueError("this durability layer already serves another pipeline's compiled core")
        self.core_state = state
        state.set("refusing", self._refusing)

    def _use(self, tracker):
        self.tracker = tracker
        if tracker is None:
            # Instance attributes shadow the methods below: the pipeline calls them on every write.
            self.read_ticket = _no_ticket
            self.barrier_ticket = _no_ticket
            self.refuse_writes = _no_refusal
            self.pending = self.refusing = self.needs_touched = False
        else:
            self.read_ticket = tracker.read_ticket
            self.barrier_ticket = tracker.barrier_ticket
            self.refuse_writes = tracker.refuse_writes
            self.needs_touched = True
            tracker._publish()
        self._bind_submit()

    def push_ticket(self) -> int:
        """The ticket of a push derived from effects that are being produced now and not submitted yet (the
        keyspace events of a running command, of a server-side expiry): the index of the batch they will
        join, in sync and async mode alike; 0 without a journal (a replica applies only committed entries)."""
        tracker = self.tracker
        if tracker is None:
            return 0
        self.promised_index = index = tracker.next_index()
        return index

    def placed(self, index):
        """The tracker put the effects just submitted in batch `index`: whatever was promised an earlier batch
        while they were produced waits for this one."""
        promise, self.promised_index = self.promised_index, 0
        fresh, self._fresh = self._fresh, []
        if index <= promise:
            return
        for entry in fresh:
            if type(entry) is list:
                entry[0] = index
                continue
            box, pos, item = entry
            held = box.held
            if pos < len(held) and held[pos][1] is item:
                held[pos] = (index, item)

    def export_ticket(self) -> int:
        """The ticket of an export of the whole dataset as memory holds it now (SYNC's RDB, in either mode):
        everything issued so far."""
        return self.assigned if self.tracker is not None and self.assigned > self.committed else 0

    # -- commits -------------------------------------------------------------------------------
    def on_commit(self, index):
        """Called by the tracker after entry `index` committed: held replies leave, waiters run."""
        for box in list(self.waiting):
            box.release()
        heap = self._commit_waiters
        while heap and heap[0][0] <= index:
            fn = heapq.heappop(heap)[2]
            fn()
        for fn in tuple(self.commit_listeners):   # (a listener may remove itself: server._journal_healed)
            fn(index)

    def on_failure(self, first, exc):
        """Called by the tracker when nothing from journal index `first` on could be persisted: every reply
        waiting for one of those entries (the writes, and the reads that waited for them) is answered with
        an error now instead of hanging, then the owner (the server, a shard's node) is told."""
        self.promised_index, self._fresh = 0, []
        reason = failure_reason(exc)
        write_error = b"-%s\r\n" % messages.JOURNAL_FAILED_WRITE.format(reason).encode()
        for box in list(self.waiting):
            box.fail_from(first, write_error)
        heap = self._commit_waiters
        if any(w[3] is not None and w[0] >= first for w in heap):
            lost = [w for w in heap if w[3] is not None and w[0] >= first]
            self._commit_waiters = [w for w in heap if w[3] is None or w[0] < first]
            heapq.heapify(self._commit_waiters)
            for w in lost:
                w[3](reason)
        for fn in self.failure_listeners:
            fn(first, exc)

    def when_committed(self, index, fn, failed=None):
        """fn() once journal entry `index` is committed (at once if it is). If that entry cannot be persisted
        (on_failure), failed(reason) is called instead, when given; without it fn simply never runs."""
        if index <= self.committed or self.tracker is None:
            fn()
        elif index == self.promised_index:
            cell = [index]          # placed() may move it to a later batch
            self._fresh.append(cell)

            def when_placed():
                if cell[0] > self.committed:
                    heapq.heappush(self._commit_waiters, (cell[0], next(self._seq), when_placed, failed))
                else:
                    fn()
            heapq.heappush(self._commit_waiters, (index, next(self._seq), when_placed, failed))
        else:
            heapq.heappush(self._commit_waiters, (index, next(self._seq), fn, failed))

    def committed_deferred(self, index, reply) -> Deferred:
        """A Deferred resolved with reply once entry `index` is committed."""
        d = Deferred()
        self.when_committed(index, lambda: d.resolve(reply))
        return d

    async def drain(self, timeout_s=30.0):
        return await self.tracker.drain(timeout_s) if self.tracker is not None else True

    # -- replies -------------------------------------------------------------------------------
    def outbox(self, write, encode) -> "Outbox":
        return Outbox(self, write, encode)


class HeldPush(bytes):
    """A push waiting in `held`: if its batch fails to persist it is dropped, not answered with an error."""
    __slots__ = ()


class Outbox:
    """One connection's replies, in request order. `ready` is what may leave now (the connection writes it
    with one transport.write per batch); `held` is (index, bytes | HeldPush | Deferred) waiting for a commit.

    The compiled core's contract (fastpath/_core.c, "The Outbox API"): the core hands every reply over through
    `emit(ticket, data)` and `hold(ticket, data, carried)` and takes what a flush writes with `take_ready()`;
    it reads `held` and `ready` only to see whether they are empty, and `closed`, and writes no field. With the
    compiled core these three methods of this class are C functions (fastpath.install: `use_compiled`), the
    same steps as the Python ones below, which the core calls without a Python call; for a subclass it calls
    them by name. `release`, the way out of every held reply on each commit, is a C function of the class too
    (not one the core calls: Durability.on_commit does)."""

    __slots__ = ("durability", "ready", "held", "held_bytes", "write", "encode", "closed", "on_drained",
                 "limit_bytes", "over_limit", "on_limit", "on_failed", "carried_bytes", "carried_by_ticket")

    # What a held reply keeps alive besides its own bytes and the request it answers (those are counted
    # exactly: `carried`): its entry here and the effect's bookkeeping in the batch; a held Deferred counts
    # this alone.
    ENTRY_COST = 256

    def __init__(self, durability, write, encode):
        self.durability = durability
        self.ready = []
        self.held = []
        self.held_bytes = 0
        # The bytes of the requests whose held replies wait for their entry (a pipelined SET of 4 KB keeps its
        # 4 KB in the open batch until the commit, and its reply is only +OK): counted against the limit by
        # the index they wait for, and dropped when it commits (or fails).
        self.carried_bytes = 0
        self.carried_by_ticket = {}   # ticket -> carried bytes waiting for it (the compiled core adds to it too)
        self.write = write     # fn(bytes): the transport
        self.encode = encode   # fn(reply) -> bytes, in the connection's protocol
        self.closed = False
        self.on_drained = None  # fn() when the last held reply has left
        # Backpressure: past limit_bytes of held replies the connection stops reading the client (on_limit(True))
        # until they fall under half of it (on_limit(False)), as Valkey bounds a client's buffers.
        self.limit_bytes = 0
        self.over_limit = False
        self.on_limit = None
        # fn() after held replies were answered with the journal's error or held pushes dropped (a SYNC
        # connection closes then: a stream with a hole in it, or whose RDB never came, cannot go on)
        self.on_failed = None

    def emit(self, ticket, data):
        """An encoded reply: leaves with the batch unless it (or anything before it) must wait."""
        if ticket or self.held:
            self.hold(ticket, data)
        else:
            self.ready.append(data)

    def hold(self, ticket, data, carried=0):
        """A reply that waits for entry `ticket` (or for what is held before it); `carried`: the bytes of the
        request it answers, which the write keeps in memory until that entry commits."""
        self.held.append((ticket, data))
        self.held_bytes += len(data) + self.ENTRY_COST
        if ticket > self.durability.committed:
            self.durability.waiting.add(self)
            if carried:
                self.carried_bytes += carried
                c = self.carried_by_ticket
                c[ticket] = c.get(ticket, 0) + carried
        if self.limit_bytes and self.held_bytes + self.carried_bytes > self.limit_bytes and not self.over_limit:
            self.set_over(True)

    def _drop_carried(self, committed=None, failed_from=None):
        c = self.carried_by_ticket
        for ticket in [t for t in c if (committed is not None and t <= committed)
                       or (failed_from is not None and t >= failed_from)]:
            self.carried_bytes -= c.pop(ticket)

    def hold_deferred(self, deferred):
        self.held.append((0, deferred))
        self.held_bytes += self.ENTRY_COST
        deferred.listen(self.release)

    def set_over(self, over):
        """Past (True) or back under (False) the held-reply limit: tells the connection (on_limit). Called where
        the held bytes cross it, here and by the compiled core when it holds a reply."""
        self.over_limit = over
        if self.on_limit is not None:
            self.on_limit(over)

    def push(self, data, ticket=0) -> bool:
        """An out-of-band message: behind everything already queued, and not before journal entry `ticket`
        (the write it is derived from) is committed. True if it is held (it counts toward the client's output
        limits then)."""
        if ticket <= self.durability.committed:
            ticket = 0
        if not ticket and not self.held:
            self.ready.append(data)
            return False
        item = HeldPush(data)
        self.held.append((ticket, item))
        self.held_bytes += len(data) + self.ENTRY_COST
        if ticket:
            dur = self.durability
            dur.waiting.add(self)
            if ticket == dur.promised_index:
                dur._fresh.append((self, len(self.held) - 1, item))
        return True

    def release(self):
        """Moves what may leave now from held to ready, in order, and writes it."""
        held = self.held
        carried = self.carried_by_ticket
        if carried:
            if max(carried) <= self.durability.committed:   # (the usual case: one ticket, now committed)
                carried.clear()
                self.carried_bytes = 0
            else:
                self._drop_carried(committed=self.durability.committed)
        if held:
            committed = self.durability.committed
            n = 0
            for index, item in held:
                if index > committed:
                    self.durability.waiting.add(self)
                    break
                if type(item) is Deferred:
                    if not item.done:
                        break
                    if item.index > committed:
                        self.durability.waiting.add(self)
                        break
                    self.ready.append(self.encode(item.reply))
                    self.held_bytes -= self.ENTRY_COST
                else:
                    self.ready.append(item)
                    self.held_bytes -= len(item) + self.ENTRY_COST
                n += 1
            if n:
                del held[:n]
                if self.over_limit and self.held_bytes + self.carried_bytes <= self.limit_bytes // 2:
                    self.set_over(False)
            if not held:
                self.durability.waiting.discard(self)
                self.flush()
                if self.on_drained is not None:
                    self.on_drained()
                return
        self.flush()

    def fail_from(self, first, data):
        """Replies waiting for journal index `first` or later will never see it committed: `data` (an error)
        takes their place and they leave in order."""
        held = self.held
        failed = False
        if self.carried_by_ticket:
            self._drop_carried(failed_from=first)
        for i, (index, item) in enumerate(held):
            if type(item) is Deferred:
                if item.done and item.index >= first:
                    self.held_bytes += len(data) - self.ENTRY_COST
                    held[i] = (0, data)
                    failed = True
            elif index >= first:
                if type(item) is HeldPush:
                    # what it tells of (a keyspace event, a stream chunk) never happened: nothing is sent
                    self.held_bytes -= len(item)
                    held[i] = (0, HeldPush())
                    failed = True
                else:
                    self.held_bytes += len(data) - len(item)
                    held[i] = (0, data)
                    failed = True
        self.release()
        if failed and self.on_failed is not None:
            self.on_failed()

    def take_ready(self):
        """The bytes that may leave now, joined (None if none); `ready` is emptied."""
        ready = self.ready
        if not ready:
            return None
        data = ready[0] if len(ready) == 1 else b"".join(ready)
        ready.clear()
        return data

    def flush(self):
        data = self.take_ready()
        if data is not None and not self.closed:
            self.write(data)

    def close(self):
        self.closed = True
        self.held.clear()
        self.ready.clear()
        self.held_bytes = 0
        self.carried_bytes = 0
        self.carried_by_ticket.clear()
        self.durability.waiting.discard(self)


# The Python implementations of the Outbox API, which use_compiled(None) puts back.
PYTHON_OUTBOX_METHODS = {name: Outbox.__dict__[name] for name in ("hold", "emit", "take_ready", "release")}


def use_compiled(methods):
    """Installs the compiled core's implementations of the Outbox API ({name: method} for hold, emit, take_ready
    and release, from fastpath's outbox_methods(Outbox, Deferred)); None puts the Python ones back. The durability layer
    cannot import fastpath: fastpath.install hands them in."""
    for name, fn in PYTHON_OUTBOX_METHODS.items():
        setattr(Outbox, name, fn if methods is None else methods[name])
