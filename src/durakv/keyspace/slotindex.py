"""Which keys of a database hash to each cluster slot: what slot migration reads (Valkey keeps one dict per slot,
kvstore; here an index beside `Db.data`).

Wired in by `Keyspace.index_slots(slot_of)` (a cluster node turns it on for every database at start, before it
loads anything): every key that enters `Db.data` goes through `ContextBase.store` (or COPY/MOVE's own insert), every key
that leaves through `Keyspace.delete`, and `Db.clear` empties both; each of those keeps the index exact. The slot
function is injected (routing.slots.key_slot) because keyspace imports nothing above it.
"""


class SlotIndex:
    __slots__ = ("_slot_of", "_by_slot", "_size")

    def __init__(self, slot_of):
        self._slot_of = slot_of
        self._by_slot = {}   # slot -> {key: None}: an insertion-ordered set per slot
        self._size = 0

    def __len__(self):
        return self._size

    def add(self, key: bytes):
        slot = self._slot_of(key)
        keys = self._by_slot.get(slot)
        if keys is None:
            keys = self._by_slot[slot] = {}
        if key not in keys:
            keys[key] = None
            self._size += 1

    def discard(self, key: bytes):
        slot = self._slot_of(key)
        keys = self._by_slot.get(slot)
        if keys is not None and keys.pop(key, 0) is None:
            self._size -= 1
            if not keys:
                del self._by_slot[slot]

    def sync(self, key: bytes, present: bool):
        """After a write: the key exists (add) or not (discard)."""
        if present:
            self.add(key)
        else:
            self.discard(key)

    def count(self, slot: int) -> int:
        keys = self._by_slot.get(slot)
        return 0 if keys is None else len(keys)

    def keys(self, slot: int, count: int = -1) -> list:
        """Up to `count` (-1: all) keys of `slot`, oldest first."""
        keys = self._by_slot.get(slot)
        if not keys or count == 0:
            return []
        if count < 0 or count >= len(keys):
            return list(keys)
        out = []
        for k in keys:
            out.append(k)
            if len(out) == count:
                break
        return out

    def slots(self) -> list:
        """The slots that hold at least one key, ascending."""
        return sorted(self._by_slot)

    def clear(self):
        self._by_slot.clear()
        self._size = 0

    def rebuild(self, keys):
        self.clear()
        for k in keys:
            self.add(k)
