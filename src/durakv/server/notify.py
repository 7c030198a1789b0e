"""What the server does around a command besides running it: keyspace notifications, client-side caching
invalidation (CLIENT TRACKING), MONITOR, the subscribed/monitor-mode command limits, CLIENT PAUSE
postponement, CLIENT NO-TOUCH, and waking clients blocked on keys.

Connections take the plain path while nothing of this is in use (`Hooks.active` false and the connection
not `special`); otherwise every command goes through Hooks.handle.

Keyspace notifications (notify-keyspace-events) are derived centrally from the command that ran and the
effects it recorded, not from calls inside every handler. The event names are Valkey's; where an effect
is a rewrite of the command the command name decides (SPOP recorded as SREM still says "spop", ZINCRBY
recorded as ZADD says "zincr", INCR recorded as SET says "incrby", EXPIRE recorded as PEXPIREAT says
"expire", SET .. EX says "set" then "expire"). Server-side expiry and eviction publish "expired" and
"evicted" when they happen. Approximations, documented:
  - inside MULTI/EXEC the command names are not known per effect, so a rewritten effect gives the name
    of what it was rewritten to (SPOP in a transaction notifies "srem");
  - "del" for a collection emptied by a removal is decided by the key's existence after the whole command;
  - "new" (n) and "keymiss" (m) look at the command's own keys in its db before it runs (keymiss only for
    read-only commands);
  - commands of families this module does not know notify their effect's name in the class of its ACL
    category (e.g. a stream effect XADD -> "xadd" in class t).
A command may name its own events instead (`ctx.notify(class, event, key)`, what a module's handler does with
ValkeyModule_NotifyKeyspaceEvent): they are published after it, in the order named, and a module command's
effects derive none here.
"""

import time

from ..commands import registry
from ..commands.introspection import redacted_positions
from ..keyspace.db import FieldsExpired, ServerDeletion
from ..keyspace.search import get_search
from ..protocol.resp import Push, Raw

# notify-keyspace-events classes (server.h)
K = 1 << 0
E = 1 << 1
G = 1 << 2
STR = 1 << 3
LIST = 1 << 4
SET = 1 << 5
HASH = 1 << 6
ZSET = 1 << 7
EXPIRED = 1 << 8
EVICTED = 1 << 9
STREAM = 1 << 10
KEY_MISS = 1 << 11
MODULE = 1 << 13
NEW = 1 << 14
ALL = G | STR | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE

_CHARS = {"A": ALL, "g": G, "$": STR, "l": LIST, "s": SET, "h": HASH, "z": ZSET, "x": EXPIRED, "e": EVICTED,
          "K": K, "E": E, "t": STREAM, "m": KEY_MISS, "d": MODULE, "n": NEW}


def parse_notify_flags(text: str) -> int:
    """keyspaceEventsStringToFlags: -1 if a character is not a class."""
    flags = 0
    for ch in text:
        f = _CHARS.get(ch)
        if f is None:
            return -1
        flags |= f
    return flags


def notify_flags_to_string(flags: int) -> str:
    out = []
    if flags & ALL == ALL:
        out.append("A")
    else:
        for ch, f in (("g", G), ("$", STR), ("l", LIST), ("s", SET), ("h", HASH), ("z", ZSET), ("x", EXPIRED),
                      ("e", EVICTED), ("t", STREAM), ("d", MODULE), ("n", NEW)):
            if flags & f:
                out.append(ch)
    for ch, f in (("K", K), ("E", E), ("m", KEY_MISS)):
        if flags & f:
            out.append(ch)
    return "".join(out)


_ACL_CLASS = {"string": STR, "bitmap": STR, "hyperloglog": STR, "list": LIST, "set": SET, "hash": HASH,
              "sortedset": ZSET, "geo": ZSET, "stream": STREAM}

