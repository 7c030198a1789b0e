"""Builds the next snapshot in a separate process, so snapshots never pause the serving process.

It is recovery run elsewhere: the newest snapshot plus the journal after it, replayed through the pipeline,
then written as the next snapshot (so it lives with recovery, above snapshot/ and commands/ in the map).

    python -m durakv.recovery.builder --dir D --upto INDEX [--databases 16] [--keep 2]
                                      [--out TEMP_PATH --parent-pid PID]

Loads the newest valid snapshot of D, replays the journal entries after it up to INDEX and writes the
snapshot covering INDEX, then prints one line of JSON and exits 0. On failure prints {"ok": false,
"error": ...} and the message on stderr, and exits 1.

Started by a server (snapshot/adopt.py), it gets `--out` and `--parent-pid`: it writes and fsyncs only
that temporary file and never renames, prunes or truncates anything; the server verifies the file and
renames it into place itself, and only the server that asked for it does. It must not outlive that server
(a builder left running once wrote its snapshot while the restarted server was replaying), so it asks the
kernel to kill it when its parent dies (PR_SET_PDEATHSIG on Linux), checks at start that its parent is
still the pid it was given, and watches its stdin, a pipe the server holds open (end of file: the server is
gone) and its parent pid, exiting at once when either says so.

Run by hand (no --out, and only while no server runs on D), it writes a temporary file of its own, adopts
it the same way (verify, rename, verify again, keep the newest `keep` snapshots) and leaves the journal
alone; the server truncates the journal only up to what the oldest kept snapshot needs.

Test hooks (environment): DURAKV_SNAPSHOT_BUILDER_DELAY_MS=<ms> makes the builder sleep that long after
replaying and before writing (to test what happens to a builder whose server dies meanwhile);
DURAKV_SNAPSHOT_BUILDER_NO_PDEATHSIG=1 skips the prctl, to test the portable fallback alone.
"""

import argparse
import ctypes
import json
import logging
import os
import select
import signal
import sys
import threading
import time

from ..config import delay_hook
from ..keyspace import Keyspace
from ..snapshot.adopt import adopt_snapshot, journal_needed_from, prune_snapshots, temp_path
from ..snapshot.format import load_newest_snapshot, write_snapshot_file
from . import pipeline_apply_fn, replay_journal

log = logging.getLogger("durakv.snapshot")

DELAY_ENV = "DURAKV_SNAPSHOT_BUILDER_DELAY_MS"
NO_PDEATHSIG_ENV = "DURAKV_SNAPSHOT_BUILDER_NO_PDEATHSIG"
_PR_SET_PDEATHSIG = 1
_WATCH_INTERVAL_S = 0.2


def build(data_dir, upto: int, databases: int = 16, keep: int = 2, out=None, key_save_delay_us=0) -> dict:
    """Does the work of the builder process; returns the result dict (raises on failure). With `out` the
    snapshot is only written (fsynced) to that path; without, it is also adopted (renamed into place)."""
    started = time.monotonic()
    keyspace = Keyspace(num_dbs=databases)
    keyspace.expire_enabled = False
    apply_fn = pipeline_apply_fn(keyspace)
    base_index, base_path = load_newest_snapshot(data_dir, keyspace, apply_fn)
    if base_index >= upto:
        deleted = [] if out else prune_snapshots(data_dir, keep)
        return {"ok": True, "index": base_index, "path": base_path, "base_index": base_index, "entries": 0,
                "already": True, "deleted": deleted, "journal_from": journal_needed_from(data_dir, keep),
                "elapsed_ms": int((time.monotonic() - started) * 1000)}
    last = replay_journal(data_dir, apply_fn, after=base_index, upto=upto)
    if last != upto:
        raise RuntimeError("journal replay stopped at index %d, not %d" % (last, upto))
    delay_ms = int(os.environ.get(DELAY_ENV, "0") or 0)
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)
    target = out or temp_path(data_dir, upto, os.getpid())
    os.makedirs(os.path.dirname(target), exist_ok=True)
    info = write_snapshot_file(target, keyspace, upto, journal_follows=True,
                               on_key=delay_hook(key_save_delay_us))   # rdb-key-save-delay
    result = {"ok": True, "index": upto, "path": target, "base_index": base_index,
              "entries": upto - base_index, "keys": info["keys"], "commands": info["commands"],
              "bytes": info["bytes"], "crc": info["crc"], "deleted": [], "already": False}
    if out is None:
        adopted = adopt_snapshot(data_dir, target, upto, base_index, keep)
        result.update(path=adopted.path, deleted=adopted.deleted, journal_from=adopted.journal_from)
    result["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    return result


def _die_with_parent(parent_pid: int):
    """Makes sure this process does not outlive the server that started it."""
    if sys.platform.startswith("linux") and os.environ.get(NO_PDEATHSIG_ENV) != "1":
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        except (OSError, AttributeError) as exc:
            log.warning("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    # The parent may have died before the prctl above: then we were already re-parented.
    if os.getppid() != parent_pid:
        print("snapshot builder: the server (pid %d) that asked for this snapshot is gone" % parent_pid,
              file=sys.stderr, flush=True)
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int):
    """The portable fallback: the server holds our stdin's pipe open; end of file or a new parent pid means
    it is gone."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        fd = -1
    while True:
        if fd >= 0:
            try:
                ready, _w, _x = select.select([fd], [], [], _WATCH_INTERVAL_S)
            except (OSError, ValueError):
                ready, fd = [], -1
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    os._exit(1)
        else:
            time.sleep(_WATCH_INTERVAL_S)
        if os.getppid() != parent_pid:
            os._exit(1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m durakv.recovery.builder",
                                     description="Write the snapshot covering journal index UPTO.")
    parser.add_argument("--dir", required=True, help="data directory (holds journal/ and snapshots/)")
    parser.add_argument("--upto", required=True, type=int, help="journal index the snapshot covers")
    parser.add_argument("--databases", type=int, default=16, help="number of databases (default 16)")
    parser.add_argument("--keep", type=int, default=2, help="snapshots to keep, the new one included")
    parser.add_argument("--out", help="write only this temporary file (the server that asked adopts it)")
    parser.add_argument("--parent-pid", type=int, help="exit as soon as this process (the server) is gone")
    parser.add_argument("--key-save-delay", type=int, default=0,
                        help="rdb-key-save-delay: microseconds to wait before each key is written (debug)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.parent_pid:
        _die_with_parent(args.parent_pid)
    if args.upto < 1 or args.keep < 1:
        print(json.dumps({"ok": False, "error": "--upto and --keep must be >= 1"}), flush=True)
        print("snapshot builder: --upto and --keep must be >= 1", file=sys.stderr)
        return 2
    try:
        result = build(args.dir, args.upto, args.databases, args.keep, out=args.out,
                       key_save_delay_us=args.key_save_delay)
    except Exception as exc:  # report any failure as one line, exit non-zero
        message = "%s: %s" % (type(exc).__name__, exc)
        print(json.dumps({"ok": False, "error": message}), flush=True)
        print("snapshot builder failed: %s" % message, file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
