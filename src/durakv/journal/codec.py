"""The effect codec: effects [(db_id, argv)] <-> one journal entry's payload bytes.

A payload is a concatenation of RESP-encoded commands. `SELECT n` switches the database of the commands
after it; every payload starts with the SELECT of its first effect, so an entry is self-contained (a replica
or a reader can start at any entry). Backends never look inside: they store the bytes this module makes.
"""

import hiredis

from ..protocol.resp import encode_command, extend_command

FEED_BYTES = 64 * 1024
FEED_MAX_BYTES = 8 * 1024 * 1024
_SELECT = [encode_command((b"SELECT", b"%d" % i)) for i in range(64)]


def effect_pieces(effects) -> list:
    """The payload of effects as pieces to join (a large value stays one piece, not copied)."""
    parts = []
    current = None
    for db_id, argv in effects:
        if db_id != current:
            parts.append(_SELECT[db_id] if db_id < 64 else encode_command((b"SELECT", b"%d" % db_id)))
            current = db_id
        if _has_large(argv):
            extend_command(parts, argv)
        else:
            parts.append(encode_command(argv))
    return parts


def encode_effects(effects) -> bytes:
    """One journal payload for effects [(db_id, argv)]: SELECT of the first effect's db, then the commands,
    with a SELECT wherever the db changes."""
    return b"".join(effect_pieces(effects))


def effects_size(effects, db):
    """(bytes, db): what encode_effects adds for effects to a batch whose last effect was in database db (None:
    a new batch, which starts with a SELECT), and the database the batch ends in."""
    size = 0
    for db_id, argv in effects:
        if db_id != db:
            size += select_len(db_id)
            db = db_id
        size += encoded_len(argv)
    return size, db


# The Python implementations above: the reference of the compiled ones, which use_compiled(None) puts back.
PYTHON = {"encode_effects": encode_effects, "effects_size": effects_size}


def use_compiled(encode, size=None):
    """Puts the compiled core's encode_effects and effects_size (fastpath.install), which this module's Python is
    the reference of, in this module's place of those names; None puts the Python back. Callers reach them
    through the module (`codec.encode_effects`): a Python function that forwarded to the compiled one cost a
    frame on every batch."""
    globals()["encode_effects"] = encode or PYTHON["encode_effects"]
    globals()["effects_size"] = size or PYTHON["effects_size"]


LARGE_ARG_BYTES = 64 * 1024


def _has_large(argv) -> bool:
    for a in argv:
        if len(a) > LARGE_ARG_BYTES:
            return True
    return False


class _Decoder:
    """Commands of a payload fed in one or more slices (the parts of one payload, in order)."""

    __slots__ = ("reader", "out", "db_id", "consumed", "total")

    def __init__(self):
        self.reader = hiredis.Reader()
        self.out = []
        self.db_id = 0
        self.consumed = 0
        self.total = 0

    def feed(self, data):
        self.out.extend(self.iter_feed(data))

    def iter_feed(self, data):
        """Yields the (db_id, argv) of data's commands as each is decoded (feed() collects them): a reader that
        works in slices (start-up replay) meets a large payload one command at a time."""
        reader = self.reader
        size = len(data)
        fed = 0
        step = FEED_BYTES
        while True:
            try:
                argv = reader.gets()
            except hiredis.ProtocolError as exc:
                raise ValueError("payload is not RESP: %s" % exc) from None
            if argv is False:
                if fed >= size:
                    break
                # Fed a slice at a time: hiredis moves what is left of its buffer after each command it parses,
                # so a multi-MB batch fed at once costs time quadratic in its size (62 s for 16 MB of 4 KB SETs).
                # Inside one large command the slices grow (nothing is moved until it is complete).
                n = min(step, size - fed)
                reader.feed(data, fed, n)
                fed += n
                step = min(step * 2, FEED_MAX_BYTES)
                continue
            step = FEED_BYTES
            if type(argv) is not list or not argv or any(type(a) is not bytes for a in argv):
                raise ValueError("payload holds something other than a command: %r" % (argv,))
            self.consumed += encoded_len(argv)
            if len(argv) == 2 and argv[0].upper() == b"SELECT":
                if not argv[1].isdigit():
                    raise ValueError("bad SELECT %r in payload" % argv[1])
                self.db_id = int(argv[1])
            else:
                yield self.db_id, argv
        self.total += size

    def finish(self) -> list:
        if self.consumed != self.total:
            raise ValueError("payload ends inside a command (%d of %d bytes decoded)" % (self.consumed, self.total))
        return self.out


def iter_payload(payload):
    """decode_payload one command at a time: yields (db_id, argv); raises ValueError as decode_payload does,
    for a payload that ends inside a command once the commands before it were yielded."""
    decoder = _Decoder()
    yield from decoder.iter_feed(payload)
    decoder.finish()


def decode_payload(payload) -> list:
    """[(db_id, argv)] of a payload (argv a list of bytes; SELECT consumed). Raises ValueError when the
    payload is not a whole sequence of commands."""
    decoder = _Decoder()
    decoder.feed(payload)
    return decoder.finish()


# -- continuation parts: one command's effects larger than the journal's entry limit -------------------------
#
# A payload of more than `max_entry_bytes` is carried in n >= 2 consecutive entries, each one RESP command
# `DURAKV.PART <i> <n> <chunk>` (i = 0 .. n-1), the chunks joined being the whole payload. Readers apply the
# payload only once part n-1 arrives after parts 0 .. n-2 in order (PartAssembler); an epoch marker, a
# non-part entry or a part out of sequence discards an incomplete tail (a writer that died or was deposed
# between two parts: its tail was never acknowledged, since the ticket is the last part's index).

