"""ACL users as Valkey 7+/8.0 has them (src/acl.c): users, selectors, rules, the permission check, the ACL log,
and the text forms (ACL LIST, ACL GETUSER, the aclfile, a JSON-able dict for a shard's settings).

Pure: no I/O, no clock, no randomness; callers pass time and random bytes in. Names and patterns are bytes
(as Valkey's sds), command names and rules are str (the command table's spelling).

The universe of commands is Valkey's table (spec.py), not only the commands durakv implements, so that a rule
written for Valkey (`+debug|segfault`, `-migrate`) is accepted here and round-trips through ACL SAVE unchanged.
Categories are the declared ones plus the implicit ones server.c's setImplicitACLCategories() derives from the
command flags.
"""

import hashlib
import hmac

from .. import messages
from ..keyspace.glob import compile_glob
from ..config import split_args
from ..protocol.resp import RespSet
from . import keyspecs
from .spec import SPEC

# -- categories and the command universe ------------------------------------------------------------------

CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
              "connection", "transaction", "scripting")
_CATEGORY_SET = frozenset(CATEGORIES)


def effective_categories(spec) -> frozenset:
    """The declared ACL categories of a command plus the implicit ones (server.c setImplicitACLCategories)."""
    cats = set(spec.get("acl", ()))
    flags = spec.get("flags", ())
    if "write" in flags:
        cats.add("write")
    if "readonly" in flags and "scripting" not in cats:
        cats.add("read")  # scripting commands are kept out of @read
    if "admin" in flags:
        cats.update(("admin", "dangerous"))
    if "pubsub" in flags:
        cats.add("pubsub")
    if "fast" in flags:
        cats.add("fast")
    if "blocking" in flags:
        cats.add("blocking")
    if "fast" not in cats:
        cats.add("slow")
    return frozenset(cats)


class AclCommand:
    """One entry of the ACL command universe (a command or a subcommand)."""
    __slots__ = ("fullname", "categories", "subs", "parent")

    def __init__(self, fullname, categories, parent=None):
        self.fullname = fullname
        self.categories = categories
        self.subs = []
        self.parent = parent


def _build_universe():
    cmds = {}
    for name, spec in SPEC.items():
        top = cmds[name] = AclCommand(name, effective_categories(spec))
        for sub_name, sub_spec in spec.get("subcommands", {}).items():
            full = name + "|" + sub_name
            cmds[full] = AclCommand(full, effective_categories(sub_spec), parent=name)
            top.subs.append(full)
    return cmds


COMMANDS = _build_universe()
ALL_COMMANDS = frozenset(COMMANDS)
CATEGORY_MEMBERS = {cat: tuple(n for n, c in COMMANDS.items() if cat in c.categories) for cat in CATEGORIES}


def lookup_rule_command(name: str):
    """ACLLookupCommand: 'cmd' or 'container|sub' (strictly: 'get|x' and 'a|b|c' are unknown)."""
    parts = name.lower().split("|")
    if len(parts) > 2:
        return None
    base = COMMANDS.get(parts[0])
    if base is None or base.parent is not None:
        return None
    if len(parts) == 1:
        return base
    if not base.subs:
        return None
    return COMMANDS.get(parts[0] + "|" + parts[1])


# -- rule errors (ACLSetUserStringError) ------------------------------------------------------------------

ENOENT, EINVAL, EEXIST, EISDIR, ENODEV, EBADMSG, EALREADY, ECHILD = (
    "ENOENT", "EINVAL", "EEXIST", "EISDIR", "ENODEV", "EBADMSG", "EALREADY", "ECHILD")
_ERROR_TEXT = {
    ENOENT: messages.ACL_RULE_UNKNOWN, EINVAL: messages.ACL_RULE_SYNTAX, EEXIST: messages.ACL_RULE_KEYS_AFTER_ALL,
    EISDIR: messages.ACL_RULE_CHANNELS_AFTER_ALL, ENODEV: messages.ACL_RULE_NO_SUCH_PASSWORD,
    EBADMSG: messages.ACL_RULE_BAD_HASH, EALREADY: messages.ACL_RULE_DUPLICATE_USER,
    ECHILD: messages.ACL_RULE_SUBCOMMAND_FIRSTARG,
}


