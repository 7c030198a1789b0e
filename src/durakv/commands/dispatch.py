"""processCommand: every check in one place, then the handler, then the effects.

execute(session, args) -> (reply, effects, cmd). Checks in Valkey's order: unknown command,
arity, authentication, transaction queueing, role (read-only replica), durability backpressure,
OOM (with eviction first). A write's memory is measured before and after on its keys.
"""

import time

from .. import messages
from ..errors import CommandError
from ..keyspace.db import estimate_key, estimate_key_overhead
from ..protocol.resp import QUEUED, ErrorReply, OK, NullArray
from . import registry
from .base import Context
from .introspection import Monitors

# Allowed while a transaction is being queued; they act at once.
_MULTI_IMMEDIATE = {b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"}
_NO_KEY_COMMANDS_TOUCH_ALL = {b"flushdb", b"flushall", b"swapdb"}
# estimate_key(k, v) for a string value, inlined on the write path: this constant + len(k) + len(v).
_STRING_KEY_COST = estimate_key_overhead(b"")


def _arg_preview(args):
    shown = " ".join("'%s'" % a[:128].decode("utf-8", "replace") for a in args[1:])
    return shown


class Dispatcher:
    def __init__(self, keyspace, server=None, perf_counter=time.perf_counter):
        self.keyspace = keyspace
        self.server = server
        self.perf_counter = perf_counter
        self.watchers = {}           # (db_id, key) -> set of sessions
        self.total_commands = 0
        self.total_errors = 0
        self.error_counts = {}       # error prefix -> count
        self.keyspace_hits = 0
        self.keyspace_misses = 0
        # Policy inputs, updated by the server when config changes:
        self.requirepass = None
        self.maxmemory = 0
        self.maxmemory_policy = "noeviction"
        self.maxmemory_samples = 5
        self.used_memory_fn = lambda: keyspace.used_bytes
        self.refuse_writes_fn = None   # () -> error text or None (durability backpressure)
        self.is_replica_fn = None      # () -> bool
        # Slow log + latency monitor (commands/introspection.py), following the server's config live.
        self.monitors = Monitors(keyspace, server.config if server is not None else None)
        self.serving_fn = None         # (cmd) -> error text while this node must not serve (lease)
        # Scripting (durakv/scripting): its per-server state, and while a script runs past
        # busy-reply-threshold the object that answers -BUSY / holds the calling client's commands.
        self.scripting = None
        self.busy = None

    def new_context(self, session):
        ctx = Context(self.keyspace, self.server, session, self)
        ctx.db = self.keyspace.dbs[session.db_id]
        session.ctx = ctx
        return ctx

    # -- the one entry point -------------------------------------------------------------------
    def execute(self, session, args):
        """Runs one command for session. Returns (reply, effects, cmd)."""
        cmd = registry.TABLE.get(args[0].lower())
        if cmd is None or (cmd.handler is None and not cmd.subcommands):
            return self._reject(session, None, messages.UNKNOWN_COMMAND.format(
                args[0][:128].decode("utf-8", "replace"), _arg_preview(args)))
        if cmd.subcommands and (cmd.handler is None or len(args) > 1):
            if len(args) < 2:
                return self._reject(session, cmd, messages.WRONG_ARITY.format(cmd.name))
            sub = cmd.subcommands.get(args[1].lower())
            if sub is None or sub.handler is None:
                return self._reject(session, cmd, messages.UNKNOWN_SUBCOMMAND.format(
                    args[1][:128].decode("utf-8", "replace"), cmd.name.upper()))
            cmd = sub
        arity = cmd.arity
        n = len(args)
        if (arity > 0 and n != arity) or n < -arity:
            name = cmd.fullname if cmd.parent is not None else cmd.name
            return self._reject(session, cmd, messages.WRONG_ARITY.format(name))
        if not session.authenticated and not cmd.no_auth:
            return self._reject(session, cmd, messages.NOAUTH)
        if self.busy is not None:
            held = self.busy.intercept(session, cmd, args)
            if held is not None:
                return held
        if session.in_multi and args[0].lower() not in _MULTI_IMMEDIATE:
            if cmd.no_multi:
                return self._reject(session, cmd, messages.NOT_ALLOWED_IN_MULTI)
            session.multi_queue.append((cmd, args))
            return QUEUED, (), cmd
        return self._run(session, cmd, args)

    def _reject(self, session, cmd, text):
        if session.in_multi:
            session.multi_error = True
        if cmd is not None:
            cmd.rejected_calls += 1
        self._count_error(text)
        return ErrorReply(text), (), cmd

    def _count_error(self, text):
        self.total_errors += 1
        prefix = text.split(" ", 1)[0]
        self.error_counts[prefix] = self.error_counts.get(prefix, 0) + 1

    def _admission(self, session, cmd):
        """Role, backpressure and memory checks for a command about to run; error text or None."""
        if self.serving_fn is not None and not cmd.stale:
            text = self.serving_fn(cmd)
            if text:
                return text
        if cmd.write:
            if self.is_replica_fn is not None and self.is_replica_fn():
                return messages.READONLY
            if self.refuse_writes_fn is not None:
                text = self.refuse_writes_fn()
                if text:
                    return text
        if self.maxmemory and cmd.denyoom:
            if self.used_memory_fn() > self.maxmemory and not self._evict():
                return messages.OOM
        return None

    def _evict(self) -> bool:
        """Evicts until under maxmemory. False if the policy forbids it or nothing is left."""
        policy = self.maxmemory_policy
        if policy == "noeviction":
            return False
        for _ in range(100000):
            if self.used_memory_fn() <= self.maxmemory:
                return True
            if self.keyspace.evict_one(policy, self.maxmemory_samples) is None:
                return False
        return self.used_memory_fn() <= self.maxmemory

    def _run(self, session, cmd, args, in_exec=False):
        ctx = session.ctx
        if ctx is None:
            ctx = self.new_context(session)
        if not in_exec:
            text = self._admission(session, cmd)
            if text is not None:
                return self._reject(session, cmd, text)
        keyspace = self.keyspace
        key_idx = None
        before = 0
        db = ctx.db
        if cmd.write:
            key_idx = cmd.key_indexes(args)
            lookup = keyspace.lookup
            for i in key_idx:
                k = args[i]
                v = lookup(db, k)  # lazy expiry first, so the handler sees live keys
                if v is not None:
                    before += (_STRING_KEY_COST + len(k) + len(v)) if type(v) is bytes else estimate_key(k, v)
        started = self.perf_counter()
        try:
            reply = cmd.handler(ctx, args)
        except CommandError as exc:
            reply = ErrorReply(exc.text)
            cmd.failed_calls += 1
            self._count_error(exc.text)
        except Exception as exc:  # a handler bug must not take the server down
            reply = ErrorReply("ERR internal error in '%s': %s" % (cmd.fullname, exc))
            cmd.failed_calls += 1
            self._count_error(reply.text)
            if self.server is not None:
                self.server.log_exception(cmd.fullname, exc)
        cmd.calls += 1
        usec = int((self.perf_counter() - started) * 1e6)
        cmd.usec += usec
        cmd.latency[usec.bit_length()] += 1  # LATENCY HISTOGRAM (commands/introspection.py)
        if usec >= self.monitors.threshold_us:
            self.monitors.record(session, cmd, args, usec)
        self.total_commands += 1
        if cmd.write:
            after = 0
            db = ctx.db
            data = db.data
            for i in key_idx:
                k = args[i]
                v = data.get(k)
                if v is not None:
                    after += (_STRING_KEY_COST + len(k) + len(v)) if type(v) is bytes else estimate_key(k, v)
            keyspace.used_bytes += after - before
        effects = ctx.take_effects() if (ctx.effects or keyspace.deleted_by_server) else ()
        if effects and self.watchers:
            self.touch_watched(effects)
        return reply, effects, cmd

    # -- WATCH --------------------------------------------------------------------------------
    def watch(self, session, db_id, key):
        session.watched.add((db_id, key))
        self.watchers.setdefault((db_id, key), set()).add(session)

    def unwatch_all(self, session):
        for wk in session.watched:
            s = self.watchers.get(wk)
            if s is not None:
                s.discard(session)
                if not s:
                    del self.watchers[wk]
        session.watched.clear()
        session.dirty_cas = False

    def touch_watched(self, effects):
        watchers = self.watchers
        for db_id, argv in effects:
            name = argv[0].lower() if isinstance(argv[0], bytes) else str(argv[0]).lower().encode()
            if name in _NO_KEY_COMMANDS_TOUCH_ALL:
                for (wdb, _k), sessions in list(watchers.items()):
                    if name == b"flushall" or name == b"swapdb" or wdb == db_id:
                        for s in sessions:
                            s.dirty_cas = True
                continue
            cmd = registry.TABLE.get(name)
            if cmd is None:
                continue
            if cmd.subcommands:
                continue
            for key in cmd.keys(argv):
                sessions = watchers.get((db_id, key))
                if sessions:
                    for s in sessions:
                        s.dirty_cas = True

    # -- MULTI / EXEC -------------------------------------------------------------------------
    def exec_transaction(self, session):
        """Runs the queued commands atomically. Returns (reply, effects) with all effects in order."""
        queue = session.multi_queue
        session.multi_queue = []
        session.in_multi = False
        failed = session.multi_error
        session.multi_error = False
        if failed:
            self.unwatch_all(session)
            return ErrorReply(messages.EXECABORT), ()
        if session.dirty_cas or self._watched_expired(session):
            self.unwatch_all(session)
            return NullArray, ()
        self.unwatch_all(session)
        # Admission for the whole transaction: one write refused means none runs (Valkey's rule
        # for OOM/READONLY/backpressure discovered at EXEC time).
        for cmd, _args in queue:
            text = self._admission(session, cmd)
            if text is not None:
                self._count_error(text)
                return ErrorReply(text), ()
        replies = []
        effects = []
        ctx = session.ctx
        ctx.may_block = False  # blocking commands inside a transaction answer as if timed out
        try:
            for cmd, args in queue:
                reply, eff, _ = self._run(session, cmd, args, in_exec=True)
                replies.append(reply)
                if eff:
                    effects.extend(eff)
        finally:
            ctx.may_block = True
        return replies, effects

    def _watched_expired(self, session):
        ks = self.keyspace
        for db_id, key in session.watched:
            db = ks.dbs[db_id]
            if key in db.data and ks.is_expired(db, key):
                return True
        return False


__all__ = ["Dispatcher", "OK"]


def apply_effect(dispatcher, session, db_id, argv):
    """Applies one journaled effect (recovery, replicas): no admission checks, no new effects kept.
    Returns the reply (an ErrorReply means the journal and this code disagree)."""
    cmd = registry.TABLE.get(argv[0].lower())
    if cmd is not None and cmd.subcommands and len(argv) > 1:
        cmd = cmd.subcommands.get(argv[1].lower(), cmd)
    if cmd is None or cmd.handler is None:
        return ErrorReply(messages.UNKNOWN_COMMAND.format(argv[0].decode("utf-8", "replace"), ""))
    ctx = session.ctx or dispatcher.new_context(session)
    session.db_id = db_id
    ctx.db = dispatcher.keyspace.dbs[db_id]
    reply, _effects, _cmd = dispatcher._run(session, cmd, argv, in_exec=True)
    return reply
