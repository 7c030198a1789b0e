"""The internal encoding Valkey would use for a value, as OBJECT ENCODING reports it.

durakv stores every type one way (bytes, dict, set, deque, ZSet), but clients and Valkey's own tests branch
on OBJECT ENCODING, and Valkey's answer depends on history as well as content: a hash that once held a
long value stays a hashtable after the value is deleted, an APPENDed string is raw however short, a list
that outgrew its listpack returns to one only when it shrinks to half the limit. So the family modules
report each growth or shrink to the functions here, which keep the encoding Valkey would have reached in
`Db.enc` (key -> encoding name) for the keys they touched. A key they never saw (restored from a snapshot
or RESTORE payload) has no entry and gets the encoding its content implies, which is what Valkey's loading
code chooses too. `Db.enc` follows the key: it is dropped when the key is deleted or given a new value.

The thresholds are Valkey's config (hash-max-listpack-entries, ..., and their old `ziplist` names).
"""

from ..protocol.numbers import string2ll

# Valkey 8.0's defaults (config.c).
DEFAULTS = {
    "hash-max-listpack-entries": 512,
    "hash-max-listpack-value": 64,
    "set-max-intset-entries": 512,
    "set-max-listpack-entries": 128,
    "set-max-listpack-value": 64,
    "zset-max-listpack-entries": 128,
    "zset-max-listpack-value": 64,
    "list-max-listpack-size": -2,
    "list-compress-depth": 0,
    "stream-node-max-bytes": 4096,
    "stream-node-max-entries": 100,
    "hll-sparse-max-bytes": 3000,
}

EMBSTR_SIZE_LIMIT = 44
# quicklist.c: node size limits for a negative list-max-listpack-size, and the byte cap of a count-limited one.
_NEG_FILL_BYTES = (4096, 8192, 16384, 32768, 65536)
SIZE_SAFETY_LIMIT = 8192
_INTSET_LIMIT = 1 << 30

# Encoding names as OBJECT ENCODING answers them.
INT, EMBSTR, RAW = b"int", b"embstr", b"raw"
LISTPACK, QUICKLIST, HASHTABLE, INTSET, SKIPLIST = b"listpack", b"quicklist", b"hashtable", b"intset", b"skiplist"


class EncodingRules:
    """The thresholds in force (followed live from CONFIG SET), with the other representation knobs
    (stream node limits, HLL sparse limit, list compression) that decide what a reply shows."""

    __slots__ = ("hash_entries", "hash_value", "set_intset_entries", "set_entries", "set_value",
                 "zset_entries", "zset_value", "list_fill", "list_packed_threshold", "list_compress_depth",
                 "stream_node_max_bytes", "stream_node_max_entries", "hll_sparse_max_bytes", "_list_limits")

    _FIELDS = {
        "hash-max-listpack-entries": "hash_entries",
        "hash-max-listpack-value": "hash_value",
        "set-max-intset-entries": "set_intset_entries",
        "set-max-listpack-entries": "set_entries",
        "set-max-listpack-value": "set_value",
        "zset-max-listpack-entries": "zset_entries",
        "zset-max-listpack-value": "zset_value",
        "list-max-listpack-size": "list_fill",
        "list-compress-depth": "list_compress_depth",
        "stream-node-max-bytes": "stream_node_max_bytes",
        "stream-node-max-entries": "stream_node_max_entries",
        "hll-sparse-max-bytes": "hll_sparse_max_bytes",
    }

    def __init__(self):
        for name, value in DEFAULTS.items():
            setattr(self, self._FIELDS[name], value)
        # DEBUG QUICKLIST-PACKED-THRESHOLD: elements at least this long sit in plain quicklist nodes,
        # which never turn back into a listpack (0: Valkey's default rule, isLargeElement).
        self.list_packed_threshold = 0
        self._list_limits = self._compute_list_limits()

    def set(self, config_name, value) -> bool:
        """Takes one config value; False if the name is not an encoding threshold."""
        field = self._FIELDS.get(config_name)
        if field is None:
            return False
        setattr(self, field, int(value))
        if field == "list_fill":
            self._list_limits = self._compute_list_limits()
        return True

    def load(self, get):
        """Reads every threshold through get(config_name) (a Config's __getitem__)."""
        for name in self._FIELDS:
            self.set(name, get(name))

    # -- list limits (quicklistNodeLimit) -----------------------------------------------------------
    def list_limits(self):
        """(byte limit or None, count limit or None) of one listpack node (computed when the config changes,
        read on every list write)."""
        return self._list_limits

    def _compute_list_limits(self):
        fill = self.list_fill
        if fill >= 0:
            return None, (1 if fill == 0 else fill)
        return _NEG_FILL_BYTES[min(-fill - 1, len(_NEG_FILL_BYTES) - 1)], None


