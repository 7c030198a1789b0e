"""Start-up recovery (newest valid snapshot + the journal after it) and the journal entry codec.

A journal entry's payload is a concatenation of RESP-encoded commands (effects). `SELECT n` switches the
database of the commands after it; every payload starts with the SELECT of its first effect, so an entry
is self-contained (a replica or a reader can start at any entry).

Recovery runs synchronously, before the server serves, with keyspace.expire_enabled False: time does not
delete keys during replay, only the DEL effects in the journal do. The caller supplies
apply_fn(db_id, argv), which runs one command (the server passes one that goes through its Dispatcher;
dispatcher_apply_fn builds such a function for a bare Keyspace).
"""

import logging

import hiredis

from .commands import load_all
from .commands.dispatch import Dispatcher
from .commands.session import Session
from .errors import DurakvError, JournalCorrupt
from .journal.base import JournalTruncated
from .journal.local import iter_entries, journal_dir, list_segments
from .protocol.parser import request_len
from .protocol.resp import ErrorReply, encode_command
from .snapshot.format import load_newest_snapshot

log = logging.getLogger("durakv.recovery")

_SELECT = [encode_command((b"SELECT", b"%d" % i)) for i in range(64)]


class RecoveryError(DurakvError):
    """Replaying a snapshot or journal command failed (the state cannot be rebuilt)."""


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


def apply_payload(payload) -> list:
    """Decodes a journal payload into [(db_id, argv)] (argv a list of bytes; SELECT consumed).
    Raises ValueError when the payload is not a whole sequence of commands."""
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
        consumed += request_len(argv)
        if len(argv) == 2 and argv[0].upper() == b"SELECT":
            if not argv[1].isdigit():
                raise ValueError("bad SELECT %r in payload" % argv[1])
            db_id = int(argv[1])
        else:
            out.append((db_id, argv))
    if consumed != len(payload):
        raise ValueError("payload ends inside a command (%d of %d bytes decoded)" % (consumed, len(payload)))
    return out


decode_payload = apply_payload


def dispatcher_apply_fn(keyspace):
    """apply_fn(db_id, argv) that runs argv through a Dispatcher on keyspace and raises RecoveryError when
    the command replies with an error (an effect must always apply)."""
    load_all()
    dispatcher = Dispatcher(keyspace)
    session = Session()
    ctx = dispatcher.new_context(session)
    ctx.replaying = True
    dbs = keyspace.dbs
    execute = dispatcher.execute

    def apply(db_id, argv):
        if db_id != session.db_id:
            if not 0 <= db_id < len(dbs):
                raise RecoveryError("replaying %r: database %d does not exist (databases: %d)"
                                    % (argv[:1], db_id, len(dbs)))
            session.db_id = db_id
            ctx.db = dbs[db_id]
        reply, _effects, _cmd = execute(session, argv)
        if type(reply) is ErrorReply:
            raise RecoveryError("replaying %s in db %d failed: %s"
                                % (b" ".join(a[:64] for a in argv[:4]).decode("utf-8", "replace"), db_id,
                                   reply.text))

    apply.dispatcher = dispatcher
    return apply


def replay_journal(dir, apply_fn, after=0, upto=None) -> int:
    """Applies the journal entries after `after` (up to `upto`); returns the last index applied (`after` if
    none). Raises JournalCorrupt if the journal no longer holds entry after+1 or, with upto, ends early."""
    last = after
    try:
        for entry in iter_entries(dir, after=after, upto=upto):
            if entry.index != last + 1:
                raise JournalCorrupt("journal: entry %d follows %d" % (entry.index, last))
            try:
                effects = apply_payload(entry.payload)
            except ValueError as exc:
                raise JournalCorrupt("journal entry %d: %s" % (entry.index, exc)) from None
            for db_id, argv in effects:
                apply_fn(db_id, argv)
            last = entry.index
    except JournalTruncated as exc:
        raise JournalCorrupt("the journal no longer holds the entries after index %d: %s" % (after, exc)) from None
    return last


def _check_reaches(dir, index):
    """Raises JournalCorrupt unless the journal holds entry `index` or starts right after it (or is absent)."""
    segs = list_segments(journal_dir(dir))
    if not segs or segs[0][0] > index:
        return
    for entry in iter_entries(dir, after=index - 1, upto=index):
        if entry.index == index:
            return
    raise JournalCorrupt("the journal ends before index %d, which the snapshot covers" % index)


def recover(dir, keyspace, apply_fn, journal=True):
    """Rebuilds keyspace from data directory `dir`: the newest valid snapshot, then every journal entry
    after it (journal=False: the snapshot only, for a server running without a journal). Returns
    (snapshot_index, last_index) — 0 for no snapshot; last_index is the last journal entry applied
    (snapshot_index when none). Expiry is off during the replay and restored after.

    Open the journal afterwards with `open(base_index=snapshot_index)`, so that a journal holding no entry
    continues its numbering after the snapshot."""
    saved = keyspace.expire_enabled
    keyspace.expire_enabled = False
    try:
        snap_index, snap_path = load_newest_snapshot(dir, keyspace, apply_fn)
        if snap_index and journal:
            try:
                _check_reaches(dir, snap_index)
            except JournalCorrupt as exc:
                raise JournalCorrupt("%s (snapshot %s)" % (exc, snap_path)) from None
        last = replay_journal(dir, apply_fn, after=snap_index) if journal else snap_index
    finally:
        keyspace.expire_enabled = saved
    log.info("recovered %s: snapshot index %d%s, journal replayed to index %d", dir, snap_index,
             " (%s)" % snap_path if snap_path else "", last)
    return snap_index, last
