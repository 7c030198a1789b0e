"""Where a command's keys are in its arguments: the one key-spec walker and the one getkeys table.

Valkey's db.c: getKeysUsingKeySpecs walks a command's key specs; getKeysFromCommandWithSpecs prefers them and
falls back to the command's getkeys procedure (sortGetKeys, migrateGetKeys, ...) when a spec cannot be followed
(unknown, incomplete, a syntax error) or when the key flags depend on the arguments (variable_flags). Dispatch
and routing (registry.Command.key_indexes), tracking, keyspace events, the ACL check (acl_keys) and COMMAND
GETKEYS / GETKEYSANDFLAGS all ask here, so they cannot disagree about a grammar.

A key is (position in args, flags): args[0] is the command name; flags is a tuple of Valkey's key-spec flag
names as spec.py spells them ("rw", "access", "update", ...), () where Valkey's procedure gives no flags.
"""

from ..protocol.numbers import string2ll
from .args import ArgCursor
from .base import atoi

# The key flags Valkey's getkeys procedures give (CMD_KEY_* combinations).
RO_ACCESS = ("ro", "access")
OW_UPDATE = ("ow", "update")
RW_ACCESS_UPDATE = ("rw", "access", "update")
RW_ACCESS_DELETE = ("rw", "access", "delete")
NO_FLAGS = ()


