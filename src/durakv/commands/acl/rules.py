"""ACL rule errors and rule-text syntax: ACLSetUserStringError's codes and texts, the character rules of names
and patterns, and the rejoining of a (selector) split over several arguments (src/acl.c).

Pure: no I/O, no clock, no randomness (callers pass them in); names and patterns are bytes (Valkey's sds),
command names and rules are str (the command table's spelling).
"""

from ... import messages


ENOENT, EINVAL, EEXIST, EISDIR, ENODEV, EBADMSG, EALREADY, ECHILD, ERANGE = (
    "ENOENT", "EINVAL", "EEXIST", "EISDIR", "ENODEV", "EBADMSG", "EALREADY", "ECHILD", "ERANGE")
ERROR_TEXT = {
    ENOENT: messages.ACL_RULE_UNKNOWN, EINVAL: messages.ACL_RULE_SYNTAX, EEXIST: messages.ACL_RULE_KEYS_AFTER_ALL,
    EISDIR: messages.ACL_RULE_CHANNELS_AFTER_ALL, ENODEV: messages.ACL_RULE_NO_SUCH_PASSWORD,
    EBADMSG: messages.ACL_RULE_BAD_HASH, EALREADY: messages.ACL_RULE_DUPLICATE_USER,
    ECHILD: messages.ACL_RULE_SUBCOMMAND_FIRSTARG, ERANGE: messages.ACL_RULE_DB_RANGE,
}


class RuleError(Exception):
    """A rule that cannot be applied; `code` is Valkey's errno name, `text` its message."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code
        self.text = ERROR_TEXT.get(code, messages.ACL_RULE_WRONG_FORMAT)


def has_spaces(s: bytes) -> bool:
    """ACLStringHasSpaces: whitespace or NUL (kept out of names and patterns so rules stay splittable)."""
    return any(c in b" \t\n\v\f\r\x00" for c in s)


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
