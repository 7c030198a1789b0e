"""The `jetstream` journal backend: one NATS JetStream stream per shard, replicated R3 across AZs.

Entries are stream messages: the payload is the batch of effects, header `Durakv-Epoch` the writer's epoch;
an epoch marker is a message with an empty payload. Indices are stream sequences.

Appends are pipelined: up to `max_appends_in_flight` messages are sent before the first is acknowledged,
each conditional on the sequence the one before it will get (`Nats-Expected-Last-Sequence` = previous
expected + 1), and an append's future resolves only when every earlier one has (the contiguous prefix of
successes; a success after a failure is never acknowledged). The stream leader checks that header against
its proposed sequence before proposing, so a chain can land only whole and in order as long as no other
writer's message lands inside it; one that does (a rejection, or an unknown outcome: timeout, leader change)
stops the writer: every send in flight is abandoned, the tail after the last acknowledged entry is read
(our own entry whose ack was lost: resolved; entries of older epochs: skipped over; a marker of a newer
epoch: fenced, every pending append fails with JournalFenced and `on_fenced` is called) and what is left
is sent again, in order, conditional on the new tail.

Why fencing still holds (docs/design.md "The journal"; measured in tests/cluster/test_journal_jetstream.py):
* A deposed writer's appends that land after the new writer's marker carry an older epoch, and readers
  (EpochFilter) skip them; the deposed writer acknowledges none of them, because the append just before
  its first one after the marker was rejected (the marker took its place) and it stops at that rejection.
* A deposed writer never has more than MAX_APPENDS_IN_FLIGHT sends in flight and never slides its window
  past an append it has not seen succeed, so its sends are all conditional on positions before the new
  writer's marker M plus at most that window: none can land at or beyond M + MAX_APPENDS_IN_FLIGHT. The new
  writer therefore sends one append at a time until it holds every position below that bound (the
  probation after its first landed entry), and pipelines only after: in a window no foreign entry can land
  between two of its own, which would otherwise let a later append of the window land before an earlier
  one. An older-epoch entry seen past the probation breaks that bound and fails the journal (JournalFailed)
  instead of risking reordered entries.
* A send whose outcome is unknown is sent again conditional on the same position, unless the tail showed
  that position taken: so at most one copy of an entry can ever land, and readers never see duplicates.

Entry size: NATS refuses a message over the server's `max_payload` (headers included; nats-py raises
MaxPayloadError before sending anything), and JetStream refuses to store one over 32 MB whatever max_payload
says (error 10077 "message too large", nats-server #6798: its file store cannot index bigger records).
`max_entry_bytes` is the server's max_payload (read from the server the connection is on) less
HEADER_MARGIN_BYTES for this journal's headers, and at most MAX_ENTRY_BYTES (8 MB: NATS warns that payloads
over 8 MB perform poorly, and one big message holds up the lease renewals and heartbeats that share this
connection and the servers' routes while it is sent and replicated); the write tracker never makes a
bigger entry (it closes batches before and carries larger effects in continuation parts). A payload the
client refuses anyway (a server with a lower limit after a reconnect) fails the journal at once: it was
never sent, so it is a definite failure, not an unknown outcome to send again.

nats-py 2.16 pitfalls (measured): `publish_async` futures never complete when the server answers with an API
error (the reply handler raises inside the subscription callback), and have no timeout. So appends are
raw request/replies on this journal's own inbox subscription, sent by one task (so the server receives them
in order), each with its own deadline. Error 10164 (wrong last sequence, constant form) is handled as a
rejection like 10071.
"""

import asyncio
import collections
import json
import logging

from ..logs import Recurring
from .base import Entry, Journal, JournalClosed, JournalFailed, JournalFenced, JournalTruncated

log = logging.getLogger("durakv.journal.jetstream")

EPOCH_HEADER = "Durakv-Epoch"
EXPECTED_LAST = "Nats-Expected-Last-Sequence"
EXPECTED_STREAM = "Nats-Expected-Stream"
WRONG_LAST_SEQUENCE = 10071
CONDITIONAL_IN_FLIGHT = 10164        # "wrong last sequence" without the sequence
SEQUENCE_NOT_MATCH = 10063           # the leader's proposal did not match its applied state
CLUSTER_UNAVAILABLE = 10008
NOT_LEADER = 10009
# Answers after which the append did not land but may be sent again once the tail has been read.
RETRY_CODES = frozenset((WRONG_LAST_SEQUENCE, CONDITIONAL_IN_FLIGHT, SEQUENCE_NOT_MATCH, CLUSTER_UNAVAILABLE,
                         NOT_LEADER))
MAX_APPENDS_IN_FLIGHT = 32           # the bound on every writer's window that fencing relies on (see above)
DEFAULT_APPENDS_IN_FLIGHT = 8        # config journal-max-appends-in-flight; chosen by scripts/bench_sync_latency.py
RETRY_MIN_S = 0.05
RETRY_MAX_S = 0.5
HEADER_MARGIN_BYTES = 1024           # room for the headers NATS counts in max_payload (ours take ~120 bytes)
MAX_ENTRY_BYTES = 1 * 1024 * 1024    # the cap on an entry whatever max_payload allows (see above)
NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024


