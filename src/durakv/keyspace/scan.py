"""Cursor iteration for SCAN, HSCAN, SSCAN and ZSCAN over Python containers.

A Python dict or set has no stable cursor, so an iteration takes a snapshot of the container's
items (a list, one C-speed copy) when it starts at cursor 0, and later calls page through that list.
The snapshot lives in a small bounded cache keyed by a scan id carried in the cursor's high bits:

    cursor = scan_id << 32 | position

Every item present for the whole iteration is in the snapshot, so it is returned at least once;
items removed meanwhile are skipped when their page comes (the caller's `source` is checked),
items added meanwhile may or may not be returned -- Valkey's SCAN guarantees exactly this much.
A cursor whose snapshot is gone (evicted, server restarted, another container) is served from a
fresh snapshot at the same position, which is the best that can be done without state.
Containers of at most `whole_limit` items are returned whole with cursor 0 (as Valkey does for
its compact encodings), and so is any container no larger than COUNT at cursor 0.
"""

from collections import OrderedDict

from .. import messages
from ..errors import CommandError
from ..protocol.numbers import string2ull

MAX_SCANS = 32                 # live iterations kept
MAX_SNAPSHOT_ITEMS = 4_000_000  # total items held by all snapshots (the newest is always kept)
_POS_BITS = 32
_POS_MASK = (1 << _POS_BITS) - 1
_ID_LIMIT = 1 << 31


class ScanCursors:
    """The bounded cache of live iterations: scan_id -> (source container, snapshot list)."""

    def __init__(self, max_scans=MAX_SCANS, max_items=MAX_SNAPSHOT_ITEMS):
        self.max_scans = max_scans
        self.max_items = max_items
        self._scans = OrderedDict()
        self._items = 0
        self._next_id = 1

    def __len__(self):
        return len(self._scans)

    def _new_id(self):
        sid = self._next_id
        self._next_id = sid + 1 if sid + 1 < _ID_LIMIT else 1
        return sid

    def _add(self, source, snapshot):
        sid = self._new_id()
        old = self._scans.pop(sid, None)
        if old is not None:
            self._items -= len(old[1])
        self._scans[sid] = (source, snapshot)
        self._items += len(snapshot)
        scans = self._scans
        while len(scans) > 1 and (len(scans) > self.max_scans or self._items > self.max_items):
            _sid, (_src, snap) = scans.popitem(last=False)
            self._items -= len(snap)
        return sid

    def _drop(self, sid):
        entry = self._scans.pop(sid, None)
        if entry is not None:
            self._items -= len(entry[1])

    def page(self, source, cursor: int, count: int, whole_limit: int = 0):
        """(next_cursor, items) for one call: up to `count` snapshot positions, keeping the items
        still in `source`. `source` is any sized container supporting iteration and `in`."""
        if cursor == 0:
            n = len(source)
            if n <= whole_limit or n <= count:
                return 0, list(source)
            snapshot = list(source)
            sid = self._add(source, snapshot)
            pos = 0
        else:
            sid = cursor >> _POS_BITS
            pos = cursor & _POS_MASK
            entry = self._scans.get(sid)
            if entry is not None and entry[0] is source:
                snapshot = entry[1]
                self._scans.move_to_end(sid)
            else:
                snapshot = list(source)
                sid = self._add(source, snapshot)
        end = pos + count
        items = [item for item in snapshot[pos:end] if item in source]
        if end >= len(snapshot):
            self._drop(sid)
            return 0, items
        return (sid << _POS_BITS) | end, items


CURSORS = ScanCursors()


def scan_page(source, cursor: int, count: int, whole_limit: int = 0):
    """One page of an iteration over `source` in the shared cursor cache; see ScanCursors.page."""
    return CURSORS.page(source, cursor, count, whole_limit)


def parse_cursor(value: bytes) -> int:
    """A SCAN cursor: Valkey's string2ull (a strict int64 that is not negative, else whatever strtoull takes
    whole: leading spaces, a sign, leading zeros, '-n' wrapping). Otherwise 'ERR invalid cursor'."""
    n = string2ull(value)
    if n is None:
        raise CommandError(messages.INVALID_CURSOR)
    return n


def scan_reply(cursor: int, items) -> list:
    """The SCAN-family reply: [cursor as a bulk string, items]."""
    return [b"%d" % cursor, items]
