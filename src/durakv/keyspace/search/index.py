"""Search indexes as derived state of a keyspace: made by FT.CREATE, fed by every change to a key, searched by
FT.SEARCH.

An index is never journaled: its definition is (FT.CREATE / FT.DROPINDEX are effects, and snapshots carry
them), its contents are rebuilt from the keyspace. Three things keep them exact:

- `Search.key_changed(db_id, key)` after any write, for the keys the write touched. The caller is the one
  place every keyspace change passes through (the pipeline's observer after call(), and the server's own
  deletions: expiry, eviction), whatever the path: a client's command, EXEC, a script, a blocked client's
  retry, a replica applying the journal, start-up replay, RESTORE. It re-reads the key and re-indexes it, so
  it needs no knowledge of which command ran.
- `Search.changed_unknown(db_id or None)` when a write's keys cannot be listed (FLUSHDB, FLUSHALL, SWAPDB, a
  dataset replaced by a reload or a full sync): the indexes of that database start again from the keyspace.
- A backfill: an index made over existing data (or told to start again) scans the database's keys in slices
  (`backfill_step`, driven by the server between commands within a time budget, so the loop never stalls);
  writes meanwhile are indexed at once, and the scan re-reads each key, so the two never disagree.

The key -> fields extraction is the index's `source` (HASH today: the fields of a hash; JSON plugs in a
path -> value extraction of the same shape).
"""

import math
import time

from ..jsondoc import JsonDoc, dumps_compact
from ..jsonpath import SYNTAX_ERRORS as JSON_SYNTAX_ERRORS
from ..jsonpath import Selector
from .lazynumpy import np
from .schema import to_double
from .vectors import FlatVectors, HnswVectors, NumericIndex, TagIndex


class HashSource:
    """The fields of a hash key as an index reads them: fields whose TTL passed are not there."""
    key_type = "HASH"

    def __init__(self, keyspace):
        self.keyspace = keyspace

    def read(self, db, key):
        """{identifier: bytes} of the key's live fields, or None when the key is missing, expired or not a hash."""
        ks = self.keyspace
        value = ks.peek(db, key)
        if type(value) is not dict:
            return None
        if db.hexpires and key in db.hexpires:
            value = ks.live_hash(db, key, value)
        return value

    def content(self, db, key, identifiers=None):
        """[(field, value)] a search result shows for the key (all fields, or the ones asked for)."""
        fields = self.read(db, key)
        if fields is None:
            return None
        if identifiers is None:
            return list(fields.items())
        return [(i, fields[i]) for i in identifiers if i in fields]


def json_get_text(doc, path: str):
    """What `JSON.GET key path` answers for a document (compact), or None where it answers an error: a JSONPath
    gives the array of what it selects, a legacy path its first value."""
    if path == "." or path == "$":
        values, v2 = [doc.root], path == "$"
    else:
        sel = Selector()
        rc = sel.get_values(doc.root, path)
        if rc is not None and (not sel.is_v2 or rc in JSON_SYNTAX_ERRORS):
            return None
        values, v2 = sel.values(), sel.is_v2
    if not v2:
        return dumps_compact(values[0]) if values else None
    return "[" + ",".join(dumps_compact(v) for v in values) + "]"


def normalize_json_record(text):
    """valkey-search's NormalizeJsonRecord: JSON.GET's array without its brackets, and without the quotes of a
    string; None when it is empty or not an array."""
    if not text or text[0] != "[":
        return None
    text = text[1:]
    if text.endswith("]"):
        text = text[:-1]
    if text.startswith('"'):
        text = text[1:]
        if text.endswith('"'):
            text = text[:-1]
    return text or None


def json_vector(record: str):
    """VectorBase::NormalizeStringRecord: "[1, 2.5, ...]" as float32 bytes; b"!" (no vector's size) when a number
    does not parse, which the index counts as a failure."""
    if record.startswith("["):
        record = record[1:]
        if record.endswith("]"):
            record = record[:-1]
    out = []
    for part in record.split(","):
        if not part.strip():
            continue
        f = to_double(part.encode())
        if f is None:
            return b"!"
        out.append(f)
    return np.asarray(out, dtype="<f4").tobytes()


