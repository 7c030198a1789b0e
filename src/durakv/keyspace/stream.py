"""The stream value type: entries ordered by ID plus consumer groups.

An ID is one int, ms << 64 | seq, so IDs compare, sort and bisect as plain ints. Entries live in a
dict id -> (field, value, field, value, ...) plus the sorted list of live ids.

Valkey keeps a stream as a radix tree of listpack nodes and its approximate trimming ("~") removes
only whole nodes. To trim exactly like Valkey, the node layout is modelled here (not the bytes): each
node remembers its first ID, its last appended ID, live and total (live + deleted) entry counts and an
estimate of its listpack size; a node is closed at 100 entries or ~4096 bytes like Valkey's defaults
(stream-node-max-entries / stream-node-max-bytes). The layout is internal: equality ignores it.

Consumer groups: Group(last_id, entries_read, pel: IdMap id -> Nack, consumers: name -> Consumer);
Consumer(name, seen_time, active_time, pel: IdMap id -> Nack) sharing the Nack objects with the group
PEL. Consumer seen/active times are soft state (as in Valkey's replication: never journaled exactly).
"""

from bisect import bisect_left, bisect_right, insort

MASK64 = (1 << 64) - 1
MAX_ID = (1 << 128) - 1
INVALID_ENTRIES_READ = -1

NODE_MAX_ENTRIES = 100
NODE_MAX_BYTES = 4096
STREAM_LISTPACK_MAX_SIZE = 1 << 30

TRIM_MAXLEN = 1
TRIM_MINID = 2


def id_bytes(i: int) -> bytes:
    return b"%d-%d" % (i >> 64, i & MASK64)


# -- listpack size estimate (for the node split rule only) --------------------------------------

def _lp_int_size(v: int) -> int:
    if 0 <= v <= 127:
        return 2
    if -4096 <= v <= 4095:
        return 3
    if -32768 <= v <= 32767:
        return 4
    if -8388608 <= v <= 8388607:
        return 5
    if -2147483648 <= v <= 2147483647:
        return 6
    return 10


def _lp_str_size(b: bytes) -> int:
    n = len(b)
    if 0 < n <= 20:
        digits = b[1:] if b[0] == 45 else b
        if digits.isdigit() and (digits[0] != 48 or (n == 1)):
            v = int(b)
            if -(1 << 63) <= v < (1 << 63):
                return _lp_int_size(v)
    if n < 64:
        total = 1 + n
    elif n < 4096:
        total = 2 + n
    else:
        total = 5 + n
    if total < 128:
        return total + 1
    if total < 16384:
        return total + 2
    return total + 3


class _Node:
    """One modelled listpack node of the radix tree."""

    __slots__ = ("first", "last", "live", "total", "nbytes", "fields")

    def __init__(self, first, fields, nbytes):
        self.first = first      # master ID (first entry ever appended to the node)
        self.last = first       # last appended ID (deleted or not)
        self.live = 0
        self.total = 0
        self.nbytes = nbytes
        self.fields = fields    # master entry field names

    def copy(self):
        n = _Node(self.first, self.fields, self.nbytes)
        n.last, n.live, n.total = self.last, self.live, self.total
        return n


# -- consumer groups -------------------------------------------------------------------------------

class IdList:
    """Ascending stream IDs. Removing the smallest one is O(1) amortized (a head offset, compacted
    when half the list is dead), as trimming and acknowledging mostly remove the oldest IDs; other
    removals and out-of-order inserts shift the list."""

    __slots__ = ("a", "head")

    def __init__(self, items=()):
        self.a = list(items)
        self.head = 0

    def __len__(self):
        return len(self.a) - self.head

    def __iter__(self):
        return iter(self.a[self.head:])  # over a copy: the caller may change the list meanwhile

    def __eq__(self, other):
        return isinstance(other, IdList) and self.to_list() == other.to_list()

    __hash__ = None

    def to_list(self):
        return self.a[self.head:]

    def first(self) -> int:
        return self.a[self.head]

    def last(self) -> int:
        return self.a[-1]

    def add(self, i):
        a = self.a
        if len(a) == self.head or i > a[-1]:
            if len(a) == self.head and self.head:
                a.clear()
                self.head = 0
            a.append(i)
        else:
            insort(a, i, self.head)

    def remove(self, i):
        """Removes i, which must be present."""
        a, h = self.a, self.head
        pos = bisect_left(a, i, h)
        if pos == h:
            self.drop_head(1)
        else:
            del a[pos]

    def drop_head(self, k):
        self.head += k
        h = self.head
        if h > 32 and 2 * h > len(self.a):
            del self.a[:h]
            self.head = 0

    def bounds(self, start: int, end: int = MAX_ID):
        """Absolute positions [lo, hi) in self.a of the IDs within [start, end]."""
        a = self.a
        lo = bisect_left(a, start, self.head)
        hi = len(a) if end >= MAX_ID else bisect_right(a, end, lo)
        return lo, hi

    def between(self, start: int, end: int = MAX_ID, count: int = 0, rev: bool = False):
        """IDs within [start, end], ascending (descending with rev), at most count (0 = all): a new list."""
        lo, hi = self.bounds(start, end)
        if lo >= hi:
            return []
        if not rev:
            if count and hi - lo > count:
                hi = lo + count
            return self.a[lo:hi]
        if count and hi - lo > count:
            lo = hi - count
        out = self.a[lo:hi]
        out.reverse()
        return out

    def head_ids(self, count: int):
        """The first count IDs (all when count is 0)."""
        h = self.head
        return self.a[h:h + count] if count else self.a[h:]