# effect name -> (class, event) for effects whose key is argv[1] and mean one event
_SIMPLE = {
    b"setrange": (STR, b"setrange"), b"append": (STR, b"append"), b"incr": (STR, b"incrby"),
    b"decr": (STR, b"incrby"), b"incrby": (STR, b"incrby"), b"decrby": (STR, b"incrby"),
    b"incrbyfloat": (STR, b"incrbyfloat"), b"setbit": (STR, b"setbit"), b"pfadd": (STR, b"pfadd"),
    b"pexpireat": (G, b"expire"), b"expireat": (G, b"expire"), b"pexpire": (G, b"expire"),
    b"expire": (G, b"expire"), b"persist": (G, b"persist"),
    b"lpush": (LIST, b"lpush"), b"lpushx": (LIST, b"lpush"), b"rpush": (LIST, b"rpush"),
    b"rpushx": (LIST, b"rpush"), b"linsert": (LIST, b"linsert"), b"lset": (LIST, b"lset"),
    b"hsetnx": (HASH, b"hset"), b"hmset": (HASH, b"hset"), b"hincrby": (HASH, b"hincrby"),
    b"hincrbyfloat": (HASH, b"hincrbyfloat"), b"sadd": (SET, b"sadd"),
    b"hpexpireat": (HASH, b"hexpire"), b"hexpireat": (HASH, b"hexpire"), b"hpexpire": (HASH, b"hexpire"),
    b"hexpire": (HASH, b"hexpire"), b"hpersist": (HASH, b"hpersist"),
    b"sinterstore": (SET, b"sinterstore"), b"sunionstore": (SET, b"sunionstore"),
    b"sdiffstore": (SET, b"sdiffstore"), b"zunionstore": (ZSET, b"zunionstore"),
    b"zinterstore": (ZSET, b"zinterstore"), b"zdiffstore": (ZSET, b"zdiffstore"),
    b"zrangestore": (ZSET, b"zrangestore"), b"sort": (LIST, b"sortstore"),
}
# removals: the key may be gone afterwards, then "del" follows
_REMOVERS = {
    b"lpop": (LIST, b"lpop"), b"rpop": (LIST, b"rpop"), b"lrem": (LIST, b"lrem"), b"ltrim": (LIST, b"ltrim"),
    b"srem": (SET, b"srem"), b"spop": (SET, b"spop"), b"hdel": (HASH, b"hdel"), b"zrem": (ZSET, b"zrem"),
    b"zremrangebyrank": (ZSET, b"zremrangebyrank"), b"zremrangebyscore": (ZSET, b"zremrangebyscore"),
    b"zremrangebylex": (ZSET, b"zremrangebylex"), b"zpopmin": (ZSET, b"zpopmin"),
    b"zpopmax": (ZSET, b"zpopmax"),
}
_NONE = {b"flushdb", b"flushall", b"swapdb", b"publish", b"spublish", b"pfcount"}   # PFCOUNT: its cache
# what SET is called when another command was rewritten into it
_SET_ORIGIN = {"incrbyfloat": b"incrbyfloat"}
_ZPOP_ORIGIN = {"zpopmin": b"zpopmin", "bzpopmin": b"zpopmin", "zpopmax": b"zpopmax", "bzpopmax": b"zpopmax"}
_EXPIRE_OPTS = {b"ex", b"px", b"exat", b"pxat"}
# commands whose HDEL effect removes fields they expired at once (a TTL in the past): "hexpired"
_HEXPIRED_ORIGIN = {"hexpire", "hpexpire", "hexpireat", "hpexpireat", "hgetex", "hsetex"}
# commands whose DEL / UNLINK effect deletes a key because the time they gave is already past
# (deleteExpiredKeyFromOverwriteAndPropagate): "expired", as Valkey, not "del"
_EXPIRED_ORIGIN = {"expire", "pexpire", "expireat", "pexpireat", "set", "getex"}
# what HSET / HSETEX is called when another command was rewritten into it
_HSET_ORIGIN = {"hincrbyfloat": b"hincrbyfloat", "hincrby": b"hincrby"}

_CLIENT_FAMILY = {"client"}
_SEARCH_DEFINITIONS = {b"ft.create", b"ft.dropindex"}   # index definitions: no key of the database changed
_RO_SCRIPTS = {"eval_ro", "evalsha_ro", "fcall_ro"}