class RuleError(Exception):
    """A rule that cannot be applied; `code` is Valkey's errno name, `text` its message."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code
        self.text = _ERROR_TEXT.get(code, messages.ACL_RULE_WRONG_FORMAT)


def has_spaces(s: bytes) -> bool:
    """ACLStringHasSpaces: whitespace or NUL (kept out of names and patterns so rules stay splittable)."""
    return any(c in b" \t\n\v\f\r\x00" for c in s)


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _valid_hash(h: bytes) -> bool:
    return len(h) == 64 and all(c in b"0123456789abcdef" for c in h)


# -- selectors ----------------------------------------------------------------------------------------------

READ = 1
WRITE = 2
ALL_PERMS = READ | WRITE


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
                 "channels", "channel_match", "rules")

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
            if category not in _CATEGORY_SET:
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
        parts.append(self.describe_commands())
        return b" ".join(parts)

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

    def check(self, cmd, args, keys_box):
        """ACLSelectorCheckCmd: None if this selector allows it, else (reason, argument position)."""
        if not self.allcommands and not cmd.no_auth:
            name = cmd.fullname
            if name not in self.allowed:
                allowed_first = self.firstargs.get(name) if self.firstargs else None
                if allowed_first is None or len(args) < 2:
                    return DENIED_CMD, 0
                idx = 2 if cmd.parent is not None else 1
                if idx >= len(args) or args[idx].lower() not in allowed_first:
                    return DENIED_CMD, 0
        if not self.allkeys:
            info = keys_box[1]
            if info is None:
                info = keys_box[1] = _key_info(cmd)
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
            spec = _CHANNEL_SPECS.get(cmd.fullname)
            if spec is not None:
                is_pattern, count = spec
                stop = len(args) if count < 0 else min(len(args), 1 + count)
                for pos in range(1, stop):
                    if not self.channel_allowed(args[pos], is_pattern):
                        return DENIED_CHANNEL, pos
        return None


# -- users --------------------------------------------------------------------------------------------------

class User:
    __slots__ = ("name", "enabled", "nopass", "sanitize", "passwords", "selectors", "unrestricted")

    def __init__(self, name: bytes, pubsub_all=False):
        self.name = name
        self.enabled = False
        self.nopass = False
        self.sanitize = True       # sanitize-payload (RESTORE payloads are checked); False: skip-sanitize-payload
        self.passwords = []        # SHA-256 hex digests
        self.selectors = [Selector(root=True, allchannels=pubsub_all)]
        self.unrestricted = False  # some selector allows every command, key and channel (the check's fast path)

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    def copy(self, name=None):
        u = User(self.name if name is None else name)
        u.copy_from(self)
        return u

    def copy_from(self, other):
        """ACLCopyUser: the rules of `other`, keeping this user's name (and identity: clients point at it)."""
        self.enabled = other.enabled
        self.nopass = other.nopass
        self.sanitize = other.sanitize
        self.passwords = list(other.passwords)
        self.selectors = [s.copy() for s in other.selectors]
        self.refresh()

    def refresh(self):
        self.unrestricted = any(s.allcommands and s.allkeys and s.allchannels for s in self.selectors)

    # -- rules (ACLSetUser) --------------------------------------------------------------------------------
    def apply(self, op: bytes, pubsub_all=False):
        try:
            self._apply(op, pubsub_all)
        finally:
            self.refresh()

    def _apply(self, op, pubsub_all):
        if not op:
            return
        lo = op.lower()
        first = op[:1]
        if lo == b"on":
            self.enabled = True
        elif lo == b"off":
            self.enabled = False
        elif lo == b"skip-sanitize-payload":
            self.sanitize = False
        elif lo == b"sanitize-payload":
            self.sanitize = True
        elif lo == b"nopass":
            self.nopass = True
            self.passwords = []
        elif lo == b"resetpass":
            self.nopass = False
            self.passwords = []
        elif first == b">" or first == b"#":
            if first == b">":
                h = hash_password(op[1:])
            else:
                if not _valid_hash(op[1:]):
                    raise RuleError(EBADMSG)
                h = op[1:].decode()
            if h not in self.passwords:
                self.passwords.append(h)
            self.nopass = False
        elif first == b"<" or first == b"!":
            if first == b"<":
                h = hash_password(op[1:])
            else:
                if not _valid_hash(op[1:]):
                    raise RuleError(EBADMSG)
                h = op[1:].decode()
            if h not in self.passwords:
                raise RuleError(ENODEV)
            self.passwords.remove(h)
        elif first == b"(" and op[-1:] == b")":
            selector = Selector(root=False, allchannels=pubsub_all)
            for part in split_args(op[1:-1]) or ():  # unbalanced quotes: an empty selector, as Valkey
                selector.apply(part)
            self.selectors.append(selector)
        elif lo == b"clearselectors":
            del self.selectors[1:]
        elif lo == b"reset":
            self.nopass = False
            self.passwords = []
            root = self.root
            root.apply(b"resetkeys")
            root.apply(b"resetchannels")
            if pubsub_all:
                root.apply(b"allchannels")
            self.enabled = False
            self.sanitize = True
            del self.selectors[1:]
            root.apply(b"-@all")
        else:
            self.root.apply(op)

    def check_password(self, password: bytes) -> bool:
        """ACLCheckUserCredentials for an existing user, comparing SHA-256 digests in constant time."""
        if not self.enabled:
            return False
        if self.nopass:
            return True
        digest = hash_password(password)
        ok = False
        for stored in self.passwords:
            ok |= hmac.compare_digest(digest, stored)
        return ok

    # -- rendering -----------------------------------------------------------------------------------------
    def flag_names(self):
        names = ["on" if self.enabled else "off"]
        if self.nopass:
            names.append("nopass")
        names.append("sanitize-payload" if self.sanitize else "skip-sanitize-payload")
        return names

    def describe(self) -> bytes:
        """ACLDescribeUser: flags, passwords, root selector, then (selectors)."""
        parts = [n.encode() for n in self.flag_names()]
        parts.extend(b"#" + p.encode() for p in self.passwords)
        parts.append(self.root.describe())
        for s in self.selectors[1:]:
            parts.append(b"(" + s.describe() + b")")
        return b" ".join(parts)

    def list_line(self) -> bytes:
        return b"user " + self.name + b" " + self.describe()

    def getuser_reply(self):
        """ACL GETUSER's map."""
        root = self.root
        return {b"flags": RespSet(n.encode() for n in self.flag_names()),
                b"passwords": [p.encode() for p in self.passwords],
                b"commands": root.describe_commands(), b"keys": root.keys_text(), b"channels": root.channels_text(),
                b"selectors": [{b"commands": s.describe_commands(), b"keys": s.keys_text(),
                                b"channels": s.channels_text()} for s in self.selectors[1:]]}


