"""Databases, expiry and memory accounting."""

import heapq
import random
import sys
from collections import deque
from operator import attrgetter

from .bloom import Bloom, BloomDefaults
from .encoding import EncodingRules
from .events import KEY_MISS
from .jsondoc import TYPE_NAME as _JSON_TYPE_NAME, JsonDoc
from .keytable import KeyTable
from .slotindex import SlotIndex
from .stream import Stream
from .zset import ZSet

# a module value (JSON, a Bloom filter) answers TYPE with its module type's name, as Valkey does
_TYPE_NAMES = {bytes: "string", dict: "hash", deque: "list", set: "set", ZSet: "zset", Stream: "stream",
               JsonDoc: _JSON_TYPE_NAME, Bloom: "bloomfltr"}


def type_name(value) -> str:
    return _TYPE_NAMES.get(type(value), "none")


# Estimated bytes for one key (dict slot, key object header) and per-element container overhead.
_KEY_OVERHEAD = 100
_ELEMENT_OVERHEAD = {dict: 100, deque: 16, set: 80, ZSet: 180}
_BYTES_HEADER = sys.getsizeof(b"")
# What the server counts for itself on an empty dataset, so that used_memory (and so maxmemory) means what
# it means on Valkey, whose empty server reports about 0.9 MB (its dicts, shared objects, client buffers).
BASELINE_BYTES = 1 << 20