class IdMap:
    """A dict keyed by stream ID that also iterates in ID order (`keys`, an IdList)."""

    __slots__ = ("map", "keys")

    def __init__(self):
        self.map = {}
        self.keys = IdList()

    def __len__(self):
        return len(self.map)

    def __contains__(self, i):
        return i in self.map

    def get(self, i):
        return self.map.get(i)

    def add(self, i, value):
        m = self.map
        if i not in m:
            self.keys.add(i)
        m[i] = value

    def remove(self, i):
        if self.map.pop(i, None) is None:
            return False
        self.keys.remove(i)
        return True

    def ids_from(self, start: int, end: int = MAX_ID, count: int = 0):
        """IDs in [start, end], ascending, at most count (0 = all): a new list."""
        return self.keys.between(start, end, count)


class Nack:
    __slots__ = ("consumer", "delivery_time", "delivery_count")

    def __init__(self, consumer, delivery_time, delivery_count=1):
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count


class Consumer:
    __slots__ = ("name", "seen_time", "active_time", "pel")

    def __init__(self, name, now):
        self.name = name
        self.seen_time = now
        self.active_time = -1
        self.pel = IdMap()


class Group:
    __slots__ = ("last_id", "entries_read", "pel", "consumers")

    def __init__(self, last_id, entries_read):
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = IdMap()
        self.consumers = {}

    def create_consumer(self, name, now):
        """The new Consumer, or None when it already exists."""
        if name in self.consumers:
            return None
        c = self.consumers[name] = Consumer(name, now)
        return c

    def delete_consumer(self, consumer):
        pel = self.pel
        for i in consumer.pel.keys:
            pel.remove(i)
        del self.consumers[consumer.name]

    def remove_nack(self, i):
        nack = self.pel.map.get(i)
        if nack is None:
            return None
        self.pel.remove(i)
        nack.consumer.pel.remove(i)
        return nack

    def state(self):
        """Comparable logical state (consumer seen/active times are soft state, left out)."""
        return (self.last_id, self.entries_read,
                [(i, n.consumer.name, n.delivery_time, n.delivery_count) for i, n in
                 ((i, self.pel.map[i]) for i in self.pel.keys)],
                sorted((c.name, tuple(c.pel.keys)) for c in self.consumers.values()))


# -- the stream ------------------------------------------------------------------------------------