# -- the permission check -------------------------------------------------------------------------------------

DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL = 1, 2, 3, 4
REASONS = {DENIED_CMD: "command", DENIED_KEY: "key", DENIED_AUTH: "auth", DENIED_CHANNEL: "channel"}


def check(user, cmd, args):
    """Whether `user` may run `cmd` (a registry Command: fullname, no_auth, key_specs) with `args`.

    None when allowed, else (reason, position): DENIED_CMD with position 0, or DENIED_KEY / DENIED_CHANNEL with
    the position of the key or channel in args. With several selectors the first that allows wins; otherwise
    Valkey's pick: a command denial only if no selector got past the command, else the highest reason, then the
    last position."""
    if user is None or user.unrestricted:
        return None
    keys_box = [None, None]  # the keys (and how to find them) are worked out once for all the selectors
    selectors = user.selectors
    if len(selectors) == 1:
        return selectors[0].check(cmd, args, keys_box)
    best_reason, best_pos = DENIED_CMD, 0
    for selector in selectors:
        denied = selector.check(cmd, args, keys_box)
        if denied is None:
            return None
        reason, pos = denied
        if reason > best_reason or (reason == best_reason and pos > best_pos):
            best_reason, best_pos = reason, pos
    return best_reason, best_pos


def unrestricted_key_access(user, cmd, args, need=READ) -> bool:
    """ACLUserCheckCmdWithUnrestrictedKeyAccess: some selector allows the command and every key for `need`
    (SORT BY/GET read keys that no key spec names)."""
    if user is None or user.unrestricted:
        return True
    keys_box = [None, None]
    return any(s.check(cmd, args, keys_box) is None and s.unrestricted_keys(need) for s in user.selectors)


