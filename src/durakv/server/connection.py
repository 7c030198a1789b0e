"""One client connection: parse, dispatch in order, hand effects to durability, write replies in order."""

import asyncio
import collections

from .. import messages
from ..errors import CommandError
from ..protocol.parser import RequestParser, unauthenticated_limit
from ..protocol.resp import ErrorReply, Raw, encode
from ..commands.base import Blocked
from ..commands.session import Session

_RAW = Raw
_SEES_ALL = frozenset(("exec", "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"))


class Connection(asyncio.Protocol):
    def __init__(self, server, tls=False):
        self.server = server
        self.tls = tls
        self.transport = None
        self.session = Session(created_ms=server.clock_ms(), authenticated=not server.requirepass)
        cfg = server.config
        self.parser = RequestParser(cfg["proto-max-bulk-len"], cfg["client-query-buffer-limit"])
        self.pending = collections.deque()   # (commit index to wait for, bytes | Future) behind a held reply
        self.closing = False
        self.paused = False
        # Parked (server/blocking.py): blocked on keys or postponed by CLIENT PAUSE; the commands that
        # arrive meanwhile wait in `backlog`, in order.
        self.blocked = None
        self.backlog = None
        self.backlog_error = None
        self.out = None            # replies of the batch being processed (pushes go behind them)
        # Pub/sub, MONITOR, CLIENT TRACKING / NO-TOUCH / NO-EVICT (server/notify.py, server/pubsub.py);
        # `special` sends this connection's commands through server.hooks.
        self.subs = None
        self.monitor = False
        self.tracking = None
        self.no_touch = False
        self.no_evict = False
        self.special = False

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
        server.total_connections += 1
        if len(server.clients) >= server.config["maxclients"]:
            server.rejected_connections += 1
            transport.write(b"-%s\r\n" % messages.MAX_CLIENTS.encode())
            transport.close()
            self.closing = True
            return
        server.clients[s.id] = self
        server.dispatcher.new_context(s)

    def connection_lost(self, exc):
        self.closing = True
        server = self.server
        server.clients.pop(self.session.id, None)
        server.dispatcher.unwatch_all(self.session)
        server.tracker.waiters.discard(self)
        self.pending.clear()
        if self.special or self.blocked is not None:
            server.hooks.drop_client(self)
        self.backlog = None

    def pause_writing(self):
        # The client is not reading its replies: stop reading its requests until it catches up.
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_writing(self):
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def data_received(self, data):
        if self.closing:
            return
        commands, error = self.parser.feed(data)
        if self.backlog is not None:  # parked: these wait behind the parked command, in order
            self.backlog.extend(commands)
            if error is not None and self.backlog_error is None:
                self.backlog_error = error
            return
        self._process(commands, error)

    def resume(self):
        """Runs the commands that waited while this connection was parked (blocked or paused)."""
        if self.closing or self.blocked is not None or self.backlog is None:
            return
        commands = list(self.backlog)
        error = self.backlog_error
        self.backlog = self.backlog_error = None
        self._process(commands, error)

    def _process(self, commands, error):
        out = self.out = []
        server = self.server
        server.now_ms = server.clock_ms()  # one clock read per batch of requests (idle accounting)
        try:
            for i, args in enumerate(commands):
                if not self.session.authenticated:
                    # Valkey's tighter limits before AUTH, checked per request as it comes up (an AUTH
                    # earlier in the same read lifts them for the requests after it).
                    limit = unauthenticated_limit(args)
                    if limit is not None:
                        error = limit
                        break
                self._handle(args, out, server)
                if self.session.close_after_reply or self.closing:
                    break
                if self.blocked is not None:
                    if self.backlog is None:
                        self.backlog = collections.deque()
                    self.backlog.extend(commands[i + 1:])
                    self.backlog_error, error = error, None
                    break
        finally:
            self.out = None
        if error is not None and not self.session.close_after_reply:
            server.log_protocol_error(self.session, error)
            self._emit(0, b"-ERR %s\r\n" % error.encode(), out)
            self.session.close_after_reply = True
        if out and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        if self.session.close_after_reply and not self.pending:
            self.close()

    # -- one command ---------------------------------------------------------------------------
    def _handle(self, args, out, server):
        hooks = server.hooks
        if hooks.active or self.special:
            hooks.handle(self, args, out)  # pub/sub limits, MONITOR, PAUSE, tracking, notifications, ...
        else:
            self._execute(args, out, server, None)

    def _execute(self, args, out, server, hooks):
        session = self.session
        session.last_interaction_ms = server.now_ms
        reply, effects, cmd = server.dispatcher.execute(session, args)
        tracker = server.tracker
        index = 0
        if effects:
            index = tracker.submit(effects, server.keys_of_effect)
            session.last_write_index = tracker.assigned  # the batch holding them (WAITAOF)
        elif tracker.mode == "sync" and tracker.committed < tracker.assigned and cmd is not None \
                and type(reply) is not ErrorReply:
            # A read (or a write that changed nothing) must not reveal an uncommitted write.
            if cmd.name in _SEES_ALL:
                index = tracker.barrier_index()  # EXEC, scripts: may have read any key
            elif cmd.readonly or cmd.write:
                if cmd.keyless:
                    index = tracker.barrier_index()  # no keys: sees the whole keyspace
                else:
                    index = tracker.read_wait_index(session.db_id, cmd.keys(args))
        if cmd is not None:
            session.last_cmd = cmd.fullname
        if hooks is not None:
            hooks.after(self, args, cmd, reply, effects)
        elif effects and server.blocking.waiting:
            server.hooks.after_effects(self, cmd, effects)  # may wake clients blocked on these keys
        t = type(reply)
        if t is _RAW:
            data = reply
        elif t is bytes:
            data = b"$%d\r\n%s\r\n" % (len(reply), reply)
        elif t is Blocked:
            server.blocking.block(self, reply, cmd, args)  # parked: the reply comes when it is served
            return
        elif t is asyncio.Future or isinstance(reply, asyncio.Future):
            self._emit_future(index, reply, out)
            return
        else:
            try:
                data = encode(reply, session.resp == 3)
            except Exception as exc:  # noqa: BLE001 - a bad reply must not take the server down
                server.log_exception(cmd.fullname if cmd else "?", exc)
                data = b"-ERR internal error encoding the reply\r\n"
        self._emit(index, data, out)

    def _emit(self, index, data, out):
        s = self.session
        if s.reply_off or s.reply_skip:  # CLIENT REPLY OFF / SKIP (commands/connection.py)
            data = s.mute_reply(data)
        if self.pending or (index and index > self.server.tracker.committed):
            self.pending.append((index, data))
            self.server.tracker.waiters.add(self)
        else:
            out.append(data)

    def _emit_future(self, index, fut, out):
        self.pending.append((index, fut))
        self.server.tracker.waiters.add(self)
        fut.add_done_callback(lambda _f: self.on_commit(self.server.tracker.committed))

    def on_commit(self, committed):
        """Releases the held replies whose commit has happened, in request order."""
        pending = self.pending
        out = []
        resp3 = self.session.resp == 3
        while pending:
            index, data = pending[0]
            if index > committed:
                break
            if isinstance(data, asyncio.Future):
                if not data.done():
                    break
                try:
                    data = encode(data.result(), resp3)
                except CommandError as exc:
                    data = b"-%s\r\n" % exc.text.encode()
                except Exception as exc:  # noqa: BLE001
                    data = b"-ERR %s\r\n" % str(exc).encode()
            pending.popleft()
            out.append(data)
        if not pending:
            self.server.tracker.waiters.discard(self)
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
        if not pending and self.session.close_after_reply:
            self.close()

    def push(self, reply):
        """An out-of-band message (pub/sub, tracking) written behind what is already queued."""
        data = encode(reply, self.session.resp == 3)
        if self.pending:
            self.pending.append((0, data))
        elif self.out is not None:
            self.out.append(data)  # this connection is mid-batch: behind the replies before it
        elif self.transport is not None and not self.closing:
            self.transport.write(data)

    def send_reply(self, index, reply):
        """A reply produced outside this connection's own processing (a served blocked command)."""
        data = reply if type(reply) is _RAW else encode(reply, self.session.resp == 3)
        out = []
        self._emit(index, data, out)
        if out and self.transport is not None and not self.closing:
            self.transport.write(out[0])

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


def _fmt_addr(addr):
    if not addr:
        return "?"
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(addr)
