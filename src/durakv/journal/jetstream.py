"""The `jetstream` journal backend: one NATS JetStream stream per shard, replicated R3 across AZs.

Entries are stream messages: the payload is the batch of effects, header `Durakv-Epoch` the writer's epoch;
an epoch marker is a message with an empty payload. Indices are stream sequences.

Fencing (DESIGN.md "Journal backends"; measured, not assumed): every append is conditional on the last
sequence this writer knows (`Nats-Expected-Last-Sequence`), and this backend keeps exactly one append in
flight, so a rejection can never be followed by a later in-flight append of the same writer landing. On a
rejection the writer reads the tail: if a marker of a newer epoch is there it is fenced (every pending and
later append fails with JournalFenced and `on_fenced` is called); if only entries of older epochs intervened
(a stale writer's append that landed before this writer's marker) it retries after them.
nats-py 2.16 pitfalls handled here: error 10164 means another conditional write to the subject is in flight
(retry, not a conflict); publish() is awaited one at a time (publish_async futures hang on API errors).
"""

import asyncio
import collections
import logging

from ..logs import Recurring
from .base import Entry, Journal, JournalClosed, JournalFailed, JournalFenced, JournalTruncated

log = logging.getLogger("durakv.journal.jetstream")

EPOCH_HEADER = "Durakv-Epoch"
EXPECTED_LAST = "Nats-Expected-Last-Sequence"
WRONG_LAST_SEQUENCE = 10071
CONDITIONAL_IN_FLIGHT = 10164


def stream_name(shard: str) -> str:
    return "DURAKV_SHARD_%s" % shard


def subject_name(shard: str) -> str:
    return "durakv.shard.%s.journal" % shard


async def connect(servers, name="durakv", tls=None):
    """A NATS connection that reconnects for ever (tls: an ssl.SSLContext for tls:// servers). Its errors are
    logged once per condition with a count (nats-py's default logs a traceback for every reconnect attempt)."""
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
                            disconnected_cb=disconnected_cb, reconnected_cb=reconnected_cb)
    return nc


def _msg_entry(msg) -> Entry:
    headers = msg.headers or {}
    epoch = int(headers.get(EPOCH_HEADER, "0"))
    seq = msg.metadata.sequence.stream if hasattr(msg, "metadata") else msg.seq
    return Entry(seq, epoch, bytes(msg.data or b""))