# -- strings ----------------------------------------------------------------------------------------

def string_encoding(db, key, value: bytes) -> bytes:
    if db.enc.get(key) is RAW:
        return RAW
    if len(value) <= 20 and string2ll(value) is not None:
        return INT
    return EMBSTR if len(value) <= EMBSTR_SIZE_LIMIT else RAW


def string_modified_in_place(db, key):
    """APPEND, SETRANGE, SETBIT, BITFIELD, BITOP's target and HLL writes leave a raw string, as
    Valkey's dbUnshareStringValue / createRawStringObject do."""
    db.enc[key] = RAW


# -- hashes -----------------------------------------------------------------------------------------

def hash_content_encoding(rules, h) -> bytes:
    if len(h) > rules.hash_entries:
        return HASHTABLE
    limit = rules.hash_value
    for f, v in h.items():
        if len(f) > limit or len(v) > limit:
            return HASHTABLE
    return LISTPACK


def hash_encoding(rules, db, key, h) -> bytes:
    enc = db.enc.get(key)
    return enc if enc is not None else hash_content_encoding(rules, h)


def hash_written(rules, db, key, h, argv_values=(), new_key=False):
    """After fields were set: hashTypeTryConversion on the arguments (a hint of more than
    hash-max-listpack-entries fields, or one longer than hash-max-listpack-value, converts) and the
    entry count check after the insert."""
    enc = db.enc
    cur = enc.get(key)
    if cur is HASHTABLE:
        return
    if cur is None and not new_key:
        cur = hash_content_encoding(rules, h)
        if cur is HASHTABLE:
            enc[key] = HASHTABLE
            return
    entries = rules.hash_entries
    if (len(h) > entries or len(argv_values) // 2 > entries
            or (argv_values and max(map(len, argv_values)) > rules.hash_value)):
        enc[key] = HASHTABLE
    elif cur is not LISTPACK:
        enc[key] = LISTPACK


# -- sets -------------------------------------------------------------------------------------------

def set_content_encoding(rules, s) -> bytes:
    n = len(s)
    if n <= min(rules.set_intset_entries, _INTSET_LIMIT) and all(string2ll(m) is not None for m in s):
        return INTSET
    if n > rules.set_entries:
        return HASHTABLE
    limit = rules.set_value
    return HASHTABLE if any(len(m) > limit for m in s) else LISTPACK


def set_encoding(rules, db, key, s) -> bytes:
    enc = db.enc.get(key)
    return enc if enc is not None else set_content_encoding(rules, s)


def set_created(rules, first: bytes, size_hint: int) -> bytes:
    """setTypeCreate: the encoding of a new set about to receive size_hint members, the first one given."""
    if string2ll(first) is not None and size_hint <= rules.set_intset_entries:
        return INTSET
    if size_hint <= rules.set_entries:
        return LISTPACK
    return HASHTABLE


def set_added(rules, db, key, s, added, size_hint=0, created=False):
    """After SADD / SMOVE put `added` (the members that were new, in order) into s.

    Replays setTypeMaybeConvert for the size hint and setTypeAdd's conversions member by member:
    intset -> listpack for a non-integer while small enough, -> hashtable past the limits."""
    enc = db.enc
    if created:
        cur = set_created(rules, added[0] if added else b"", size_hint)
    else:
        cur = enc.get(key)
        if cur is None:
            # Not seen before: the content before this write decides (what loading would have made).
            before = s.difference(added) if added else s
            cur = set_content_encoding(rules, before)
        if cur is LISTPACK and size_hint > rules.set_entries:
            cur = HASHTABLE
        elif cur is INTSET and size_hint > rules.set_intset_entries:
            cur = HASHTABLE
    if cur is LISTPACK and added and len(s) <= rules.set_entries and max(map(len, added)) <= rules.set_value:
        pass  # every added member fits: the common case, decided at C speed
    elif cur is INTSET and added and len(s) <= min(rules.set_intset_entries, _INTSET_LIMIT) \
            and all(map(_is_int, added)):
        pass
    elif cur is not HASHTABLE and added:
        n = len(s) - len(added)  # members before this write
        lp_value = rules.set_value
        intset_max = min(rules.set_intset_entries, _INTSET_LIMIT)
        for i, m in enumerate(added):
            if cur is INTSET:
                if string2ll(m) is not None:
                    n += 1
                    if n > intset_max:
                        cur = HASHTABLE
                        break
                    continue
                # A non-integer into an intset: a listpack only if every member fits one.
                prev = s.difference(added[i:])
                maxlen = max(map(len, prev)) if prev else 0
                if n < rules.set_entries and len(m) <= lp_value and maxlen <= lp_value:
                    cur = LISTPACK
                    n += 1
                else:
                    cur = HASHTABLE
                    break
            elif n < rules.set_entries and len(m) <= lp_value:
                n += 1
            else:
                cur = HASHTABLE
                break
    enc[key] = cur