NAME_MAX = 128     # a NATS server name as durakv shows it (data from NATS is untrusted: bounded)


def stream_copies(info) -> dict:
    """A stream's copies from its StreamInfo: the leader, each follower (current and online or not) and
    `copies_ok`, the copies that hold the stream now (the leader plus every current, online follower). A NATS
    server whose disk filled turns JetStream off and its copy goes away: this is where that shows."""
    cluster = info.cluster
    replicas = [{"name": str(r.name)[:NAME_MAX], "current": bool(r.current),
                 "offline": bool(getattr(r, "offline", False)), "lag": getattr(r, "lag", None)}
                for r in (cluster.replicas or [])] if cluster else []
    return {"leader": str(cluster.leader)[:NAME_MAX] if cluster and cluster.leader else None,
            "replicas": replicas, "messages": info.state.messages, "last_seq": info.state.last_seq,
            "copies": 1 + len(replicas),
            "copies_ok": 1 + sum(1 for r in replicas if r["current"] and not r["offline"])}


def stream_name(shard: str) -> str:
    return "DURAKV_SHARD_%s" % shard


def subject_name(shard: str) -> str:
    return "durakv.shard.%s.journal" % shard


def is_transient(exc) -> bool:
    """An error NATS gives while it cannot answer yet and will again: a request timed out, no responders (a
    stream or bucket without a leader), JetStream temporarily unavailable (503), the connection reconnecting.
    Anything else (a wrong configuration, a refusal) is not retried."""
    import nats.errors
    import nats.js.errors
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, nats.errors.NoRespondersError,
                        nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
                        nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError)):
        return True
    return isinstance(exc, nats.js.errors.APIError) and getattr(exc, "code", None) == 503


async def connect(servers, name="durakv", tls=None, creds=None, inbox_prefix=None):
    """A NATS connection that reconnects for ever (tls: an ssl.SSLContext for tls:// servers, with the client's
    certificate when the servers verify clients; creds: the path of a NATS credentials file (a JWT and the
    seed that signs the server's nonce); inbox_prefix: the reply subjects' prefix this identity may
    subscribe to). Its errors are logged once per condition with a count (nats-py's default logs a traceback
    for every reconnect attempt)."""
    import nats
    events = Recurring(logging.getLogger("durakv.nats"))

    async def error_cb(exc):
        events("error:" + type(exc).__name__, "NATS connection %s: %s", name, exc or type(exc).__name__)

    async def disconnected_cb():
        if not nc.is_closed:   # not when this process closed it
            events("disconnected", "NATS connection %s lost; reconnecting", name)

    async def reconnected_cb():
        for key in [k for k in list(events._open) if k.startswith("error:")]:
            events.clear(key)
        events.clear("disconnected", "NATS connection %s reconnected to %s", name,
                     getattr(nc, "connected_url", None) and nc.connected_url.netloc)

    nc = await nats.connect(servers=list(servers), name=name, max_reconnect_attempts=-1,
                            reconnect_time_wait=0.1, connect_timeout=2, allow_reconnect=True,
                            ping_interval=1, max_outstanding_pings=3, tls=tls, error_cb=error_cb,
                            disconnected_cb=disconnected_cb, reconnected_cb=reconnected_cb,
                            **({"user_credentials": creds} if creds else {}),
                            **({"inbox_prefix": inbox_prefix} if inbox_prefix else {}))
    return nc


MAX_EPOCH = 2 ** 62


def _msg_entry(msg) -> Entry:
    """The journal entry of a stream message. Its epoch header is untrusted input: one that is not a decimal
    integer in 1..2^62 gives epoch -1, which every reader refuses (journal/base.py EpochFilter)."""
    headers = msg.headers or {}
    text = headers.get(EPOCH_HEADER, "")
    epoch = int(text) if isinstance(text, str) and 0 < len(text) <= 19 and text.isascii() and text.isdigit() else -1
    if epoch > MAX_EPOCH:
        epoch = -1
    seq, time_ms = _stream_seq_time(msg)
    # The stream's stored time of the message, set by the stream leader when it stored it (before the quorum's
    # acknowledgement): the entry's commit time for point-in-time restore. A mirror keeps its origin's.
    return Entry.timed(seq, epoch, bytes(msg.data or b""), time_ms)


def _stream_seq(msg) -> int:
    return _stream_seq_time(msg)[0]


def _stream_seq_time(msg):
    """(stream sequence, stored time in ms) of a message: from a consumer's delivery, the 6th and 8th tokens of
    its v1 reply subject ($JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time ns>.<pending>;
    nats-py's metadata builds dataclasses and a datetime per message to say the same), any other form through
    nats-py; from a direct or sequence read, its own fields."""
    if not hasattr(msg, "metadata"):
        stored = getattr(msg, "time", None)
        return msg.seq, int(stored.timestamp() * 1000) if stored else 0
    reply = msg.reply
    if reply:
        tokens = reply.split(".")
        if (len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK" and tokens[5].isdigit()
                and tokens[7].isdigit()):
            return int(tokens[5]), int(tokens[7]) // 1_000_000
    meta = msg.metadata
    return meta.sequence.stream, int(meta.timestamp.timestamp() * 1000) if meta.timestamp else 0