def _top(cmd):
    return cmd.parent if cmd.parent is not None else cmd


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
        self._server_deleted = set()       # (db_id, key) removed by expiry/eviction: no "del" for them
        self._tracking_server_deleted = set()   # the same for tracking: invalidated as the server's
        self._deferred = []                # invalidations for the current client, sent after its reply
        self.own_feed = []                 # (conn, push, ticket) for the current client, sent after its reply
        ks = server.keyspace
        ks.deleted_by_server = _DeletionLog(self._on_server_delete, ks.deleted_by_server)
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
        flags = parse_notify_flags(text or "")
        self.notify_flags = flags if flags > 0 else 0
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
        pre_absent = None
        if self.notify_flags & (NEW | KEY_MISS) and not cmd.keyless:
            db = ks.dbs[session.db_id]
            data = db.data
            pre_absent = {k for k in cmd.keys(args) if k not in data or ks.is_expired(db, k)}
        if self.monitors and cmd.calls_commands and cmd.skip_monitor:
            self._feed(session, cmd, args)   # EVAL/FCALL show before the commands they run (evalCommand)
        if saved_access is None and pre_absent is None:
            return None
        return saved_access, pre_absent

    def after_call(self, session, cmd, args, reply, effects, touched, pre, retry=False):
        server = self.server
        ctx = session.ctx
        named = None
        if ctx is not None and ctx.events:
            named, ctx.events = ctx.events, []
        pre_absent = None
        if pre is not None:
            saved_access, pre_absent = pre
            if saved_access is not None:
                server.keyspace.track_access = saved_access
        if self.monitors and not cmd.skip_monitor and not retry:
            self._feed(session, cmd, args)
        current = self.current
        if current is not None and current.tracking is not None and not current.tracking.bcast \
                and cmd.readonly and cmd.name not in _RO_SCRIPTS:
            self.tracking.remember(current, cmd, args)
        if pre_absent and self.notify_flags & KEY_MISS and cmd.readonly:
            db_id = session.db_id
            for key in cmd.keys(args):
                if key in pre_absent:
                    # derived from no effect of its own: held like the read's reply (absence caused by an
                    # uncommitted DEL is not told before that DEL commits)
                    self._publish(KEY_MISS, b"keymiss", db_id, key,
                                  server.durability.read_ticket(db_id, (key,)))
        if effects and not cmd.calls_commands:   # EXEC's and scripts' own commands reported theirs
            if self.search:
                self._index(effects, touched)
            self._effects(cmd, args, effects, touched, pre_absent, served=retry, named=named)
        elif named and self.notify_flags and server.pubsub.has_subscribers():
            self._notify_named(named, pre_absent, set())

    def effects_outside_call(self, effects, touched):
        """Effects no command produced (server-side expiry/eviction): invalidations and wake-ups."""
        if self.search:
            self._index(effects, touched)
        self._effects(None, None, effects, touched, None, served=True)

    def _index(self, effects, touched):
        """Search indexes re-read the keys a write touched; when the keys are not known (FLUSHALL, SWAPDB, ...)
        the indexes of the databases it wrote start again from the keyspace."""
        search = self.search
        if touched is not None:
            search.keys_changed(touched)
            return
        for db_id, argv in effects:
            name = argv[0].lower()
            if name in _SEARCH_DEFINITIONS:
                continue
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
            feed, self.own_feed = self.own_feed, []
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
                last is None or (last.parent or last).name not in _CLIENT_FAMILY):
            t.caching = False

    def _effects(self, cmd, args, effects, touched, pre_absent, served, named=None):
        server = self.server
        if self.notify_flags:
            if server.pubsub.has_subscribers():
                self._notify(cmd, args, effects, pre_absent, named)
            self._server_deleted.clear()
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
                    self._publish(G, b"del", db_id, key)
            return
        if self.tracking.clients:
            # The server's deletion, not the client's (signalModifiedKey(NULL, ...)): NOLOOP does not hide it
            self._tracking_server_deleted.add((db_id, key))
        if not self.notify_flags:
            return
        self._server_deleted.add((db_id, key))
        if reason == "expired":
            self._publish(EXPIRED, b"expired", db_id, key)
        else:
            self._publish(EVICTED, b"evicted", db_id, key)

    def _publish(self, cls, event, db_id, key, ticket=None):
        flags = self.notify_flags
        if not flags & cls:
            return
        pubsub = self.server.pubsub
        if not pubsub.has_subscribers():
            return
        # Raised while the effects it describes are produced, before they are submitted: it leaves once the
        # batch they join commits (keymiss too: it must not reveal that an uncommitted write removed a key).
        if ticket is None:
            ticket = self.server.durability.push_ticket()
        if flags & K:
            pubsub.publish(b"__keyspace@%d__:%s" % (db_id, key), event, ticket=ticket)
        if flags & E:
            pubsub.publish(b"__keyevent@%d__:%s" % (db_id, event), key, ticket=ticket)

    def _notify(self, cmd, args, effects, pre_absent, named=None):
        origin = _top(cmd).name if cmd is not None else None
        ks = self.server.keyspace
        dbs = ks.dbs
        server_deleted = self._server_deleted
        new_seen = set()
        publish = self._publish
        for db_id, argv in effects:
            name = argv[0].lower()
            if name in _NONE:
                continue
            if type(argv) is ServerDeletion or (name == b"del" and len(argv) == 2
                                                and (db_id, argv[1]) in server_deleted):
                server_deleted.discard((db_id, argv[1]))
                continue
            for cls, event, edb, key, may_empty in _events(name, argv, db_id, origin, args):
                if pre_absent and key in pre_absent and (edb, key) not in new_seen and key in dbs[edb].data:
                    new_seen.add((edb, key))
                    publish(NEW, b"new", edb, key)
                publish(cls, event, edb, key)
                if may_empty and key not in dbs[edb].data:
                    publish(G, b"del", edb, key)
        if named:
            self._notify_named(named, pre_absent, new_seen)

    def _notify_named(self, named, pre_absent, new_seen):
        """The events a command named itself (ctx.notify), "new" first for a key it created."""
        dbs = self.server.keyspace.dbs
        publish = self._publish
        for db_id, letter, event, key in named:
            if pre_absent and key in pre_absent and (db_id, key) not in new_seen and key in dbs[db_id].data:
                new_seen.add((db_id, key))
                publish(NEW, b"new", db_id, key)
            publish(_CHARS[letter], event, db_id, key)


