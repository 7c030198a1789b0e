"""A database's table of keys: `Db.data`.

`KeyTable` is the compiled table (keyspace/_keytable.c: one allocation per key holding the key, its access time
and, for a string of up to INLINE_MAX bytes, the string; docs/memory.md) where it was built, else `PyKeyTable`,
the pure-Python reference below, which DURAKV_PURE_PYTHON=1 also selects (as it selects the pure-Python core).

Both are mappings of bytes keys with dict's `get`, `pop`, `clear`, `in`, `len`, `[]`, iteration (keys) and
`keys()`/`values()`/`items()` (iterators; changing the table's size while one runs raises RuntimeError, as a dict
does), plus what a keyspace needs beside them:

- `get_access(key)` / `set_access(key, value)`: the key's access time (OBJECT IDLETIME's LRU clock in seconds, or
  LFU's packed minutes and counter), an unsigned 32-bit value, None until set; it goes with the key.
- `random_key(bits)`: a random key (or None) from 64 random bits the caller draws (the keyspace's injected rng).
- `scan(cursor, count)`: one SCAN call, `(next_cursor, keys)`; the compiled table walks its buckets with Valkey's
  reverse-binary cursor, the reference pages a snapshot of its keys (keyspace/scan.py).
- `reserve(n)`: room for n keys before a load that knows its size.
- `stats()`: {'keys', 'buckets', 'bucket_bytes', 'entry_bytes', 'object_values'}.

Values are any Python object. A string the compiled table keeps inline is handed out as a new bytes object on each
read (equal, not identical); every other value is the object stored.
"""

import os
import sys

from .scan import scan_page

INLINE_MAX = 4096


class PyKeyTable(dict):
    """The reference: a dict, with access times in a second dict and random keys from a snapshot list of the
    keys, rebuilt once too many sampled keys have gone."""

    __slots__ = ("_access", "_sample", "_sample_misses")

    def __init__(self, reserve=0):
        super().__init__()
        self._access = {}
        self._sample = []
        self._sample_misses = 0

    def __delitem__(self, key):
        dict.__delitem__(self, key)
        self._access.pop(key, None)

    def pop(self, key, *default):
        if key in self:
            self._access.pop(key, None)
        return dict.pop(self, key, *default)

    def clear(self):
        dict.clear(self)
        self._access.clear()
        self._sample = []

    def reserve(self, n):
        pass   # a dict grows by itself; presizing one is not offered by Python

    def keys(self):
        return iter(dict.keys(self))

    def values(self):
        return iter(dict.values(self))

    def items(self):
        return iter(dict.items(self))

    def get_access(self, key):
        return self._access.get(key) if key in self else None

    def set_access(self, key, value):
        if not 0 <= value <= 0xFFFFFFFF:
            raise OverflowError("an access time is a 32-bit value")
        if key not in self:
            return False
        self._access[key] = value
        return True

    def random_key(self, bits):
        if not self:
            return None
        for _ in range(8):
            sample = self._sample
            if (not sample or len(sample) < len(self) // 2
                    or self._sample_misses > max(16, len(sample) // 4)):
                sample = self._sample = list(self)
                self._sample_misses = 0
            key = sample[bits % len(sample)]
            if key in self:
                return key
            self._sample_misses += 1
            bits = (bits * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        self._sample = list(self)
        self._sample_misses = 0
        return self._sample[bits % len(self._sample)]

    def scan(self, cursor, count):
        return scan_page(self, cursor, count)

    def stats(self):
        entry_bytes = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in dict.items(self))
        return {"keys": len(self), "buckets": 0, "bucket_bytes": dict.__sizeof__(self) + self._access.__sizeof__(),
                "entry_bytes": entry_bytes, "object_values": len(self)}


KeyTable = PyKeyTable
COMPILED = False
if os.environ.get("DURAKV_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from ._keytable import INLINE_MAX, KeyTable  # noqa: F811
        COMPILED = True
    except ImportError:   # built without a C compiler: the reference serves
        pass