class _Append:
    """One append until it is acknowledged: what to send, and the state of its current send. Its outcome goes
    to a future (append) or a callback (append_notify)."""
    __slots__ = ("payload", "epoch", "fut", "notify", "token", "answer", "deadline")

    def __init__(self, payload, epoch, fut, notify=None):
        self.payload = payload
        self.epoch = epoch
        self.fut = fut
        self.notify = notify    # fn(seq, None) or fn(None, exc), instead of fut
        self.token = 0          # reply token of the send in flight (0: not sent)
        self.answer = None      # None (no answer yet), the stream sequence, or an _Error
        self.deadline = 0.0

    def settle(self, seq, exc):
        notify = self.notify
        if notify is not None:
            self.notify = None      # once: a failure path may meet an item twice
            notify(seq, exc)
            return
        fut = self.fut
        if fut is not None and not fut.done():
            if exc is None:
                fut.set_result(seq)
            else:
                fut.set_exception(exc)


class _DirectDelivery:
    """Stands in for a nats-py Subscription's pending queue, so that its messages are handled by `handler(msg)`
    right where the connection's parser delivers them, in the same event-loop iteration as the read.

    nats-py hands every message to an asyncio.Queue that a task of the subscription drains, calling an async
    callback: one more loop iteration (and a task switch, a coroutine) per message between the socket and its
    handler. For an append's answer that iteration sat between the commit and the replies it releases; for a
    replica, between an entry's arrival and its apply. The handler must not block or await; what it raises
    is logged (it runs inside the connection's read loop, which an exception would end)."""
    __slots__ = ("sub", "handler")

    def __init__(self, sub, handler):
        self.sub = sub
        self.handler = handler

    def put_nowait(self, msg):
        self.sub._pending_size -= len(msg.data)     # nats-py counted it as pending for the queue's consumer
        try:
            self.handler(msg)
        except Exception:  # noqa: BLE001 - see the class docstring
            log.exception("handling a NATS message on %s", getattr(self.sub, "_subject", "?"))

    def qsize(self):
        return 0

    def empty(self):
        return True

    def full(self):
        return False

    def task_done(self):
        pass

    async def join(self):
        return None

    async def get(self):
        await asyncio.get_running_loop().create_future()     # never: nothing waits here


def deliver_directly(sub, handler) -> bool:
    """Makes `sub` (a nats-py Subscription, or a JetStream push subscription around one) call `handler(msg)`
    synchronously from the connection's parser (_DirectDelivery). Messages already queued are handled first, in
    order. Returns False (and changes nothing: the subscription's own callback keeps working) when this nats-py
    does not have the internals it relies on; tests/cluster/test_jetstream_commit_path.py checks that the installed one does."""
    inner = getattr(sub, "_sub", sub)
    if not all(hasattr(inner, a) for a in ("_pending_queue", "_pending_size", "_wait_for_msgs_task")):
        return False
    old = inner._pending_queue
    if isinstance(old, _DirectDelivery):
        old.handler = handler
        return True
    if not hasattr(old, "get_nowait"):
        return False
    direct = _DirectDelivery(inner, handler)
    inner._pending_queue = direct
    task = inner._wait_for_msgs_task
    if task is not None and not task.done():
        task.cancel()       # it only ever waits in queue.get() (the callbacks it ran never awaited)
    while not old.empty():
        direct.put_nowait(old.get_nowait())
    return True


def hpub_bytes(subject: str, reply: str, headers, payload) -> bytes:
    """A NATS HPUB command (what nats-py's publish builds, for headers known to be valid)."""
    hdr = b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers) + b"\r\n"
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject.encode(), reply.encode(), len(hdr), len(hdr) + len(payload),
                                                hdr, payload)


def _buffered(transport) -> int:
    """Bytes a nats-py transport holds unsent (0 when it cannot say)."""
    writer = getattr(transport, "_io_writer", None)
    t = getattr(writer, "transport", None)
    try:
        return t.get_write_buffer_size() if t is not None else 0
    except Exception:  # noqa: BLE001 - a closing transport
        return 0


# A send is written to the socket at once only while the transport holds less than this (else it joins
# nats-py's buffer, which its flusher writes after waiting for the socket to drain).
DIRECT_WRITE_MAX_BUFFERED = 1 << 20


class _Error:
    __slots__ = ("code", "text", "exc")

    def __init__(self, code, text):
        self.code = code
        self.text = text
        self.exc = None         # what a send raised, when that is the error

    def __repr__(self):
        return "error %s (%s)" % (self.code, self.text)


class _Fatal(Exception):
    """The tail shows something no retry can fix (carries the JournalError to fail with)."""


