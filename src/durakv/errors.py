"""One error hierarchy. A CommandError carries the full reply text (prefix included)."""

from . import messages


class DurakvError(Exception):
    """Base class for durakv's own failures (not replies)."""


class CommandError(DurakvError):
    """Raised by a handler; becomes an error reply. `text` is the reply without the leading '-'."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class WrongType(CommandError):
    def __init__(self):
        super().__init__(messages.WRONGTYPE)


class ConfigError(DurakvError):
    """A configuration file or argument is invalid; start-up stops with this message."""


class JournalCorrupt(DurakvError):
    """A journal record before the tail failed its checksum; start-up stops (never a silent skip)."""


class ProtocolError(DurakvError):
    """The client sent bytes that are not RESP; the connection is answered and closed."""


class DataDirInUse(DurakvError):
    """Another process holds the data directory's lock; start-up stops (exit 1) naming its pid."""

    def __init__(self, text: str, holder_pid=None):
        super().__init__(text)
        self.holder_pid = holder_pid


def with_path(exc, path):
    """`exc` naming `path` when it is an OSError that names no file (a write, an fsync, a truncate fail with the
    descriptor only): what an operator reads about a full disk or a refused permission must say which file it
    was. Other exceptions, and OSErrors that name their file already, are returned as they are."""
    if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
        named = OSError(exc.errno, exc.strerror or str(exc), str(path))
        named.__cause__ = exc
        return named
    return exc
