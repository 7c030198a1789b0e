"""Builds the next snapshot in a separate process, so snapshots never pause the serving process.

    python -m durakv.snapshot.builder --dir D --upto INDEX [--databases 16] [--keep 2]

Loads the newest valid snapshot of D, replays the journal entries after it up to INDEX, writes
D/snapshots/snapshot-INDEX.dks, deletes older snapshots except the newest `keep`, prints one line of JSON
and exits 0. On failure prints {"ok": false, "error": ...} and the message on stderr, and exits 1.

The journal is only read here (the server keeps appending meanwhile); the server truncates it
(journal.truncate_before(INDEX + 1)) once this process has succeeded.
"""

import argparse
import json
import logging
import os
import sys
import time

# The snapshot package itself stays below commands/ in the layering; only this entry point (a process of
# its own, never imported by the package) needs the command table, through recovery, to replay the journal.
from ..keyspace import Keyspace
from ..recovery import pipeline_apply_fn, replay_journal
from .format import (SNAPSHOT_RE, list_snapshots, load_newest_snapshot, snapshot_path, snapshots_dir,
                     write_snapshot)

log = logging.getLogger("durakv.snapshot")


def build(data_dir, upto: int, databases: int = 16, keep: int = 2) -> dict:
    """Does the work of the builder process; returns the result dict (raises on failure)."""
    started = time.monotonic()
    keyspace = Keyspace(num_dbs=databases)
    keyspace.expire_enabled = False
    apply_fn = pipeline_apply_fn(keyspace)
    base_index, base_path = load_newest_snapshot(data_dir, keyspace, apply_fn)
    if base_index >= upto:
        deleted = prune(data_dir, keep)
        return {"ok": True, "index": base_index, "path": base_path, "base_index": base_index, "entries": 0,
                "already": True, "deleted": deleted, "elapsed_ms": int((time.monotonic() - started) * 1000)}
    last = replay_journal(data_dir, apply_fn, after=base_index, upto=upto)
    if last != upto:
        raise RuntimeError("journal replay stopped at index %d, not %d" % (last, upto))
    info = write_snapshot(snapshot_path(data_dir, upto), keyspace, upto)
    deleted = prune(data_dir, keep)
    return {"ok": True, "index": upto, "path": info["path"], "base_index": base_index,
            "entries": upto - base_index, "keys": info["keys"], "commands": info["commands"],
            "bytes": info["bytes"], "deleted": deleted, "already": False,
            "elapsed_ms": int((time.monotonic() - started) * 1000)}


def prune(data_dir, keep: int = 2):
    """Deletes snapshots older than the newest `keep`, and temporary files of builders no longer running.
    Returns the deleted paths."""
    deleted = []
    for _index, path in list_snapshots(data_dir)[keep:]:
        try:
            os.unlink(path)
            deleted.append(path)
        except FileNotFoundError:
            pass
    sdir = snapshots_dir(data_dir)
    try:
        names = os.listdir(sdir)
    except FileNotFoundError:
        names = []
    for name in names:
        base, sep, pid = name.rpartition(".tmp.")
        if not sep or not SNAPSHOT_RE.match(base) or not pid.isdigit():
            continue
        if int(pid) != os.getpid() and not _alive(int(pid)):
            path = os.path.join(sdir, name)
            try:
                os.unlink(path)
                deleted.append(path)
            except FileNotFoundError:
                pass
    return deleted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m durakv.snapshot.builder",
                                     description="Write the snapshot covering journal index UPTO.")
    parser.add_argument("--dir", required=True, help="data directory (holds journal/ and snapshots/)")
    parser.add_argument("--upto", required=True, type=int, help="journal index the snapshot covers")
    parser.add_argument("--databases", type=int, default=16, help="number of databases (default 16)")
    parser.add_argument("--keep", type=int, default=2, help="snapshots to keep, the new one included")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.upto < 1 or args.keep < 1:
        print(json.dumps({"ok": False, "error": "--upto and --keep must be >= 1"}), flush=True)
        print("snapshot builder: --upto and --keep must be >= 1", file=sys.stderr)
        return 2
    try:
        result = build(args.dir, args.upto, args.databases, args.keep)
    except Exception as exc:  # report any failure as one line, exit non-zero
        message = "%s: %s" % (type(exc).__name__, exc)
        print(json.dumps({"ok": False, "error": message}), flush=True)
        print("snapshot builder failed: %s" % message, file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