class JsonSource:
    """The attributes of a JSON document key, each read as valkey-search reads it: `JSON.GET key identifier`,
    normalized (normalize_json_record); a vector's text becomes float32 bytes."""
    key_type = "JSON"

    def __init__(self, keyspace, attributes):
        self.keyspace = keyspace
        self.attributes = [(a.identifier, a.type == "VECTOR") for a in attributes]

    def _doc(self, db, key):
        value = self.keyspace.peek(db, key)
        return value if type(value) is JsonDoc else None

    def record(self, doc, identifier: bytes):
        text = json_get_text(doc, identifier.decode("utf-8", "surrogateescape"))
        return normalize_json_record(text) if text is not None else None

    def read(self, db, key):
        doc = self._doc(db, key)
        if doc is None:
            return None
        out = {}
        for identifier, is_vector in self.attributes:
            rec = self.record(doc, identifier)
            if rec is not None:
                out[identifier] = json_vector(rec) if is_vector else rec.encode("utf-8", "surrogateescape")
        return out

    def content(self, db, key, identifiers=None):
        """[(name, value)] of a search result: the whole document as `$`, or the identifiers asked for."""
        doc = self._doc(db, key)
        if doc is None:
            return None
        out = []
        for identifier in (identifiers if identifiers is not None else (b"$",)):
            rec = self.record(doc, identifier)
            if rec is not None:
                out.append((identifier, rec.encode("utf-8", "surrogateescape")))
        return out


