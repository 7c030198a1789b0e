"""What every handler uses: the execution Context and argument parsing helpers.

A handler is `fn(ctx, args) -> reply`. It runs synchronously against ctx.keyspace, never awaits,
never touches a socket, file or journal. A write records its deterministic effects with
ctx.propagate(...); the pipeline hands them to the durability layer.
"""

from collections import deque

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import ZSet
from ..keyspace.db import FeedOnly
from ..keyspace.events import GENERIC, NEW
from ..protocol.numbers import INT64_MAX, INT64_MIN, string2ll  # noqa: F401  (INT64_* re-exported)



class Blocked:
    """Returned by a blocking command (BLPOP, XREAD BLOCK, ...) that cannot be served now.

    The server parks the client on `keys` (in the context's db) and, each time one of them is written,
    calls `retry(ctx)` for the parked clients in the order they blocked: it returns the reply (and
    records effects with ctx.propagate, like any handler) or None to keep waiting. After `timeout_ms`
    (0 = forever) the client gets `timeout_reply`. Handlers must not return Blocked when
    ctx.may_block is False (inside MULTI/EXEC or a script): they answer as if the timeout had passed."""

    __slots__ = ("keys", "timeout_ms", "retry", "timeout_reply", "db_id", "unblock_on_nokey")

    def __init__(self, keys, timeout_ms, retry, timeout_reply=None, unblock_on_nokey=False):
        self.keys = keys
        self.timeout_ms = timeout_ms
        self.retry = retry
        self.timeout_reply = timeout_reply
        self.db_id = None
        self.unblock_on_nokey = unblock_on_nokey   # a deletion of a key wakes it too (XREADGROUP)