def walk(specs, args):
    """getKeysUsingKeySpecs over `specs` ((begin_search, find_keys, flags tuple) of key-spec dicts): the keys
    as ranges [(first, stop, step, flags)] (positions range(first, stop, step)), or None when a spec cannot be
    followed (an unknown one, a key position past the arguments, a bad numkeys, or an incomplete spec).
    Ranges, not positions, so that dispatch takes positions without building a (position, flags) per key."""
    argc = len(args)
    out = []
    for bs, fk, flags in specs:
        if "index" in bs:
            first = bs["index"]["pos"]
        elif "keyword" in bs:
            kw = bs["keyword"]["keyword"].lower().encode()
            startfrom = bs["keyword"]["startfrom"]
            start = startfrom if startfrom > 0 else argc + startfrom
            end = argc - 1 if startfrom > 0 else 1
            step_dir = 1 if start <= end else -1
            first = 0
            i = start
            while i != end:  # Valkey stops before `end`: the last argument (or the first) is never a keyword
                if i >= argc or i < 1:
                    break
                if args[i].lower() == kw:
                    first = i + 1
                    break
                i += step_dir
            if not first:
                continue  # keyword absent: this spec names no key
        else:
            return None
        if "range" in fk:
            r = fk["range"]
            step = r["step"]
            if r["lastkey"] >= 0:
                last = first + r["lastkey"]
            elif not r["limit"]:
                last = argc + r["lastkey"]
            else:
                last = first + ((argc - first) // r["limit"] + r["lastkey"])
        elif "keynum" in fk:
            k = fk["keynum"]
            step = k["step"]
            idx = first + k["keynumidx"]
            if idx >= argc:
                return None
            numkeys = string2ll(args[idx])
            if numkeys is None or numkeys < 0:
                return None
            first += k["firstkey"]
            last = first + (numkeys - 1) * step   # MSETEX's key-value pairs: numkeys keys, `step` apart
        else:
            return None
        if last >= argc or last < first or first >= argc:
            return None
        out.append((first, last + 1, step, flags))
        if "incomplete" in flags:
            return None
    return out


# -- the getkeys procedures (db.c *GetKeys) -------------------------------------------------------------

def _generic(key_count_ofs, first_key_ofs, store_ofs=0):
    """genericGetKeys: a numkeys argument (read with C's atoi, as Valkey does) and that many keys."""
    def proc(args):
        num = atoi(args[key_count_ofs]) if key_count_ofs < len(args) else 0
        if num < 1 or num > len(args) - first_key_ofs:
            return []  # the command itself answers a syntax error
        out = [(first_key_ofs + i, NO_FLAGS) for i in range(num)]
        if store_ofs:
            out.append((store_ofs, NO_FLAGS))
        return out
    return proc


def _sort(args):
    """sortGetKeys: the key, and the last STORE's destination; LIMIT's two and GET's / BY's one argument are
    skipped, any other word is an option without arguments (the word after STORE is looked at again)."""
    out = [(1, RO_ACCESS)]
    store = None
    c = ArgCursor(args, 2)
    while c:
        a = c.next_lower()
        if a == b"limit":
            c.skip(2)
        elif a == b"get" or a == b"by":
            c.skip()
        elif a == b"store" and c.left():
            store = c.pos
    if store is not None:
        out.append((store, OW_UPDATE))
    return out


def _sort_ro(args):
    return [(1, RO_ACCESS)]


def _migrate(args):
    """migrateGetKeys: the key argument, or with KEYS (after the fixed five) every argument after it."""
    first, num = 3, 1
    if len(args) > 6:
        skip = {b"copy": 0, b"replace": 0, b"auth": 1, b"auth2": 2}
        c = ArgCursor(args, 6)
        while c:
            a = c.next_lower()
            if a == b"keys":
                if args[3]:
                    return []  # KEYS needs an empty key argument: MIGRATE itself answers the syntax error
                first, num = c.pos, c.left()
                break
            c.skip(skip.get(a, 0))
    return [(first + i, RW_ACCESS_DELETE) for i in range(num)]


def _georadius(args):
    """georadiusGetKeys: the key (read), and the last STORE / STOREDIST destination that has an argument
    (overwritten). Valkey 9 marks the STORE specs variable_flags, so this is what answers, flags included."""
    stored = None
    c = ArgCursor(args, 5)
    while c:
        a = c.next_lower()
        if (a == b"store" or a == b"storedist") and c.left():
            stored = c.pos
            c.skip()
    out = [(1, RO_ACCESS)]
    if stored is not None:
        out.append((stored, OW_UPDATE))
    return out


def _xread(args):
    """xreadGetKeys: the first STREAMS that is an option (not a group, consumer or key name), then half of the
    arguments after it; none on a syntax error."""
    streams = -1
    n = len(args)
    c = ArgCursor(args, 1)
    while c:
        a = c.next_lower()
        if a == b"block" or a == b"count":
            c.skip()
        elif a == b"group":
            c.skip(2)
        elif a == b"noack":
            pass
        elif a == b"streams":
            streams = c.pos - 1
            break
        else:
            break
    num = n - streams - 1
    if streams == -1 or num == 0 or num % 2:
        return []
    num //= 2
    return [(i, NO_FLAGS) for i in range(streams + 1, n - num)]


_SET_RW = [(1, RW_ACCESS_UPDATE)]
_SET_OW = [(1, OW_UPDATE)]


def _set(args):
    """setGetKeys: GET anywhere after the value makes the key read as well as written."""
    for a in args[3:]:
        if a.lower() == b"get":
            return _SET_RW
    return _SET_OW


def _bitfield(args):
    """bitfieldGetKeys: read-only only when every subcommand is a complete GET or OVERFLOW; a SET / INCRBY,
    or anything it does not know (a syntax error), counts as a write."""
    readonly = True
    c = ArgCursor(args, 2)
    while c:
        a = c.next_lower()
        rem = c.left()
        if a == b"get" and rem >= 2:
            c.skip(2)
        elif (a == b"set" or a == b"incrby") and rem >= 3:
            readonly = False
            break
        elif a == b"overflow" and rem >= 1:
            c.skip()
        else:
            readonly = False
            break
    return [(1, RO_ACCESS if readonly else RW_ACCESS_UPDATE)]


GETKEYS = {
    "bitfield": _bitfield,
    "blmpop": _generic(2, 3), "bzmpop": _generic(2, 3),
    "eval": _generic(2, 3), "eval_ro": _generic(2, 3), "evalsha": _generic(2, 3), "evalsha_ro": _generic(2, 3),
    "fcall": _generic(2, 3), "fcall_ro": _generic(2, 3),
    "georadius": _georadius, "georadiusbymember": _georadius,
    "lmpop": _generic(1, 2), "zmpop": _generic(1, 2),
    "migrate": _migrate, "set": _set, "sintercard": _generic(1, 2),
    "sort": _sort, "sort_ro": _sort_ro, "xread": _xread, "xreadgroup": _xread,
    "zdiff": _generic(1, 2), "zinter": _generic(1, 2), "zintercard": _generic(1, 2), "zunion": _generic(1, 2),
    "zdiffstore": _generic(2, 3, 1), "zinterstore": _generic(2, 3, 1), "zunionstore": _generic(2, 3, 1),
}


class KeyFinder:
    """How to find one command's keys, worked out once (getKeysFromCommandWithSpecs).

    `not_keys`: count the specs flagged not_key (sharded pub/sub channels) as keys, for routing by slot."""

    __slots__ = ("specs", "use_specs", "proc", "has_keys", "fixed", "min_argc", "fixed_positions")

    def __init__(self, cmd, not_keys=False):
        all_specs = cmd.key_specs
        # flags as tuples: hashable, so a caller maps them to what it needs once (acl_keys: the access)
        self.specs = [(s["begin_search"], s["find_keys"], tuple(s["flags"])) for s in all_specs
                      if not_keys or "not_key" not in s["flags"]]
        self.proc = GETKEYS.get(cmd.fullname)
        self.has_keys = bool(self.specs) or self.proc is not None   # doesCommandHaveKeys
        self.use_specs = bool(self.specs) and not any("variable_flags" in s["flags"] for s in all_specs)
        # The common shape (GET, HSET, COPY, ...): keys at positions known in advance, valid once the command
        # has that many arguments; then nothing is walked.
        self.fixed = None
        self.fixed_positions = None
        self.min_argc = 0
        if self.specs and all("index" in bs and "range" in fk and fk["range"]["lastkey"] >= 0
                              and "incomplete" not in flags for bs, fk, flags in self.specs):
            fixed = []
            for bs, fk, flags in self.specs:
                first = bs["index"]["pos"]
                r = fk["range"]
                last = first + r["lastkey"]
                fixed.extend((i, flags) for i in range(first, last + 1, r["step"]))
                self.min_argc = max(self.min_argc, last + 1)
            # variable_flags varies the flags only, never the positions (setGetKeys and bitfieldGetKeys
            # answer position 1 as the spec does): dispatch may take the positions from the specs
            self.fixed_positions = tuple(i for i, _flags in fixed)
            if self.use_specs:
                self.fixed = tuple(fixed)

    def keys(self, args):
        """[(position, flags)] of the keys in args."""
        if self.fixed is not None and len(args) >= self.min_argc:
            return self.fixed
        if self.use_specs:
            ranges = walk(self.specs, args)
            if ranges is not None:
                return [(i, flags) for first, stop, step, flags in ranges for i in range(first, stop, step)]
        if self.proc is not None:
            return self.proc(args)
        return []

    def positions(self, args):
        """The positions of the keys in args, as keys() finds them (what dispatch and routing need)."""
        if self.use_specs:
            ranges = walk(self.specs, args)
            if ranges is not None:
                if len(ranges) == 1:
                    first, stop, step, _flags = ranges[0]
                    return range(first, stop, step)
                return [i for first, stop, step, _flags in ranges for i in range(first, stop, step)]
        if self.proc is not None:
            return [i for i, _flags in self.proc(args)]
        return ()


_FINDERS = {}  # (command, not_keys) -> KeyFinder


def finder(cmd, not_keys=False) -> KeyFinder:
    f = _FINDERS.get((cmd, not_keys))
    if f is None:
        f = _FINDERS[(cmd, not_keys)] = KeyFinder(cmd, not_keys)
    return f


def keys_with_flags(cmd, args):
    """getKeysFromCommandWithSpecs: [(position, flags)] of the keys in a full command (args[0] its name)."""
    return finder(cmd).keys(args)


def has_keys(cmd) -> bool:
    """doesCommandHaveKeys: a key spec that names keys, or a getkeys procedure."""
    return finder(cmd).has_keys
