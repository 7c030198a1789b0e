"""The ACL permission check: whether a user may run a command with its arguments, the denial reasons and their
NOPERM texts, and the channels a pub/sub command names (src/acl.c ACLCheckAllUserCommandPerm).

Pure: no I/O, no clock, no randomness (callers pass them in); names and patterns are bytes (Valkey's sds),
command names and rules are str (the command table's spelling).
"""

from ... import messages
from .keys import READ


DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL, DENIED_DB = 1, 2, 3, 4, 5
REASONS = {DENIED_CMD: "command", DENIED_KEY: "key", DENIED_AUTH: "auth", DENIED_CHANNEL: "channel",
           DENIED_DB: "database"}
# Which selector's denial is reported (the highest): a database denial (Valkey 9.1) ranks above a command's and
# below a key's, as Valkey 9.1.2 answers.
_RANK = {DENIED_CMD: 1, DENIED_DB: 1.5, DENIED_KEY: 2, DENIED_AUTH: 3, DENIED_CHANNEL: 4}


def check(user, cmd, args, db=None):
    """Whether `user` may run `cmd` (a registry Command: fullname, no_auth, key_specs) with `args`.

    None when allowed, else (reason, position): DENIED_CMD with position 0, DENIED_KEY / DENIED_CHANNEL with
    the position of the key or channel in args, DENIED_DB with the position of the database number or 0 (the
    current database). `db`: (the client's current database, how many there are), for the db= rules; None
    checks no database. With several selectors the first that allows wins; otherwise Valkey's pick: a command
    denial only if no selector got past the command, else the highest reason, then the last position."""
    if user is None or user.unrestricted:
        return None
    keys_box = [None, None]  # the keys (and how to find them) are worked out once for all the selectors
    selectors = user.selectors
    if len(selectors) == 1:
        return selectors[0].check(cmd, args, keys_box, db)
    best_reason, best_pos = DENIED_CMD, 0
    for selector in selectors:
        denied = selector.check(cmd, args, keys_box, db)
        if denied is None:
            return None
        reason, pos = denied
        if _RANK[reason] > _RANK[best_reason] or (reason == best_reason and pos > best_pos):
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
        # the command's fullname as the server holds it: a module's as it declared it (BF.ADD)
        return messages.ACL_DENIED_CMD.format(name, cmd.display)
    if reason == DENIED_DB:
        if verbose:
            return messages.ACL_DENIED_DB_VERBOSE.format(name, arg.decode("utf-8", "replace"))
        return messages.ACL_DENIED_DB
    what = "key" if reason == DENIED_KEY else "channel"
    if verbose:
        return messages.ACL_DENIED_VERBOSE.format(name, arg.decode("utf-8", "replace"), what)
    return messages.ACL_DENIED.format(what)


def channels_of(cmd, args):
    """[(position, is_pattern)] of the channels a publish/subscribe command names (getChannelsFromCommand)."""
    spec = CHANNEL_SPECS.get(cmd.fullname)
    if spec is None:
        return []
    is_pattern, count = spec
    stop = len(args) if count < 0 else min(len(args), 1 + count)
    return [(pos, is_pattern) for pos in range(1, stop)]


# Commands whose arguments are channels the check looks at: (is a pattern, how many; -1 = all the rest).
# The UNSUBSCRIBE family names channels too but is never denied.
CHANNEL_SPECS = {"subscribe": (False, -1), "ssubscribe": (False, -1), "psubscribe": (True, -1),
                  "publish": (False, 1), "spublish": (False, 1)}
