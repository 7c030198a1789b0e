"""Load-generator worker: one process, one asyncio loop, raw RESP over asyncio protocols, hiredis parsing.

Hot path is callback based (no coroutine per request): a connection's data_received parses replies with
hiredis and hands each to its client, which records the latency sample and, in closed loop, sends the next batch.

Open loop: client c sends batch i at its *intended* time t0 + phase_c + i / batch_rate, whether or not earlier
replies have come back (up to max_outstanding in flight), and latency is measured from that intended time, so a
server stall is charged to every request that should have been sent during it (no coordinated omission). How
late the generator itself was at sending is recorded per batch ("send lag": the send time minus the intended
time, for the batches its timers sent), apart from the batches the server held back (sent only once replies
brought a connection under max_outstanding: that wait is the server's) and the batches never sent (still held
back, or their connection lost, when the run ended: counted as UNSENT errors). A generator whose own lag is
large measured itself, not the server: the runner reports it and splits the load over processes. Open-loop
workers wait with select() on the epoll descriptor (PreciseEpollSelector): microsecond timeouts, which
epoll_wait and libuv round to milliseconds, at the cost of one descriptor rather than one per connection.

Closed loop: each client keeps `pipeline` requests in flight; latency is measured from the actual send time.
"""

import asyncio
import math
import os
import random
import select
import selectors
import signal
import ssl
import time
from array import array
from collections import deque

import hiredis

from ...protocol.resp import encode_command
from . import hist as histmod
from .config import GET, KIND_NAMES, SET, json_document
from .slots import SlotMap, key_hash_slot, parse_cluster_slots, parse_redirect

CTRL = -1      # control request (AUTH, CLIENT SETNAME, ASKING, CLUSTER SLOTS): not measured
PREFILL = 2    # prefill SET: counted, not measured
MAX_REDIRECTS = 5
_US = 1_000_000

ReplyError = hiredis.ReplyError


def bloom_request(kind, key_n, prefix, filters):
    """The bloom workload's request for item <prefix>key_n: BF.EXISTS (a read) or BF.ADD (a write) in filter
    bf:(key_n mod filters). Returns (RESP bytes, the key it routes by)."""
    key = b"bf:%d" % (key_n % filters)
    item = prefix + b"%d" % key_n
    if kind == GET:
        return b"*3\r\n$9\r\nBF.EXISTS\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(key), key, len(item), item), key
    return b"*3\r\n$6\r\nBF.ADD\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (len(key), key, len(item), item), key


monotonic = time.monotonic


def make_ssl_context(cfg):
    if not cfg.tls:
        return None
    ctx = ssl.create_default_context(cafile=cfg.tls_cacert or None)
    if cfg.tls_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.tls_cert:
        ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key or None)
    return ctx


class Conn(asyncio.Protocol):
    """One RESP connection: a FIFO of pending request entries, matched to replies in order."""

    def __init__(self, client, addr):
        self.client = client
        self.addr = addr
        self.reader = hiredis.Reader()
        self.pending = deque()
        self.out = []
        self.transport = None
        self.auth = None
        self.lost = False
        self.ready = asyncio.get_running_loop().create_future()

    # asyncio callbacks
    def connection_made(self, transport):
        self.transport = transport
        if not self.ready.done():
            self.ready.set_result(True)
        if self.out:
            self.flush()

    def data_received(self, data):
        reader = self.reader
        reader.feed(data)
        reply = reader.gets()
        if reply is False:
            return
        now = monotonic()
        pending = self.pending
        on_reply = self.client.on_reply
        while reply is not False:
            on_reply(self, pending.popleft(), reply, now)
            reply = reader.gets()
        client = self.client
        client.w.last_reply = now
        client.after_replies(now)

    def connection_lost(self, exc):
        self.lost = True
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionError("connection closed"))
        self.client.on_conn_lost(self, exc)

    # sending
    def queue(self, data, entry):
        self.pending.append(entry)
        self.out.append(data)

    def flush(self):
        if self.transport is not None and self.out and not self.lost:
            self.transport.write(b"".join(self.out) if len(self.out) > 1 else self.out[0])
            self.out.clear()

    def close(self):
        if self.transport is not None:
            self.transport.close()


