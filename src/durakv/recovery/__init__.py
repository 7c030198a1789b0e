"""Start-up recovery: the newest valid snapshot + the journal after it, replayed through the pipeline.

Recovery runs with keyspace.expire_enabled False: time does not delete keys during replay, only the DEL
effects in the journal do. Its work is a generator of small steps (`recover_steps`: one command applied, one
chunk checked): a server drives it in slices of its event loop while it answers -LOADING (recovery/loading.py),
`recover` drives it at once. The caller supplies
apply_fn(db_id, argv), which runs one effect (the server's goes through its pipeline's apply();
pipeline_apply_fn builds such a function for a bare Keyspace). The entry codec is journal/codec.py.
"""

import logging
import os

from ..commands import load_all
from ..commands.pipeline import Pipeline
from ..commands.session import Session
from ..errors import DurakvError, JournalCorrupt
from ..journal.base import JournalTruncated
from ..journal.codec import PartAssembler
from ..journal.walformat import HEADER_SIZE as RECORD_HEADER_BYTES, journal_dir, list_segments
from ..journal.walscan import iter_entries
from ..protocol.resp import ErrorReply
from ..snapshot.format import list_snapshots, load_newest_snapshot_steps, run_steps
from ..snapshot.format import load_newest_snapshot  # noqa: F401 - server/server.py's DEBUG RELOAD MERGE takes it here

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
    return run_steps(replay_journal_steps(dir, apply_fn, after, upto))


def planned_bytes(dir, journal=True) -> int:
    """What a start-up load will read, for INFO's loading_total_bytes from its start (as Valkey knows its file's
    size): the newest snapshot and the journal's segments after it (those of an older snapshot, should the
    newest prove damaged, are not counted)."""
    snaps = list_snapshots(dir)
    total, after = 0, 0
    if snaps:
        after, path = snaps[0]
        try:
            total = os.path.getsize(path)
        except OSError:
            pass
    return total + (journal_bytes_after(dir, after) if journal else 0)


def journal_bytes_after(dir, after) -> int:
    """The size of the journal's segments that may hold entries after `after` (INFO's loading_total_bytes)."""
    segs = list_segments(journal_dir(dir))
    total = 0
    for i, (_first, path) in enumerate(segs):
        if i + 1 < len(segs) and segs[i + 1][0] <= after + 1:
            continue  # every entry of this one is at or before `after`
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total


def replay_journal_steps(dir, apply_fn, after=0, upto=None, progress=None):
    """replay_journal as a generator: yields after each effect applied (a 16 MB entry holds some 100,000 of
    them, decoded one at a time) and after each entry; returns the last index applied. `progress`
    (recovery/loading.LoadProgress, or None) counts the bytes of the entries replayed in loaded_bytes."""
    last = after
    parts = PartAssembler()
    try:
        for entry in iter_entries(dir, after=after, upto=upto):
            if entry.index != last + 1:
                raise JournalCorrupt("journal: entry %d follows %d" % (entry.index, last))
            try:
                for db_id, argv in parts.feed_iter(entry.payload, entry.index):
                    apply_fn(db_id, argv)
                    yield
            except ValueError as exc:
                raise JournalCorrupt("journal entry %d: %s" % (entry.index, exc)) from None
            last = entry.index
            if progress is not None:
                progress.loaded_bytes += RECORD_HEADER_BYTES + len(entry.payload)
            yield
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
    return run_steps(recover_steps(dir, keyspace, apply_fn, journal))


def recover_steps(dir, keyspace, apply_fn, journal=True, progress=None):
    """recover as a generator of small steps (a snapshot's commands, the journal's effects), for a server that
    loads in slices of its event loop (recovery/loading.py Slicer); returns (snapshot_index, last_index).
    `progress` (LoadProgress, or None) counts the bytes of the snapshot and of the journal replayed in
    loaded_bytes; its total_bytes is the caller's (planned_bytes)."""
    saved = keyspace.expire_enabled
    keyspace.expire_enabled = False
    try:
        snap_index, snap_path = yield from load_newest_snapshot_steps(dir, keyspace, apply_fn, progress,
                                                                      count_total=False)
        if snap_index and journal:
            try:
                _check_reaches(dir, snap_index)
            except JournalCorrupt as exc:
                raise JournalCorrupt("%s (snapshot %s)" % (exc, snap_path)) from None
        if journal:
            last = yield from replay_journal_steps(dir, apply_fn, after=snap_index, progress=progress)
        else:
            last = snap_index
    finally:
        keyspace.expire_enabled = saved
    log.info("recovered %s: snapshot index %d%s, journal replayed to index %d", dir, snap_index,
             " (%s)" % snap_path if snap_path else "", last)
    return snap_index, last