# t_stream.c's events: XADD (then xtrim when it trimmed), XTRIM, XDEL, XSETID and the XGROUP subcommands;
# XCLAIM and XACK effects notify nothing, nor do the group position and consumers that XREADGROUP,
# XCLAIM or XAUTOCLAIM record, except a consumer they create.
_STREAM_EVENTS = {b"xadd", b"xtrim", b"xdel", b"xsetid", b"xgroup", b"xclaim", b"xack"}
_XGROUP_EVENTS = {b"create": b"xgroup-create", b"createconsumer": b"xgroup-createconsumer",
                  b"delconsumer": b"xgroup-delconsumer", b"destroy": b"xgroup-destroy",
                  b"setid": b"xgroup-setid"}


def _stream_events(name, argv, db_id, origin):
    if name in (b"xclaim", b"xack"):
        return ()
    if name == b"xgroup":
        sub = argv[1].lower() if len(argv) > 2 else b""
        event = _XGROUP_EVENTS.get(sub)
        if event is None or (sub == b"setid" and origin != "xgroup"):
            return ()
        return [(STREAM, event, db_id, argv[2], False)]
    out = [(STREAM, name, db_id, argv[1], False)]
    if name == b"xadd" and len(argv) > 2 and argv[2].lower() in (b"maxlen", b"minid"):
        out.append((STREAM, b"xtrim", db_id, argv[1], False))
    return out


def _copy_target_db(argv, db_id):
    i = 3
    while i < len(argv):
        if argv[i].lower() == b"db" and i + 1 < len(argv):
            try:
                return int(argv[i + 1])
            except ValueError:
                return db_id
        i += 1
    return db_id