def denial_message(reason, user, cmd, arg, verbose=False) -> str:
    """getAclErrorMessage (without the NOPERM prefix)."""
    name = user.name.decode("utf-8", "replace")
    if reason == DENIED_CMD:
        return messages.ACL_DENIED_CMD.format(name, cmd.fullname)
    what = "key" if reason == DENIED_KEY else "channel"
    if verbose:
        return messages.ACL_DENIED_VERBOSE.format(name, arg.decode("utf-8", "replace"), what)
    return messages.ACL_DENIED.format(what)


def channels_of(cmd, args):
    """[(position, is_pattern)] of the channels a publish/subscribe command names (getChannelsFromCommand)."""
    spec = _CHANNEL_SPECS.get(cmd.fullname)
    if spec is None:
        return []
    is_pattern, count = spec
    stop = len(args) if count < 0 else min(len(args), 1 + count)
    return [(pos, is_pattern) for pos in range(1, stop)]


# Commands whose arguments are channels the check looks at: (is a pattern, how many; -1 = all the rest).
# The UNSUBSCRIBE family names channels too but is never denied.
_CHANNEL_SPECS = {"subscribe": (False, -1), "ssubscribe": (False, -1), "psubscribe": (True, -1),
                  "publish": (False, 1), "spublish": (False, 1)}


# -- keys and their access (db.c getKeysFromCommandWithSpecs and the getkeys procs) -------------------------

def _need_of(flags) -> int:
    need = 0
    if "access" in flags:
        need |= READ
    if "insert" in flags or "delete" in flags or "update" in flags:
        need |= WRITE
    return need


_NEED = {}  # key flags -> the access they need


def _need(flags) -> int:
    need = _NEED.get(flags)
    if need is None:
        need = _NEED[flags] = _need_of(flags)
    return need


class _KeyInfo:
    """A command's keys (keyspecs: the one walker) with the access each needs, worked out once per command."""
    __slots__ = ("finder", "has_keys", "fixed", "min_argc")

    def __init__(self, cmd):
        f = self.finder = keyspecs.finder(cmd)
        self.has_keys = f.has_keys
        self.min_argc = f.min_argc
        self.fixed = None if f.fixed is None else tuple((i, _need(flags)) for i, flags in f.fixed)

    def keys(self, args):
        """[(position, access needed: READ|WRITE bits)] (getKeysFromCommandWithSpecs)."""
        if self.fixed is not None and len(args) >= self.min_argc:
            return self.fixed
        return [(i, _need(flags)) for i, flags in self.finder.keys(args)]


_KEY_INFO = {}  # Command -> _KeyInfo


def _key_info(cmd):
    info = _KEY_INFO.get(cmd)
    if info is None:
        info = _KEY_INFO[cmd] = _KeyInfo(cmd)
    return info


# -- pub/sub clients after a change of channel rules (getUpcomingChannelList, ACLShouldKillPubsubClient) -----

def upcoming_channels(new, original):
    """None if `new` allows every channel `original` did (no subscriber needs to go), else the list of
    channel patterns `new` allows."""
    if any(s.allchannels for s in new.selectors):
        return None
    upcoming = [c for s in new.selectors for c in s.channels]
    have = set(upcoming)
    for s in original.selectors:
        if s.allchannels or any(c not in have for c in s.channels):
            return upcoming
    return None