def _is_int(m: bytes) -> bool:
    """string2ll(m) is not None, with a fast path for the common small positive integers."""
    if m.isdigit() and len(m) < 19:
        return m[0] != 48 or len(m) == 1
    return string2ll(m) is not None


def set_stored(rules, db, key, s):
    """A set built by a store command (SINTERSTORE, SUNIONSTORE, SDIFFSTORE, SPOP's rebuild): Valkey
    shrinks it to the smallest encoding its content allows."""
    db.enc[key] = set_content_encoding(rules, s)


# -- sorted sets ------------------------------------------------------------------------------------

def zset_content_encoding(rules, z) -> bytes:
    if len(z) > rules.zset_entries:
        return SKIPLIST
    limit = rules.zset_value
    return SKIPLIST if any(len(m) > limit for m in z.scores) else LISTPACK


def zset_encoding(rules, db, key, z) -> bytes:
    enc = db.enc.get(key)
    return enc if enc is not None else zset_content_encoding(rules, z)


def zset_added(rules, db, key, z, members=(), size_hint=0, new_key=False):
    """After ZADD / ZINCRBY: zsetTypeCreate / zsetTypeMaybeConvert on (elements, longest member),
    then the per-insert checks."""
    enc = db.enc
    cur = enc.get(key)
    if cur is SKIPLIST:
        return
    if cur is None and not new_key:
        cur = zset_content_encoding(rules, z)
    longest = max(map(len, members)) if members else 0
    if (size_hint > rules.zset_entries or longest > rules.zset_value or len(z) > rules.zset_entries
            or cur is SKIPLIST):
        enc[key] = SKIPLIST
    else:
        if cur is not LISTPACK:
            enc[key] = LISTPACK
        z.unsign_zeros(members)    # zzlInsertAt writes a -0 score as the integer 0


def zset_stored(rules, db, key, z):
    """ZRANGESTORE / ZUNIONSTORE / ... / GEO*STORE targets: zsetConvertToListpackIfNeeded."""
    enc = db.enc[key] = zset_content_encoding(rules, z)
    if enc is LISTPACK:
        z.unsign_zeros(list(z.scores))


# -- lists ------------------------------------------------------------------------------------------

def lp_entry_bytes(value: bytes) -> int:
    """Bytes one element takes in a listpack: encoding header, data, back-length (listpack.c)."""
    n = len(value)
    if not n or not (48 <= value[0] <= 57 or value[0] == 45):  # cannot be an integer
        if n < 64:
            return n + 2  # 1 byte of encoding, the data, 1 byte of back-length
        return _lp_string_bytes(n)
    v = string2ll(value)
    if v is not None:
        if 0 <= v <= 127:
            size = 1
        elif -4096 <= v <= 4095:
            size = 2
        elif -32768 <= v <= 32767:
            size = 3
        elif -(1 << 23) <= v < (1 << 23):
            size = 4
        elif -(1 << 31) <= v < (1 << 31):
            size = 5
        else:
            size = 9
    else:
        return _lp_string_bytes(n)
    return size + 1  # an integer entry is at most 10 bytes: a 1-byte back-length


def _lp_string_bytes(n: int) -> int:
    size = n + (1 if n < 64 else 2 if n < 4096 else 5)
    if size <= 127:
        return size + 1
    if size < 16383:
        return size + 2
    if size < 2097151:
        return size + 3
    return size + (4 if size < 268435455 else 5)


def listpack_bytes(values) -> int:
    """lpBytes of a listpack holding `values` (7 bytes of header and end mark plus every entry)."""
    return 7 + sum(map(lp_entry_bytes, values))


