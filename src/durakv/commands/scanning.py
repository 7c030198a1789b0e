"""HSCAN / SSCAN over a collection (ZSCAN has its own reply shape in zsets.py)."""

from .. import messages
from ..errors import CommandError
from ..keyspace.glob import compile_glob
from ..keyspace.scan import parse_cursor, scan_page, scan_reply
from .args import ArgCursor

# Containers this small are returned whole at cursor 0, as Valkey does for its compact encodings
# (hash-max-listpack-entries / set-max-listpack-entries default to 128).
SCAN_WHOLE_LIMIT = 128

SCAN_TYPE_NAMES = frozenset((b"string", b"list", b"set", b"zset", b"hash", b"stream", b"rejson-rl"))
# module type names as TYPE shows them (getObjectTypeByName matches them in any case)
_MODULE_TYPE_NAMES = {b"rejson-rl": "ReJSON-RL"}


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
    c = ArgCursor(args, start)
    while c:
        opt = c.next_lower()
        more = c.left() >= 1
        if opt == b"count" and more:
            count = c.int()
            if count < 1:
                raise CommandError(messages.SYNTAX)
            opts.count = count
        elif opt == b"match" and more:
            pattern = c.next()
            opts.match = None if pattern == b"*" else compile_glob(pattern)
        elif opt == b"type" and kind == "db" and more:
            given = c.next()
            name = given.lower()
            if name not in SCAN_TYPE_NAMES:
                raise CommandError(messages.UNKNOWN_TYPE_NAME.format(given.decode("utf-8", "replace")))
            opts.type = _MODULE_TYPE_NAMES.get(name) or name.decode()
        elif opt == b"novalues":
            if kind != "hash":
                raise CommandError(messages.NOVALUES_ONLY_HSCAN)
            opts.only_keys = True
        elif opt == b"noscores":
            if kind != "zset":
                raise CommandError(messages.NOSCORES_ONLY_ZSCAN)
            opts.only_keys = True
        else:
            raise CommandError(messages.SYNTAX)
    return opts


def scan_collection(ctx, args, typ):
    """HSCAN (typ dict) / SSCAN (typ set): cursor, then the key, then the options (Valkey's order:
    a missing key replies an empty page whatever the options)."""
    cursor = parse_cursor(args[2])
    source = ctx.lookup_type(args[1], typ)
    if source is None:
        return [b"0", []]
    opts = parse_scan_options(args, 3, "hash" if typ is dict else "set")
    cursor, items = scan_page(source, cursor, opts.count, SCAN_WHOLE_LIMIT)
    match = opts.match
    if match is not None:
        items = [item for item in items if match(item)]
    if typ is dict and items and ctx.db.hexpires and args[1] in ctx.db.hexpires:
        gone = ctx.keyspace.expired_fields_of(ctx.db, args[1])
        if gone:
            gone = set(gone)
            items = [f for f in items if f not in gone]   # fields whose TTL passed are not returned
    if typ is dict and not opts.only_keys:
        flat = []
        for field in items:
            flat.append(field)
            flat.append(source[field])
        items = flat
    return scan_reply(cursor, items)