class Context:
    """Per-command execution state. One instance per session, reset for each command.

    `services` is the handler's only way to the process around it, in groups (`services.clients`,
    `services.pubsub`, `services.admin`, `services.persistence`, `services.replication`, `services.cluster`,
    `services.faults`, `services.off_loop`: commands/services.py); `pipeline` runs nested commands (EXEC) and
    owns WATCH."""

    __slots__ = ("keyspace", "db", "client", "services", "effects", "touched", "replaying", "pipeline", "may_block",
                 "touched_exact")

    def __init__(self, keyspace, services=None, client=None, pipeline=None):
        self.keyspace = keyspace
        self.pipeline = pipeline
        self.services = services
        self.client = client
        self.db = keyspace.dbs[0]
        self.effects = []
        self.touched = []        # (db_id, key) the effects touched beyond the command's own keys; None: unknown
        self.touched_exact = False   # the handler reported exactly the keys it changed (ctx.touch)
        self.replaying = False
        self.may_block = True

    @property
    def resp3(self) -> bool:
        return self.client is not None and self.client.resp == 3

    def now_ms(self) -> int:
        return self.keyspace.clock_ms()

    @property
    def scripting(self):
        """The pipeline's scripting state (scripting/runner.ScriptingState), None before the first script."""
        pipeline = self.pipeline
        return pipeline.scripting if pipeline is not None else None

    def shared_integers_allowed(self) -> bool:
        """canUseSharedObject: no shared integers under maxmemory with an LRU/LFU policy (OBJECT REFCOUNT and
        DEBUG OBJECT show a shared integer's refcount)."""
        pipeline = self.pipeline
        return not (pipeline.maxmemory and pipeline.maxmemory_policy.endswith(("lru", "lfu")))

    # -- keys ---------------------------------------------------------------------------------
    def lookup(self, key):
        return self.keyspace.lookup(self.db, key)

    def lookup_read(self, key):
        """The value at key as a read sees it inside a command that writes (Valkey's lookupKeyRead there:
        counted as a hit or miss, "keymiss" when missing); a read-only command's lookups are such already."""
        return self.keyspace.lookup_read(self.db, key)

    def read_type(self, key, typ):
        """lookup_type through lookup_read."""
        value = self.keyspace.lookup_read(self.db, key)
        if value is None or type(value) is typ:
            return value
        raise WrongType()

    def lookup_type(self, key, typ):
        """The value at key if it is of Python type `typ`, None if missing; WRONGTYPE otherwise."""
        value = self.keyspace.lookup(self.db, key)
        if value is None or type(value) is typ:
            return value
        raise WrongType()

    def lookup_string(self, key):
        return self.lookup_type(key, bytes)

    def lookup_hash(self, key):
        """The stored hash at key (for writers: fields whose TTL passed are still in it), None, WRONGTYPE."""
        return self.lookup_type(key, dict)

    def read_hash(self, key):
        """The hash at key as readers see it: without fields whose TTL passed (keyspace.live_hash)."""
        h = self.keyspace.lookup(self.db, key)
        if h is None:
            return None
        if type(h) is not dict:
            raise WrongType()
        db = self.db
        if db.hexpires and key in db.hexpires:
            return self.keyspace.live_hash(db, key, h)
        return h

    def lookup_list(self, key):
        return self.lookup_type(key, deque)

    def lookup_set(self, key):
        return self.lookup_type(key, set)

    def lookup_zset(self, key):
        return self.lookup_type(key, ZSet)

    def exists(self, key) -> bool:
        return self.keyspace.lookup(self.db, key) is not None

    def peek(self, key):
        """The live value of key with no effect (an expired key stays, counted nowhere): LOOKUP_NOEFFECTS."""
        return self.keyspace.peek(self.db, key)

    def store(self, key, value, keep_ttl=False):
        """Sets key to value (any type), dropping its TTL unless keep_ttl. A key that was not there is created:
        "new" (dbAdd)."""
        db = self.db
        if self.keyspace.notify_flags & NEW and key not in db.data:
            self.keyspace.event_sink(NEW, b"new", db.id, key)
        if db.slots is not None:
            db.slots.add(key)
        db.data[key] = value
        self.keyspace.created(db, key)
        if db.enc:
            db.enc.pop(key, None)  # a new value starts from its own encoding (keyspace/encoding.py)
        if not keep_ttl and db.expires:
            db.expires.pop(key, None)
        if db.hexpires:
            db.hexpires.pop(key, None)   # a new value: the old hash's field TTLs go with it

    def delete(self, key) -> bool:
        return self.keyspace.delete(self.db, key)

    def delete_if_empty(self, key, value):
        if not value:
            self.keyspace.delete(self.db, key)

    def remove_if_empty(self, key, value):
        """A removal's end in Valkey: the collection it emptied is deleted, "del" after the removal's own event
        (which the handler raised already). True if it was."""
        if value:
            return False
        self.keyspace.delete(self.db, key)
        self.notify(GENERIC, b"del", key)
        return True

    def ttl_ms(self, key):
        """Expire time (absolute ms) of key, or None."""
        return self.db.expires.get(key)

    def set_expire(self, key, expire_at_ms):
        self.db.set_expire(key, expire_at_ms)

    def persist(self, key) -> bool:
        return self.db.expires.pop(key, None) is not None

    # -- effects ------------------------------------------------------------------------------
    def propagate(self, *argv):
        """Record one effect (a deterministic command) in the current database."""
        self._flush_server_deletes()
        self.effects.append((self.db.id, argv))

    def propagate_feed(self, *argv):
        """Record an effect for Valkey's replication stream alone (PUBLISH): durability hands it to the SYNC
        feeds in its place among the command's effects and keeps it out of the journal."""
        self._flush_server_deletes()
        self.effects.append((self.db.id, FeedOnly(argv)))
        self.keyspace.changes -= 1    # not a change of the data (call() counts every effect in server.dirty)

    def propagate_in(self, db_id, *argv):
        """Record one effect in database db_id (a command that changes other databases than the current one:
        CLUSTER FLUSHSLOT)."""
        self._flush_server_deletes()
        self.effects.append((db_id, argv))

    def propagate_args(self, args):
        self._flush_server_deletes()
        self.effects.append((self.db.id, tuple(args)))

    def notify(self, event_class: int, event: bytes, key: bytes):
        """notifyKeyspaceEvent: raises a keyspace event of this command's database where the handler changed
        key, in Valkey's order. `event_class` is one of keyspace/events.py's classes. While notify-keyspace-events
        has no class of it (the default: none) this is one test."""
        if self.keyspace.notify_flags & event_class:
            self.keyspace.event_sink(event_class, event, self.db.id, key)

    def notify_in(self, db_id: int, event_class: int, event: bytes, key: bytes):
        """notify for a key of another database (MOVE's target, COPY ... DB)."""
        ks = self.keyspace
        if ks.notify_flags & event_class:
            ks.event_sink(event_class, event, db_id, key)

    def touch(self, db_id, key, exact=False):
        """Reports a key this command's effects changed that its key specs do not name (MOVE's target db,
        COPY ... DB). exact=True: the handler reports every key it changed (the command's own keys are then
        not added), e.g. SMOVE of a member the destination already holds changes only the source."""
        if self.touched is not None:
            self.touched.append((db_id, key))
        if exact:
            self.touched_exact = True

    def touch_unknown(self):
        """This command's effects may have changed keys nobody can list (FLUSHALL, SWAPDB, SORT ... STORE):
        every later read waits for their commit."""
        self.touched = None

    def take_server_deletes(self):
        """Turns the keys the server deleted meanwhile (lazy expiry, eviction) into DEL effects, in order."""
        self._flush_server_deletes()

    def _flush_server_deletes(self):
        deleted = self.keyspace.deleted_by_server
        if deleted:
            touched = self.touched
            effect = self.keyspace.deletion_effect
            for db_id, key, reason in deleted:
                self.effects.append((db_id, effect(key, reason)))
                if touched is not None:
                    touched.append((db_id, key))
            deleted.clear()

    def take_effects(self):
        self._flush_server_deletes()
        effects = self.effects
        self.effects = []
        return effects

    def take_touched(self):
        touched = self.touched
        self.touched = []
        self.touched_exact = False
        return touched


# -- argument parsing -------------------------------------------------------------------------

def parse_int(value: bytes, message=messages.NOT_INTEGER) -> int:
    """A signed 64-bit integer in Valkey's strict form (no spaces, no '+', no leading zeros)."""
    n = string2ll(value)
    if n is None:
        raise CommandError(message)
    return n


def parse_nonneg_int(value: bytes, message=messages.VALUE_OUT_OF_RANGE_POSITIVE) -> int:
    n = parse_int(value)
    if n < 0:
        raise CommandError(message)
    return n


def normalize_range(start: int, stop: int, length: int):
    """Valkey's index normalization for inclusive [start, stop]; returns None if empty."""
    if start < 0:
        start += length
    if stop < 0:
        stop += length
    if start < 0:
        start = 0
    if start > stop or start >= length:
        return None
    if stop >= length:
        stop = length - 1
    return start, stop


def upper(b: bytes) -> bytes:
    return b.upper()


def syntax_error():
    return CommandError(messages.SYNTAX)


def wrong_arity(name) -> CommandError:
    return CommandError(messages.WRONG_ARITY.format(name))


def atoi(b: bytes) -> int:
    """C's atoi: leading spaces, a sign, then digits; 0 when there are none."""
    s = b.lstrip(b" \t\n\v\f\r")
    sign = 1
    if s[:1] in (b"-", b"+"):
        sign = -1 if s[:1] == b"-" else 1
        s = s[1:]
    n = 0
    for c in s:
        if 48 <= c <= 57:
            n = n * 10 + c - 48
        else:
            break
    return sign * n
