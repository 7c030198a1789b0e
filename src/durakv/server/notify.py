"""What the server does around a command besides running it: keyspace notifications, client-side caching
invalidation (CLIENT TRACKING), MONITOR, the subscribed/monitor-mode command limits, CLIENT PAUSE
postponement, CLIENT NO-TOUCH, and waking clients blocked on keys.

Connections take the plain path while nothing of this is in use (`Hooks.active` false and the connection
not `special`); otherwise every command goes through Hooks.handle.

Keyspace notifications (notify-keyspace-events): handlers raise their events through their context where
Valkey's code calls notifyKeyspaceEvent (`ctx.notify(LIST, b"lpush", key)`), the keyspace raises "new" where a
key is created and "keymiss" where a read misses, and the server's own deletions raise "expired" and "evicted"
(keyspace/events.py). This module publishes them (`Hooks.keyspace_event`, the keyspace's event sink) as they are
raised, so their order is Valkey's within a command, across a transaction's or a script's commands and for a
replica applying its primary's effects (the handler of each effect raises what Valkey's replica raises for the
propagated command). What still differs from Valkey is in docs/compatibility.md.
"""

import time

from ..commands import registry
from ..commands.introspection import redacted_positions
from ..keyspace import events
from ..keyspace.db import FieldsExpired
from ..keyspace.events import EVICTED, EXPIRED, GENERIC, HASH, KEY_MISS, KEYEVENT, KEYSPACE
from ..keyspace.search import get_search
from ..protocol.resp import Push, Raw


def _repr(arg: bytes) -> bytes:
    """sdscatrepr: a double-quoted, escaped string."""
    out = bytearray(b'"')
    for c in arg:
        if c == 0x5C:
            out += b"\\\\"
        elif c == 0x22:
            out += b'\\"'
        elif c == 0x0A:
            out += b"\\n"
        elif c == 0x0D:
            out += b"\\r"
        elif c == 0x09:
            out += b"\\t"
        elif c == 0x07:
            out += b"\\a"
        elif c == 0x08:
            out += b"\\b"
        elif 0x20 <= c <= 0x7E:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)


class _DeletionLog(list):
    """keyspace.deleted_by_server that also tells the hooks at once (for "expired"/"evicted")."""
    __slots__ = ("hook",)

    def __init__(self, hook, items=()):
        super().__init__(items)
        self.hook = hook

    def append(self, item):
        list.append(self, item)
        self.hook(item)


# -- client-side caching ------------------------------------------------------------------------------

class TrackingState:
    __slots__ = ("bcast", "optin", "optout", "noloop", "caching", "redirect", "prefixes", "broken")

    def __init__(self):
        self.bcast = self.optin = self.optout = self.noloop = self.caching = self.broken = False
        self.redirect = 0
        self.prefixes = []


class _Prefix:
    __slots__ = ("keys", "clients")

    def __init__(self):
        self.keys = {}     # key modified this loop iteration -> connection that modified it (or None)
        self.clients = {}  # conn -> None