class JetStreamJournal(Journal):
    """One shard's stream. `epoch` is the writer's epoch (set by the failover controller on promotion)."""

    def __init__(self, nc, shard: str, replicas: int = 3, epoch: int = 0, request_timeout_s: float = 5.0,
                 max_appends_in_flight: int = DEFAULT_APPENDS_IN_FLIGHT, creds=None):
        """`nc` is a connected nats client, or a list of server URLs to connect to in open() (with the NATS
        credentials file `creds`)."""
        self._creds = creds
        if not 1 <= max_appends_in_flight <= MAX_APPENDS_IN_FLIGHT:
            raise ValueError("max_appends_in_flight must be between 1 and %d" % MAX_APPENDS_IN_FLIGHT)
        self._servers = None
        self._request_timeout_s = request_timeout_s
        if isinstance(nc, (list, tuple, str)):
            self._servers = [nc] if isinstance(nc, str) else list(nc)
            nc = None
        self.nc = nc
        self.js = nc.jetstream(timeout=request_timeout_s) if nc is not None else None
        self.shard = shard
        self.stream = stream_name(shard)
        self.subject = subject_name(shard)
        self.replicas = replicas
        self.epoch = epoch
        self.max_appends_in_flight = max_appends_in_flight
        self.on_fenced = None           # callback(exc) when a newer epoch took over
        self._last = 0                  # last stream sequence this writer knows (its acknowledged prefix)
        self._first = 1
        self._bytes = 0
        self._queue = collections.deque()   # _Append not yet acknowledged, in order; the first _sent are sent
        self._sent = 0
        self._by_token = {}             # reply token -> _Append, for the sends in flight
        self._token = 0
        self._inbox = None
        self._inbox_sub = None
        self._solo_until = None         # sends go one at a time until _last reaches this (None: nothing landed)
        self._wake = None
        self._recovering = False        # the writer task is reading the tail: nothing is sent or acknowledged
        self._halted = False            # a send raised: nothing more is sent until the tail has been read
        self._pumping = False           # _pump is running (a callback it made may call it again)
        self._repump = False
        self._task = None
        self._open = False
        self._failed = None
        self.append_count = 0
        self.retries = 0                # sends made again after a rejection or an unknown outcome
        self.inspections = 0            # reads of the tail after one
        self.skipped_foreign = 0        # older-epoch entries stepped over
        self.max_in_flight_seen = 0

    # -- setup ----------------------------------------------------------------------------------
    async def ensure_stream(self, timeout_s: float = 60.0):
        """Creates the shard's stream if it does not exist. Retried until the deadline: right after a
        cluster starts (or while an AZ is down) JetStream may not place an R3 stream yet."""
        from nats.js.api import StorageType, StreamConfig
        from nats.js.errors import NotFoundError
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_exc = None
        while loop.time() < deadline:
            try:
                return await self.js.stream_info(self.stream)
            except NotFoundError:
                pass
            except Exception as exc:  # noqa: BLE001 - no JetStream leader yet, timeouts
                last_exc = exc
                await asyncio.sleep(0.2)
                continue
            cfg = StreamConfig(name=self.stream, subjects=[self.subject], storage=StorageType.FILE,
                               num_replicas=self.replicas, allow_direct=True)
            try:
                return await self.js.add_stream(cfg)
            except Exception as exc:  # noqa: BLE001 - created concurrently, or not placeable yet
                last_exc = exc
                await asyncio.sleep(0.2)
        raise TimeoutError("stream %s could not be created or found: %r" % (self.stream, last_exc))

    async def wait_stream(self, timeout_s: float = 60.0):
        """Waits until the shard's stream exists and answers (a node may not create it: the operator's `cluster
        create` did). Raises TimeoutError naming the stream."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_exc = None
        while loop.time() < deadline:
            try:
                return await self.js.stream_info(self.stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - not created yet, no leader yet, timeouts
                last_exc = exc
                await asyncio.sleep(0.2)
        raise TimeoutError("stream %s is not there (was the shard created with `durakv cluster create` or "
                           "`add-node`?): %r" % (self.stream, last_exc))

    async def refresh(self):
        info = await self.js.stream_info(self.stream)
        self._last = info.state.last_seq
        self._first = info.state.first_seq or (self._last + 1)
        self._bytes = info.state.bytes
        return info

    async def open(self, base_index: int = 0) -> None:
        if self.nc is None:
            self.nc = await connect(self._servers, creds=self._creds)
            self.js = self.nc.jetstream(timeout=self._request_timeout_s)
        await self.ensure_stream()
        info = await self.refresh()
        if base_index and info.state.messages == 0 and info.state.last_seq < base_index:
            # A stream cannot be renumbered: an empty stream behind a snapshot of index N would hand out
            # indices <= N again. Refuse rather than number entries twice.
            from ..errors import JournalCorrupt
            raise JournalCorrupt("stream %s ends at %d but the snapshot covers index %d"
                                 % (self.stream, info.state.last_seq, base_index))
        await self.open_writer()

    async def open_writer(self):
        """Starts appending after _last (set by refresh() or set_last())."""
        if self._task is not None:
            self._task.cancel()     # a writer opened twice: the earlier one must not send anything more
            self._task = None
        self._wake = asyncio.Event()
        self._failed = None
        self._queue.clear()
        self._by_token.clear()
        self._sent = 0
        self._solo_until = None
        if self._inbox_sub is None:
            # One wildcard subscription carries every append's answer (token = last subject token).
            self._inbox = self.nc.new_inbox() + "."
            self._inbox_sub = await self.nc.subscribe(self._inbox + "*", cb=self._on_answer_cb)
            # answers are handled where the parser meets them: the commit, and the replies it releases, happen
            # in the iteration that read the answer
            deliver_directly(self._inbox_sub, self._on_answer)
        self._recovering = self._halted = False
        self._open = True
        self._task = asyncio.get_running_loop().create_task(self._writer(), name="durakv-jetstream-writer")

    async def lead_here(self, timeout_s: float = 10.0) -> bool:
        """Moves the stream's Raft leadership to the NATS server this journal's connection is on (JetStream's
        leader step-down with a preferred server), if it is elsewhere. An append goes to the server the
        connection is on, which forwards it to the stream leader over a route, and the answer comes back the
        same way: with the leader elsewhere every commit pays that hop twice (across AZs: one more round trip
        between them) and two servers' route reads and writes. Best effort: an election in progress, or an
        identity minted before nodes were allowed the step-down, leaves the leader where it is (False). The
        appends in flight meanwhile meet the election like any other (the writer reads the tail and sends
        again)."""
        nc = self.nc
        here = (getattr(nc, "_server_info", None) or {}).get("server_name")
        if not here or self.js is None:
            return False
        try:
            info = await self.js.stream_info(self.stream)
            leader = info.cluster.leader if info.cluster is not None else None
            replicas = {r.name for r in (info.cluster.replicas or ())} if info.cluster is not None else set()
            if leader == here:
                return True
            if here not in replicas:
                return False        # our server holds no copy of the stream: it cannot lead it
            body = json.dumps({"placement": {"preferred": here}}).encode()
            msg = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.%s" % self.stream, body, timeout=timeout_s)
            ok = bool(json.loads(msg.data).get("success"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - best effort (see above)
            log.info("%s: could not move the stream leader to %s (%r); appends go through the leader where it is",
                     self.stream, here, exc)
            return False
        if ok:
            log.info("%s: stream leader moved to %s, the server this primary's journal connection is on",
                     self.stream, here)
        return ok

    def stop_writer(self):
        """Stops appending (the node became a replica after a planned handover)."""
        self._open = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._fail(JournalClosed("this node is no longer the primary"))
        self._drop_inbox()

    def _drop_inbox(self):
        sub, self._inbox_sub = self._inbox_sub, None
        if sub is not None and self.nc is not None and not self.nc.is_closed:
            async def unsubscribe():
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be going away: nothing to undo then
                    pass
            asyncio.get_running_loop().create_task(unsubscribe())

    # -- properties -----------------------------------------------------------------------------
    @property
    def commit_index(self) -> int:
        return self._last

    @property
    def first_index(self) -> int:
        return self._first

    @property
    def bytes_size(self) -> int:
        return self._bytes

    @property
    def max_entry_bytes(self) -> int:
        """The largest payload an append may carry (see the module's docstring)."""
        max_payload = getattr(self.nc, "max_payload", 0) or NATS_DEFAULT_MAX_PAYLOAD
        return max(4096, min(MAX_ENTRY_BYTES, max_payload - HEADER_MARGIN_BYTES))

    @property
    def in_flight(self) -> int:
        """Appends sent and not yet answered."""
        return self._sent

    @property
    def pending(self) -> int:
        """Appends called and not yet acknowledged (sent or waiting for room in the window)."""
        return len(self._queue)

    # -- appends --------------------------------------------------------------------------------
    def append(self, payload: bytes, epoch: int = None):
        if not self._open:
            raise JournalClosed("journal is closed")
        fut = asyncio.get_running_loop().create_future()
        if self._failed is not None:
            fut.set_exception(self._failed)
            return fut
        self._enqueue(_Append(payload, self.epoch if epoch is None else epoch, fut))
        return fut

    def append_notify(self, payload: bytes, notify, epoch: int = None):
        """append() without a future: notify(seq, None) once the entry is stored, or notify(None, exc), called in
        the event-loop iteration that read the answer (a future's done callbacks run one iteration later).
        Raises JournalClosed / JournalFailed when the journal refuses at call time, as the local journal does."""
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._failed is not None:
            raise self._failed
        self._enqueue(_Append(payload, self.epoch if epoch is None else epoch, None, notify))

    def _enqueue(self, item):
        max_payload = getattr(self.nc, "max_payload", 0)
        self._queue.append(item)
        if max_payload and len(item.payload) > max_payload - HEADER_MARGIN_BYTES:
            # NATS would refuse it: fail it (and, by the contract, every later append) without sending it. Its
            # outcome is given in a later callback, never from inside the caller's append.
            self._failed = JournalFailed("append of %d bytes refused: over the NATS server's max_payload (%d bytes) "
                                         "less %d for headers" % (len(item.payload), max_payload, HEADER_MARGIN_BYTES))
            log.error("%s: %s", self.stream, self._failed)
            asyncio.get_running_loop().call_soon(self._fail, self._failed)
            return
        self._pump()

    async def append_marker(self, epoch: int) -> int:
        """Appends this writer's epoch marker after the last entry it has read (the caller read the
        journal to its end and set _last via catch_up). Raises JournalFenced if a newer epoch is there."""
        self.epoch = epoch
        return await self.append(b"", epoch)

    def set_last(self, seq: int):
        """The writer continues after `seq` (the last entry a promoted replica applied)."""
        self._last = seq

    def _window(self) -> int:
        # Probation: until this writer holds every position a deposed writer's window could still reach.
        if self._solo_until is None or self._last < self._solo_until:
            return 1
        return self.max_appends_in_flight

    async def _on_answer_cb(self, msg):
        self._on_answer(msg)     # only if direct delivery is not available (deliver_directly returned False)

    def _on_answer(self, msg):
        """An append's answer (from the parser of the journal's connection, see _DirectDelivery)."""
        try:
            token = int(msg.subject[len(self._inbox):])
        except (TypeError, ValueError):
            return
        item = self._by_token.pop(token, None)
        if item is None or item.token != token:
            return  # the answer to a send that was abandoned (the tail was read since)
        headers = msg.headers
        if headers and headers.get("Status") == "503":
            item.answer = _Error(503, "no responders (no stream leader)")
        else:
            try:
                resp = json.loads(msg.data)
                err = resp.get("error")
                if err is not None:
                    item.answer = _Error(err.get("err_code"), err.get("description", ""))
                else:
                    item.answer = int(resp["seq"])
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                item.answer = _Error(None, "unreadable answer %r: %r" % (bytes(msg.data[:200]), exc))
        self._pump()

    def _pump(self):
        """The writer's fast path, run synchronously wherever something changed (an append called, an answer
        read): acknowledges the answered prefix (the contiguous successes, each at the position expected) and
        sends what the window allows. Anything else at the head (a rejection, an error, an unexpected
        sequence) wakes the writer task, which reads the tail and sends again (_writer). Settling an append
        may make the tracker append the next batch, which calls back in here: that call only asks for one
        more round."""
        if self._pumping:
            self._repump = True
            return
        if self._recovering or self._failed is not None or not self._open:
            return
        self._pumping = True
        try:
            queue = self._queue
            while True:
                self._repump = False
                while queue:
                    head = queue[0]
                    answer = head.answer
                    if answer is None or head.token == 0:
                        break
                    if type(answer) is int and answer == self._last + 1:
                        self._acknowledge(answer)
                        continue
                    self._wake.set()        # not a plain success: the slow path decides
                    return
                if self._recovering or self._failed is not None or not self._open:
                    return
                window = self._window()
                while self._sent < len(queue) and self._sent < window and not self._halted:
                    item = queue[self._sent]
                    self._sent += 1
                    if self._sent > self.max_in_flight_seen:
                        self.max_in_flight_seen = self._sent
                    self._send(item, self._last + self._sent - 1)
                    if self._sent == 1:
                        self._wake.set()    # the writer task watches the head's deadline
                if not self._repump:
                    return
        finally:
            self._pumping = False

    def _send(self, item, expected):
        """Sends one append, synchronously: written to the socket at once when nothing is queued ahead of it in
        nats-py's buffer (else it joins that buffer, behind what is there, and nats-py's flusher writes it).
        A send that raises marks the item (an unknown outcome: the slow path reads the tail) and halts sending."""
        self._token += 1
        token = item.token = self._token
        item.answer = None
        item.deadline = asyncio.get_running_loop().time() + self._request_timeout_s
        self._by_token[token] = item
        headers = ((EXPECTED_LAST, str(expected)), (EPOCH_HEADER, str(item.epoch)), (EXPECTED_STREAM, self.stream))
        nc = self.nc
        try:
            if nc is None or nc.is_closed:
                raise JournalClosed("the NATS connection is closed")
            if len(item.payload) > nc._max_payload:
                import nats.errors
                raise nats.errors.MaxPayloadError
            cmd = hpub_bytes(self.subject, self._inbox + str(token), headers, item.payload)
            nc.stats["out_msgs"] += 1
            nc.stats["out_bytes"] += len(item.payload)
            transport = nc._transport
            if (nc.is_connected and not nc._pending_data_size and transport is not None
                    and _buffered(transport) < DIRECT_WRITE_MAX_BUFFERED):
                transport.write(cmd)
            else:
                nc._pending.append(cmd)
                nc._pending_data_size += len(cmd)
                flush = nc._flush_queue
                if flush is not None and flush.empty():
                    flush.put_nowait(asyncio.get_running_loop().create_future())
        except Exception as exc:  # noqa: BLE001 - outcome unknown (or nothing sent): the slow path decides
            self._by_token.pop(token, None)
            item.answer = _Error(None, "send failed: %r" % exc)
            item.answer.exc = exc
            self._halted = True
            self._wake.set()

    async def _writer(self):
        """The slow path: watches the head's deadline, and after anything but a plain success reads the tail
        and sends again (the fast path is _pump)."""
        loop = asyncio.get_running_loop()
        trouble = None          # what went wrong first in this episode (logged once), and how often since
        troubles = 0
        delay_s = RETRY_MIN_S
        while self._open:
            queue = self._queue
            rejected = False        # a definite "not stored": sent again at once, no pause
            self._pump()
            if self._failed is not None:
                return
            if not queue or queue[0].token == 0 and queue[0].answer is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            head = queue[0]
            answer = head.answer
            if answer is None:
                remaining_s = head.deadline - loop.time()
                if remaining_s > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), remaining_s)
                    except asyncio.TimeoutError:
                        pass
                    continue
                problem = "no answer in %.1fs" % self._request_timeout_s
            elif isinstance(answer, int):
                if answer == self._last + 1:
                    continue        # acknowledged by the next _pump
                problem = "acknowledged at %d, expected %d" % (answer, self._last + 1)
            elif answer.code in RETRY_CODES or answer.code == 503 or answer.code is None:
                exc = getattr(answer, "exc", None)
                if exc is not None:
                    import nats.errors
                    if isinstance(exc, nats.errors.MaxPayloadError):
                        # Refused by the client before anything was sent: definite, sending again cannot help.
                        self._fail(JournalFailed("append of %d bytes refused: over the NATS server's max_payload "
                                                 "(%d bytes)" % (len(head.payload), getattr(self.nc, "max_payload", 0))))
                        return
                    if isinstance(exc, JournalClosed) or self.nc is None or self.nc.is_closed:
                        self._fail(JournalClosed("the NATS connection is closed"))
                        return
                problem = repr(answer)
                rejected = answer.code in (WRONG_LAST_SEQUENCE, CONDITIONAL_IN_FLIGHT)
            else:
                self._fail(JournalFailed("append rejected: %r" % answer))
                return
            # Not acknowledged: stop, read the tail, send again what did not land.
            self._recovering = True
            if trouble is None:
                trouble = problem
                log.warning("append to %s not acknowledged (%s); reading the tail and sending again",
                            self.stream, problem)
            troubles += 1
            self._abandon_sends()
            try:
                if not rejected or troubles > 2:
                    await asyncio.sleep(delay_s)   # a timeout, an election, or no progress: give the stream a moment
                    delay_s = min(delay_s * 2, RETRY_MAX_S)
                while self._open:
                    try:
                        await self._inspect_tail()
                        break
                    except _Fatal as fatal:
                        self._fail(fatal.args[0])
                        return
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - no leader yet, disconnected: read it again later
                        log.debug("reading the tail of %s failed: %r", self.stream, exc)
                        await asyncio.sleep(delay_s)
                        delay_s = min(delay_s * 2, RETRY_MAX_S)
            finally:
                self._recovering = False
                self._halted = False
            self.retries += 1
            self._pump()
            if trouble is not None and self._progress_after_trouble():
                log.warning("appends to %s acknowledged again after %d retries (first: %s)", self.stream, troubles,
                            trouble)
                trouble, troubles, delay_s = None, 0, RETRY_MIN_S

    def _progress_after_trouble(self):
        """After a retry: the queue is empty or its head is in flight with no answer yet (so far so good)."""
        return not self._queue or (self._queue[0].answer is None and self._queue[0].token != 0)

    def _acknowledge(self, seq):
        """The head append is stored at seq (= _last + 1)."""
        item = self._queue.popleft()
        if self._sent:
            self._sent -= 1
        self._last = seq
        if self._solo_until is None:
            self._solo_until = seq + MAX_APPENDS_IN_FLIGHT - 1
        self._bytes += len(item.payload)
        self.append_count += 1
        item.settle(seq, None)

    def _abandon_sends(self):
        for i in range(self._sent):
            self._queue[i].token = 0
            self._queue[i].answer = None
        self._by_token.clear()
        self._sent = 0

    async def _inspect_tail(self):
        """After a rejection or an unknown outcome, with nothing in flight: walks the stream after _last.
        Our own entries (landed, their ack lost) are acknowledged in order, older epochs' entries stepped
        over; raises _Fatal(JournalFenced) at a newer epoch's entry."""
        self.inspections += 1
        info = await self.js.stream_info(self.stream)
        last = info.state.last_seq
        while self._last < last:
            seq = self._last + 1
            entry = _msg_entry(await self.js.get_msg(self.stream, seq=seq))
            head = self._queue[0] if self._queue else None
            epoch = head.epoch if head is not None else self.epoch
            if entry.epoch > epoch:
                raise _Fatal(JournalFenced("epoch %d superseded by %d at index %d" % (epoch, entry.epoch, seq)))
            if entry.epoch < epoch:
                if self._solo_until is not None and seq > self._solo_until:
                    raise _Fatal(JournalFailed(
                        "entry %d of epoch %d landed after this writer's (epoch %d) probation ended at %d: a "
                        "deposed writer had more than %d appends in flight; stopping rather than risk "
                        "reordered entries" % (seq, entry.epoch, epoch, self._solo_until, MAX_APPENDS_IN_FLIGHT)))
                self._last = seq
                self.skipped_foreign += 1
                continue
            if head is None or entry.payload != head.payload:
                raise _Fatal(JournalFailed("entry %d has this writer's epoch %d but is not its next append"
                                           % (seq, epoch)))
            # Our own append landed but its ack was lost: it is durable, resolve it.
            self._acknowledge(seq)

    def _fail(self, exc):
        self._failed = exc
        self._by_token.clear()
        self._sent = 0
        while self._queue:
            self._queue.popleft().settle(None, exc)
        if isinstance(exc, JournalFenced) and self.on_fenced is not None:
            self.on_fenced(exc)

    # -- reading --------------------------------------------------------------------------------
    async def read(self, after: int):
        info = await self.js.stream_info(self.stream)
        last = info.state.last_seq
        first = info.state.first_seq
        if after + 1 < first and last >= first:
            raise JournalTruncated("entry %d was purged (first is %d)" % (after + 1, first))
        seq = after
        while seq < last:
            seq += 1
            msg = await self.js.get_msg(self.stream, seq=seq)
            yield _msg_entry(msg)

    async def follow(self, after: int, callback):
        """Push-consumes every entry with index > after, calling callback(entry) in order (an ordered
        consumer: gaps or redeliveries are impossible; it restarts itself after disconnects). callback returns
        None, or an awaitable (a reader applying in slices): the entries after it are then held, in order,
        until it is done."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        held = collections.deque()      # entries that arrived while an awaitable of the callback was pending
        waiter = None                   # the task awaiting it, then delivering `held`

        def on_msg(msg):
            # Runs in the connection's parser (deliver_directly), which cannot wait: an awaitable is waited
            # for by a task of its own, and what arrives meanwhile queues behind it.
            nonlocal waiter
            entry = _msg_entry(msg)
            if waiter is not None:
                held.append(entry)
                return
            pending = callback(entry)
            if pending is not None:
                waiter = asyncio.ensure_future(deliver_held(pending))

        async def deliver_held(pending):
            nonlocal waiter
            try:
                while pending is not None:
                    try:
                        await pending
                    except Exception:  # noqa: BLE001 - as a callback's error: logged, the next entry goes on
                        log.exception("applying a journal entry on %s", self.subject)
                    pending = None
                    while held and pending is None:
                        try:
                            pending = callback(held.popleft())
                        except Exception:  # noqa: BLE001 - as _DirectDelivery: logged, the next entry goes on
                            log.exception("applying a journal entry on %s", self.subject)
            finally:
                waiter = None

        async def on_msg_cb(msg):
            on_msg(msg)

        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        sub = await self.js.subscribe(self.subject, cb=on_msg_cb, ordered_consumer=True, config=cfg,
                                      stream=self.stream, pending_msgs_limit=1_000_000,
                                      pending_bytes_limit=1 << 30)
        # each entry is applied where the parser meets it, not one loop iteration (and a task switch) later
        deliver_directly(sub, on_msg)
        unsubscribe = sub.unsubscribe

        async def unsubscribe_and_drop(*args, **kwargs):
            # An awaitable of the callback still pending, and the entries held behind it, go with the
            # subscription (as nats-py cancels its callback task, and what it was awaiting, on unsubscribe).
            held.clear()
            if waiter is not None:
                waiter.cancel()
            return await unsubscribe(*args, **kwargs)

        sub.unsubscribe = unsubscribe_and_drop
        return sub

    async def last_index(self) -> int:
        info = await self.js.stream_info(self.stream)
        return info.state.last_seq

    async def copies(self) -> dict:
        """The stream's copies as its leader reports them (stream_copies)."""
        return stream_copies(await self.js.stream_info(self.stream))

    async def truncate_before(self, index: int) -> int:
        await self.js.purge_stream(self.stream, seq=index)
        await self.refresh()
        return self._first

    async def drain(self, timeout_s=10.0):
        """Waits until every queued append is done (planned failover hands over only then)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._queue and loop.time() < deadline and self._failed is None:
            await asyncio.sleep(0.002)
        return not self._queue

    async def close(self) -> None:
        if self._open:
            await self.drain(5.0)
        self._open = False
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._task = None
        if self._queue:
            self._fail(JournalClosed("journal closed before these appends were acknowledged"))
        sub, self._inbox_sub = self._inbox_sub, None
        if sub is not None and self.nc is not None and not self.nc.is_closed:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        if self._servers is not None and self.nc is not None:
            await self.nc.close()
            self.nc = None
