"""Parked clients: blocked on keys (BLPOP, BZPOPMIN, XREAD BLOCK, ...) and postponed by CLIENT PAUSE.

Blocking on keys follows Valkey's blocked.c: a handler that cannot be served returns `Blocked`; the
connection is parked (its later pipelined commands wait behind it, in order) and put on a FIFO list per
(db, key). Whenever effects touch such a key (any client's command, EXEC, server-side deletions, or the
effects of another served blocked client, as for a BLMOVE chain) the key is "ready" and the clients parked
on it are retried in the order they blocked, through the pipeline (pipeline.retry_blocked: the same admission
and call() as any command). The blocked client's reply is a Deferred held in its outbox; a retry that
returns a reply resolves it with the ticket durability gave its effects (so the journal holds e.g. LPOP for
the served BLPOP, and in sync mode the reply leaves only once the pop is durable).

CLIENT PAUSE parks ("postpones") a client whose command must wait for the pause to end; the command is
re-run from scratch afterwards, exactly like Valkey's BLOCKED_POSTPONE.
"""

import collections
import logging

from .. import messages
from ..commands.base import Blocked
from ..protocol.resp import Deferred, ErrorReply

log = logging.getLogger("durakv.blocking")


class ParkedForPause:
    """conn.blocked while a connection waits for CLIENT PAUSE to end (its command was answered with the
    pipeline's POSTPONE, commands/pipeline.Postponed, and runs again afterwards)."""
    __slots__ = ()


PARKED_FOR_PAUSE = ParkedForPause()


class BlockedClient:
    __slots__ = ("conn", "blocked", "cmd", "args", "db_id", "keys", "timer", "done", "reply")

    def __init__(self, conn, blocked, cmd, args, db_id):
        self.conn = conn
        self.blocked = blocked
        self.cmd = cmd
        self.args = args
        self.db_id = db_id
        self.keys = tuple(dict.fromkeys(blocked.keys))
        self.timer = None
        self.done = False
        self.reply = Deferred()   # held in the client's outbox until served, timed out or unblocked


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
        conn.outbox.hold_deferred(entry.reply)
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

    def _finish(self, entry, reply, ticket=0):
        """Releases a parked client with its reply and lets its queued commands run."""
        self._release(entry)
        conn = entry.conn
        entry.reply.resolve(reply, ticket)
        if conn.closing:
            return
        self.server.loop.call_soon(conn.resume)

    def _account(self, entry, failed=False):
        """A blocked command that ends without being served (timeout, CLIENT UNBLOCK) is counted now, once,
        as Valkey's updateStatsOnUnblock does (a served one is counted by the call that serves it)."""
        pipeline = self.server.pipeline
        if entry.cmd is not None and pipeline.stats_enabled:
            pipeline.account(entry.conn.session, entry.cmd, entry.args, 0)
            if failed:
                entry.cmd.failed_calls += 1

    def _timed_out(self, entry):
        if not entry.done:
            self._account(entry)
            self._finish(entry, entry.blocked.timeout_reply)

    def unblock(self, client_id, error=False) -> bool:
        """CLIENT UNBLOCK: answers a client blocked on keys as if timed out (or with an error)."""
        conn = self.server.clients.get(client_id)
        if conn is None:
            return False
        entry = conn.blocked
        if not isinstance(entry, BlockedClient) or entry.done:
            return False
        self._account(entry, failed=error)
        if error:
            self.server.pipeline.count_error(messages.UNBLOCKED_BY_CLIENT)
            self._finish(entry, ErrorReply(messages.UNBLOCKED_BY_CLIENT))
        else:
            self._finish(entry, entry.blocked.timeout_reply)
        return True

    def drop_client(self, conn):
        """A parked connection went away."""
        entry = conn.blocked
        if isinstance(entry, BlockedClient):
            self._release(entry)
        elif entry is PARKED_FOR_PAUSE:
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
        conn = entry.conn
        if conn.closing:
            self._release(entry)
            return
        session = conn.session
        ctx = session.ctx
        saved_db = ctx.db
        ctx.db = self.server.keyspace.dbs[entry.db_id]
        try:
            reply, ticket = self.server.pipeline.retry_blocked(session, entry.cmd, entry.args,
                                                               entry.blocked.retry)
        finally:
            ctx.db = saved_db
        if reply is None or type(reply) is Blocked:
            return
        self._finish(entry, reply, ticket)

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
            ks = self.server.keyspace
            self._saved_active_expire = self.server.active_expire_enabled
            self._saved_lazy_expire = (ks.expire_enabled, ks.hide_expired)
            # No expiry traffic while paused (Valkey's PAUSE_ACTION_EXPIRE): no active cycle, and an expired
            # key reads as gone without being deleted (what a replica does), so nothing is written meanwhile.
            self.server.active_expire_enabled = False
            ks.expire_enabled, ks.hide_expired = False, True
        if self._pause_timer is not None:
            self._pause_timer.cancel()
        self._pause_timer = loop.call_later((self.pause_end_ms - now) / 1000.0, self._pause_check)
        self.server.pipeline.pause = self
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
        self.server.pipeline.pause = None
        if self._saved_active_expire is not None:
            ks = self.server.keyspace
            self.server.active_expire_enabled = self._saved_active_expire
            ks.expire_enabled, ks.hide_expired = self._saved_lazy_expire
            self._saved_active_expire = None
        self.server.evict_soon()   # what the pause kept from being evicted goes now
        self.resume_postponed()

    def resume_postponed(self):
        """Runs every postponed client's command again from scratch (CLIENT PAUSE ended, or a planned
        failover's hand-over that held writes finished): one still paused is postponed again by admission."""
        waiting = list(self.postponed)
        self.postponed.clear()
        loop = self.server.loop
        for conn in waiting:
            if conn.blocked is PARKED_FOR_PAUSE:
                conn.blocked = None
                loop.call_soon(conn.resume)
        self.server.hooks.refresh()

    def must_postpone(self, may_replicate) -> bool:
        """True if a command may not run now because of CLIENT PAUSE (may_replicate: it writes or may
        propagate, EXEC of such commands included)."""
        mode = self.pause_mode
        if mode is None:
            return False
        if self.server.clock_ms() >= self.pause_end_ms:
            self.unpause()
            return False
        return mode == "all" or may_replicate

    def postpone(self, conn, args):
        """Parks conn with args as the first command to run once the pause ends."""
        conn.blocked = PARKED_FOR_PAUSE
        if conn.backlog is None:
            conn.backlog = collections.deque()
        conn.backlog.appendleft(args)
        self.postponed[conn] = None

    # -- INFO -----------------------------------------------------------------------------------
    def blocked_clients(self) -> int:
        return self.count + len(self.postponed)

    def blocking_keys(self) -> int:
        return len(self.waiting)

    def blocking_keys_on_nokey(self) -> int:
        """Keys with a client that a deletion of the key wakes too (XREADGROUP: it answers -NOGROUP)."""
        return sum(1 for clients in self.waiting.values() if any(e.blocked.unblock_on_nokey for e in clients))