class Stream:
    __slots__ = ("entries", "ids", "last_id", "entries_added", "max_deleted_id", "groups", "nodes",
                 "node_firsts", "data_bytes")

    def __init__(self):
        self.entries = {}        # id -> (field, value, ...)
        self.ids = IdList()      # live ids, ascending
        self.last_id = 0
        self.entries_added = 0
        self.max_deleted_id = 0
        self.groups = None       # name -> Group, created on demand
        self.nodes = []          # modelled listpack nodes, ascending
        self.node_firsts = []    # their first ids (for bisect)
        self.data_bytes = 0      # field and value bytes of the live entries (memory estimate)

    def __len__(self):
        return len(self.ids)

    def __bool__(self):          # an empty stream is still a key
        return True

    __hash__ = None

    def __eq__(self, other):
        if type(other) is not Stream:
            return NotImplemented
        if (self.ids != other.ids or self.entries != other.entries or self.last_id != other.last_id
                or self.entries_added != other.entries_added or self.max_deleted_id != other.max_deleted_id):
            return False
        mine, theirs = self.groups or {}, other.groups or {}
        if mine.keys() != theirs.keys():
            return False
        return all(g.state() == theirs[name].state() for name, g in mine.items())

    def __repr__(self):
        return "Stream(len=%d, last=%s, groups=%d)" % (len(self.ids), id_bytes(self.last_id).decode(),
                                                        len(self.groups or ()))

    @property
    def first_id(self) -> int:
        """Valkey's recorded first entry id: the first live id, 0-0 when empty."""
        return self.ids.first() if self.ids else 0

    def last_entry_id(self) -> int:
        """The last live id (the stream must not be empty)."""
        return self.ids.a[-1]

    # -- entries --------------------------------------------------------------------------------
    def append(self, i: int, fields: tuple, node_max_bytes=NODE_MAX_BYTES, node_max_entries=NODE_MAX_ENTRIES):
        """Appends entry i (which must be greater than last_id). The node limits are Valkey's
        stream-node-max-bytes / -entries (0: no limit of that kind), as streamAppendItem applies them."""
        nodes = self.nodes
        node = nodes[-1] if nodes else None
        totelelen = 0
        for x in fields:
            totelelen += len(x)
        self.data_bytes += totelelen
        if not node_max_bytes or node_max_bytes > STREAM_LISTPACK_MAX_SIZE:
            node_max_bytes = STREAM_LISTPACK_MAX_SIZE
        if node is not None and (node.nbytes + totelelen >= node_max_bytes
                                 or (node_max_entries and node.total >= node_max_entries)):
            node = None
        if node is None:
            names = fields[0::2]
            size = 7 + 6 + _lp_int_size(len(names))
            for f in names:
                size += _lp_str_size(f)
            node = _Node(i, names, size)
            nodes.append(node)
            self.node_firsts.append(i)
        size = 4 + _lp_int_size((i >> 64) - (node.first >> 64)) + _lp_int_size((i & MASK64) - (node.first & MASK64))
        for v in fields[1::2]:
            size += _lp_str_size(v)
        names = fields[0::2]
        if names != node.fields:
            size += _lp_int_size(len(names))
            for f in names:
                size += _lp_str_size(f)
        node.nbytes += size
        node.last = i
        node.live += 1
        node.total += 1
        self.entries[i] = fields
        self.ids.a.append(i)
        self.entries_added += 1
        self.last_id = i

    def delete(self, i: int) -> bool:
        """XDEL of one id: True if it existed."""
        fields = self.entries.pop(i, None)
        if fields is None:
            return False
        self.data_bytes -= sum(map(len, fields))
        self.ids.remove(i)
        k = bisect_right(self.node_firsts, i) - 1
        node = self.nodes[k]
        if node.live == 1:
            del self.nodes[k]
            del self.node_firsts[k]
        else:
            node.live -= 1
        if i > self.max_deleted_id:
            self.max_deleted_id = i
        return True

    def _drop_head(self, k):
        """Removes the first k live ids (trimming)."""
        if k <= 0:
            return
        pop = self.entries.pop
        removed = 0
        for i in self.ids.head_ids(k):
            removed += sum(map(len, pop(i)))
        self.data_bytes -= removed
        self.ids.drop_head(k)

    def trim(self, strategy, maxlen=0, minid=0, approx=False, limit=0) -> int:
        """streamTrim: removes entries from the head; with approx only whole nodes. Returns how many."""
        nodes = self.nodes
        deleted = 0
        removed_nodes = 0
        length = len(self.ids)
        for node in nodes:
            if strategy == TRIM_MAXLEN and length <= maxlen:
                break
            entries = node.live
            if limit and deleted + entries > limit:
                break
            if strategy == TRIM_MAXLEN:
                remove_node = length - entries >= maxlen
            else:
                remove_node = node.last < minid
            if remove_node:
                removed_nodes += 1
                length -= entries
                deleted += entries
                continue
            if approx:
                break
            if strategy == TRIM_MAXLEN:
                k = min(entries, length - maxlen)
            else:
                lo = self.ids.head + deleted
                k = bisect_left(self.ids.a, minid, lo, lo + entries) - lo
            if k > 0:
                node.live -= k
                deleted += k
            break
        if removed_nodes:
            del nodes[:removed_nodes]
            del self.node_firsts[:removed_nodes]
        self._drop_head(deleted)
        return deleted

    def first_id_with_tombstones(self) -> int:
        """streamGetEdgeID(first, with tombstones): the first node's master id, MAX_ID when empty."""
        return self.nodes[0].first if self.nodes else MAX_ID

    def range(self, start: int, end: int, count: int = 0, rev: bool = False):
        """Live ids in [start, end] (ascending, or descending with rev), at most count (0 = all)."""
        return self.ids.between(start, end, count, rev)

    # -- group helpers (Valkey's streamRangeHasTombstones / streamEstimateDistanceFromFirstEverEntry) --
    def range_has_tombstones(self, start: int) -> bool:
        md = self.max_deleted_id
        if not self.ids or not md:
            return False
        if self.ids.first() > md:
            return False
        return start <= md

    def estimate_distance(self, i: int) -> int:
        if not self.entries_added:
            return 0
        if not self.ids and i <= self.last_id:
            return self.entries_added
        if i == self.last_id:
            return self.entries_added
        if i > self.last_id:
            return INVALID_ENTRIES_READ
        md = self.max_deleted_id
        first = self.first_id
        if not md or md < first:
            if i < first:
                return self.entries_added - len(self.ids)
            if i == first:
                return self.entries_added - len(self.ids) + 1
        return INVALID_ENTRIES_READ

    def group_lag(self, g):
        """The group's lag, or None when it cannot be known."""
        if not self.entries_added:
            return 0
        if g.entries_read != INVALID_ENTRIES_READ and not self.range_has_tombstones(g.last_id):
            return self.entries_added - g.entries_read
        er = self.estimate_distance(g.last_id)
        if er != INVALID_ENTRIES_READ:
            return self.entries_added - er
        return None

    def get_group(self, name):
        groups = self.groups
        return groups.get(name) if groups else None

    def create_group(self, name, last_id, entries_read):
        """The new Group, or None if a group of that name exists."""
        if self.groups is None:
            self.groups = {}
        elif name in self.groups:
            return None
        g = self.groups[name] = Group(last_id, entries_read)
        return g

    # -- whole-value operations -----------------------------------------------------------------
    def copy(self):
        s = Stream()
        s.entries = self.entries.copy()
        s.ids = IdList(self.ids)
        s.last_id, s.entries_added, s.max_deleted_id = self.last_id, self.entries_added, self.max_deleted_id
        s.nodes = [n.copy() for n in self.nodes]
        s.node_firsts = self.node_firsts[:]
        s.data_bytes = self.data_bytes
        if self.groups:
            s.groups = {}
            for name, g in self.groups.items():
                ng = s.groups[name] = Group(g.last_id, g.entries_read)
                for cname, c in g.consumers.items():
                    nc = ng.consumers[cname] = Consumer(cname, c.seen_time)
                    nc.active_time = c.active_time
                for i in g.pel.keys:
                    n = g.pel.map[i]
                    c = ng.consumers[n.consumer.name]
                    nn = Nack(c, n.delivery_time, n.delivery_count)
                    ng.pel.add(i, nn)
                    c.pel.add(i, nn)
        return s

    def estimate_bytes(self) -> int:
        """Approximate memory: entries (kept as a running byte count), nodes and consumer groups."""
        size = 128 + 48 * len(self.nodes) + 150 * len(self.ids) + self.data_bytes
        if self.groups:
            for g in self.groups.values():
                size += 200 + 120 * len(g.pel) + 150 * len(g.consumers)
        return size

    def rebuild_commands(self, key):
        """Commands that recreate this stream on an empty key (snapshots), as Valkey's AOF rewrite:
        XADD per entry, XGROUP CREATE .. ENTRIESREAD, XCLAIM .. FORCE per pending entry (XGROUP
        CREATECONSUMER for consumers without any), XSETID with ENTRIESADDED/MAXDELETEDID last.
        Pending entries whose stream entry is gone are recreated through placeholder entries that are
        removed again (XTRIM for those before the first entry, XDEL for the others) before XSETID."""
        entries = self.entries
        orphans = set()
        if self.groups:
            for g in self.groups.values():
                for i in g.pel.keys:
                    if i not in entries:
                        orphans.add(i)
        if orphans:
            all_ids = sorted(orphans.union(self.ids))
        else:
            all_ids = self.ids.to_list()
        if all_ids:
            for i in all_ids:
                fields = entries.get(i)
                if fields is None:
                    fields = (b"x", b"y")
                yield (b"XADD", key, id_bytes(i)) + tuple(fields)
        else:
            yield (b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y")
        if self.groups:
            for name in sorted(self.groups):
                g = self.groups[name]
                yield (b"XGROUP", b"CREATE", key, name, id_bytes(g.last_id), b"ENTRIESREAD",
                       b"%d" % g.entries_read)
                for cname in sorted(g.consumers):
                    c = g.consumers[cname]
                    if not c.pel:
                        yield (b"XGROUP", b"CREATECONSUMER", key, name, cname)
                        continue
                    for i in c.pel.keys:
                        nack = c.pel.map[i]
                        yield (b"XCLAIM", key, name, cname, b"0", id_bytes(i), b"TIME",
                               b"%d" % nack.delivery_time, b"RETRYCOUNT", b"%d" % nack.delivery_count,
                               b"JUSTID", b"FORCE")
        if orphans:
            first = self.ids.first() if self.ids else None
            head = [i for i in orphans if first is None or i < first]
            middle = sorted(i for i in orphans if first is not None and i > first)
            if head:
                if first is None:
                    yield (b"XTRIM", key, b"MAXLEN", b"0")
                else:
                    yield (b"XTRIM", key, b"MINID", id_bytes(first))
            if middle:
                yield (b"XDEL", key) + tuple(id_bytes(i) for i in middle)
        yield (b"XSETID", key, id_bytes(self.last_id), b"ENTRIESADDED", b"%d" % self.entries_added,
               b"MAXDELETEDID", id_bytes(self.max_deleted_id))
