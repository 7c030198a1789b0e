"""One ACL user: its flags, passwords and selectors, the user rules (ACLSetUser), the password check and its
text forms (ACL LIST's line, ACL GETUSER's map).

Pure: no I/O, no clock, no randomness (callers pass them in); names and patterns are bytes (Valkey's sds),
command names and rules are str (the command table's spelling).
"""

import hmac

from ...config import split_args
from ...protocol.resp import RespSet
from .passwords import hash_password, rule_digest
from .rules import ENODEV, RuleError
from .selectors import Selector


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
        self.unrestricted = any(s.allcommands and s.allkeys and s.allchannels and s.alldbs for s in self.selectors)

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
            h = rule_digest(op, first == b">")
            if h not in self.passwords:
                self.passwords.append(h)
            self.nopass = False
        elif first == b"<" or first == b"!":
            h = rule_digest(op, first == b"<")
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
            root.apply(b"alldbs")
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
        # Valkey 9.1 shows neither sanitize-payload nor skip-sanitize-payload (both still accepted)
        names = ["on" if self.enabled else "off"]
        if self.nopass:
            names.append("nopass")
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
                b"databases": root.databases_text(),
                b"selectors": [{b"commands": s.describe_commands(), b"keys": s.keys_text(),
                                b"channels": s.channels_text(), b"databases": s.databases_text()}
                               for s in self.selectors[1:]]}