class Client:
    """A logical client: a SET/GET pattern, its schedule, and its connection (one per node in cluster mode)."""

    def __init__(self, worker, spec):
        self.w = worker
        self.spec = spec
        cfg = worker.cfg
        self.pattern = spec.pattern
        self.plen = len(spec.pattern)
        self.pidx = spec.index % self.plen
        self.pipeline = cfg.pipeline
        self.keymax = cfg.key_maximum
        self.prefix = cfg.key_prefix.encode()
        self.bloom = cfg.bloom_filters if cfg.workload == "bloom" else 0   # the bloom workload's filter count
        self.rand = worker.rng.random
        self.value_part = worker.value_part
        self.set_fmt = worker.set_fmt
        self.get_fmt = worker.get_fmt
        self.lat = worker.lat
        self.cluster = cfg.cluster
        self.conns = {}            # addr -> Conn
        self.conn = None           # the only connection (non-cluster)
        self.outstanding = 0
        self.end = 0.0
        self.done = False
        self.started = False
        self.sending = False
        self.idle_waiter = None

    # connections
    async def connect(self):
        if self.cluster:
            for addr in self.w.slotmap.addresses():
                await self.conn_for(addr).ready
        else:
            self.conn = self.conn_for((self.w.cfg.host, self.w.cfg.port))
            await self.conn.ready

    def conn_for(self, addr):
        """The connection to addr, opened on first use (also mid-run, after a redirect to a new node): AUTH and
        CLIENT SETNAME go first, and requests queued meanwhile are written once it is connected."""
        conn = self.conns.get(addr)
        if conn is None or conn.lost:
            conn = Conn(self, addr)
            self.conns[addr] = conn
            cfg = self.w.cfg
            if cfg.password:
                auth = ("AUTH", cfg.user, cfg.password) if cfg.user else ("AUTH", cfg.password)
                conn.auth = self.w.loop.create_future()
                conn.queue(encode_command(auth), (CTRL, 0.0, conn.auth, 0, 0))
            if cfg.client_names:
                conn.queue(encode_command(("CLIENT", "SETNAME", self.spec.name)), (CTRL, 0.0, None, 0, 0))
            self.w.loop.create_task(self.w.open_conn(conn))
        return conn

    async def setup(self):
        """Waits for every connection's AUTH; returns the first AUTH error text, if any."""
        for conn in list(self.conns.values()):
            if conn.auth is not None:
                reply = await conn.auth
                if isinstance(reply, ReplyError):
                    return "AUTH failed: %s" % reply
            await self.request(conn, b"*1\r\n$4\r\nPING\r\n")

    def request(self, conn, data):
        fut = self.w.loop.create_future()
        conn.queue(data, (CTRL, 0.0, fut, 0, 0))
        conn.flush()
        return fut

    # building requests
    def next_kind(self):
        kind = self.pattern[self.pidx]
        self.pidx += 1
        if self.pidx == self.plen:
            self.pidx = 0
        return kind

    def send(self, kind, key_n, intended):
        if self.bloom:
            data, key = bloom_request(kind, key_n, self.prefix, self.bloom)
        else:
            key = self.prefix + b"%d" % key_n
            if kind == GET:
                data = self.get_fmt % (len(key), key)
            else:
                data = self.set_fmt % (len(key), key, self.value_part)
        if self.cluster:
            conn = self.conn_for(self.w.slotmap.nodes[self.w.slot_of(key)])
        else:
            conn = self.conn
        conn.queue(data, (kind, intended, data, 0, key_n))
        self.outstanding += 1

    def emit(self, count, intended):
        """Queues `count` requests with the given intended time (the hot path: inlined for one connection)."""
        rand, keymax = self.rand, self.keymax
        if self.cluster or self.bloom:   # the generic path (SET/GET on one connection is inlined below)
            for _ in range(count):
                self.send(self.next_kind(), int(rand() * keymax) + 1, intended)
            return
        conn = self.conn
        pend, out = conn.pending.append, conn.out.append
        pattern, plen, pidx, prefix, value_part = self.pattern, self.plen, self.pidx, self.prefix, self.value_part
        set_fmt, get_fmt = self.set_fmt, self.get_fmt
        for _ in range(count):
            kind = pattern[pidx]
            pidx += 1
            if pidx == plen:
                pidx = 0
            key = prefix + b"%d" % (int(rand() * keymax) + 1)
            if kind == GET:
                data = get_fmt % (len(key), key)
            else:
                data = set_fmt % (len(key), key, value_part)
            pend((kind, intended, data, 0, 0))
            out(data)
        self.pidx = pidx
        self.outstanding += count

    def flush(self):
        if self.cluster:
            for conn in self.conns.values():
                if conn.out:
                    conn.flush()
        else:
            self.conn.flush()

    # replies
    def on_reply(self, conn, entry, reply, now):
        kind = entry[0]
        if kind == CTRL:
            fut = entry[2]
            if fut is not None and not fut.done():
                fut.set_result(reply)
            return
        if type(reply) is ReplyError:
            msg = str(reply)
            if self.cluster and (msg.startswith("MOVED ") or msg.startswith("ASK ")) and entry[3] < MAX_REDIRECTS:
                if self.redirect(conn, entry, msg):
                    return
            etype = msg.split(" ", 1)[0] or "ERR"
            self.w.add_error(KIND_NAMES[kind] if kind < 2 else "PREFILL", etype)
        elif kind == PREFILL:
            self.w.prefilled += 1
        else:
            self.lat[kind].append(int((now - entry[1]) * _US))
        self.outstanding -= 1

    def redirect(self, conn, entry, msg) -> bool:
        parsed = parse_redirect(msg, conn.addr[0])
        if parsed is None:
            return False
        rtype, slot, addr = parsed
        self.w.redirects[rtype] = self.w.redirects.get(rtype, 0) + 1
        target = self.conn_for(addr)
        if rtype == "MOVED":
            self.w.slotmap.update(slot, addr)
        else:
            target.queue(b"*1\r\n$6\r\nASKING\r\n", (CTRL, 0.0, None, 0, 0))
        target.queue(entry[2], (entry[0], entry[1], entry[2], entry[3] + 1, entry[4]))
        target.flush()
        return True

    def after_replies(self, now):
        if self.outstanding == 0:
            waiter = self.idle_waiter
            if waiter is not None:
                self.idle_waiter = None
                if not waiter.done():
                    waiter.set_result(True)
            if self.started and not self.sending and not self.done:
                self.finish()

    def on_conn_lost(self, conn, exc):
        n = 0
        while conn.pending:
            entry = conn.pending.popleft()
            if entry[0] == CTRL:
                if entry[2] is not None and not entry[2].done():
                    entry[2].set_exception(ConnectionError("connection lost"))
                continue
            self.w.add_error(KIND_NAMES[entry[0]] if entry[0] < 2 else "PREFILL", "CONNECTION")
            n += 1
        self.outstanding -= n
        if self.w.running and not self.w.stopping:
            self.w.note(f"connection to {conn.addr[0]}:{conn.addr[1]} lost: {exc or 'closed by server'}")
        if self.idle_waiter is not None and not self.idle_waiter.done():
            self.idle_waiter.set_exception(ConnectionError("connection lost during prefill"))
        if not self.cluster or all(c.lost for c in self.conns.values()):
            self.sending = False
            if self.started and not self.done:
                self.finish()

    def finish(self):
        self.done = True
        self.w.client_finished()

    # prefill
    async def prefill(self, keys, batch=256):
        loop = self.w.loop
        for i in range(0, len(keys), batch):
            for n in keys[i:i + batch]:
                self.send_prefill(n)
            self.flush()
            if self.outstanding:
                self.idle_waiter = loop.create_future()
                await self.idle_waiter

    def send_prefill(self, key_n):
        if self.bloom:
            data, key = bloom_request(SET, key_n, self.prefix, self.bloom)
        else:
            key = self.prefix + b"%d" % key_n
            data = self.set_fmt % (len(key), key, self.value_part)
        conn = self.conn_for(self.w.slotmap.nodes[self.w.slot_of(key)]) if self.cluster else self.conn
        conn.queue(data, (PREFILL, 0.0, data, 0, key_n))
        self.outstanding += 1