def subscriptions_revoked(upcoming, channels, patterns, shard_channels) -> bool:
    """Whether a client subscribed to these must be disconnected under the `upcoming` channel patterns."""
    for p in patterns:
        if p not in upcoming:
            return True
    matchers = [compile_glob(u) for u in upcoming]
    for group in (channels, shard_channels):
        for ch in group:
            if not any(m(ch) for m in matchers):
                return True
    return False


# -- the users of a server ----------------------------------------------------------------------------------

class SetUserError(Exception):
    """ACL SETUSER refused: `text` is the reply without its 'ERR ' prefix."""

    def __init__(self, text):
        super().__init__(text)
        self.text = text


def merge_selector_args(args):
    """ACLMergeSelectorArguments: rejoins a (selector) spread over several arguments.
    Returns (merged, None) or (None, index of the argument whose '(' is never closed)."""
    out = []
    open_at = -1
    current = b""
    for j, op in enumerate(args):
        if open_at == -1 and op[:1] == b"(" and op[-1:] != b")":
            current = op
            open_at = j
            continue
        if open_at != -1:
            current += b" " + op
            if op[-1:] == b")":
                open_at = -1
                out.append(current)
            continue
        out.append(op)
    if open_at != -1:
        return None, open_at
    return out, None


class Users:
    """The users of one server (Valkey's Users rax + DefaultUser). `default` is never replaced, only changed:
    clients without an explicit user run as it."""

    def __init__(self, pubsub_all=False):
        self.pubsub_all = pubsub_all  # acl-pubsub-default allchannels: new selectors start with &*
        self.by_name = {}
        self.default = self.by_name[b"default"] = self.new_default()

    @staticmethod
    def new_default():
        u = User(b"default")
        for op in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
            u.apply(op)
        return u

    def get(self, name: bytes):
        return self.by_name.get(name)

    def names(self):
        return sorted(self.by_name)

    def sorted_users(self):
        return [self.by_name[n] for n in sorted(self.by_name)]

    def default_requires_auth(self) -> bool:
        """authRequired's server half: a new connection must AUTH unless default is on and nopass."""
        d = self.default
        return not (d.nopass and d.enabled)

    def set_default_password(self, password):
        """requirepass: the default user's only password, or nopass when empty (ACLUpdateDefaultUserPassword)."""
        d = self.default
        d.apply(b"resetpass")
        d.apply(b">" + password if password else b"nopass")

    def stage(self, name: bytes, ops):
        """ACLStringSetUser without the commit: the user as it would be after `ops` (a copy; nothing changes).
        Raises SetUserError with Valkey's message."""
        merged, bad = merge_selector_args(ops)
        if merged is None:
            raise SetUserError(messages.ACL_SETUSER_UNMATCHED.format(ops[bad].decode("utf-8", "replace")))
        existing = self.by_name.get(name)
        temp = existing.copy() if existing is not None else User(name, self.pubsub_all)
        for op in merged:
            try:
                temp.apply(op, self.pubsub_all)
            except RuleError as exc:
                raise SetUserError(messages.ACL_SETUSER_MODIFIER.format(op.decode("utf-8", "replace"),
                                                                        exc.text)) from None
        return temp

    def commit(self, name: bytes, staged):
        """Makes `staged` the rules of `name` (created if new). Returns the User clients point at."""
        u = self.by_name.get(name)
        if u is None:
            u = self.by_name[name] = User(name)
        u.copy_from(staged)
        return u

    def setuser(self, name: bytes, ops):
        return self.commit(name, self.stage(name, ops))

    def delete(self, name: bytes):
        """Removes a user (never default); the removed User or None."""
        if name == b"default":
            raise ValueError("the default user cannot be removed")
        return self.by_name.pop(name, None)

    # -- config `user` lines (ACLAppendUserForLoading + ACLLoadConfiguredUsers) ---------------------------
    def load_config_users(self, lines):
        """Applies `user <name> <rules...>` declarations (token lists without the 'user' word). Raises
        ValueError with Valkey's start-up message on the first bad one."""
        seen = set()
        for tokens in lines:
            if not tokens:
                raise ValueError("Error in user declaration 'user': %s" % _ERROR_TEXT[EINVAL])
            name, rules = tokens[0], tokens[1:]
            if name in seen:
                raise ValueError("Error in user declaration '%s': %s"
                                 % (name.decode("utf-8", "replace"), _ERROR_TEXT[EALREADY]))
            seen.add(name)
            merged, bad = merge_selector_args(rules)
            if merged is None:
                raise ValueError("Error in user declaration '%s': %s"
                                 % (rules[bad].decode("utf-8", "replace"), _ERROR_TEXT[EINVAL]))
            probe = User(b"probe", self.pubsub_all)
            for op in merged:
                try:
                    probe.apply(op, self.pubsub_all)
                except RuleError as exc:
                    if exc.code != ENOENT:
                        raise ValueError("Error in user declaration '%s': %s"
                                         % (op.decode("utf-8", "replace"), exc.text)) from None
            if has_spaces(name):
                raise ValueError("Spaces not allowed in ACL usernames")
            u = self.by_name.get(name)
            if u is None:
                u = self.by_name[name] = User(name, self.pubsub_all)
            else:
                u.apply(b"reset", self.pubsub_all)  # only default can already exist
            for op in merged:
                try:
                    u.apply(op, self.pubsub_all)
                except RuleError as exc:
                    raise ValueError("Error loading ACL rule '%s' for the user named '%s': %s"
                                     % (op.decode("utf-8", "replace"), name.decode("utf-8", "replace"),
                                        exc.text)) from None

    # -- the aclfile (ACLLoadFromFile / ACLSaveToFile) ------------------------------------------------------
    def file_text(self) -> bytes:
        return b"".join(u.list_line() + b"\n" for u in self.sorted_users())

    def parse_file(self, text: bytes, filename: str):
        """The users an aclfile defines, as a new {name: User}; or raises ValueError with every problem found
        (Valkey's one-line list). Nothing here changes until replace_all() is called."""
        users = {}
        errors = []
        for lineno, raw in enumerate(text.split(b"\n"), 1):
            line = raw.strip(b" \t\r\n")
            if not line:
                continue
            argv = line.split(b" ")
            if argv[0] != b"user" or len(argv) < 2:
                errors.append(messages.ACL_FILE_NOT_USER.format(filename, lineno))
                continue
            name = argv[1]
            if has_spaces(name):
                errors.append(messages.ACL_FILE_BAD_USERNAME.format(filename, lineno,
                                                                     name.decode("utf-8", "replace")))
                continue
            if name in users:
                errors.append(messages.ACL_FILE_DUPLICATE.format(name.decode("utf-8", "replace"), lineno))
                continue
            u = users[name] = User(name, self.pubsub_all)
            merged, _bad = merge_selector_args(argv[2:])
            if merged is None:
                errors.append(messages.ACL_FILE_UNMATCHED.format(filename, lineno))
                merged = []
            syntax_error = False
            for op in merged:
                op = op.strip(b"\t\r\n")
                try:
                    u.apply(op, self.pubsub_all)
                except RuleError as exc:
                    if exc.code == ENOENT:
                        errors.append(messages.ACL_FILE_UNKNOWN_OP.format(
                            filename, lineno, op.decode("utf-8", "replace"), exc.text))
                    elif not syntax_error:
                        errors.append(messages.ACL_FILE_OTHER.format(filename, lineno, exc.text))
                        syntax_error = True
        if errors:
            raise ValueError("".join(errors) + messages.ACL_FILE_VERDICT)
        return users

    def replace_all(self, users):
        """Installs a parsed aclfile. The default User object stays (its rules are copied), every other user is
        a new object: callers re-point or drop their clients by name."""
        new_default = users.pop(b"default", None) or self.new_default()
        self.default.copy_from(new_default)
        users[b"default"] = self.default
        self.by_name = users

    # -- a shard's settings (the coordination store keeps these so a failover keeps the users) -------------
    def to_dict(self) -> dict:
        """JSON-able: every user as its ACL LIST rules (the form ACL SAVE writes and ACL LOAD reads back)."""
        return {"version": 1, "users": [
            {"name": u.name.decode("utf-8", "surrogateescape"),
             "rules": u.describe().decode("utf-8", "surrogateescape")} for u in self.sorted_users()]}

    def load_dict(self, data: dict):
        """Replaces every user with the ones of to_dict() output. Raises ValueError (and changes nothing) if
        a rule does not apply."""
        if data.get("version") != 1:
            raise ValueError("unknown ACL settings version %r" % data.get("version"))
        lines = b"".join(b"user " + e["name"].encode("utf-8", "surrogateescape") + b" "
                         + e["rules"].encode("utf-8", "surrogateescape") + b"\n" for e in data["users"])
        self.replace_all(self.parse_file(lines, "<acl settings>"))


