"""The effect codec: effects [(db_id, argv)] <-> one journal entry's payload bytes.

A payload is a concatenation of RESP-encoded commands. `SELECT n` switches the database of the commands
after it; every payload starts with the SELECT of its first effect, so an entry is self-contained (a replica
or a reader can start at any entry). Backends never look inside: they store the bytes this module makes.
"""

import hiredis

from ..protocol.resp import encode_command

_SELECT = [encode_command((b"SELECT", b"%d" % i)) for i in range(64)]


def encode_effects(effects) -> bytes:
    """One journal payload for effects [(db_id, argv)]: SELECT of the first effect's db, then the commands,
    with a SELECT wherever the db changes."""
    parts = []
    current = None
    for db_id, argv in effects:
        if db_id != current:
            parts.append(_SELECT[db_id] if db_id < 64 else encode_command((b"SELECT", b"%d" % db_id)))
            current = db_id
        parts.append(encode_command(argv))
    return b"".join(parts)


def _encoded_len(argv) -> int:
    n = len(b"*%d\r\n" % len(argv))
    for a in argv:
        n += len(b"$%d\r\n" % len(a)) + len(a) + 2
    return n


def decode_payload(payload) -> list:
    """[(db_id, argv)] of a payload (argv a list of bytes; SELECT consumed). Raises ValueError when the
    payload is not a whole sequence of commands."""
    reader = hiredis.Reader()
    reader.feed(payload)
    out = []
    db_id = 0
    consumed = 0
    while True:
        try:
            argv = reader.gets()
        except hiredis.ProtocolError as exc:
            raise ValueError("payload is not RESP: %s" % exc) from None
        if argv is False:
            break
        if type(argv) is not list or not argv or any(type(a) is not bytes for a in argv):
            raise ValueError("payload holds something other than a command: %r" % (argv,))
        consumed += _encoded_len(argv)
        if len(argv) == 2 and argv[0].upper() == b"SELECT":
            if not argv[1].isdigit():
                raise ValueError("bad SELECT %r in payload" % argv[1])
            db_id = int(argv[1])
        else:
            out.append((db_id, argv))
    if consumed != len(payload):
        raise ValueError("payload ends inside a command (%d of %d bytes decoded)" % (consumed, len(payload)))
    return out
