"""HSCAN / SSCAN over a collection (ZSCAN has its own reply shape in zsets.py)."""

from ..keyspace.scan import parse_cursor, parse_scan_options, scan_page, scan_reply

# Containers this small are returned whole at cursor 0, as Valkey does for its compact encodings
# (hash-max-listpack-entries / set-max-listpack-entries default to 128).
SCAN_WHOLE_LIMIT = 128


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
