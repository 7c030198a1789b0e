"""ACL key access: the READ/WRITE permission bits and, per command, its keys with the access each needs (db.c
getKeysFromCommandWithSpecs over keyspecs, the one walker).

Pure: a cache per command, no I/O.
"""

from .. import keyspecs


READ = 1
WRITE = 2
ALL_PERMS = READ | WRITE


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


def key_info(cmd):
    info = _KEY_INFO.get(cmd)
    if info is None:
        info = _KEY_INFO[cmd] = _KeyInfo(cmd)
    return info
