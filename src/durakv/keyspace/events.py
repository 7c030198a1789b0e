"""Keyspace events: the notify-keyspace-events classes (server.h's NOTIFY_*) and their letters.

Handlers raise events through their context (`ctx.notify(LIST, b"lpush", key)`) where Valkey calls
notifyKeyspaceEvent; the keyspace raises "new" where a key is created (Context.store: dbAdd), "keymiss" where a
read misses (Keyspace.lookup while a command reads: lookupKeyReadWithFlags), "expired" and "evicted" where the
server deletes. Whoever publishes them (server/notify.py) sets Keyspace.notify_flags and Keyspace.event_sink; while
notify_flags is 0 (the default) raising an event costs one test of it.
"""

KEYSPACE = 1 << 0     # K: __keyspace@<db>__:<key> channels
KEYEVENT = 1 << 1     # E: __keyevent@<db>__:<event> channels
GENERIC = 1 << 2      # g: DEL, EXPIRE, RENAME, ...
STRING = 1 << 3       # $
LIST = 1 << 4         # l
SET = 1 << 5          # s
HASH = 1 << 6         # h
ZSET = 1 << 7         # z
EXPIRED = 1 << 8      # x
EVICTED = 1 << 9      # e
STREAM = 1 << 10      # t
KEY_MISS = 1 << 11    # m
MODULE = 1 << 13      # d
NEW = 1 << 14         # n
ALL = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE   # A

_LETTERS = {"A": ALL, "g": GENERIC, "$": STRING, "l": LIST, "s": SET, "h": HASH, "z": ZSET, "x": EXPIRED,
            "e": EVICTED, "K": KEYSPACE, "E": KEYEVENT, "t": STREAM, "m": KEY_MISS, "d": MODULE, "n": NEW}


def parse_flags(text: str) -> int:
    """keyspaceEventsStringToFlags: the classes of a notify-keyspace-events value, -1 if a character is not one."""
    flags = 0
    for ch in text:
        f = _LETTERS.get(ch)
        if f is None:
            return -1
        flags |= f
    return flags


def flags_to_string(flags: int) -> str:
    """keyspaceEventsFlagsToString: CONFIG GET's spelling (A for all of ALL's classes)."""
    out = []
    if flags & ALL == ALL:
        out.append("A")
    else:
        for ch, f in (("g", GENERIC), ("$", STRING), ("l", LIST), ("s", SET), ("h", HASH), ("z", ZSET),
                      ("x", EXPIRED), ("e", EVICTED), ("t", STREAM), ("d", MODULE), ("n", NEW)):
            if flags & f:
                out.append(ch)
    for ch, f in (("K", KEYSPACE), ("E", KEYEVENT), ("m", KEY_MISS)):
        if flags & f:
            out.append(ch)
    return "".join(out)


def raised(flags: int) -> int:
    """The classes a handler's event is published for: none unless a channel kind (K or E) is on, so that a
    setting without one makes raising an event cost one test, as with none."""
    return flags if flags & (KEYSPACE | KEYEVENT) else 0
