"""ACL selectors: one set of command, key and channel permissions (aclSelector), its rules (ACLSetSelector),
its text forms and its part of the permission check (ACLSelectorCheckCmd).

Pure: no I/O, no clock, no randomness (callers pass them in); names and patterns are bytes (Valkey's sds),
command names and rules are str (the command table's spelling).
"""

from ...keyspace.glob import compile_glob
from ...protocol.numbers import string2ll, strtol_whole
from .check import CHANNEL_SPECS, DENIED_CHANNEL, DENIED_CMD, DENIED_DB, DENIED_KEY
from .keys import ALL_PERMS, READ, WRITE, key_info
from .rules import EEXIST, EINVAL, EISDIR, ENOENT, ECHILD, ERANGE, RuleError, has_spaces
from .universe import (ALL_COMMANDS, CATEGORY_MEMBERS, CATEGORY_SET, COMMANDS, effective_categories,
                           lookup_rule_command)

INT_MAX = 2 ** 31 - 1


def parse_db_ids(text: bytes):
    """The ids of a db=<id>[,<id>...] rule (Valkey 9.1): each a base-10 integer as strtol reads one (blanks and
    a sign before it, nothing after), 0 .. INT_MAX. Raises RuleError: EINVAL for a malformed list, ERANGE for
    an id out of range."""
    ids = set()
    for part in text.split(b","):
        n = strtol_whole(part)
        if n is None:
            raise RuleError(EINVAL)
        if not 0 <= n <= INT_MAX:
            raise RuleError(ERANGE)
        ids.add(n)
    return ids


_DB_SCOPED = {}   # Command -> whether it works on the client's current database


def _db_scoped(cmd) -> bool:
    """The commands a db= rule checks the current database for (Valkey 9.1.2, probed): those that read or write
    data (the readonly / write flags), the @keyspace ones, and those with keys (not sharded channels)."""
    scoped = _DB_SCOPED.get(cmd)
    if scoped is None:
        scoped = _DB_SCOPED[cmd] = bool(cmd.readonly or cmd.write or key_info(cmd).has_keys
                                        or "keyspace" in effective_categories(cmd.spec))
    return scoped


def _db_arg(args, pos, ndbs):
    """A database number at args[pos] as the command would take it (string2ll, in range), or None."""
    n = string2ll(args[pos]) if pos < len(args) else None
    return n if n is not None and 0 <= n < ndbs else None


class KeyPattern:
    __slots__ = ("pattern", "flags", "match")

    def __init__(self, pattern: bytes, flags: int):
        self.pattern = pattern
        self.flags = flags
        self.match = compile_glob(pattern)

    def describe(self) -> bytes:
        if self.flags == ALL_PERMS:
            # '%R~* %W~*' leave a '*' pattern that is not 'allkeys'; written as '~*' (Valkey's form) it would load
            # back as allkeys, and a pattern after it would then refuse to load. '%RW~*' loads back as it was.
            prefix = b"%RW~" if self.pattern == b"*" else b"~"
        else:
            prefix = b"%R~" if self.flags == READ else b"%W~"
        return prefix + self.pattern


