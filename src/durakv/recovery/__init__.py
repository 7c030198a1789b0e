"""Start-up recovery: the newest valid snapshot + the journal after it, replayed through the pipeline.

Recovery runs synchronously, before the server serves, with keyspace.expire_enabled False: time does not
delete keys during replay, only the DEL effects in the journal do. The caller supplies
apply_fn(db_id, argv), which runs one effect (the server's goes through its pipeline's apply();
pipeline_apply_fn builds such a function for a bare Keyspace). The entry codec is journal/codec.py.
"""

import logging

from ..commands import load_all
from ..commands.pipeline import Pipeline
from ..commands.session import Session
from ..errors import DurakvError, JournalCorrupt
from ..journal.base import JournalTruncated
from ..journal.codec import PartAssembler
from ..journal.walformat import journal_dir, list_segments
from ..journal.walscan import iter_entries
from ..protocol.resp import ErrorReply
from ..snapshot.format import load_newest_snapshot

log = logging.getLogger("durakv.recovery")


class RecoveryError(DurakvError):
    """Replaying a snapshot or journal command failed (the state cannot be rebuilt)."""


def pipeline_apply_fn(keyspace):
    """apply_fn(db_id, argv) that runs argv through a Pipeline on keyspace (Pipeline.apply: no admission,
    no statistics) and raises RecoveryError when the command replies with an error (an effect must always
    apply)."""
    load_all()
    pipeline = Pipeline(keyspace)
    pipeline.stats_enabled = False
    session = Session()
    pipeline.new_context(session).replaying = True
    dbs = keyspace.dbs

    def apply(db_id, argv):
        if not 0 <= db_id < len(dbs):
            raise RecoveryError("replaying %r: database %d does not exist (databases: %d)"
                                % (argv[:1], db_id, len(dbs)))
        reply = pipeline.apply(session, db_id, argv)
        if type(reply) is ErrorReply:
            raise RecoveryError("replaying %s in db %d failed: %s"
                                % (b" ".join(a[:64] for a in argv[:4]).decode("utf-8", "replace"), db_id,
                                   reply.text))

    apply.pipeline = pipeline
    return apply


def replay_journal(dir, apply_fn, after=0, upto=None) -> int:
    """Applies the journal entries after `after` (up to `upto`); returns the last index applied (`after` if
    none). Raises JournalCorrupt if the journal no longer holds entry after+1 or, with upto, ends early.
    A command carried in continuation parts applies at its last part; parts whose last one never came (the
    writer crashed, or failed, between two) are dropped when the next entry is not their continuation."""
    last = after
    parts = PartAssembler()
    try:
        for entry in iter_entries(dir, after=after, upto=upto):
            if entry.index != last + 1:
                raise JournalCorrupt("journal: entry %d follows %d" % (entry.index, last))
            try:
                effects = parts.feed(entry.payload, entry.index)
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
