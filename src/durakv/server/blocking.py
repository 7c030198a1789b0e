"""Parked clients: blocked on keys (BLPOP, BZPOPMIN, XREAD BLOCK, ...) and postponed by CLIENT PAUSE.

Blocking on keys follows Valkey's blocked.c: a handler that cannot be served returns `Blocked`; the
connection is parked (its later pipelined commands wait behind it, in order) and put on a FIFO list per
(db, key). Whenever effects touch such a key (any client's command, EXEC, server-side deletions, or the
effects of another served blocked client, as for a BLMOVE chain) the key is "ready" and the clients parked
on it are retried in the order they blocked. A retry that returns a reply releases the client: its effects
go to durability as any write's (so the journal holds e.g. LPOP for the served BLPOP) and its reply is
emitted with the commit index the tracker gave, so in sync mode it leaves only once the pop is durable.

CLIENT PAUSE parks ("postpones") a client whose command must wait for the pause to end; the command is
re-run from scratch afterwards, exactly like Valkey's BLOCKED_POSTPONE.
"""

import collections
import logging

from .. import messages
from ..commands.base import Blocked
from ..errors import CommandError
from ..keyspace.db import estimate_key
from ..protocol.resp import ErrorReply

log = logging.getLogger("durakv.blocking")


class Postponed:
    """conn.blocked while a connection waits for CLIENT PAUSE to end."""
    __slots__ = ()


POSTPONED = Postponed()


class BlockedClient:
    __slots__ = ("conn", "blocked", "cmd", "args", "db_id", "keys", "timer", "done")

    def __init__(self, conn, blocked, cmd, args, db_id):
        self.conn = conn
        self.blocked = blocked
        self.cmd = cmd
        self.args = args
        self.db_id = db_id
        self.keys = tuple(dict.fromkeys(blocked.keys))
        self.timer = None
        self.done = False