class Index:
    """One FT.CREATE: its definition, a label per indexed key, and one structure per attribute."""

    def __init__(self, definition, db, source, keyspace=None):
        self.d = definition
        self.db = db
        self.source = source
        # used_memory counts what the index holds, as Valkey counts a module's allocations: maxmemory (and its
        # eviction) sees it. Per label the estimate of what its entries cost (`cost`), charged as they change.
        self.keyspace = keyspace
        self.cost = {}
        self.charged = 0
        self.per_vector = {a.alias: (a.dim * 4 + (2 * a.m * 4 + 40 if a.algorithm == "HNSW" else 16))
                           for a in definition.attributes if a.type == "VECTOR"}
        self.structures = {}
        for a in definition.attributes:
            if a.type == "VECTOR":
                self.structures[a.alias] = HnswVectors(a) if a.algorithm == "HNSW" else FlatVectors(a)
            elif a.type == "TAG":
                self.structures[a.alias] = TagIndex(a)
            else:
                self.structures[a.alias] = NumericIndex(a)
        self.label_of = {}       # key -> label
        self.key_of = {}         # label -> key
        self.next_label = 0
        self.failures = 0        # hash_indexing_failures: values an attribute could not take (a vector's size)
        self.backfill = None     # keys still to scan (a list, consumed from `backfill_pos`), None when done
        self.backfill_pos = 0
        self.backfill_total = 0
        self.created_ms = int(time.time() * 1000)

    # -- changes ----------------------------------------------------------------------------------------
    def update(self, key):
        """Re-reads key and brings every attribute up to date with it."""
        fields = self.source.read(self.db, key)
        label = self.label_of.get(key)
        if fields is None:
            if label is not None:
                self._drop(key, label)
            return
        if label is None:
            label = self.next_label
            self.next_label += 1
        indexed = False
        for a in self.d.attributes:
            s = self.structures[a.alias]
            raw = fields.get(a.identifier)
            if raw is None:
                s.remove(label)
                continue
            if a.type == "VECTOR":
                if len(raw) != a.dim * 4:
                    s.remove(label)
                    self.failures += 1
                    continue
                vec = np.frombuffer(raw, dtype="<f4")
                if not np.all(np.isfinite(vec)):
                    s.remove(label)
                    self.failures += 1
                    continue
                s.add(label, vec)
                indexed = True
            elif a.type == "TAG":
                indexed = s.set(label, raw) or indexed
            else:
                number = to_double(raw)
                if number is not None and math.isnan(number):
                    number = None
                indexed = s.set(label, number) or indexed
        if indexed:
            self.label_of[key] = label
            self.key_of[label] = key
            self._charge(label, self._cost_of(label, fields, key))
        elif key in self.label_of:
            self._drop(key, label)

    def _cost_of(self, label, fields, key):
        n = 120 + len(key)                       # the label's own entries (key <-> label)
        for a in self.d.attributes:
            raw = fields.get(a.identifier)
            if raw is None:
                continue
            if a.type == "VECTOR":
                n += self.per_vector[a.alias] if len(raw) == a.dim * 4 else 0
            elif a.type == "TAG":
                n += 2 * len(raw) + 96
            else:
                n += 64
        return n

    def _charge(self, label, cost):
        old = self.cost.get(label, 0)
        if cost:
            self.cost[label] = cost
        else:
            self.cost.pop(label, None)
        if cost != old:
            self.charged += cost - old
            if self.keyspace is not None:
                self.keyspace.used_bytes += cost - old

    def _drop(self, key, label):
        for s in self.structures.values():
            s.remove(label)
        del self.label_of[key]
        del self.key_of[label]
        self._charge(label, 0)

    def _uncharge_all(self):
        if self.keyspace is not None:
            self.keyspace.used_bytes -= self.charged
        self.charged = 0
        self.cost = {}

    def clear(self):
        for a in self.d.attributes:
            s = self.structures[a.alias]
            for label in list(self.key_of):
                s.remove(label)
        self.label_of.clear()
        self.key_of.clear()
        self._uncharge_all()

    def drop_all(self):
        """Frees the structures (FT.DROPINDEX)."""
        self.structures = {}
        self.label_of = {}
        self.key_of = {}
        self.backfill = None
        self._uncharge_all()

    # -- backfill ---------------------------------------------------------------------------------------
    def start_backfill(self):
        """Scans the database from the start: every key the prefixes take is (re)indexed."""
        keys = list(self.db.data)
        matches = self.d.matches
        self.backfill = [k for k in keys if matches(k)] if self.d.prefixes else keys
        self.backfill_pos = 0
        self.backfill_total = len(self.backfill)
        # keys indexed before that are gone now drop out as the scan meets nothing for them
        stale = [k for k in self.label_of if k not in self.db.data]
        for k in stale:
            self._drop(k, self.label_of[k])

    @property
    def backfilling(self):
        return self.backfill is not None

    def backfill_percent(self) -> float:
        if self.backfill is None or self.backfill_total == 0:
            return 1.0
        return self.backfill_pos / self.backfill_total

    def backfill_slice(self, deadline, perf_counter) -> bool:
        """Indexes keys until deadline; True if the scan is done."""
        keys = self.backfill
        if keys is None:
            return True
        i = self.backfill_pos
        n = len(keys)
        update = self.update
        while i < n:
            update(keys[i])
            i += 1
            if perf_counter() > deadline:   # an HNSW insert costs far more than the clock read
                break
        self.backfill_pos = i
        if i >= n:
            self.backfill = None
            return True
        return False

    # -- queries ----------------------------------------------------------------------------------------
    def all_labels(self):
        return set(self.key_of)

    def evaluate(self, pred):
        """The labels a filter predicate selects."""
        from .query import And, Not, Numeric, Or, Tag
        t = type(pred)
        if t is Tag:
            return self.structures[pred.attr.alias].match(pred.tags)
        if t is Numeric:
            return self.structures[pred.attr.alias].range(pred.lo, pred.lo_incl, pred.hi, pred.hi_incl)
        if t is Not:
            return self.all_labels() - self.evaluate(pred.inner)
        if t is And:
            return self.evaluate(pred.a) & self.evaluate(pred.b)
        if t is Or:
            return self.evaluate(pred.a) | self.evaluate(pred.b)
        raise TypeError(t)

    def num_docs(self):
        return len(self.label_of)

    def num_records(self):
        return sum(len(s) for s in self.structures.values())

    def memory_bytes(self, alias=None):
        if alias is not None:
            s = self.structures.get(alias)
            return s.memory_bytes() if s is not None else 0
        return sum(s.memory_bytes() for s in self.structures.values()) + 120 * len(self.label_of)