class ClosedLoopClient(Client):
    def start(self, t0, end):
        self.end = end
        self.started = True
        if self.conn is not None and self.conn.lost or self.w.stopping:
            self.finish()
            return
        self.sending = True
        self.send_batch(monotonic())

    def send_batch(self, now):
        self.emit(self.pipeline, now)
        self.flush()

    def after_replies(self, now):
        if self.outstanding == 0 and self.sending:
            if now < self.end and not self.w.stopping:
                self.send_batch(monotonic())
                return
            self.sending = False
        Client.after_replies(self, now)


class OpenLoopClient(Client):
    def __init__(self, worker, spec):
        super().__init__(worker, spec)
        self.blocked = False
        self.timer = None
        self.cap = max(worker.cfg.max_outstanding, self.pipeline)
        self.t0 = 0.0
        self.i = 0
        self.interval = self.pipeline / spec.rate

    def start(self, t0, end):
        self.t0 = t0 + self.spec.phase
        self.end = end
        self.started = True
        self.sending = True
        if self.t0 >= end or (self.conn is not None and self.conn.lost):
            self.sending = False
            self.finish()
            return
        self.timer = self.w.loop.call_later(max(0.0, self.t0 - monotonic()), self.tick)

    def tick(self, held=False):
        """Sends every batch that is due. held: called because replies brought the connection back under
        max_outstanding, so the lateness of what goes now is the server's (recorded apart), not the timer's."""
        self.timer = None
        if not self.sending:
            return
        now = monotonic()
        due = self.t0 + self.i * self.interval
        if due > now:  # woke early
            self.timer = self.w.loop.call_later(due - now, self.tick)
            return
        lags = self.w.held if held else self.w.lag
        end, cap = self.end, self.cap
        while due <= now and due < end:
            if self.outstanding + self.pipeline > cap:
                self.blocked = True
                break
            self.emit(self.pipeline, due)
            lags.append(int((now - due) * _US))   # one sample per batch: the runner weighs it by the pipeline
            self.i += 1
            due = self.t0 + self.i * self.interval
        self.flush()
        if self.blocked:
            return
        if due < end and not self.w.stopping:
            self.timer = self.w.loop.call_later(max(0.0, due - monotonic()), self.tick)
        else:
            self.sending = False
            if self.outstanding == 0 and not self.done:
                self.finish()

    def after_replies(self, now):
        if self.blocked and self.outstanding + self.pipeline <= self.cap:
            self.blocked = False
            self.tick(held=True)
        elif self.outstanding == 0:
            Client.after_replies(self, now)

    def stop(self):
        self.sending = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def unsent(self) -> dict:
        """{kind: requests} the schedule had due before the end that were never sent (the connection stayed at
        max_outstanding, or was lost): without them a server that stops answering would look faster."""
        if not self.started or self.t0 >= self.end:
            return {}
        batches = max(0, math.ceil((self.end - self.t0) / self.interval) - self.i)
        n = batches * self.pipeline
        full, rem = divmod(n, self.plen)
        out = {}
        for j in range(self.plen):
            kind = self.pattern[(self.pidx + j) % self.plen]
            count = full + (1 if j < rem else 0)
            if count:
                out[kind] = out.get(kind, 0) + count
        return out