def _events(name, argv, db_id, origin, args):
    """(class, event, db, key, may_have_emptied_key) for one effect."""
    simple = _SIMPLE.get(name)
    if simple is not None:
        return [(simple[0], simple[1], db_id, argv[1], False)]
    remover = _REMOVERS.get(name)
    if remover is not None:
        cls, event = remover
        if name == b"srem" and origin == "spop":
            event = b"spop"
        elif name == b"hdel" and origin in _HEXPIRED_ORIGIN:
            if origin == "hsetex":   # set with a TTL in the past, then expired at once
                return [(HASH, b"hset", db_id, argv[1], False), (HASH, b"hexpire", db_id, argv[1], False),
                        (HASH, b"hexpired", db_id, argv[1], True)]
            event = b"hexpired"
        elif name == b"zrem" and origin is not None:
            if origin in _ZPOP_ORIGIN:
                event = _ZPOP_ORIGIN[origin]
            elif origin in ("zmpop", "bzmpop") and args is not None:
                event = b"zpopmax" if any(a.lower() == b"max" for a in args[2:]) else b"zpopmin"
        return [(cls, event, db_id, argv[1], True)]
    if name == b"set":
        if origin in _SET_ORIGIN:
            return [(STR, _SET_ORIGIN[origin], db_id, argv[1], False)]
        out = [(STR, b"set", db_id, argv[1], False)]
        if any(a.lower() in _EXPIRE_OPTS for a in argv[3:]):
            out.append((G, b"expire", db_id, argv[1], False))
        return out
    if name == b"mset" or name == b"msetnx":
        return [(STR, b"set", db_id, argv[i], False) for i in range(1, len(argv) - 1, 2)]
    if name == b"del" or name == b"unlink":
        if origin == "spop":
            out = []
            for k in argv[1:]:
                out.append((SET, b"spop", db_id, k, False))
                out.append((G, b"del", db_id, k, False))
            return out
        if origin in _EXPIRED_ORIGIN:
            return [(EXPIRED, b"expired", db_id, k, False) for k in argv[1:]]
        return [(G, b"del", db_id, k, False) for k in argv[1:]]
    if name == b"hset":
        return [(HASH, _HSET_ORIGIN.get(origin, b"hset"), db_id, argv[1], False)]
    if name == b"hsetex":
        # HSETEX key [PXAT ms | KEEPTTL] FIELDS n field value ...: "hset", then "hexpire" when it set a TTL
        out = [(HASH, _HSET_ORIGIN.get(origin, b"hset"), db_id, argv[1], False)]
        if len(argv) > 2 and argv[2].lower() in _EXPIRE_OPTS:
            out.append((HASH, b"hexpire", db_id, argv[1], False))
        return out
    if name == b"zadd":
        incr = origin == "zincrby" or (origin == "zadd" and args is not None
                                       and any(a.lower() == b"incr" for a in args[2:]))
        return [(ZSET, b"zincr" if incr else b"zadd", db_id, argv[1], False)]
    if name == b"rename" or name == b"renamenx":
        return [(G, b"rename_from", db_id, argv[1], False), (G, b"rename_to", db_id, argv[2], False)]
    if name == b"lmove" or name == b"rpoplpush":
        if name == b"lmove":
            src_left = argv[3].lower() == b"left"
            dst_left = argv[4].lower() == b"left"
        else:
            src_left, dst_left = False, True
        return [(LIST, b"lpush" if dst_left else b"rpush", db_id, argv[2], False),
                (LIST, b"lpop" if src_left else b"rpop", db_id, argv[1], True)]
    if name == b"smove":
        return [(SET, b"srem", db_id, argv[1], True), (SET, b"sadd", db_id, argv[2], False)]
    if name == b"move":
        try:
            target = int(argv[2])
        except (ValueError, IndexError):
            target = db_id
        return [(G, b"move_from", db_id, argv[1], False), (G, b"move_to", target, argv[1], False)]
    if name == b"copy":
        return [(G, b"copy_to", _copy_target_db(argv, db_id), argv[2], False)]
    if name in _STREAM_EVENTS:
        return _stream_events(name, argv, db_id, origin)
    cmd = registry.find(name)
    if cmd is None or cmd.keyless or "module" in cmd.flags:   # a module's command names its own (ctx.notify)
        return ()
    cls = G
    for cat in cmd.acl:
        c = _ACL_CLASS.get(cat)
        if c is not None:
            cls = c
            break
    return [(cls, name, db_id, k, False) for k in cmd.keys(argv)]


__all__ = ["Hooks", "parse_notify_flags", "notify_flags_to_string"]