class Search:
    """The indexes of one keyspace, per database and name (valkey-search 1.1's per-database indexes)."""

    def __init__(self, keyspace):
        self.keyspace = keyspace
        self.by_db = {}                  # db_id -> {name: Index}
        self.count = 0
        self.sources = {"HASH": HashSource(keyspace)}
        # set by the server: called when a backfill has work, so that it schedules backfill_step on its loop
        self.wakeup = None
        self.paused = False              # a bulk load in progress (recovery, a full sync): backfill after it
        # set by the server: called when the first index is made or the last dropped (it routes every command
        # through its observer only while an index exists)
        self.on_definitions = None

    def __bool__(self):
        return self.count > 0

    # -- definitions ------------------------------------------------------------------------------------
    def get(self, db_id, name):
        return self.by_db.get(db_id, {}).get(name)

    def names(self, db_id):
        return list(self.by_db.get(db_id, {}))

    def add(self, db_id, definition):
        db = self.keyspace.dbs[db_id]
        source = self.sources["HASH"] if definition.on == "HASH" else JsonSource(self.keyspace, definition.attributes)
        idx = Index(definition, db, source, self.keyspace)
        self.by_db.setdefault(db_id, {})[definition.name] = idx
        self.count += 1
        if not definition.skip_initial_scan and db.data and not self.paused:
            idx.start_backfill()
            self._wake()
        if self.count == 1 and self.on_definitions is not None:
            self.on_definitions()
        return idx

    def remove(self, db_id, name):
        idx = self.by_db.get(db_id, {}).pop(name, None)
        if idx is None:
            return False
        if not self.by_db[db_id]:
            del self.by_db[db_id]
        idx.drop_all()
        self.count -= 1
        if self.count == 0 and self.on_definitions is not None:
            self.on_definitions()
        return True

    def definitions(self):
        """(db_id, argv of FT.CREATE) of every index: their snapshot form."""
        for db_id in sorted(self.by_db):
            for idx in self.by_db[db_id].values():
                yield db_id, (b"FT.CREATE",) + tuple(idx.d.argv)

    def clear_definitions(self):
        for db_id in list(self.by_db):
            for name in list(self.by_db[db_id]):
                self.remove(db_id, name)

    # -- changes ----------------------------------------------------------------------------------------
    def key_changed(self, db_id, key):
        indexes = self.by_db.get(db_id)
        if not indexes or self.paused:
            return
        for idx in indexes.values():
            if idx.d.matches(key):
                idx.update(key)

    def keys_changed(self, touched):
        if self.paused:
            return        # a bulk load: resume() rebuilds from the keyspace at its end
        by_db = self.by_db
        for db_id, key in touched:
            indexes = by_db.get(db_id)
            if indexes:
                for idx in indexes.values():
                    if idx.d.matches(key):
                        idx.update(key)

    def flushed(self, db_id=None, keep_definitions=False):
        """FLUSHDB (db_id) or FLUSHALL (None): valkey-search drops the indexes of a flushed database on a
        standalone server, and keeps them (empty) in cluster mode, where an index is the cluster's."""
        for d in list(self.by_db):
            if db_id is not None and d != db_id:
                continue
            for name in list(self.by_db[d]):
                if keep_definitions:
                    self.by_db[d][name].clear()
                    self.by_db[d][name].backfill = None
                else:
                    self.remove(d, name)

    def changed_unknown(self, db_id=None):
        """The keys of db_id (every database: None) changed in ways nobody listed: its indexes start again."""
        if self.paused:
            return
        for d, indexes in self.by_db.items():
            if db_id is not None and d != db_id:
                continue
            for idx in indexes.values():
                idx.clear()
                idx.start_backfill()
        self._wake()

    def _wake(self):
        if self.wakeup is not None and not self.paused:
            self.wakeup()

    def pause(self):
        """A bulk load begins: writes still reach the indexes, but no backfill runs until resume()."""
        self.paused = True

    def resume(self, rebuild=True):
        """A bulk load ended: with rebuild, every index scans its database again."""
        self.paused = False
        if rebuild:
            self.changed_unknown(None)
        else:
            self._wake()

    # -- backfill ---------------------------------------------------------------------------------------
    def backfilling(self) -> bool:
        return any(idx.backfilling for indexes in self.by_db.values() for idx in indexes.values())

    def backfill_step(self, budget_s, perf_counter=time.perf_counter) -> bool:
        """Advances every backfill within budget_s; True while work is left."""
        if self.paused:
            return False
        deadline = perf_counter() + budget_s
        left = False
        for indexes in list(self.by_db.values()):
            for idx in list(indexes.values()):
                if idx.backfill is None:
                    continue
                if perf_counter() > deadline or not idx.backfill_slice(deadline, perf_counter):
                    left = True
        return left


def get_search(keyspace) -> Search:
    """The Search of a keyspace (attribute `search`), made on first use."""
    s = getattr(keyspace, "search", None)
    if s is None:
        s = keyspace.search = Search(keyspace)
    return s