def estimate_value(value) -> int:
    """Approximate bytes held by a value: exact for strings, sampled (5 elements, as Valkey's
    MEMORY USAGE does) for collections so the cost stays O(1) per write."""
    t = type(value)
    if t is bytes:
        return _BYTES_HEADER + len(value)
    if t is Stream:
        return value.estimate_bytes()
    if t is JsonDoc:
        return value.size        # kept by every JSON write (keyspace/jsondoc.py)
    if t is Bloom:
        return value.memory_usage()   # the module's own figure (BF.INFO SIZE): exact, O(filters)
    n = len(value)
    if n == 0:
        return 64
    if t is dict:
        it = iter(value.items())
        sample = [next(it) for _ in range(min(5, n))]
        avg = sum(len(k) + len(v) for k, v in sample) / len(sample) + 2 * _BYTES_HEADER
    elif t is deque:
        sample = [value[0], value[-1], value[n // 2]]
        avg = sum(len(x) for x in sample) / 3 + _BYTES_HEADER
    elif t is set:
        it = iter(value)
        sample = [next(it) for _ in range(min(5, n))]
        avg = sum(len(x) for x in sample) / len(sample) + _BYTES_HEADER
    else:  # ZSet
        it = iter(value.scores)
        sample = [next(it) for _ in range(min(5, n))]
        avg = sum(len(x) for x in sample) / len(sample) + _BYTES_HEADER + 24
    return int(64 + n * (avg + _ELEMENT_OVERHEAD[t]))


def estimate_key(key: bytes, value) -> int:
    return _KEY_OVERHEAD + _BYTES_HEADER + len(key) + estimate_value(value)


def estimate_key_overhead(value: bytes) -> int:
    """estimate_key(k, v) - len(k) - len(v) for a string value (the pipeline inlines it)."""
    return estimate_key(b"", value) - len(value)



class ServerDeletion(tuple):
    """An effect (argv) the server produced on its own (lazy or active expiry, eviction). Valkey propagates
    those apart and at once, never inside a command's MULTI/EXEC: the replication stream keeps them apart."""
    __slots__ = ()


class FeedOnly(tuple):
    """An effect only Valkey's replication stream carries (PUBLISH, as Valkey propagates it to its replicas):
    never journaled, never applied. It is recorded only while a SYNC/PSYNC connection takes that stream."""
    __slots__ = ()


class FieldsExpired(tuple):
    """The `reason` of a deleted_by_server entry (db_id, key, reason) for hash fields the server removed
    because their TTL passed: the fields, in order. Its effect is `HDEL key field ...`. `silent` entries are
    expired fields a write replaces (HSETEX ... KEEPTTL): journaled so that replay does not keep their old
    TTL, with no keyspace event (Valkey overwrites such a field in place and tells nobody). `key_deleted`:
    the hash had no field left and is gone."""
    __slots__ = ()
    silent = False
    key_deleted = False


class _SilentFieldsExpired(FieldsExpired):
    __slots__ = ()
    silent = True


class _LastFieldsExpired(FieldsExpired):
    __slots__ = ()
    key_deleted = True

class Db:
    """One numbered database. `data` maps key -> value (a keytable.KeyTable, which also keeps each key's access
    time: the LRU clock in seconds or LFU's packed counter, when the policy needs it), `expires` key ->
    expire_at_ms for the keys that have a TTL."""

    __slots__ = ("id", "data", "expires", "expiry_heap", "avg_ttl_ms", "enc", "slots", "hexpires", "hexpiry_heap",
                 "hexpiry_mark")

    def __init__(self, db_id: int):
        self.id = db_id
        self.data = KeyTable()
        self.expires = {}
        self.expiry_heap = []  # (expire_at_ms, key); entries are checked against `expires` on pop
        self.avg_ttl_ms = 0
        self.enc = {}          # key -> the encoding Valkey would have reached (keyspace/encoding.py)
        # keyspace.slotindex.SlotIndex of the keys per cluster slot, kept by store()/delete()/clear() once
        # Keyspace.index_slots() turned it on (cluster mode: what slot migration reads); None otherwise
        self.slots = None
        # Hash field TTLs (Valkey 9's HEXPIRE ...): key -> {field: expire_at_ms} for the hashes that have
        # some, beside the plain dict value (which every hash read uses as is), and a heap of
        # (expire_at_ms, key, field) for active expiry, checked against `hexpires` on pop
        self.hexpires = {}
        self.hexpiry_heap = []
        self.hexpiry_mark = 4096   # the heap is checked for stale entries once it is twice this long

    def __len__(self):
        return len(self.data)

    def set_expire(self, key: bytes, expire_at_ms: int):
        self.expires[key] = expire_at_ms
        heapq.heappush(self.expiry_heap, (expire_at_ms, key))

    def set_field_expire(self, key: bytes, field: bytes, expire_at_ms: int):
        ttls = self.hexpires.get(key)
        if ttls is None:
            ttls = self.hexpires[key] = {}
        ttls[field] = expire_at_ms
        heapq.heappush(self.hexpiry_heap, (expire_at_ms, key, field))

    def clear_field_expire(self, key: bytes, field: bytes) -> bool:
        """Drops field's TTL; True if it had one."""
        ttls = self.hexpires.get(key)
        if ttls is None or ttls.pop(field, None) is None:
            return False
        if not ttls:
            del self.hexpires[key]
        return True

    def field_ttls_into(self, key: bytes, ttls):
        """Gives key the field TTLs {field: expire_at_ms} (a copy), replacing any it had (RENAME, COPY, MOVE,
        RESTORE)."""
        self.hexpires.pop(key, None)
        for field, at in ttls.items():
            self.set_field_expire(key, field, at)

    def random_keys(self, count: int, rng: random.Random, from_expires=False):
        """Up to `count` random keys (may repeat), O(1) each: the table's random_key from the keyspace's rng. A key
        with a TTL is drawn from the whole table and kept if it has one, unless few enough have one to list."""
        source = self.expires if from_expires else self.data
        if not source:
            return []
        if from_expires:
            keys = list(source) if len(source) <= 64 else None
            if keys is not None:
                return [rng.choice(keys) for _ in range(count)]
        data = self.data
        out = []
        tries = 0
        while len(out) < count and tries < count * 8:
            tries += 1
            k = data.random_key(rng.getrandbits(64))
            if k is None:
                break
            if k in source:
                out.append(k)
        return out

    def reserve(self, keys: int, expires: int, presized):
        """Room for `keys` keys (and `expires` TTLs) before a load that knows its size (an RDB's RESIZEDB), so
        that no insert of the load rebuilds a table at once: the key table takes buckets for `keys`, presized(n)
        makes an empty dict with room for n for the TTLs (the compiled core's; CPython grows a dict by rebuilding
        it whole). Only an empty database is resized."""
        if self.data or self.expires:
            return False
        self.data.reserve(keys)
        self.expires = presized(expires)
        return True

    def clear(self):
        self.data.clear()
        if self.slots is not None:
            self.slots.clear()
        self.expires.clear()
        self.expiry_heap.clear()
        self.enc.clear()
        self.hexpires.clear()
        self.hexpiry_heap.clear()


class Keyspace:
    """All databases plus the bookkeeping shared by them.

    `expire_enabled` is False while replaying a journal or following one as a replica: then time does
    not make keys vanish (the primary's DEL effects do), exactly as Valkey while loading.
    Keys deleted by lazy/active expiry or eviction are reported in `deleted_by_server` as (db, key)
    so the caller can turn them into DEL effects for the journal.
    """
    # counters the compiled core adds to at their offsets (fastpath/_core.c), and the inputs of its decision to
    # run, which it reads from the state they are published to (core_state: commands/corestate.py); the rest in
    # the dict
    __slots__ = ("_track", "lru_stamp", "_expire_enabled", "_hide_expired", "_deleted_by_server", "hits", "misses",
                 "used_bytes", "changes", "notify_flags", "core_state",
                 "__dict__", "__weakref__")


    def __init__(self, num_dbs: int = 16, clock_ms=None, rng=None):
        import time
        self.core_state = None       # the compiled core's state, once a server's pipeline binds it
        self.dbs = [Db(i) for i in range(num_dbs)]
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.rng = rng or random.Random()
        self.expire_enabled = True
        self.hide_expired = False    # replicas: expired keys are invisible to reads but not deleted
        self.deleted_by_server = []  # (db_id, key, reason) with reason 'expired' | 'evicted'
        self.baseline_bytes = BASELINE_BYTES
        # used_memory: the baseline plus the estimated dataset bytes, kept current by the pipeline
        self.used_bytes = BASELINE_BYTES
        self.reading = False         # a read-only command runs: its lookups count as hits / misses
        self.hits = 0
        self.misses = 0
        # Keyspace events (keyspace/events.py): the classes published, 0 while nobody publishes (the one test an
        # event costs then), and (class, event, db_id, key) -> None, the publisher that sets them
        self.notify_flags = 0
        self.event_sink = None
        self.expired_keys = 0
        self.expired_time_cap_reached = 0   # active expiry cycles cut by their time budget (INFO stats)
        self.dump_payload_sanitizations = 0  # RESTORE payloads decoded (each one checked whole: INFO stats)
        self.expired_fields = 0      # hash fields removed because their TTL passed (INFO expired_fields)
        self.evicted_keys = 0
        self.changes = 0             # effects recorded (Valkey's server.dirty)
        self.changes_saved = 0       # changes when the last successful snapshot started
        # The LRU clock (s), refreshed by the server's cron as serverCron refreshes Valkey's server.lruclock:
        # an access stores it (one int object shared by the keys of a tick) instead of reading the clock;
        # None (no cron: tests of this module) reads the clock at each access. `lru_stamp` is it while access
        # times are kept (track_access 'lru'), else None: the one test lookup() makes.
        self.lru_second = None
        self.lru_stamp = None
        # Seconds DEBUG LRU-CLOCK-ADVANCE moved the LRU clock ahead of the real one (0 outside tests)
        self.lru_offset_s = 0
        # 'lru': access times, kept as Valkey keeps every object's LRU clock unless the policy is LFU; 'lfu';
        # None only while a command must leave them alone (CLIENT NO-TOUCH)
        self.track_access = "lru"
        self.lfu_log_factor = 10
        # lazyfree-lazy-expire / -eviction: the server's own deletions are written (and propagated) as UNLINK
        self.unlink_expired = True
        self.unlink_evicted = True
        self.unlink_server_del = True   # lazyfree-lazy-server-del: RESTORE of an expired key, SPOP of all
        self.lfu_decay_time_min = 1
        self.latency_monitor = None  # commands.introspection.Monitors: gets "expire-cycle" samples
        self.encoding_rules = EncodingRules()  # list/hash/set/zset encoding thresholds (CONFIG)
        self.bloom_defaults = BloomDefaults()  # the bf.* configs a new Bloom filter takes (CONFIG)

    def index_slots(self, slot_of):
        """Keeps every database's keys indexed by cluster slot from now on (a cluster node: cluster-databases of
        them): slot migration then lists a slot's keys of each database without scanning the keyspace."""
        for db in self.dbs:
            if db.slots is None:
                db.slots = SlotIndex(slot_of)
                db.slots.rebuild(db.data)

    # -- expiry -----------------------------------------------------------------------------
    def is_expired(self, db: Db, key: bytes, now_ms=None) -> bool:
        at = db.expires.get(key)
        if at is None or not (self.expire_enabled or self.hide_expired):
            return False   # replaying a journal: time does not pass for keys
        return at <= (now_ms if now_ms is not None else self.clock_ms())

    def lookup(self, db: Db, key: bytes):
        """The live value of key, or None. Deletes an expired key (lazy expiry). While a command reads
        (`reading`: lookupKeyRead) a hit or a miss is counted and a miss raises "keymiss"."""
        value = db.data.get(key)
        if value is None:
            if self.reading:
                self._missed(db, key)
            return None
        if db.expires and key in db.expires and db.expires[key] <= self.clock_ms():
            if self.expire_enabled:
                self.server_delete(db, key, "expired")
                if self.reading:
                    self._missed(db, key)
                return None
            if self.hide_expired:
                if self.reading:
                    self._missed(db, key)
                return None  # a replica: the key is gone for readers; the primary's DEL will remove it
        stamp = self.lru_stamp
        if stamp is not None:
            db.data.set_access(key, stamp)
        elif self._track is not None:
            self._touch(db, key)
        if self.reading:
            self.hits += 1
        return value

    def _missed(self, db: Db, key: bytes):
        self.misses += 1
        if self.notify_flags & KEY_MISS:
            self.event_sink(KEY_MISS, b"keymiss", db.id, key)

    def lookup_read(self, db: Db, key: bytes):
        """lookupKeyRead inside a command that writes (SET .. GET, GETDEL, the sources of SUNIONSTORE, ...): a
        read's lookup, counted as a hit or a miss, "keymiss" when the key is missing."""
        if self.reading:
            return self.lookup(db, key)
        self.reading = True
        try:
            return self.lookup(db, key)
        finally:
            self.reading = False

    def peek(self, db: Db, key: bytes):
        """The live value of key, or None, with no effect at all (Valkey's LOOKUP_NOEFFECTS): an expired key
        is not deleted, no hit or miss is counted, its LRU/LFU data is not touched."""
        value = db.data.get(key)
        if value is not None and db.expires and key in db.expires and db.expires[key] <= self.clock_ms() \
                and (self.expire_enabled or self.hide_expired):
            return None
        return value

    def delete(self, db: Db, key: bytes) -> bool:
        """Removes key. Memory accounting is the caller's (the pipeline measures a command's keys
        before and after it runs); deletions the server makes on its own use server_delete."""
        value = db.data.pop(key, None)
        if value is None:
            return False
        if db.slots is not None:
            db.slots.discard(key)
        if db.expires:
            db.expires.pop(key, None)
        if db.enc:
            db.enc.pop(key, None)
        if db.hexpires:
            db.hexpires.pop(key, None)
        return True

    def deletion_effect(self, key: bytes, reason):
        """The effect of a deletion the server made on its own: UNLINK or DEL as Valkey's propagateDeletion,
        HDEL for expired hash fields."""
        if type(reason) in _FIELD_REASONS:
            return ServerDeletion((b"HDEL", key) + tuple(reason))
        unlink = self.unlink_expired if reason == "expired" else self.unlink_evicted
        return ServerDeletion((b"UNLINK" if unlink else b"DEL", key))

    def server_delete(self, db: Db, key: bytes, reason: str):
        """A deletion not asked for by a command (expiry, eviction): accounted and reported. An expired key
        is left in place (only hidden from readers) while expiry is off: a replica, or clients paused."""
        if reason == "expired" and not self.expire_enabled:
            return
        value = db.data.get(key)
        if value is None:
            return
        self.used_bytes -= estimate_key(key, value)
        self.delete(db, key)
        if reason == "expired":
            self.expired_keys += 1
        else:
            self.evicted_keys += 1
        self.deleted_by_server.append((db.id, key, reason))

    # -- hash field expiry ----------------------------------------------------------------------
    # A field whose TTL passed stays in the hash's dict until active expiry removes it (Valkey 9 does the same:
    # reads skip it, HLEN still counts it, the key exists while it holds only such fields); the readers go
    # through live_hash / field_expired. While time does not pass for keys (replay, a replica applying its
    # primary's effects) no field is expired; a replica's readers still do not see them (hide_expired).

    def expired_fields_of(self, db: Db, key: bytes, now_ms=None):
        """The fields of hash key whose TTL has passed (still stored), in no particular order."""
        ttls = db.hexpires.get(key)
        if ttls is None or not (self.expire_enabled or self.hide_expired):
            return ()
        now = self.clock_ms() if now_ms is None else now_ms
        return [f for f, at in ttls.items() if at <= now]

    def live_hash(self, db: Db, key: bytes, h):
        """The hash h (at key) as a reader sees it: h itself, or a filtered copy when some of its fields
        have expired."""
        if not db.hexpires or key not in db.hexpires:
            return h
        gone = self.expired_fields_of(db, key)
        if not gone:
            return h
        gone = set(gone)
        return {f: v for f, v in h.items() if f not in gone}

    def field_expired(self, db: Db, key: bytes, field: bytes, now_ms=None) -> bool:
        ttls = db.hexpires.get(key) if db.hexpires else None
        if ttls is None:
            return False
        at = ttls.get(field)
        if at is None or not (self.expire_enabled or self.hide_expired):
            return False
        return at <= (self.clock_ms() if now_ms is None else now_ms)

    def expire_fields(self, db: Db, key: bytes, fields, silent=False):
        """Removes expired fields of hash key as the server's own deletion: reported in deleted_by_server
        (its effect HDEL key field ...). Active expiry deletes the key once no field is left and accounts
        the memory; `silent` is a write that is about to set those fields again (the pipeline measures its
        keys, and the hash is not deleted in between)."""
        h = db.data.get(key)
        if type(h) is not dict:
            db.hexpires.pop(key, None)   # TTLs left behind by a path that replaced the hash: nothing to expire
            return
        before = 0 if silent else estimate_key(key, h)
        removed = []
        for f in fields:
            if f in h:
                del h[f]
                removed.append(f)
            db.clear_field_expire(key, f)
        if not removed:
            return
        if silent:
            reason = _SilentFieldsExpired(removed)
        else:
            self.expired_fields += len(removed)
            if h:
                self.used_bytes += estimate_key(key, h) - before
                reason = FieldsExpired(removed)
            else:
                self.used_bytes -= before
                self.delete(db, key)
                reason = _LastFieldsExpired(removed)
        self.deleted_by_server.append((db.id, key, reason))

    def _active_expire_fields(self, db: Db, now: int, deadline: float, perf_counter) -> int:
        heap = db.hexpiry_heap
        due = {}
        n = 0
        hexpires = db.hexpires
        while heap and heap[0][0] <= now:
            at, key, field = heapq.heappop(heap)
            ttls = hexpires.get(key)
            if ttls is None or ttls.get(field) != at:
                continue  # stale: TTL changed, field or key gone
            fields = due.get(key)
            if fields is None:
                fields = due[key] = []
            fields.append(field)
            n += 1
            if n % 64 == 0 and perf_counter() > deadline:
                break
        for key, fields in due.items():
            self.expire_fields(db, key, fields)
        return n

    @staticmethod
    def _compact_field_heap(db: Db):
        """Keeps the field heap from growing with stale entries when field TTLs are rewritten often: measured
        only when it doubled since the last look, so the live TTLs are not counted every cycle."""
        if len(db.hexpiry_heap) > 2 * db.hexpiry_mark:
            hexpires = db.hexpires
            if len(db.hexpiry_heap) > 2 * sum(len(t) for t in hexpires.values()):
                db.hexpiry_heap = [(at, k, f) for k, t in hexpires.items() for f, at in t.items()]
                heapq.heapify(db.hexpiry_heap)
            db.hexpiry_mark = max(4096, len(db.hexpiry_heap))

    def active_expire_cycle(self, budget_ms: float, perf_counter) -> int:
        started = perf_counter()
        removed = self._active_expire_cycle(budget_ms, perf_counter)
        if self.latency_monitor is not None:
            self.latency_monitor.add_sample_if_needed("expire-cycle", int((perf_counter() - started) * 1000))
        return removed

    def _active_expire_cycle(self, budget_ms: float, perf_counter) -> int:
        """Deletes expired keys, earliest first, within a time budget. Returns how many.

        Departs from Valkey's random sampling: a heap of expiry times finds every expired key without
        scanning, which matters in Python where random access into a dict is O(n)."""
        if not self.expire_enabled:
            return 0
        now = self.clock_ms()
        deadline = perf_counter() + budget_ms / 1000.0
        removed = 0
        for db in self.dbs:
            heap = db.expiry_heap
            while heap and heap[0][0] <= now:
                at, key = heapq.heappop(heap)
                if db.expires.get(key) != at:
                    continue  # stale: TTL changed or key deleted
                self.server_delete(db, key, "expired")
                removed += 1
                if removed % 64 == 0 and perf_counter() > deadline:
                    self.expired_time_cap_reached += 1
                    return removed
            if db.hexpiry_heap:
                if db.hexpiry_heap[0][0] <= now:
                    removed += self._active_expire_fields(db, now, deadline, perf_counter)
                self._compact_field_heap(db)
            # Keep the heap from growing with stale entries when TTLs are rewritten often.
            if len(heap) > 2 * len(db.expires) + 1024:
                db.expiry_heap = [(at, k) for k, at in db.expires.items()]
                heapq.heapify(db.expiry_heap)
        return removed

    # -- the compiled core's inputs (published to core_state where they change) ---------------------
    def bind_core_state(self, state):
        """From now on this keyspace writes its part of the compiled core's decision to `state`
        (commands/corestate.py): whether time deletes keys, whether expired keys hide, the access times kept,
        and its list of the server's own deletions. One core per keyspace: a second state is refused."""
        if self.core_state is not None and self.core_state is not state:
            raise ValueError("this keyspace already serves another pipeline's compiled core")
        self.core_state = state
        state.set("no_expire", not self._expire_enabled)
        state.set("hide_expired", self._hide_expired)
        state.deleted = self._deleted_by_server
        self._publish_access()

    def _publish_access(self):
        """Access times: none kept, or the LRU clock stamped on each key the core looks up; LFU counters (or an
        LRU clock not ticked yet) are the Python path's."""
        state = self.core_state
        if state is not None:
            state.lru_stamp = self.lru_stamp
            state.set("access", self._track is not None and self.lru_stamp is None)

    # (read through C getters: no Python frame where a lookup reads them)
    def _set_expire_enabled(self, on):
        self._expire_enabled = on
        if self.core_state is not None:
            self.core_state.set("no_expire", not on)
    expire_enabled = property(attrgetter("_expire_enabled"), _set_expire_enabled)

    def _set_hide_expired(self, on):
        self._hide_expired = on
        if self.core_state is not None:
            self.core_state.set("hide_expired", on)
    hide_expired = property(attrgetter("_hide_expired"), _set_hide_expired)

    def _set_deleted_by_server(self, log):
        # (server/notify.py wraps it once; filled and drained in place everywhere else)
        self._deleted_by_server = log
        if self.core_state is not None:
            self.core_state.deleted = log
    deleted_by_server = property(attrgetter("_deleted_by_server"), _set_deleted_by_server)

    # -- access tracking for LRU/LFU eviction --------------------------------------------------
    @property
    def track_access(self):
        return self._track

    @track_access.setter
    def track_access(self, value):
        self._track = value
        self.lru_stamp = self.lru_second if value == "lru" else None
        self._publish_access()

    def lru_tick(self):
        """The cron's refresh of the LRU clock."""
        self.lru_second = self.clock_ms() // 1000 + self.lru_offset_s
        if self._track == "lru":
            self.lru_stamp = self.lru_second
            self._publish_access()

    def lru_now_s(self) -> int:
        """The LRU clock (LRU_CLOCK()): the cron's tick, on which access times are stamped and read."""
        second = self.lru_second
        return second if second is not None else self.clock_ms() // 1000 + self.lru_offset_s

    def advance_lru_clock(self, seconds: int):
        """DEBUG LRU-CLOCK-ADVANCE: the LRU clock runs `seconds` further ahead of the real one from now on."""
        self.lru_offset_s += seconds
        if self.lru_second is not None:
            self.lru_tick()

    def _touch(self, db: Db, key: bytes):
        if self._track == "lru":
            second = self.lru_second
            db.data.set_access(key, second if second is not None else self.clock_ms() // 1000 + self.lru_offset_s)
            return
        now = self.clock_ms()
        packed = db.data.get_access(key)
        minutes = (now // 60000) & 0xFFFF
        if packed is None:
            counter = 5  # LFU_INIT_VAL: a new object's counter, then this access counts (updateLFU)
        else:
            counter = packed & 0xFF
            elapsed = (minutes - (packed >> 8)) & 0xFFFF
            if self.lfu_decay_time_min:
                counter = max(0, counter - elapsed // self.lfu_decay_time_min)
        if counter < 255:
            base = max(0, counter - 5)
            if self.rng.random() < 1.0 / (base * self.lfu_log_factor + 1):
                counter += 1
        db.data.set_access(key, (minutes << 8) | counter)

    def created(self, db: Db, key: bytes):
        """A value was just stored at key: a new object's LRU clock is now (createObject). An LFU counter
        starts at LFU_INIT_VAL without an entry (lfu_counter)."""
        stamp = self.lru_stamp
        if stamp is not None:
            db.data.set_access(key, stamp)
        elif self._track == "lru":
            self._touch(db, key)

    def idle_ms(self, db: Db, key: bytes) -> int:
        last = db.data.get_access(key)
        if last is None or self._track == "lfu":    # (None: CLIENT NO-TOUCH, which still reads them)
            return 0
        # whole LRU clock units, as estimateObjectIdleTime, and against the same clock the stamp came from (the
        # cron's LRU_CLOCK, as Valkey at hz >= 1): the exact time would count a just-stamped key a second idle
        # as soon as the second turned and the cron had not ticked yet
        now_s = self.lru_now_s()
        return max(0, (now_s - last) * 1000)

    def lfu_counter(self, db: Db, key: bytes) -> int:
        packed = db.data.get_access(key)
        return 5 if packed is None else packed & 0xFF

    # -- eviction ------------------------------------------------------------------------------
    def evict_one(self, policy: str, samples: int = 5):
        """Evicts the best of `samples` random candidates under `policy`. Returns (db_id, key) or None."""
        best = None
        best_score = None
        volatile = policy.startswith("volatile")
        now = self.clock_ms()
        for db in self.dbs:
            source = db.expires if volatile else db.data
            if not source:
                continue
            for key in db.random_keys(samples, self.rng, from_expires=volatile):
                if policy.endswith("lru"):
                    score = -(db.data.get_access(key) or 0)   # oldest access first
                elif policy.endswith("lfu"):
                    score = -(self.lfu_counter(db, key))       # least used first
                elif policy == "volatile-ttl":
                    score = -(db.expires.get(key, now) - now)  # soonest expiry first
                else:
                    score = self.rng.random()
                if best_score is None or score > best_score:
                    best, best_score = (db, key), score
        if best is None:
            return None
        db, key = best
        self.server_delete(db, key, "evicted")
        return db.id, key


_FIELD_REASONS = frozenset((FieldsExpired, _SilentFieldsExpired, _LastFieldsExpired))