PART_COMMAND = b"DURAKV.PART"
_PART_PREFIX = b"*4\r\n$11\r\nDURAKV.PART\r\n"
# What a part entry adds around its chunk: the prefix, i and n (up to 20 digits each, with their framing) and
# the chunk's own length line and CRLF.
PART_OVERHEAD = len(_PART_PREFIX) + 2 * (1 + 2 + 2 + 20 + 2) + (1 + 20 + 2) + 2


def encoded_len(argv) -> int:
    """Bytes encode_command(argv) takes (the tracker bounds a batch with it before encoding it)."""
    n = 3 + len(str(len(argv)))
    for a in argv:
        la = len(a)
        n += 5 + len(str(la)) + la
    return n


def select_len(db_id) -> int:
    """Bytes of the SELECT that encode_effects puts before effects of db_id."""
    return len(_SELECT[db_id]) if db_id < 64 else encoded_len((b"SELECT", b"%d" % db_id))


def encode_parts(payload, max_entry_bytes) -> list:
    """Splits payload (bytes, or a list of pieces as effect_pieces makes) into part entries of at most
    max_entry_bytes each (see above); [payload] when it fits."""
    pieces = payload if isinstance(payload, list) else [payload]
    total = sum(len(p) for p in pieces)
    if total <= max_entry_bytes:
        return [pieces[0] if len(pieces) == 1 else b"".join(pieces)]
    chunk = max_entry_bytes - PART_OVERHEAD
    if chunk < 1:
        raise ValueError("entry limit %d leaves no room for a part" % max_entry_bytes)
    count = (total + chunk - 1) // chunk
    out = []
    views = [memoryview(p) for p in pieces]
    k = 0          # the piece being cut, and where in it
    pos = 0
    for i in range(count):
        want = min(chunk, total - i * chunk)
        slices = []
        while want:
            view = views[k]
            take = min(want, len(view) - pos)
            slices.append(view[pos:pos + take])
            pos += take
            want -= take
            if pos == len(view):
                k += 1
                pos = 0
        size = sum(len(x) for x in slices)
        out.append(b"".join([_PART_PREFIX, b"$%d\r\n%d\r\n$%d\r\n%d\r\n$%d\r\n" % (
            len(b"%d" % i), i, len(b"%d" % count), count, size)] + slices + [b"\r\n"]))
    return out


def is_part(payload) -> bool:
    return payload[:len(_PART_PREFIX)] == _PART_PREFIX


def _decode_part(payload):
    """(i, n, chunk) of a part entry; raises ValueError when it is not a whole one."""
    reader = hiredis.Reader()
    reader.feed(payload)
    try:
        argv = reader.gets()
    except hiredis.ProtocolError as exc:
        raise ValueError("part entry is not RESP: %s" % exc) from None
    if type(argv) is not list or len(argv) != 4 or reader.gets() is not False:
        raise ValueError("malformed part entry")
    if not (argv[1].isdigit() and argv[2].isdigit()):
        raise ValueError("malformed part numbers %r %r" % (argv[1], argv[2]))
    if encoded_len(argv) != len(payload):
        raise ValueError("part entry has bytes after its command")
    i, n = int(argv[1]), int(argv[2])
    if not 0 <= i < n or n < 2:
        raise ValueError("part %d of %d" % (i, n))
    return i, n, argv[3]


class PartAssembler:
    """Every reader's way from accepted entries to effects: whole entries decode at once, part entries once all
    of their parts arrived in order. feed() returns the effects to apply now ([] while parts are pending);
    reset() (an epoch marker) discards an incomplete tail. `discarded` counts the tails dropped."""

    __slots__ = ("_n", "_next", "_decoder", "discarded")

    def __init__(self):
        self._n = 0
        self._next = 0          # the part expected next (0: none pending)
        self._decoder = None
        self.discarded = 0

    @property
    def pending(self) -> int:
        """Parts held, waiting for the rest."""
        return self._next

    def reset(self):
        if self._next:
            self.discarded += 1
        self._n = self._next = 0
        self._decoder = None

    def feed_iter(self, payload, index=0):
        """feed() for a reader that works in slices: an iterable of the effects to apply now, a whole entry's
        decoded one command at a time as it is iterated (iter_payload). Iterate it to its end before the next
        feed."""
        if not is_part(payload):
            self.reset()
            return iter_payload(payload)
        return self.feed(payload, index)

    def feed(self, payload, index=0) -> list:
        """Raises ValueError for a payload that is not commands (as decode_payload). A part's chunk is decoded
        as it arrives, so a large command costs each entry its own share of the work."""
        if not is_part(payload):
            self.reset()
            return decode_payload(payload)
        i, n, chunk = _decode_part(payload)
        if i == 0:
            self.reset()
            self._n, self._decoder = n, _Decoder()
        elif not self._next or n != self._n or i != self._next:
            self.reset()   # out of sequence: the tail it would continue is gone (or never was)
            return []
        self._decoder.feed(chunk)
        if i < n - 1:
            self._next = i + 1
            return []
        decoder = self._decoder
        self._n = self._next = 0
        self._decoder = None
        return decoder.finish()