class Blocking:
    def __init__(self, server):
        self.server = server
        self.waiting = {}                      # (db_id, key) -> {BlockedClient: None}, FIFO
        self.count = 0                         # clients blocked on keys
        self.timed = 0                         # ... of which with a timeout (INFO clients_in_timeout_table)
        self._ready = collections.deque()      # (db_id, key) touched since the last serve pass
        self._ready_set = set()
        self._serving = False
        # CLIENT PAUSE
        self.pause_mode = None                 # None | 'write' | 'all'
        self.pause_end_ms = 0
        self._pause_timer = None
        self.postponed = {}                    # conn -> None, FIFO
        self._saved_active_expire = None

    # -- blocking on keys -----------------------------------------------------------------------
    def block(self, conn, blocked, cmd, args):
        """Parks conn on blocked.keys (in its current db) until served, timed out or unblocked."""
        db_id = conn.session.db_id
        blocked.db_id = db_id
        entry = BlockedClient(conn, blocked, cmd, args, db_id)
        waiting = self.waiting
        for key in entry.keys:
            dk = (db_id, key)
            clients = waiting.get(dk)
            if clients is None:
                clients = waiting[dk] = {}
            clients[entry] = None
        conn.blocked = entry
        self.count += 1
        timeout_ms = blocked.timeout_ms
        if timeout_ms and timeout_ms > 0:
            entry.timer = self.server.loop.call_later(timeout_ms / 1000.0, self._timed_out, entry)
            self.timed += 1
        self.server.hooks.refresh()

    def _release(self, entry):
        """Takes entry off every key list and its timer; the connection stays parked until resumed."""
        if entry.done:
            return
        entry.done = True
        waiting = self.waiting
        for key in entry.keys:
            dk = (entry.db_id, key)
            clients = waiting.get(dk)
            if clients is not None:
                clients.pop(entry, None)
                if not clients:
                    del waiting[dk]
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
            self.timed -= 1
        self.count -= 1
        if entry.conn.blocked is entry:
            entry.conn.blocked = None
        self.server.hooks.refresh()

    def _finish(self, entry, reply, index=0):
        """Releases a parked client with its reply and lets its queued commands run."""
        self._release(entry)
        conn = entry.conn
        if conn.closing:
            return
        conn.send_reply(index, reply)
        self.server.loop.call_soon(conn.resume)

    def _timed_out(self, entry):
        if not entry.done:
            self._finish(entry, entry.blocked.timeout_reply)

    def unblock(self, client_id, error=False) -> bool:
        """CLIENT UNBLOCK: answers a client blocked on keys as if timed out (or with an error)."""
        conn = self.server.clients.get(client_id)
        if conn is None:
            return False
        entry = conn.blocked
        if not isinstance(entry, BlockedClient) or entry.done:
            return False
        if error:
            self.server.dispatcher._count_error(messages.UNBLOCKED_BY_CLIENT)
            self._finish(entry, ErrorReply(messages.UNBLOCKED_BY_CLIENT))
        else:
            self._finish(entry, entry.blocked.timeout_reply)
        return True

    def drop_client(self, conn):
        """A parked connection went away."""
        entry = conn.blocked
        if isinstance(entry, BlockedClient):
            self._release(entry)
        elif entry is POSTPONED:
            self.postponed.pop(conn, None)
            conn.blocked = None
            self.server.hooks.refresh()

    # -- wake-ups -------------------------------------------------------------------------------
    def signal(self, db_id, key):
        dk = (db_id, key)
        if dk in self.waiting and dk not in self._ready_set:
            self._ready_set.add(dk)
            self._ready.append(dk)

    def signal_all(self, db_id=None):
        """Keyless effects (FLUSHALL, SWAPDB, ...): every blocked key (of db_id, or all dbs) is ready."""
        for dk in list(self.waiting):
            if db_id is None or dk[0] == db_id:
                self.signal(*dk)

    def serve(self):
        """Retries the clients parked on ready keys, first blocked first, until nothing is ready.
        A served client's own effects may make more keys ready (BLMOVE into a watched list)."""
        if self._serving:
            return
        self._serving = True
        try:
            ready = self._ready
            while ready:
                dk = ready.popleft()
                self._ready_set.discard(dk)
                clients = self.waiting.get(dk)
                if not clients:
                    continue
                for entry in list(clients):
                    if not entry.done:
                        self._retry(entry)
        finally:
            self._serving = False

    def _retry(self, entry):
        server = self.server
        conn = entry.conn
        if conn.closing:
            self._release(entry)
            return
        session = conn.session
        dispatcher = server.dispatcher
        cmd = entry.cmd
        # ACL: the rules may have changed while it waited (Valkey re-runs processCommand); to move into the pipeline.
        text = dispatcher.acl.blocked_denied(session, cmd, entry.args) if dispatcher.acl is not None else None
        if text is not None:
            cmd.rejected_calls += 1
            dispatcher._count_error(text)
            self._finish(entry, ErrorReply(text))
            return
        ctx = session.ctx
        keyspace = server.keyspace
        db = ctx.db = keyspace.dbs[entry.db_id]
        keys = cmd.keys(entry.args) if cmd is not None else entry.keys
        data = db.data
        before = 0
        for k in keys:
            v = keyspace.lookup(db, k)  # lazy expiry first, as the dispatcher does before measuring
            if v is not None:
                before += estimate_key(k, v)
        try:
            reply = entry.blocked.retry(ctx)
        except CommandError as exc:
            reply = ErrorReply(exc.text)
            dispatcher._count_error(exc.text)
            if cmd is not None:
                cmd.failed_calls += 1
        except Exception as exc:  # noqa: BLE001 - a retry bug must not take the server down
            reply = ErrorReply("ERR internal error in '%s': %s" % (cmd.fullname if cmd else "?", exc))
            dispatcher._count_error(reply.text)
            server.log_exception(cmd.fullname if cmd else "blocked retry", exc)
        effects = ctx.take_effects() if (ctx.effects or keyspace.deleted_by_server) else ()
        after = 0
        for k in keys:
            v = data.get(k)
            if v is not None:
                after += estimate_key(k, v)
        keyspace.used_bytes += after - before
        index = 0
        if effects:
            if dispatcher.watchers:
                dispatcher.touch_watched(effects)
            index = server.tracker.submit(effects, server.keys_of_effect)
            session.last_write_index = server.tracker.assigned
        if reply is None or type(reply) is Blocked:
            if effects:  # only lazy expiry happened: journal it, keep waiting
                server.hooks.after_effects(None, cmd, effects)
            return
        self._finish(entry, reply, index)
        if effects:
            server.hooks.after_effects(conn, cmd, effects, args=entry.args, served=True)

    # -- CLIENT PAUSE ---------------------------------------------------------------------------
    def pause(self, end_ms, all_commands):
        """CLIENT PAUSE: the end only ever moves later, the mode only ever gets stricter
        (Valkey's pauseClientsByClient)."""
        loop = self.server.loop
        mode = "all" if all_commands or self.pause_mode == "all" else "write"
        if end_ms > self.pause_end_ms:
            self.pause_end_ms = end_ms
        self.pause_mode = mode
        now = self.server.clock_ms()
        if self.pause_end_ms <= now:
            self.unpause()
            return
        if self._saved_active_expire is None:
            self._saved_active_expire = self.server.active_expire_enabled
            self.server.active_expire_enabled = False  # no expiry/eviction traffic while paused
        if self._pause_timer is not None:
            self._pause_timer.cancel()
        self._pause_timer = loop.call_later((self.pause_end_ms - now) / 1000.0, self._pause_check)
        self.server.hooks.refresh()

    def _pause_check(self):
        self._pause_timer = None
        now = self.server.clock_ms()
        if self.pause_mode is None:
            return
        if now >= self.pause_end_ms:
            self.unpause()
        else:
            self._pause_timer = self.server.loop.call_later((self.pause_end_ms - now) / 1000.0, self._pause_check)

    def unpause(self):
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        self.pause_mode = None
        self.pause_end_ms = 0
        if self._saved_active_expire is not None:
            self.server.active_expire_enabled = self._saved_active_expire
            self._saved_active_expire = None
        waiting = list(self.postponed)
        self.postponed.clear()
        loop = self.server.loop
        for conn in waiting:
            if conn.blocked is POSTPONED:
                conn.blocked = None
                loop.call_soon(conn.resume)
        self.server.hooks.refresh()

    def must_postpone(self, cmd, session) -> bool:
        """True if cmd may not run now because of CLIENT PAUSE."""
        mode = self.pause_mode
        if mode is None:
            return False
        if self.server.clock_ms() >= self.pause_end_ms:
            self.unpause()
            return False
        if mode == "all":
            return True
        if cmd.write or "may_replicate" in cmd.flags:
            return True
        if cmd.name == "exec" and session.in_multi:
            return any(c.write or "may_replicate" in c.flags for c, _a in session.multi_queue)
        return False

    def postpone(self, conn, args):
        """Parks conn with args as the first command to run once the pause ends."""
        conn.blocked = POSTPONED
        if conn.backlog is None:
            conn.backlog = collections.deque()
        conn.backlog.appendleft(args)
        self.postponed[conn] = None

    # -- INFO -----------------------------------------------------------------------------------
    def blocked_clients(self) -> int:
        return self.count + len(self.postponed)

    def blocking_keys(self) -> int:
        return len(self.waiting)
