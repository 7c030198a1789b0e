"""One client connection: parse, run each request through the pipeline in order, write what durability
releases.

The connection owns the socket side only. Every request goes to server.pipeline.process, which answers a
reply and a durability ticket; the encoded reply goes to this connection's Outbox (durability/release.py),
which decides whether it leaves with this batch or waits for a commit. All replies released in one batch are
written with one transport.write.
"""

import asyncio
import collections
import functools
import logging

from .. import messages
from ..commands.base import Blocked
from ..commands import registry
from ..commands.pipeline import Postponed
from ..commands.session import Session
from ..protocol.parser import RequestParser, unauthenticated_limit
from ..protocol.resp import Deferred, Raw, RawView, encode
from .services import OFF_LOOP_PARKED, client_line

log = logging.getLogger("durakv.server")

_RAW = Raw
# Replies produced by one batch of requests are written out once they pass this size; if the client is not
# reading (the transport is above its high-water mark) the rest of the batch waits until it drains, so a
# pipeline of large reads never piles up more than about this much per client.
OUTPUT_FLUSH_BYTES = 1 << 20


class Connection(asyncio.Protocol):
    # read per batch by the compiled core at their offsets (fastpath/_core.c); the rest in the dict
    __slots__ = ("session", "outbox", "closing", "server", "parser", "backlog", "transport",
                 "__dict__", "__weakref__")

    def __init__(self, server, tls=False):
        self.server = server
        self.tls = tls
        self.transport = None
        self.session = Session(created_ms=server.clock_ms(), authenticated=not server.acl.auth_required())
        self.session.tls = tls
        cfg = server.config
        self.parser = RequestParser(cfg["proto-max-bulk-len"], cfg["client-query-buffer-limit"], auth=self.session)
        self.outbox = None
        self.closing = False
        self.paused = False            # the transport's buffer is above its high-water mark (pause_writing)
        self.reading_paused = False
        self.output_parked = False     # the rest of a batch waits for the transport to drain
        self.obuf_soft_since_ms = 0    # client-output-buffer-limit: when the soft limit was first passed
        # Parked (server/blocking.py): blocked on keys, postponed by CLIENT PAUSE, or behind a long script;
        # the commands that arrive meanwhile wait in `backlog`, in order.
        self.blocked = None
        self.backlog = None
        self.backlog_error = None
        self.in_batch = False
        # Pub/sub and CLIENT TRACKING / NO-EVICT state (server/pubsub.py, server/notify.py).
        self.subs = None
        self.tracking = None
        self.replica_feed = None            # SYNC: Valkey's replication stream (server/replfeed.py)
        self.no_evict = False
        if server.batch_core is not None:
            # The compiled read callback (fastpath/_core.c received): this class's read, process and flush
            # for a read of complete requests it runs; anything else it hands to them before changing anything.
            self.data_received = functools.partial(server.batch_core.received, self)

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        server = self.server
        s = self.session
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        s.addr = _fmt_addr(peer)
        s.laddr = _fmt_addr(sock)
        sk = transport.get_extra_info("socket")
        s.fd = sk.fileno() if sk is not None else -1
        self.outbox = server.durability.outbox(self._write, self._encode)
        self.outbox.on_drained = self._drained
        self.outbox.limit_bytes = server.config["client-held-replies-limit"]
        self.outbox.on_limit = self._held_limit
        self.outbox.on_failed = self._held_reply_failed
        s.local = _is_loopback(peer)
        server.total_connections += 1
        if len(server.clients) >= server.config["maxclients"]:
            server.rejected_connections += 1
            transport.write(b"-%s\r\n" % messages.MAX_CLIENTS.encode())
            transport.close()
            self.closing = True
            return
        if not s.local and server.config["protected-mode"] and server.acl.users.default.nopass:
            # Valkey's clientAcceptHandler: protected mode (the default) and no password for the default user
            # serve the loopback interface only; anyone else is told why and disconnected
            server.rejected_connections += 1
            transport.write(b"-%s\r\n" % messages.PROTECTED_MODE_DENIED.encode())
            transport.close()
            self.closing = True
            return
        server.clients[s.id] = self
        server.pipeline.new_context(s)

    def connection_lost(self, exc):
        self.closing = True
        server = self.server
        server.clients.pop(self.session.id, None)
        server.pipeline.unwatch_all(self.session)
        if self.outbox is not None:
            self.outbox.close()
        server.hooks.drop_client(self)
        self.backlog = None

    def pause_writing(self):
        # The client is not reading its replies: stop reading its requests until it catches up.
        self.paused = True
        self._update_reading()

    def resume_writing(self):
        self.paused = False
        self._update_reading()
        if self.output_parked:
            self.output_parked = False
            self.server.loop.call_soon(self.resume)

    def _held_limit(self, over):
        # Too many replies wait for their commit (a sync journal slower than this client's pipeline):
        # stop reading its requests until commits catch up.
        self._update_reading()

    def _update_reading(self):
        transport = self.transport
        if transport is None or self.closing:
            return
        want = self.paused or self.outbox.over_limit
        if want and not self.reading_paused:
            self.reading_paused = True
            transport.pause_reading()
        elif not want and self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    # -- the compiled core's contract ------------------------------------------------------------
    # fastpath/_core.c `received` is data_received with the core: it does read()'s steps itself for a read it
    # can take whole, and calls these three public methods for the rest, each at the point named below.

    def read(self, data):
        """data_received's Python steps for one read: counters, the parser, then process() (or the backlog
        while parked). The core calls it for a read it does not take from the start (not at a request boundary
        of its session, parked, closing, ...), before it changed anything."""
        if self.closing:
            return
        n = len(data)
        self.session.net_in += n
        srv = self.server
        srv.net_input_bytes += n
        srv.reads_processed += 1
        if not srv.loop_stats.open:     # the first read of this event-loop turn times the turn (loopstats.py)
            srv.loop_stats.begin()
        commands, error = self.parser.feed(data)
        if self.backlog is not None:  # parked: these wait behind the parked command, in order
            self.backlog.extend(commands)
            if error is not None and self.backlog_error is None:
                self.backlog_error = error
        else:
            self.process(commands, error)
        if srv.client_eviction.limit:
            srv.client_eviction.after_read(self)

    data_received = read

    def resume(self):
        """Runs the commands that waited while this connection was parked (blocked or paused)."""
        if self.closing or self.blocked is not None or self.backlog is None:
            return
        commands = list(self.backlog)
        error = self.backlog_error
        self.backlog = self.backlog_error = None
        self.process(commands, error)

    def process(self, commands, error):
        """Runs one read's parsed requests in order (error: the parser's, answered after them), then flushes.
        The core calls it with what the parser's Python steps (feed_rest) returned for a read it parsed only in
        part; nothing is parked then."""
        server = self.server
        core = server.batch_core
        start = 0
        if core is not None:
            # The compiled core first: a read of commands it runs ends here, with one flush (the loop below,
            # from where the core stopped, is the same steps for everything else)
            session = self.session
            session.last_interaction_ms = server.now_ms = server.clock_ms()
            server.pipeline.mark()
            start, status = core.run(self, commands, 0)
            if start >= len(commands) and error is None:
                self.outbox.flush()
                return
            if status == 1:
                core = None
        self.run_batch(commands, error, start, core)

    def run_batch(self, commands, error, i, core):
        """Runs commands[i:] (error: the parser's, answered after them), the core first while it takes them
        (core None: the pipeline for all of them), then flushes and closes if asked. The core calls it, with
        error None and core itself (or None: status 1), for the commands of a read it parsed whole but ran
        only up to i; the clock and mark are read again here."""
        server = self.server
        pipeline = server.pipeline
        process = pipeline.process
        session = self.session
        outbox = self.outbox
        ready = outbox.ready
        held = outbox.held
        resp3 = session.resp == 3
        session.last_interaction_ms = server.now_ms = server.clock_ms()  # one clock read per batch (idle)
        pipeline.mark()
        hooks = server.hooks
        previous = hooks.current
        hooks.current = self
        self.in_batch = True
        ks = server.keyspace
        importing = session.import_source and server.config["import-mode"]
        if importing:
            # import-mode: an import source's commands see keys whose TTL passed as live (objectIsExpired)
            saved_expiry = (ks.expire_enabled, ks.hide_expired)
            ks.expire_enabled = ks.hide_expired = False
        size = 0
        monitors = pipeline.monitors
        # the argument the commands declaring prepare_off_loop (RESTORE) have prepared off the loop when long
        off_arg, off_min_bytes = registry.OFF_LOOP_ARG, registry.OFF_LOOP_MIN_BYTES
        # core: the compiled batch loop (fastpath/_core.c), None for the pure-Python core or once it said that
        # this batch's state needs the pipeline; i: the first command not run yet
        count = len(commands)
        try:
            while i < count:
                if core is not None:
                    # Runs commands[i:] while they are commands it runs, in a state that needs nothing else; the
                    # first one it leaves (or all of the rest, status 1) goes through the pipeline below.
                    i, status = core.run(self, commands, i)
                    if status == 2:           # its replies passed OUTPUT_FLUSH_BYTES: as below
                        size = 0
                        outbox.flush()
                        if self.paused and i < count:
                            self.output_parked = True
                            self._park(commands, i, error)
                            error = None
                            break
                        continue
                    if status == 1:
                        core = None
                    if i >= count:
                        break
                args = commands[i]
                i += 1
                if not session.authenticated:
                    # Valkey's tighter limits before AUTH, checked per request as it comes up (an AUTH
                    # earlier in the same read lifts them for the requests after it).
                    limit = unauthenticated_limit(args)
                    if limit is not None:
                        error = limit
                        break
                if len(args) > off_arg and len(args[off_arg]) >= off_min_bytes and self._prepare_first(args):
                    self._park(commands, i - 1, error)   # the command itself runs first once prepared
                    error = None
                    break
                reply, ticket, cmd = process(session, args)
                if session.decoded is not None:
                    session.decoded = None    # not used (the RESTORE was refused): nothing keeps the value
                if cmd is not None and cmd.changes_protocol:
                    resp3 = session.resp == 3  # HELLO, RESET: the replies after it use the new protocol
                t = type(reply)
                if t is _RAW:
                    data = reply
                elif t is bytes:
                    n = len(reply)
                    data = b"$%d\r\n%s\r\n" % (n, reply)
                    size += n
                elif reply is None:
                    data = b"_\r\n" if resp3 else b"$-1\r\n"
                elif t is int:
                    data = b":%d\r\n" % reply
                elif t is Blocked:
                    server.blocking.block(self, reply, cmd, args)  # its reply is a Deferred in the outbox
                    self._park(commands, i, error)
                    error = None
                    break
                elif t is Postponed:
                    server.blocking.postpone(self, args)
                    self._park(commands, i, error)
                    error = None
                    break
                elif t is Deferred:
                    outbox.hold_deferred(reply)
                    if self.blocked is not None:  # a script past busy-reply-threshold parked us
                        self._park(commands, i, error)
                        error = None
                        break
                    continue
                else:
                    try:
                        data = encode(reply, resp3)
                    except Exception as exc:  # noqa: BLE001 - a bad reply must not take the server down
                        server.log_exception(cmd.fullname if cmd else "?", exc)
                        data = b"-ERR internal error encoding the reply\r\n"
                    size += len(data)
                if len(data) > monitors.reply_limit and cmd is not None:
                    # COMMANDLOG large-reply: the reply's encoded size, known only here
                    monitors.record_reply(session, cmd, args, len(data))
                if session.reply_off or session.reply_skip:   # CLIENT REPLY OFF / SKIP
                    data = session.mute_reply(data)
                if ticket:
                    # the write's arguments stay in the open batch until its commit: counted for backpressure
                    outbox.hold(ticket, data, sum(map(len, args)))
                elif held:
                    outbox.hold(ticket, data)
                else:
                    ready.append(data)
                if pipeline.observer is not None or hooks.own_feed:
                    hooks.after_reply(self)
                if session.close_after_reply or self.closing:
                    break
                if size > OUTPUT_FLUSH_BYTES:
                    size = 0
                    outbox.flush()
                    if self.paused and i < count:
                        self.output_parked = True
                        self._park(commands, i, error)
                        error = None
                        break
        finally:
            self.in_batch = False
            hooks.current = previous
            if importing:
                ks.expire_enabled, ks.hide_expired = saved_expiry
        if error is not None and not session.close_after_reply:
            if error == messages.PROTO_QUERY_BUFFER_LIMIT:
                pipeline.query_buffer_limit_reached(session)
            else:
                server.log_protocol_error(session, error)
            # latin-1: a protocol error quotes the offending byte as it came (Valkey writes it raw)
            outbox.emit(0, b"-ERR %s\r\n" % error.encode("latin-1", "replace"))
            session.close_after_reply = True
        outbox.flush()
        if session.close_after_reply and not held:
            self.close()

    def _prepare_first(self, args) -> bool:
        """A command declaring prepare_off_loop (RESTORE) with a long argument there: a worker thread prepares
        it (RESTORE's payload checked and decoded) while this connection is parked, then the command runs
        through the pipeline as usual with the result ready (session.decoded). True if it was handed to the
        worker. (Inside MULTI it is only queued; EXEC prepares on the loop. A replica or start-up replay applying
        RESTORE decodes on the loop too.)"""
        session = self.session
        if session.in_multi or not session.authenticated:
            return False
        cmd = registry.OFF_LOOP.get(args[0].lower())
        if cmd is None:
            return False
        index, min_bytes, prepare = cmd.prepare_off_loop
        if len(args) <= index or len(args[index]) < min_bytes:
            return False
        decoded = session.decoded
        if decoded is not None and decoded[0] is args[index]:
            return False            # prepared: it runs now
        server = self.server
        loop = server.loop
        if loop is None or not loop.is_running():
            return False
        payload = args[index]
        clock_ms = server.keyspace.clock_ms

        def decoded_now(result):
            if self.blocked is OFF_LOOP_PARKED:
                self.blocked = None
            if self.closing:
                return
            session.decoded = (payload, result)
            self.resume()

        self.blocked = OFF_LOOP_PARKED
        server.services.off_loop.run(lambda: prepare(payload, clock_ms), decoded_now)
        return True

    def _park(self, commands, rest, error):
        if self.backlog is None:
            self.backlog = collections.deque()
        self.backlog.extend(commands[rest:])
        self.backlog_error = error

    # -- what the outbox calls --------------------------------------------------------------------
    def _write(self, data):
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)
            n = len(data)
            self.session.net_out += n
            srv = self.server
            srv.net_output_bytes += n
            srv.writes_processed += 1
            if srv.obuf_limited and (srv.obuf_normal_limited or self.session.special):
                self._check_output_limits()

    def output_memory(self) -> int:
        """Bytes this client's replies hold: written but not yet sent, plus those waiting for a commit."""
        transport = self.transport
        sent_pending = transport.get_write_buffer_size() if transport is not None else 0
        return sent_pending + (self.outbox.held_bytes if self.outbox is not None else 0)

    def _check_output_limits(self):
        """client-output-buffer-limit (checkClientOutputBufferLimits): past the hard limit, or past the soft one
        for longer than its seconds, the client is disconnected."""
        session = self.session
        cls = "slave" if session.monitor else ("pubsub" if session.subscribed else "normal")
        hard, soft, soft_s = self.server.obuf_limits[cls]
        if not hard and not soft:
            return
        used = self.output_memory()
        over = bool(hard and used >= hard)
        if soft and used >= soft:
            now = self.server.clock_ms()
            if not self.obuf_soft_since_ms:
                self.obuf_soft_since_ms = now
            elif now - self.obuf_soft_since_ms > soft_s * 1000:
                over = True
        else:
            self.obuf_soft_since_ms = 0
        if over and not self.closing:
            log.warning("Client %s scheduled to be closed ASAP for overcoming of output buffer limits.",
                        client_line(self, self.server.clock_ms()))
            self.closing = True
            self.transport.abort()

    def _encode(self, reply):
        if type(reply) is RawView:
            return reply.view    # written as it is: encode() would join it into a copy
        try:
            return encode(reply, self.session.resp == 3)
        except Exception as exc:  # noqa: BLE001
            self.server.log_exception("deferred reply", exc)
            return b"-ERR internal error encoding the reply\r\n"

    def _held_reply_failed(self):
        # A SYNC stream whose RDB was answered with the journal's error, or that lost a chunk (its write never
        # committed), cannot go on: the client sees the end of the stream and syncs again, as a Valkey replica
        # does after a broken link. Other clients just miss the pushes of writes that never happened.
        if self.replica_feed is not None or self.session.repl_rdb_only:
            self.session.close_after_reply = True
            if not self.outbox.held:
                self.close()

    def _drained(self):
        if self.session.close_after_reply:
            self.close()

    def push(self, reply, ticket=0):
        """An out-of-band message (pub/sub, tracking, MONITOR, a SYNC stream chunk) written behind what is
        already queued and not before journal entry `ticket` (the write it is derived from) commits."""
        if self.closing or self.outbox is None:
            return
        data = reply if type(reply) is _RAW else encode(reply, self.session.resp == 3)
        if self.outbox.push(data, ticket):
            # Held (behind a commit or a held reply): it counts toward client-output-buffer-limit as it is
            # queued, as Valkey counts a reply list that the socket has not taken yet.
            if self.server.obuf_limited:
                self._check_output_limits()
        elif not self.in_batch:
            self.outbox.flush()

    def close(self):
        self.closing = True
        t = self.transport
        if t is not None:
            # Send the FIN right behind the last reply (QUIT, CLIENT KILL): a client that reuses the
            # connection then reads EOF instead of having its next command answered by a reset.
            if not t.is_closing() and t.can_write_eof():
                try:
                    t.write_eof()
                except OSError:
                    pass
            t.close()


def _is_loopback(peer) -> bool:
    """Valkey's connSocketIsLocal: the peer's address as text starts with "127." or is "::1" (an IPv4-mapped
    ::ffff:127.0.0.1 is not local there either)."""
    if not isinstance(peer, tuple) or not peer:
        return False
    host = peer[0]
    return host.startswith("127.") or host == "::1"


def _fmt_addr(addr):
    if not addr:
        return "?"
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(addr)