class Worker:
    def __init__(self, wid, nproc, cfg, specs, queue, go, start_value):
        self.wid = wid
        self.nproc = nproc
        self.cfg = cfg
        self.specs = specs
        self.queue = queue
        self.go = go
        self.start_value = start_value
        self.loop = asyncio.get_running_loop()
        seed = cfg.seed * 1000 + wid if cfg.seed else None
        self.rng = random.Random(seed)
        if cfg.workload == "json":
            value = json_document(cfg.data_size, cfg.seed)
            # JSON.SET key . <doc> / JSON.GET key: the key and the value are filled in as for SET/GET
            self.set_fmt = b"*4\r\n$8\r\nJSON.SET\r\n$%d\r\n%b\r\n$1\r\n.\r\n%b"
            self.get_fmt = b"*2\r\n$8\r\nJSON.GET\r\n$%d\r\n%b\r\n"
        else:
            value = bytes(random.Random(cfg.seed or None).choice(b"abcdefghijklmnopqrstuvwxyz0123456789")
                          for _ in range(min(cfg.data_size, 64)))
            value = (value * (cfg.data_size // max(1, len(value)) + 1))[:cfg.data_size]
            self.set_fmt = b"*3\r\n$3\r\nSET\r\n$%d\r\n%b\r\n%b"
            self.get_fmt = b"*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n"
        self.value_part = b"$%d\r\n%b\r\n" % (len(value), value)
        self.lat = [array("q"), array("q")]
        self.lag = array("q")     # us each batch its timer sent was late by (the generator's own lag)
        self.held = array("q")    # us each batch waited for the server (held at max_outstanding)
        self.late_us = int(cfg.late_ms * 1000)
        self.errors = {}
        self.redirects = {}
        self.prefilled = 0
        self.ssl = make_ssl_context(cfg)
        self.slotmap = None
        self._slot_cache = {}
        self.clients = []
        self.running = False
        self.stopping = False
        self.unfinished = 0
        self.all_done = None
        self.last_reply = 0.0
        self.notes = []
        self.totals = [0, 0]

    # helpers used by clients
    def add_error(self, command, etype):
        key = (command, etype)
        self.errors[key] = self.errors.get(key, 0) + 1

    def note(self, text):
        if len(self.notes) < 20:
            self.notes.append(text)

    def slot_of(self, key):
        slot = self._slot_cache.get(key)
        if slot is None:
            slot = key_hash_slot(key)
            if len(self._slot_cache) < 2_000_000:
                self._slot_cache[key] = slot
        return slot

    async def open_conn(self, conn):
        host, port = conn.addr
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: conn, host, port, ssl=self.ssl,
                                            server_hostname=(self.cfg.sni or host) if self.ssl else None),
                self.cfg.connect_timeout)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            err = ConnectionError(f"cannot connect to {host}:{port}: {exc or type(exc).__name__}")
            conn.lost = True
            if not conn.ready.done():
                conn.ready.set_exception(err)
            if self.running:
                conn.client.on_conn_lost(conn, err)

    def client_finished(self):
        self.unfinished -= 1
        if self.unfinished <= 0 and self.all_done is not None and not self.all_done.done():
            self.all_done.set_result(True)

    def send(self, *msg):
        self.queue.put(msg)

    # the run
    async def load_slots(self):
        cfg = self.cfg
        seed = Client(self, self.specs[0])
        conn = seed.conn_for((cfg.host, cfg.port))
        await conn.ready
        seed.conns = {conn.addr: conn}
        err = await seed.setup()
        if err:
            raise ConnectionError(err)
        reply = await asyncio.wait_for(seed.request(conn, encode_command(("CLUSTER", "SLOTS"))), cfg.connect_timeout)
        conn.close()
        if isinstance(reply, ReplyError):
            raise ConnectionError(f"--cluster: CLUSTER SLOTS failed: {reply}")
        self.slotmap = SlotMap(parse_cluster_slots(reply, cfg.host), default=(cfg.host, cfg.port))

    async def run(self):
        cfg = self.cfg
        if cfg.cluster:
            await self.load_slots()
        cls = OpenLoopClient if cfg.open_loop else ClosedLoopClient
        self.clients = [cls(self, spec) for spec in self.specs]
        await asyncio.gather(*(c.connect() for c in self.clients))
        for c in self.clients:
            err = await c.setup()
            if err:
                raise ConnectionError(err)
        await self.prefill()
        self.send("ready", self.wid, {"prefilled": self.prefilled, "errors": self.take_errors()})

        while not self.go.is_set():
            await asyncio.sleep(0.002)
        t0 = self.start_value.value
        if cfg.duration <= 0:
            self.finish_message(t0)
            return
        end = t0 + cfg.duration
        self.cpu_start = time.process_time()
        self.running = True
        self.unfinished = len(self.clients)
        self.all_done = self.loop.create_future()
        delay = max(0.0, t0 - monotonic())
        for c in self.clients:
            self.loop.call_later(delay, c.start, t0, end)
        self.schedule_tick(t0, 1)
        try:
            await asyncio.wait_for(asyncio.shield(self.all_done), max(0.1, end + cfg.drain - monotonic()))
        except asyncio.TimeoutError:
            pass
        self.stopping = True
        unsent = 0
        for c in self.clients:
            if isinstance(c, OpenLoopClient):
                c.stop()
                for kind, n in c.unsent().items():
                    key = (KIND_NAMES[kind], "UNSENT")
                    self.errors[key] = self.errors.get(key, 0) + n
                    unsent += n
            timed_out = 0
            for conn in c.conns.values():
                for entry in conn.pending:
                    if entry[0] in (SET, GET):
                        self.add_error(KIND_NAMES[entry[0]], "TIMEOUT")
                        timed_out += 1
            if timed_out:
                self.note(f"{timed_out} requests without a reply {cfg.drain:g}s after the last send")
        if unsent:
            self.note(f"{unsent} requests due before the end were never sent (UNSENT): their connections stayed "
                      f"at --max-outstanding {cfg.max_outstanding} unanswered requests, or were lost")
        self.finish_message(t0)

    async def prefill(self):
        cfg = self.cfg
        if not cfg.prefill:
            return
        # This worker's share of keys 1..prefill, spread over its clients.
        keys = range(1 + self.wid, cfg.prefill + 1, self.nproc)
        clients = self.clients
        parts = [keys[i::len(clients)] for i in range(len(clients))]
        await asyncio.gather(*(c.prefill(part) for c, part in zip(clients, parts)))

    def schedule_tick(self, t0, k):
        self._tick_handle = self.loop.call_later(max(0.0, t0 + k - monotonic()), self.tick, t0, k)

    def tick(self, t0, k):
        if self.stopping:
            return
        self.flush_interval(k - 1)
        self.schedule_tick(t0, k + 1)

    def take_errors(self):
        errors, self.errors = self.errors, {}
        return errors

    def flush_interval(self, second):
        lat = (self.lat[SET], self.lat[GET])
        self.lat[SET], self.lat[GET] = array("q"), array("q")
        lag, self.lag = self.lag, array("q")
        held, self.held = self.held, array("q")
        pipeline, late_us = self.cfg.pipeline, self.late_us
        payload = {"ops": [len(lat[SET]), len(lat[GET])], "hist": {}, "errors": self.take_errors(),
                   "redirects": dict(self.redirects),
                   # requests sent by the timers, and those of them sent more than late_ms after their time
                   "sent": len(lag) * pipeline, "late": sum(1 for v in lag if v > late_us) * pipeline,
                   "held": len(held) * pipeline}
        for kind in (SET, GET):
            if lat[kind]:
                h = histmod.new_histogram()
                histmod.record_samples(h, lat[kind])
                payload["hist"][KIND_NAMES[kind]] = histmod.encode(h)
                self.totals[kind] += len(lat[kind])
        for name, samples in (("lag", lag), ("held_lag", held)):
            if samples:
                h = histmod.new_histogram()
                histmod.record_samples(h, samples, weight=pipeline)
                payload[name] = histmod.encode(h)
        self.send("tick", self.wid, second, payload)

    def finish_message(self, t0):
        if getattr(self, "_tick_handle", None) is not None:
            self._tick_handle.cancel()
        self.stopping = True
        if self.running:  # the drain tail goes into the last second of the run
            second = max(0, min(int(monotonic() - t0), math.ceil(self.cfg.duration) - 1))
            self.flush_interval(second)
        last_reply = self.last_reply - t0 if self.last_reply else 0.0
        for c in self.clients:
            for conn in c.conns.values():
                conn.close()
        cpu = time.process_time() - self.cpu_start if self.running else 0.0
        self.send("done", self.wid, {"last_reply": last_reply, "notes": self.notes, "cpu_s": cpu,
                                     "connections": sum(len(c.conns) for c in self.clients)})


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll for readiness, but timed waits go through select() on the epoll fd itself (readable when any
    registered descriptor has events), so a timeout of 0.3 ms is 0.3 ms and not 1 ms."""

    def select(self, timeout=None):
        if timeout is not None and timeout > 0:
            select.select([self._selector.fileno()], [], [], timeout)
            timeout = 0
        return super().select(timeout)


def make_loop(open_loop: bool):
    """Open loop: precise timers (PreciseEpollSelector). Closed loop: uvloop when installed, else default."""
    if open_loop:
        _reduce_timer_slack()
        return asyncio.SelectorEventLoop(PreciseEpollSelector())
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _prctl(option, value):
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reduce_timer_slack():
    _prctl(29, 1000)  # PR_SET_TIMERSLACK: 1 us (default 50 us)


def worker_main(wid, nproc, cfg, specs, queue, go, start_value):
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us by pid
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: end with the parent, however it ends
    if os.getppid() == 1:
        return
    if cfg.cpus:
        try:
            os.sched_setaffinity(0, set(cfg.cpus))
        except (OSError, AttributeError):
            pass
    loop = make_loop(cfg.open_loop)
    asyncio.set_event_loop(loop)

    async def main():
        await Worker(wid, nproc, cfg, specs, queue, go, start_value).run()

    try:
        loop.run_until_complete(main())
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        queue.put(("error", wid, f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            loop.close()
        except Exception:  # noqa: BLE001
            pass
        queue.close()
        queue.join_thread()