class JetStreamJournal(Journal):
    """One shard's stream. `epoch` is the writer's epoch (set by the failover controller on promotion)."""

    def __init__(self, nc, shard: str, replicas: int = 3, epoch: int = 0, request_timeout_s: float = 5.0):
        """`nc` is a connected nats client, or a list of server URLs to connect to in open()."""
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
        self.on_fenced = None           # callback(exc) when a newer epoch took over
        self._last = 0                  # last stream sequence this writer knows
        self._first = 1
        self._bytes = 0
        self._queue = collections.deque()
        self._wake = None
        self._task = None
        self._open = False
        self._failed = None
        self.append_count = 0
        self.retries = 0
        self._retry_log = Recurring(log)

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

    async def refresh(self):
        info = await self.js.stream_info(self.stream)
        self._last = info.state.last_seq
        self._first = info.state.first_seq or (self._last + 1)
        self._bytes = info.state.bytes
        return info

    async def open(self, base_index: int = 0) -> None:
        if self.nc is None:
            self.nc = await connect(self._servers)
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
        self._wake = asyncio.Event()
        self._open = True
        self._failed = None
        self._queue.clear()
        self._task = asyncio.get_running_loop().create_task(self._writer(), name="durakv-jetstream-writer")

    def stop_writer(self):
        """Stops appending (the node became a replica after a planned handover)."""
        self._open = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._fail(JournalClosed("this node is no longer the primary"))

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

    # -- appends --------------------------------------------------------------------------------
    def append(self, payload: bytes, epoch: int = None):
        if not self._open:
            raise JournalClosed("journal is closed")
        fut = asyncio.get_running_loop().create_future()
        if self._failed is not None:
            fut.set_exception(self._failed)
            return fut
        self._queue.append((payload, self.epoch if epoch is None else epoch, fut))
        self._wake.set()
        return fut

    async def append_marker(self, epoch: int) -> int:
        """Appends this writer's epoch marker after the last entry it has read (the caller read the
        journal to its end and set _last via catch_up). Raises JournalFenced if a newer epoch is there."""
        self.epoch = epoch
        return await self.append(b"", epoch)

    def set_last(self, seq: int):
        """The writer continues after `seq` (the last entry a promoted replica applied)."""
        self._last = seq

    async def _writer(self):
        from nats.js.errors import APIError
        while self._open:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            payload, epoch, fut = self._queue[0]
            try:
                ack = await self.js.publish(self.subject, payload, stream=self.stream,
                                            headers={EXPECTED_LAST: str(self._last), EPOCH_HEADER: str(epoch)})
            except APIError as exc:
                code = getattr(exc, "err_code", None)
                if code == CONDITIONAL_IN_FLIGHT:
                    self.retries += 1
                    await asyncio.sleep(0.002)
                    continue
                if code == WRONG_LAST_SEQUENCE:
                    try:
                        fenced = await self._inspect_tail(epoch)
                    except Exception as inner:  # noqa: BLE001
                        log.warning("reading the tail after a rejected append failed: %r", inner)
                        await asyncio.sleep(0.05)
                        continue
                    if fenced is not None:
                        self._fail(fenced)
                        return
                    self.retries += 1
                    continue
                self._fail(JournalFailed("append rejected: %s" % exc))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - timeouts, disconnects: retry the same append
                # The outcome is unknown; the conditional header makes a retry safe: if the first try
                # landed, the retry is rejected and the tail shows our own entry.
                if self.nc is None or self.nc.is_closed:
                    self._fail(JournalClosed("the NATS connection is closed"))
                    return
                self._retry_log("append", "append to %s not acknowledged (%s); retrying", self.stream,
                                type(exc).__name__)
                self.retries += 1
                await asyncio.sleep(0.05)
                continue
            self._queue.popleft()
            if self._retry_log.active("append"):
                self._retry_log.clear("append", "appends to %s acknowledged again", self.stream)
            self._last = ack.seq
            self._bytes += len(payload)
            self.append_count += 1
            if not fut.done():
                fut.set_result(ack.seq)

    async def _inspect_tail(self, epoch):
        """After a rejection: returns JournalFenced if a newer epoch's marker is past our last, else
        advances _last over older-epoch entries (or our own entry whose ack was lost) and returns None."""
        info = await self.js.stream_info(self.stream)
        last = info.state.last_seq
        payload, _, _ = self._queue[0]
        seq = self._last
        while seq < last:
            seq += 1
            msg = await self.js.get_msg(self.stream, seq=seq)
            entry = _msg_entry(msg)
            if entry.epoch > epoch:
                return JournalFenced("epoch %d superseded by %d at index %d" % (epoch, entry.epoch, seq))
            if entry.epoch == epoch and entry.payload == payload:
                # Our own append landed but its ack was lost: it is durable, resolve it.
                payload, _, fut = self._queue.popleft()
                self._last = seq
                if not fut.done():
                    fut.set_result(seq)
                return None
        self._last = last
        return None

    def _fail(self, exc):
        self._failed = exc
        while self._queue:
            _, _, fut = self._queue.popleft()
            if not fut.done():
                fut.set_exception(exc)
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
        consumer: gaps or redeliveries are impossible; it restarts itself after disconnects)."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        async def on_msg(msg):
            callback(_msg_entry(msg))

        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1)
        return await self.js.subscribe(self.subject, cb=on_msg, ordered_consumer=True, config=cfg,
                                       stream=self.stream, pending_msgs_limit=1_000_000,
                                       pending_bytes_limit=1 << 30)

    async def last_index(self) -> int:
        info = await self.js.stream_info(self.stream)
        return info.state.last_seq

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
        await self.drain(5.0)
        self._open = False
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._servers is not None and self.nc is not None:
            await self.nc.close()
            self.nc = None