def listpack_fits(values, limit: int, n=None) -> bool:
    """listpack_bytes(values) <= limit, at C speed unless the answer is close.

    Counting each entry as its length + 2 is exact for strings under 64 bytes, over by at most 12 for an
    integer (stored in 1-9 bytes) and under by at most 8 for a longer string, so the bounds below settle
    most lists without the per-element (Python-speed) exact sizes."""
    n = len(values) if n is None else n
    total_len = sum(map(len, values))
    approx = 7 + total_len + 2 * n
    if approx - 12 * n > limit:
        return False
    if approx + 8 * (total_len // 64) <= limit:
        return True
    return listpack_bytes(values) <= limit


def list_content_encoding(rules, dq, extra=()) -> bytes:
    """The encoding of a list holding dq (and `extra`, elements about to be added) by its content."""
    size_limit, count_limit = rules.list_limits()
    n = len(dq) + len(extra)
    if count_limit is not None and n > count_limit:
        return QUICKLIST
    if size_limit is None:
        size_limit = SIZE_SAFETY_LIMIT
    if 7 + 2 * n > size_limit:
        return QUICKLIST
    if extra:
        size_limit -= sum(map(lp_entry_bytes, extra))
    return LISTPACK if listpack_fits(dq, size_limit, len(dq)) else QUICKLIST


# A list's entry in Db.enc is QUICKLIST, or for a listpack the tuple (its exact lpBytes, its length), kept
# up to date by pushes and pops so that a push need not size the whole list; or nothing (content decides).

def list_encoding(rules, db, key, dq) -> bytes:
    enc = db.enc.get(key)
    if enc is None:
        return list_content_encoding(rules, dq)
    return LISTPACK if type(enc) is tuple else enc


def _exceeds(rules, total, n):
    """quicklistNodeExceedsLimit for a listpack of `total` bytes and n entries."""
    size_limit, count_limit = rules.list_limits()
    if count_limit is not None:
        return n > count_limit or total > SIZE_SAFETY_LIMIT
    return total > size_limit


def list_grown(rules, db, key, dq, added=(), extra=()):
    """After `added` were put into dq (push, insert, the target of a move), or before LSET with the new
    element in `extra` (Valkey checks LSET as an append): a listpack that exceeds one node's limit
    becomes a quicklist (listTypeTryConvertListpack)."""
    enc = db.enc
    cur = enc.get(key)
    if cur is QUICKLIST:
        return
    n = len(dq)
    if type(cur) is tuple and added and cur[1] + len(added) == n:
        total = cur[0] + sum(map(lp_entry_bytes, added))
    else:
        size_limit, count_limit = rules.list_limits()
        if (count_limit is not None and n + len(extra) > count_limit) or \
                7 + 2 * (n + len(extra)) > (size_limit or SIZE_SAFETY_LIMIT):
            enc[key] = QUICKLIST  # decided without sizing every element
            return
        total = listpack_bytes(dq)
    if _exceeds(rules, total + (sum(map(lp_entry_bytes, extra)) if extra else 0), n + len(extra)):
        enc[key] = QUICKLIST
    else:
        enc[key] = (total, n)


def list_shrunk(rules, db, key, dq, removed=None):
    """After elements were removed (`removed`, when the caller knows them): a quicklist that fits in half
    a node becomes a listpack again (listTypeTryConvertQuicklist with shrinking, which avoids flapping at
    the limit); a listpack stays one."""
    enc = db.enc
    cur = enc.get(key)
    if type(cur) is tuple:
        if removed is not None and cur[1] - len(removed) == len(dq):
            enc[key] = (cur[0] - sum(map(lp_entry_bytes, removed)), len(dq))
        else:
            del enc[key]  # a listpack still; its size is taken afresh when it grows
        return
    if cur is None:
        cur = list_content_encoding(rules, dq)
        if cur is LISTPACK:
            return
    size_limit, count_limit = rules.list_limits()
    n = len(dq)
    threshold = rules.list_packed_threshold
    if threshold and any(len(x) >= threshold for x in dq):
        pass  # a plain node: the quicklist stays
    elif count_limit is not None:
        # A count-limited node also stops at SIZE_SAFETY_LIMIT bytes, and one element above it is a plain
        # node, which never converts.
        if n <= count_limit // 2 and 7 + 2 * n <= SIZE_SAFETY_LIMIT \
                and listpack_fits(dq, SIZE_SAFETY_LIMIT, n) \
                and all(len(x) <= SIZE_SAFETY_LIMIT for x in dq):
            enc.pop(key, None)
            return
    elif 7 + 2 * n <= size_limit // 2 and listpack_fits(dq, size_limit // 2, n):
        enc.pop(key, None)
        return
    enc[key] = QUICKLIST


def list_stored(rules, db, key, dq):
    """A list built whole (SORT ... STORE): listTypeTryConversion(LIST_CONV_AUTO), i.e. its content."""
    if list_content_encoding(rules, dq) is QUICKLIST:
        db.enc[key] = QUICKLIST
    else:
        db.enc.pop(key, None)


# -- any value --------------------------------------------------------------------------------------

def encoding_of(rules, db, key, value) -> bytes:
    """OBJECT ENCODING's answer for value (stored at key in db)."""
    from collections import deque

    from .stream import Stream
    from .zset import ZSet
    t = type(value)
    if t is bytes:
        return string_encoding(db, key, value)
    if t is dict:
        return hash_encoding(rules, db, key, value)
    if t is deque:
        return list_encoding(rules, db, key, value)
    if t is set:
        return set_encoding(rules, db, key, value)
    if t is ZSet:
        return zset_encoding(rules, db, key, value)
    if t is Stream:
        return b"stream"
    from .bloom import Bloom
    from .jsondoc import JsonDoc
    if t is JsonDoc or t is Bloom:
        return RAW          # a module value: createModuleObject leaves OBJ_ENCODING_RAW
    return b"unknown"
