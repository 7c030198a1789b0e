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
from ..protocol.numbers import string2ll
from .glob import compile_glob

MAX_SCANS = 32                 # live iterations kept
MAX_SNAPSHOT_ITEMS = 4_000_000  # total items held by all snapshots (the newest is always kept)
_POS_BITS = 32
_POS_MASK = (1 << _POS_BITS) - 1
_ID_LIMIT = 1 << 31
_UINT64_MAX = (1 << 64) - 1
_C_SPACE = b" \t\n\v\f\r"

SCAN_TYPE_NAMES = frozenset((b"string", b"list", b"set", b"zset", b"hash", b"stream", b"rejson-rl"))
# module type names as TYPE shows them (getObjectTypeByName matches them in any case)
_MODULE_TYPE_NAMES = {b"rejson-rl": "ReJSON-RL"}


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
    """Valkey's string2ull: a strict int64 that must not be negative, else whatever strtoull takes
    whole (leading spaces, a sign, leading zeros; '-n' wraps). Otherwise 'ERR invalid cursor'."""
    if string2ll(value) is not None:
        n = int(value)
        if -(1 << 63) <= n < (1 << 63):
            if n < 0:
                raise CommandError(messages.INVALID_CURSOR)
            return n
    text = value.lstrip(_C_SPACE)
    neg = False
    if text[:1] == b"+" or text[:1] == b"-":
        neg = text[:1] == b"-"
        text = text[1:]
    if not text.isdigit():
        raise CommandError(messages.INVALID_CURSOR)
    n = int(text)
    if n > _UINT64_MAX:
        raise CommandError(messages.INVALID_CURSOR)
    return (-n) & _UINT64_MAX if neg else n


class ScanOptions:
    __slots__ = ("count", "match", "type", "only_keys")

    def __init__(self):
        self.count = 10
        self.match = None      # a compiled matcher (subject -> bool), None when everything matches
        self.type = None       # lowercase type name for SCAN TYPE
        self.only_keys = False  # HSCAN NOVALUES / ZSCAN NOSCORES


def parse_scan_options(args, start: int, kind: str) -> ScanOptions:
    """COUNT / MATCH / TYPE / NOVALUES / NOSCORES from args[start:], as scanGenericCommand parses
    them. kind: 'db' (SCAN), 'hash', 'set' or 'zset'."""
    opts = ScanOptions()
    i, n = start, len(args)
    while i < n:
        opt = args[i].lower()
        more = n - i >= 2
        if opt == b"count" and more:
            try:
                count = int(args[i + 1])
            except ValueError:
                raise CommandError(messages.NOT_INTEGER) from None
            if string2ll(args[i + 1]) is None or not (-(1 << 63) <= count < (1 << 63)):
                raise CommandError(messages.NOT_INTEGER)
            if count < 1:
                raise CommandError(messages.SYNTAX)
            opts.count = count
            i += 2
        elif opt == b"match" and more:
            pattern = args[i + 1]
            opts.match = None if pattern == b"*" else compile_glob(pattern)
            i += 2
        elif opt == b"type" and kind == "db" and more:
            name = args[i + 1].lower()
            if name not in SCAN_TYPE_NAMES:
                raise CommandError(messages.UNKNOWN_TYPE_NAME.format(
                    args[i + 1].decode("utf-8", "replace")))
            opts.type = _MODULE_TYPE_NAMES.get(name) or name.decode()
            i += 2
        elif opt == b"novalues":
            if kind != "hash":
                raise CommandError(messages.NOVALUES_ONLY_HSCAN)
            opts.only_keys = True
            i += 1
        elif opt == b"noscores":
            if kind != "zset":
                raise CommandError(messages.NOSCORES_ONLY_ZSCAN)
            opts.only_keys = True
            i += 1
        else:
            raise CommandError(messages.SYNTAX)
    return opts


def scan_reply(cursor: int, items) -> list:
    """The SCAN-family reply: [cursor as a bulk string, items]."""
    return [b"%d" % cursor, items]