class Tracking:
    """Valkey's tracking.c: a table key -> ids of clients that read it, plus BCAST prefixes."""

    def __init__(self, server):
        self.server = server
        self.table = {}        # key -> set of client ids (keys are tracked by name, in every db)
        self.prefixes = {}     # prefix -> _Prefix
        self.clients = 0
        self._bcast_pending = False
        self.max_keys = 1_000_000   # tracking-table-max-keys (0: no limit)

    def enable(self, conn, redirect, bcast, optin, optout, noloop, prefixes):
        t = conn.tracking
        if t is None:
            t = conn.tracking = TrackingState()
            self.clients += 1
        t.broken = False
        t.bcast = bcast
        t.optin, t.optout, t.noloop = optin, optout, noloop
        t.redirect = redirect
        if bcast:
            for p in (prefixes or [b""]):
                state = self.prefixes.get(p)
                if state is None:
                    state = self.prefixes[p] = _Prefix()
                if conn not in state.clients:
                    state.clients[conn] = None
                    t.prefixes.append(p)

    def disable(self, conn):
        t = conn.tracking
        if t is None:
            return
        for p in t.prefixes:
            state = self.prefixes.get(p)
            if state is not None:
                state.clients.pop(conn, None)
                if not state.clients:
                    del self.prefixes[p]
        conn.tracking = None
        self.clients -= 1

    def remember(self, conn, cmd, args):
        """After a read-only command of a (non-BCAST) tracking client: remember who read which keys."""
        t = conn.tracking
        if t.optin and not t.caching or t.optout and t.caching:
            return
        if not cmd.readonly or cmd.pubsub:
            return
        cid = conn.session.id
        table = self.table
        for key in cmd.keys(args):
            ids = table.get(key)
            if ids is None:
                table[key] = {cid}
            else:
                ids.add(cid)
        if self.max_keys and len(table) > self.max_keys:
            self.limit()

    def limit(self):
        """trackingLimitUsedSlots: past tracking-table-max-keys, keys leave the table and whoever tracked one
        is told it is invalid (as if it changed), oldest first."""
        table = self.table
        clients = self.server.clients
        while self.max_keys and len(table) > self.max_keys:
            key = next(iter(table))
            for cid in table.pop(key):
                target = clients.get(cid)
                if target is not None and target.tracking is not None and not target.tracking.bcast:
                    self.send(target, [key])

    def invalidate(self, key, current, deferred, by_server=False):
        """A key changed: tell the clients that read it (once), and remember it for BCAST prefixes. by_server:
        the server removed it (expiry, eviction): BCAST NOLOOP clients hear of it too (Valkey remembers no
        client for it), while a client tracking the key itself is still told after its own reply."""
        if self.prefixes:
            for p, state in self.prefixes.items():
                if key.startswith(p):
                    state.keys[key] = None if by_server else current
                    if not self._bcast_pending:
                        self._bcast_pending = True
                        self.server.loop.call_soon(self._broadcast)
        ids = self.table.pop(key, None)
        if not ids:
            return
        clients = self.server.clients
        for cid in ids:
            target = clients.get(cid)
            if target is None:
                continue
            t = target.tracking
            if t is None or t.bcast:
                continue
            if target is current:
                if t.noloop:
                    continue
                if deferred is not None:
                    deferred.append(key)
                    continue
            self.send(target, [key])

    def flush(self, current, deferred):
        """FLUSHDB/FLUSHALL: every tracking client is told everything is invalid (a null)."""
        for conn in list(self.server.clients.values()):
            if conn.tracking is None:
                continue
            if conn is current and deferred is not None:
                deferred.append(None)
            else:
                self.send(conn, None)
        self.table = {}

    def _broadcast(self):
        self._bcast_pending = False
        for state in list(self.prefixes.values()):
            if not state.keys:
                continue
            keys = state.keys
            state.keys = {}
            everything = list(keys)
            for conn in list(state.clients):
                if conn.tracking is None:
                    continue
                if conn.tracking.noloop:
                    mine = [k for k, who in keys.items() if who is not conn]
                    if mine:
                        self.send(conn, mine)
                else:
                    self.send(conn, everything)

    def send(self, conn, keys):
        """sendTrackingMessage: RESP3 push 'invalidate', or a __redis__:invalidate message to a RESP2
        redirect target in subscribed mode. keys is a list of key names or None (flush)."""
        t = conn.tracking
        target = conn
        redirected = False
        if t is not None and t.redirect:
            target = self.server.clients.get(t.redirect)
            if target is None:
                t.broken = True
                if conn.session.resp == 3:
                    conn.push(Push([b"tracking-redir-broken", t.redirect]))
                return
            redirected = True
        if target.session.resp == 3:
            hooks = self.server.hooks
            if redirected and target is hooks.current:
                # the redirect target is running the command that caused it: Valkey 9 queues the push behind
                # that command's reply, as it does for a tracking client's own invalidations
                hooks.push_after_reply(Push([b"invalidate", keys]))
            else:
                target.push(Push([b"invalidate", keys]))
        elif redirected and target.subs is not None and target.subs.total():
            self.server.pubsub.push_message(target, b"__redis__:invalidate", keys)


