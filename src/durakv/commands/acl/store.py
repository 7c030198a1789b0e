"""The ACL users of one server: the store (Valkey's Users rax and DefaultUser), ACL SETUSER's stage and commit,
`user` config lines, the aclfile, and the JSON-able form a shard's settings carry.

Pure: no I/O, no clock, no randomness (callers pass them in); names and patterns are bytes (Valkey's sds),
command names and rules are str (the command table's spelling).
"""

from ... import messages
from .rules import EALREADY, EINVAL, ENOENT, ERROR_TEXT, RuleError, has_spaces, merge_selector_args
from .user import User


class SetUserError(Exception):
    """ACL SETUSER refused: `text` is the reply without its 'ERR ' prefix."""

    def __init__(self, text):
        super().__init__(text)
        self.text = text


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
                raise ValueError("Error in user declaration 'user': %s" % ERROR_TEXT[EINVAL])
            name, rules = tokens[0], tokens[1:]
            if name in seen:
                raise ValueError("Error in user declaration '%s': %s"
                                 % (name.decode("utf-8", "replace"), ERROR_TEXT[EALREADY]))
            seen.add(name)
            merged, bad = merge_selector_args(rules)
            if merged is None:
                raise ValueError("Error in user declaration '%s': %s"
                                 % (rules[bad].decode("utf-8", "replace"), ERROR_TEXT[EINVAL]))
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
