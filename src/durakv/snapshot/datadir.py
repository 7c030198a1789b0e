"""The first step of start-up: take the data directory for this process and check it before anything is read.

`open_data_dir(dir, config)` (called once, at the top of Server.start, for every journal backend):

1. locks the directory (journal/lock.py): a second server on the same --dir stops here, naming the holder;
2. removes temporary snapshot files of builders that are gone (never adopted, never to be);
3. with the local journal, checks the journal against what the snapshots say (journal/walcheck.py's
   check_journal): a torn last append is cut and logged; any other damage, or a journal missing while the
   newest snapshot says it continues after it, stops start-up (JournalCorrupt) unless
   `journal-load-truncated yes`, which cuts at the first damage and logs every entry range dropped.

This sits in snapshot/ because it is the lowest layer that knows both the journal and the snapshot files.
"""

import logging
import os

from ..journal.lock import lock_data_dir
from ..journal.walcheck import check_journal
from ..journal.walformat import journal_dir
from .adopt import remove_stale_temps
from .format import SnapshotCorrupt, list_snapshots, read_info

log = logging.getLogger("durakv.datadir")


def journal_expectation(data_dir):
    """(expect_after, reason) for check_journal: whether the journal must hold segments, and why."""
    for index, path in list_snapshots(data_dir):
        try:
            info = read_info(path)
        except (SnapshotCorrupt, OSError):
            continue  # recovery falls back past it too
        if info.journal_follows:
            return index, ("snapshot %s covers index %d and was built from the journal, which continues after it"
                           % (path, index))
        return None, ""  # written from memory (durability none): the journal may have been dropped after it
    if os.path.isdir(journal_dir(data_dir)):
        return 0, "the journal directory is only ever created holding a segment"
    return None, ""


def open_data_dir(data_dir, config):
    """Locks data_dir for this process and checks it (see the module text). Returns the lock, which the
    caller keeps for the life of the process. Raises DataDirInUse, JournalCorrupt or OSError."""
    lock = lock_data_dir(data_dir)
    try:
        check_data_dir(data_dir, config)
    except BaseException:
        lock.release()
        raise
    return lock


def check_data_dir(data_dir, config):
    """Steps 2 and 3 of open_data_dir, for a caller that holds the lock already: a standalone server takes the
    lock, listens (answering -LOADING) and runs this on a worker thread, since reading and checking a large
    journal takes a while. Raises JournalCorrupt or OSError."""
    remove_stale_temps(data_dir)
    if config["journal-backend"] == "local":
        expect_after, reason = journal_expectation(data_dir)
        check_journal(data_dir, load_truncated=config["journal-load-truncated"], expect_after=expect_after,
                      expect_reason=reason, remember=True)