# -- the hooks ------------------------------------------------------------------------------------------

class Hooks:
    """The pipeline's observer while anything needs it (pipeline.observer is None otherwise): MONITOR,
    keyspace notifications, CLIENT TRACKING, NO-TOUCH and clients blocked on keys. Its methods run inside
    every call() (plain commands, EXEC's commands, a script's commands, blocked retries, replica apply)."""
    # read per batch by the compiled core at their offsets (fastpath/_core.c); the rest in the dict
    __slots__ = ("own_feed", "current",
                 "__dict__", "__weakref__")


    def __init__(self, server):
        self.server = server
        self.active = False
        self.notify_flags = 0
        self.monitors = {}                 # conn -> None
        self.tracking = Tracking(server)
        self.no_touch_clients = 0
        self.current = None                # the connection whose request is running (tracking, NO-TOUCH)
        self._tracking_server_deleted = set()   # (db_id, key) the server removed: tracking tells them as its own
        self._deferred = []                # invalidations for the current client, sent after its reply
        self.own_feed = []                 # (conn, push, ticket) for the current client, sent after its reply
        ks = server.keyspace
        ks.deleted_by_server = _DeletionLog(self._on_server_delete, ks.deleted_by_server)
        ks.event_sink = self.keyspace_event
        # search indexes follow every change to a key (keyspace/search): while one exists every command comes
        # through here, whatever its path
        self.search = get_search(ks)
        self.search.on_definitions = self.refresh

    # -- state ----------------------------------------------------------------------------------
    def refresh(self):
        s = self.server
        # a tracking table left by clients that turned tracking off still has to be emptied by FLUSHALL
        self.active = bool(self.monitors or self.notify_flags or self.tracking.clients or self.tracking.table
                           or s.blocking.waiting or self.no_touch_clients or self.search)
        s.pipeline.observer = self if self.active else None

    def set_notify_flags(self, text):
        flags = events.parse_flags(text or "")
        self.notify_flags = flags if flags > 0 else 0
        # what handlers test before raising an event: nothing is published without K or E
        self.server.keyspace.notify_flags = events.raised(self.notify_flags)
        self.refresh()

    def add_monitor(self, conn) -> bool:
        if conn in self.monitors:
            return False
        self.monitors[conn] = None
        conn.session.monitor = True
        conn.session.refresh_special()
        self.refresh()
        return True

    def set_no_touch(self, conn, on):
        s = conn.session
        if s.no_touch != on:
            s.no_touch = on
            self.no_touch_clients += 1 if on else -1
            self.refresh()

    def reset_client(self, conn):
        """RESET: out of subscribed mode, tracking and MONITOR; NO-EVICT and NO-TOUCH off."""
        self.server.pubsub.drop_client(conn)
        if conn.tracking is not None:
            self.tracking.disable(conn)
        self.monitors.pop(conn, None)
        conn.session.monitor = False
        conn.session.refresh_special()
        conn.no_evict = False
        self.set_no_touch(conn, False)
        self.refresh()

    def drop_client(self, conn):
        """A connection closed: forget everything it was part of."""
        s = self.server
        s.blocking.drop_client(conn)
        s.pubsub.drop_client(conn)
        if conn.replica_feed is not None:
            s.durability.remove_feed(conn.replica_feed)
            conn.replica_feed = None
        if conn.tracking is not None:
            self.tracking.disable(conn)
        self.monitors.pop(conn, None)
        if conn.session.no_touch:
            conn.session.no_touch = False
            self.no_touch_clients -= 1
        if self.current is conn:
            self.current = None
        self.refresh()

    # -- around every call() ----------------------------------------------------------------------
    def before_call(self, session, cmd, args):
        """Runs before a command's handler. Returns what after_call needs back."""
        ks = self.server.keyspace
        saved_access = None
        if session.no_touch and ks.track_access is not None and cmd.name != "touch":
            saved_access = ks.track_access
            ks.track_access = None  # CLIENT NO-TOUCH: this command's lookups leave LRU/LFU alone
        if self.monitors and cmd.calls_commands and cmd.skip_monitor:
            self._feed(session, cmd, args)   # EVAL/FCALL show before the commands they run (evalCommand)
        return saved_access

    def after_call(self, session, cmd, args, reply, effects, touched, pre, retry=False):
        if pre is not None:
            self.server.keyspace.track_access = pre
        if self.monitors and not cmd.skip_monitor and not retry:
            self._feed(session, cmd, args)
        current = self.current
        # a read-only script (EVAL_RO, FCALL_RO: readonly and calls_commands) has its commands remember their keys
        if current is not None and current.tracking is not None and not current.tracking.bcast \
                and cmd.readonly and not cmd.calls_commands:
            self.tracking.remember(current, cmd, args)
        if effects and not cmd.calls_commands:   # EXEC's and scripts' own commands reported theirs
            if self.search:
                self._index(effects, touched)
            self._effects(effects, touched, served=retry)

    def effects_outside_call(self, effects, touched):
        """Effects no command produced (server-side expiry/eviction): invalidations and wake-ups."""
        if self.search:
            self._index(effects, touched)
        self._effects(effects, touched, served=True)

    def _index(self, effects, touched):
        """Search indexes re-read the keys a write touched; when the keys are not known (FLUSHALL, SWAPDB, ...)
        the indexes of the databases it wrote start again from the keyspace."""
        search = self.search
        if touched is not None:
            search.keys_changed(touched)
            return
        for db_id, argv in effects:
            cmd = registry.lookup(argv)
            if cmd is not None and not cmd.changes_keys:
                continue          # FT.CREATE, FUNCTION LOAD, ...: no key of the database changed
            name = argv[0].lower()
            if name == b"flushall" or name == b"flushdb":
                search.flushed(None if name == b"flushall" else db_id,
                               keep_definitions=self.server.cluster_routing is not None)
            elif name == b"swapdb":
                search.changed_unknown(None)
            else:
                search.changed_unknown(db_id)

    def after_top(self, session):
        """After a top-level command: clients blocked on keys it changed are served (handleClientsBlockedOnKeys)."""
        blocking = self.server.blocking
        if blocking.waiting:
            blocking.serve()

    def push_after_reply(self, data, ticket=0):
        """A push for the current client (its own PUBLISH, in MULTI or a script too; MONITOR lines of its
        own command; its own keyspace events, with their ticket): Valkey queues it behind the command's reply."""
        self.own_feed.append((self.current, data, ticket))

    def after_reply(self, conn):
        """The current client's reply is queued: the invalidations its own command caused follow it."""
        if self.own_feed:
            # emptied in place, never rebound: the compiled core's state holds this list (commands/corestate.py)
            feed = self.own_feed.copy()
            self.own_feed.clear()
            for target, data, ticket in feed:
                target.push(data, ticket)   # another client's only if its reply never came this way (a Deferred)
        deferred = self._deferred
        if deferred and conn.tracking is not None:
            self._deferred = []
            self.tracking.send(conn, deferred if None not in deferred else None)
        elif deferred:
            self._deferred = []
        t = conn.tracking
        last = conn.session.last_cmd
        if t is not None and t.caching and not conn.session.in_multi and (
                last is None or not last.keeps_caching):
            t.caching = False

    def _effects(self, effects, touched, served):
        server = self.server
        tracking = self.tracking
        if tracking.clients or tracking.table:
            current = None if served else self.current
            deferred = self._deferred if current is not None else None
            flushed = False
            for _db_id, argv in effects:
                name = argv[0].lower()
                if name == b"flushdb" or name == b"flushall":
                    tracking.flush(current, deferred)
                    flushed = True
            by_server = self._tracking_server_deleted
            if by_server:
                self._tracking_server_deleted = set()
            if not flushed:
                if touched is None:
                    tracking.flush(current, deferred)
                else:
                    for db_key in touched:
                        tracking.invalidate(db_key[1], current, deferred, db_key in by_server)
        blocking = server.blocking
        if blocking.waiting:
            if touched is None:
                for db_id, argv in effects:
                    name = argv[0].lower()
                    if name == b"flushdb":
                        blocking.signal_all(db_id)
                    else:
                        blocking.signal_all()
                        break
            else:
                for db_id, key in touched:
                    blocking.signal(db_id, key)

    # -- MONITOR ----------------------------------------------------------------------------------
    def _feed(self, session, cmd, args):
        redact = redacted_positions(cmd, args)
        if redact:
            args = [b"(redacted)" if j in redact else a for j, a in enumerate(args)]
        now = time.time()
        sec = int(now)
        usec = int((now - sec) * 1e6)
        line = b"+%d.%06d [%d %s] %s\r\n" % (sec, usec, session.db_id, session.addr.encode(),
                                             b" ".join(_repr(a) for a in args))
        data = Raw(line)
        current = self.current
        for m in list(self.monitors):
            if m.closing:
                continue
            if m is current:
                self.push_after_reply(data)   # behind its own reply, as Valkey's output buffer orders it
            else:
                m.push(data)

    # -- keyspace notifications -------------------------------------------------------------------
    def _on_server_delete(self, item):
        db_id, key, reason = item
        if self.search:
            # at once: an eviction in admission happens before the command that caused it runs (a search must not
            # count what is gone), and its effect reaches the command's touched keys only after the handler
            self.search.key_changed(db_id, key)
        if isinstance(reason, FieldsExpired):
            # hash fields whose TTL passed: "hexpired", then "del" when the hash went with them; the
            # ones a write replaces (silent) change nothing a client could see
            if reason.silent:
                return
            if self.tracking.clients:
                self._tracking_server_deleted.add((db_id, key))
            if self.notify_flags:
                self._publish(HASH, b"hexpired", db_id, key)
                if reason.key_deleted:
                    self._publish(GENERIC, b"del", db_id, key)
            return
        if self.tracking.clients:
            # The server's deletion, not the client's (signalModifiedKey(NULL, ...)): NOLOOP does not hide it
            self._tracking_server_deleted.add((db_id, key))
        if not self.notify_flags:
            return
        if reason == "expired":
            self._publish(EXPIRED, b"expired", db_id, key)
        else:
            self._publish(EVICTED, b"evicted", db_id, key)

    def keyspace_event(self, cls, event, db_id, key):
        """The keyspace's event sink (Keyspace.event_sink): an event a handler or the keyspace raised. A miss is
        derived from no effect of its own: held like the read's reply (the absence an uncommitted DEL caused is
        not told before that DEL commits)."""
        if cls == KEY_MISS:
            self._publish(cls, event, db_id, key, self.server.durability.read_ticket(db_id, (key,)))
        else:
            self._publish(cls, event, db_id, key)

    def _publish(self, cls, event, db_id, key, ticket=None):
        flags = self.notify_flags
        if not flags & cls:
            return
        pubsub = self.server.pubsub
        if not pubsub.has_subscribers():
            return
        # Raised while the effects it describes are produced, before they are submitted: it leaves once the
        # batch they join commits.
        if ticket is None:
            ticket = self.server.durability.push_ticket()
        if flags & KEYSPACE:
            pubsub.publish(b"__keyspace@%d__:%s" % (db_id, key), event, ticket=ticket)
        if flags & KEYEVENT:
            pubsub.publish(b"__keyevent@%d__:%s" % (db_id, event), key, ticket=ticket)


__all__ = ["Hooks"]