class Selector:
    """A set of permissions (aclSelector). Every user has a root selector, plus any added with (...)."""

    __slots__ = ("root", "allkeys", "allchannels", "allcommands", "future", "allowed", "firstargs", "patterns",
                 "channels", "channel_match", "rules", "alldbs", "dbs")

    def __init__(self, root=False, allchannels=False):
        self.root = root
        self.allkeys = False
        self.allchannels = allchannels
        self.allcommands = False
        self.future = False        # +@all's reserved bit: commands added later are allowed too
        self.allowed = set()       # fullnames whose bit is set
        self.firstargs = {}        # fullname -> [lowercase first arguments allowed] (+select|0)
        self.patterns = []         # KeyPattern
        self.channels = []         # bytes
        self.channel_match = []    # compiled self.channels, same order
        self.rules = []            # the ordered command rules, as ACL GETUSER shows them after +@all/-@all
        self.alldbs = True         # Valkey 9.1: every database (alldbs), else only the ids in dbs (db=...)
        self.dbs = frozenset()

    def copy(self):
        s = Selector(self.root, self.allchannels)
        s.allkeys = self.allkeys
        s.allcommands = self.allcommands
        s.future = self.future
        s.allowed = set(self.allowed)
        s.firstargs = {k: list(v) for k, v in self.firstargs.items()}
        s.patterns = [KeyPattern(p.pattern, p.flags) for p in self.patterns]
        s.channels = list(self.channels)
        s.channel_match = list(self.channel_match)
        s.rules = list(self.rules)
        s.alldbs = self.alldbs
        s.dbs = self.dbs
        return s

    # -- rules (ACLSetSelector) ----------------------------------------------------------------------------
    def apply(self, op: bytes):
        lo = op.lower()
        first = op[:1]
        second = op[1:2]
        if lo == b"allkeys" or lo == b"~*":
            self.allkeys = True
            self.patterns = []
        elif lo == b"resetkeys":
            self.allkeys = False
            self.patterns = []
        elif lo == b"allchannels" or lo == b"&*":
            self.allchannels = True
            self.channels, self.channel_match = [], []
        elif lo == b"resetchannels":
            self.allchannels = False
            self.channels, self.channel_match = [], []
        elif lo == b"alldbs":
            self.alldbs, self.dbs = True, frozenset()
        elif lo == b"resetdbs":
            self.alldbs, self.dbs = False, frozenset()
        elif lo.startswith(b"db="):
            self.dbs = frozenset(parse_db_ids(op[3:]))   # replaces the ids a db= before it gave
            self.alldbs = False
        elif lo == b"allcommands" or lo == b"+@all":
            self.allowed = set(ALL_COMMANDS)
            self.allcommands = self.future = True
            self.rules = []
            self.firstargs = {}
        elif lo == b"nocommands" or lo == b"-@all":
            self.allowed = set()
            self.allcommands = self.future = False
            self.rules = []
            self.firstargs = {}
        elif first == b"~" or first == b"%":
            self._add_key_pattern(op)
        elif first == b"&":
            if self.allchannels:
                raise RuleError(EISDIR)
            pattern = op[1:]
            if has_spaces(pattern):
                raise RuleError(EINVAL)
            if pattern not in self.channels:
                self.channels.append(pattern)
                self.channel_match.append(compile_glob(pattern))
            self.allchannels = False
        elif first == b"+" and second != b"@":
            self._allow_command(op[1:].decode("utf-8", "surrogateescape"))
        elif first == b"-" and second != b"@":
            cmd = lookup_rule_command(op[1:].decode("utf-8", "surrogateescape"))
            if cmd is None:
                raise RuleError(ENOENT)
            self._change_perm(cmd, False)
            self._update_rules(cmd.fullname, False)
        elif (first == b"+" or first == b"-") and second == b"@":
            category = op[2:].decode("utf-8", "surrogateescape").lower()
            if category not in CATEGORY_SET:
                raise RuleError(ENOENT)
            allow = first == b"+"
            self._update_rules("@" + category, allow)
            for name in CATEGORY_MEMBERS[category]:
                self._change_perm(COMMANDS[name], allow)
        else:
            raise RuleError(EINVAL)

    def _add_key_pattern(self, op):
        if self.allkeys:
            raise RuleError(EEXIST)
        flags = 0
        offset = 1
        if op[:1] == b"%":
            n = len(op)
            while offset < n:
                c = op[offset:offset + 1].upper()
                if c == b"R" and not flags & READ:
                    flags |= READ
                elif c == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif c == b"~" and flags:
                    offset += 1
                    break
                else:
                    raise RuleError(EINVAL)
                offset += 1
            if not flags:
                raise RuleError(EINVAL)  # a bare '%': Valkey would store a pattern it cannot describe
        else:
            flags = ALL_PERMS
        pattern = op[offset:]
        if has_spaces(pattern):
            raise RuleError(EINVAL)
        for p in self.patterns:
            if p.pattern == pattern:
                p.flags |= flags
                break
        else:
            self.patterns.append(KeyPattern(pattern, flags))
        self.allkeys = False

    def _allow_command(self, body: str):
        if "|" not in body:
            cmd = lookup_rule_command(body)
            if cmd is None:
                raise RuleError(ENOENT)
            self._change_perm(cmd, True)
            self._update_rules(cmd.fullname, True)
            return
        base, _, sub = body.rpartition("|")
        cmd = lookup_rule_command(base)
        if cmd is None:
            raise RuleError(ENOENT)
        if cmd.parent is not None:
            raise RuleError(ECHILD)
        if not sub:
            raise RuleError(EINVAL)
        if cmd.subs:
            subcmd = lookup_rule_command(body)
            if subcmd is None:
                raise RuleError(ENOENT)
            self._change_perm(subcmd, True)
        else:
            # A first argument of an otherwise blocked command (SELECT|0, DEBUG|OBJECT): deprecated in Valkey,
            # still accepted.
            allowed = self.firstargs.setdefault(cmd.fullname, [])
            arg = sub.lower().encode("utf-8", "surrogateescape")
            if arg not in allowed:
                allowed.append(arg)
        self._update_rules(body, True)

    def _set_bit(self, name, value):
        if value:
            self.allowed.add(name)
        else:
            self.allowed.discard(name)
            self.allcommands = False

    def _change_perm(self, cmd, allow):
        """ACLChangeSelectorPerm: a command and, for a container, all its subcommands."""
        self._set_bit(cmd.fullname, allow)
        self.firstargs.pop(cmd.fullname, None)
        for sub in cmd.subs:
            self._set_bit(sub, allow)

    def _update_rules(self, rule: str, allow: bool):
        """ACLUpdateCommandRules: a new rule replaces the same rule and the rules of its subcommands, so the
        string stays the shortest ordered form that rebuilds the same permissions."""
        new = rule.lower()
        prefix = new + "|"
        self.rules = [r for r in self.rules if r[1:] != new and not r[1:].startswith(prefix)]
        self.rules.append(("+" if allow else "-") + new)

    # -- rendering -----------------------------------------------------------------------------------------
    def describe_commands(self) -> bytes:
        head = "+@all" if self.future else "-@all"
        return (" ".join([head] + self.rules)).encode("utf-8", "surrogateescape")

    def describe(self) -> bytes:
        """ACLDescribeSelector: keys, channels, commands (the form ACL LIST and the aclfile use)."""
        parts = []
        if self.allkeys:
            parts.append(b"~*")
        else:
            parts.extend(p.describe() for p in self.patterns)
        if self.allchannels:
            parts.append(b"&*")
        else:
            parts.append(b"resetchannels")
            parts.extend(b"&" + c for c in self.channels)
        if not self.alldbs:
            parts.append(self.databases_text() or b"resetdbs")
        parts.append(self.describe_commands())
        return b" ".join(parts)

    def databases_text(self) -> bytes:
        """ACL GETUSER's `databases`: alldbs, db=<ids in order>, or empty (resetdbs)."""
        if self.alldbs:
            return b"alldbs"
        if not self.dbs:
            return b""
        return b"db=" + b",".join(b"%d" % n for n in sorted(self.dbs))

    def keys_text(self) -> bytes:
        if self.allkeys:
            return b"~*"
        return b" ".join(p.describe() for p in self.patterns)

    def channels_text(self) -> bytes:
        if self.allchannels:
            return b"&*"
        return b" ".join(b"&" + c for c in self.channels)

    # -- checks --------------------------------------------------------------------------------------------
    def key_allowed(self, key: bytes, need: int) -> bool:
        if self.allkeys:
            return True
        for p in self.patterns:
            if p.flags & need == need and p.match(key):
                return True
        return False

    def _db_denied(self, cmd, args, db):
        """The position of the database the command may not reach (0: the current one), or None. The databases
        a command names are checked first (SELECT, SWAPDB, MOVE, COPY ... DB), numbers it would refuse are left
        to it; FLUSHALL needs every database."""
        current, ndbs = db
        dbs = self.dbs
        name = cmd.fullname
        if name == "select" or name == "swapdb":
            positions = (1,) if name == "select" else (1, 2)
            ids = [_db_arg(args, pos, ndbs) for pos in positions]
            if None in ids:
                return None       # SWAPDB checks its databases only when both are numbers it would take
            for pos, n in zip(positions, ids):
                if n not in dbs:
                    return pos
            return None
        if name == "flushall":
            return 0
        if name == "move":
            n = _db_arg(args, 2, ndbs)
            if n is not None and n not in dbs:
                return 2
        elif name == "copy":
            for pos in range(3, len(args) - 1):
                if args[pos].lower() == b"db":
                    n = _db_arg(args, pos + 1, ndbs)
                    if n is not None and n not in dbs:
                        return pos + 1
                    break
        if current not in dbs and _db_scoped(cmd):
            return 0
        return None

    def channel_allowed(self, channel: bytes, is_pattern: bool) -> bool:
        if self.allchannels:
            return True
        if is_pattern:
            return channel in self.channels  # a PSUBSCRIBE pattern is compared literally
        for match in self.channel_match:
            if match(channel):
                return True
        return False

    def unrestricted_keys(self, need: int) -> bool:
        """ACLSelectorHasUnrestrictedKeyAccess."""
        if self.allkeys:
            return True
        return any(p.flags & need == need and p.pattern == b"*" for p in self.patterns)

    def check(self, cmd, args, keys_box, db=None):
        """ACLSelectorCheckCmd: None if this selector allows it, else (reason, argument position). `db`: (the
        client's current database, how many there are), or None to leave the db= rules out."""
        if not self.allcommands and not cmd.no_auth:
            name = cmd.fullname
            if name not in self.allowed:
                allowed_first = self.firstargs.get(name) if self.firstargs else None
                if allowed_first is None or len(args) < 2:
                    return DENIED_CMD, 0
                idx = 2 if cmd.parent is not None else 1
                if idx >= len(args) or args[idx].lower() not in allowed_first:
                    return DENIED_CMD, 0
        if not self.alldbs and db is not None:
            pos = self._db_denied(cmd, args, db)
            if pos is not None:
                return DENIED_DB, pos
        if not self.allkeys:
            info = keys_box[1]
            if info is None:
                info = keys_box[1] = key_info(cmd)
            if info.has_keys:
                keys = keys_box[0]
                if keys is None:
                    keys = keys_box[0] = info.keys(args)
                patterns = self.patterns
                for pos, need in keys:  # key_allowed(), inlined: this runs for every command of such a user
                    key = args[pos]
                    for p in patterns:
                        if p.flags & need == need and p.match(key):
                            break
                    else:
                        return DENIED_KEY, pos
        if not self.allchannels:
            spec = CHANNEL_SPECS.get(cmd.fullname)
            if spec is not None:
                is_pattern, count = spec
                stop = len(args) if count < 0 else min(len(args), 1 + count)
                for pos in range(1, stop):
                    if not self.channel_allowed(args[pos], is_pattern):
                        return DENIED_CHANNEL, pos
        return None
