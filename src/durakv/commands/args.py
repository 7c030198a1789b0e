"""The argument cursor every command family parses its options with (mini-redis's `Parse`).

A handler walks its options left to right:

    c = ArgCursor(args, 3)
    while c:
        opt = c.next_lower()
        if opt == b"replace":
            replace = True
        elif opt == b"db" and c.left():
            db = c.int()
        else:
            raise syntax_error()

so every family takes arguments, counts what is left and reports a missing or malformed one the same way, with
Valkey's texts: a missing argument is "ERR syntax error" (Valkey's option loops check `j+1 < argc` and fall
through to it), a non-integer one "ERR value is not an integer or out of range" (or the text the caller passes,
as getLongLongFromObjectOrReply's `msg`). A family's own value parsers (scores, coordinates, stream IDs) take
their argument from next(). Checks stay in the caller's order: the cursor only reads.
"""

from .. import messages
from ..errors import CommandError
from .base import parse_int


class ArgCursor:
    """args[pos:end], consumed from the left. `pos` is the index of the next argument to take."""

    __slots__ = ("args", "pos", "end")

    def __init__(self, args, start=1, end=None):
        self.args = args
        self.pos = start
        self.end = len(args) if end is None else end

    def __bool__(self):
        return self.pos < self.end

    def left(self) -> int:
        """How many arguments are still to take."""
        return self.end - self.pos

    def peek(self):
        """The next argument without taking it, or None at the end."""
        return self.args[self.pos] if self.pos < self.end else None

    def next(self) -> bytes:
        """Takes the next argument; "ERR syntax error" when there is none."""
        pos = self.pos
        if pos >= self.end:
            raise CommandError(messages.SYNTAX)
        self.pos = pos + 1
        return self.args[pos]

    # next()'s body written out again in the readers below: one Python call less per option, on paths as
    # hot as SET ... EX.
    def next_lower(self) -> bytes:
        """The next argument lower-cased, for comparing with an option name (Valkey's strcasecmp)."""
        pos = self.pos
        if pos >= self.end:
            raise CommandError(messages.SYNTAX)
        self.pos = pos + 1
        return self.args[pos].lower()

    def next_upper(self) -> bytes:
        pos = self.pos
        if pos >= self.end:
            raise CommandError(messages.SYNTAX)
        self.pos = pos + 1
        return self.args[pos].upper()

    def take(self, count: int) -> list:
        """The next `count` arguments; "ERR syntax error" when fewer are left."""
        pos = self.pos
        if self.end - pos < count:
            raise CommandError(messages.SYNTAX)
        self.pos = pos + count
        return self.args[pos:pos + count]

    def skip(self, count: int = 1):
        """Passes over `count` arguments (at most to the end), as a getkeys procedure skips an option's."""
        self.pos = min(self.pos + count, self.end)

    def int(self, message=messages.NOT_INTEGER) -> int:
        """The next argument as a signed 64-bit integer in Valkey's strict form (string2ll)."""
        pos = self.pos
        if pos >= self.end:
            raise CommandError(messages.SYNTAX)
        self.pos = pos + 1
        return parse_int(self.args[pos], message)