# -- ACL LOG ----------------------------------------------------------------------------------------------------

CTX_TOPLEVEL, CTX_LUA, CTX_MULTI, CTX_MODULE = "toplevel", "lua", "multi", "module"
_GROUPING_MAX_MS = 60000
_GROUPING_SCAN = 10


class LogEntry:
    __slots__ = ("count", "reason", "context", "object", "username", "ctime_ms", "client_info", "entry_id",
                 "created_ms")


class AclLog:
    """The ACL LOG (newest first) and the INFO acl_access_denied_* counters."""

    def __init__(self, max_len=128):
        self.max_len = max_len
        self.entries = []
        self.next_id = 0
        self.denied = {DENIED_AUTH: 0, DENIED_CMD: 0, DENIED_KEY: 0, DENIED_CHANNEL: 0}

    def add(self, reason, context, obj: bytes, username: bytes, client_info: bytes, now_ms: int):
        """addACLLogEntry: a denial like a recent one (same reason, context, object and user within 60 s,
        among the newest 10) bumps that entry's count and moves it to the top."""
        self.denied[reason] += 1
        if self.max_len == 0:
            self._trim()
            return
        for i, e in enumerate(self.entries[:_GROUPING_SCAN]):
            if (e.reason == reason and e.context == context and abs(e.ctime_ms - now_ms) <= _GROUPING_MAX_MS
                    and e.object == obj and e.username == username):
                e.count += 1
                e.ctime_ms = now_ms
                e.client_info = client_info
                if i:
                    del self.entries[i]
                    self.entries.insert(0, e)
                return
        e = LogEntry()
        e.count = 1
        e.reason = reason
        e.context = context
        e.object = obj
        e.username = username
        e.ctime_ms = e.created_ms = now_ms
        e.client_info = client_info
        e.entry_id = self.next_id
        self.next_id += 1
        self.entries.insert(0, e)
        self._trim()

    def _trim(self):
        del self.entries[self.max_len:]

    def reset(self):
        self.entries = []

    def reply(self, count, now_ms):
        out = []
        for e in self.entries[:max(count, 0)]:
            out.append({b"count": e.count, b"reason": REASONS[e.reason].encode(), b"context": e.context.encode(),
                        b"object": e.object, b"username": e.username,
                        b"age-seconds": (now_ms - e.ctime_ms) / 1000.0, b"client-info": e.client_info,
                        b"entry-id": e.entry_id, b"timestamp-created": e.created_ms,
                        b"timestamp-last-updated": e.ctime_ms})
        return out

    def info_fields(self):
        d = self.denied
        return {"acl_access_denied_auth": d[DENIED_AUTH], "acl_access_denied_cmd": d[DENIED_CMD],
                "acl_access_denied_key": d[DENIED_KEY], "acl_access_denied_channel": d[DENIED_CHANNEL]}

    def reset_stats(self):
        for k in self.denied:
            self.denied[k] = 0


# -- small helpers ------------------------------------------------------------------------------------------------

GENPASS_MAX_BITS = 4096


def genpass(bits: int, random_bytes) -> bytes:
    """ACL GENPASS: `bits` of randomness as lowercase hex (rounded up to whole hex digits)."""
    chars = (bits + 3) // 4
    return random_bytes((chars + 1) // 2).hex()[:chars].encode()
