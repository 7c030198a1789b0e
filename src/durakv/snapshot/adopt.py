"""Adopting a snapshot: the serving process, not the builder, puts a new snapshot in place.

The builder (recovery/builder.py, a child process) writes `snapshot-<index>.dks.tmp.<server pid>.<token>` and
fsyncs it. The server that started it checks the checksum, renames the file into place, fsyncs the directory
and reads the checksum back under the final name; only then are older snapshots pruned. A temporary file is
adopted only by the process whose pid it carries, so a builder left over from a server that died can never
put its snapshot under a restarted server (and at start-up such files are removed).

Two snapshots are kept (the new one and the one it was built from), and the journal is kept from the older
one on (`journal_from`): one bad snapshot file is then not fatal, start-up falls back to the previous one
plus the journal after it.
"""

import asyncio
import json
import logging
import os
import sys
from typing import NamedTuple

from .format import SNAPSHOT_RE, SnapshotCorrupt, fsync_dir, list_snapshots, snapshot_path, snapshots_dir, \
    verify_snapshot

log = logging.getLogger("durakv.snapshot")

_OUTPUT_LIMIT = 64 * 1024  # a builder prints one line of JSON; its stderr is kept only for the error text


class Adopted(NamedTuple):
    index: int          # the snapshot now newest
    path: str
    journal_from: int   # the journal must keep entries >= this (the older kept snapshot's index + 1)
    deleted: list       # snapshot and temporary files removed


def temp_path(data_dir, index: int, owner_pid: int, token: str = "") -> str:
    """Where a builder writes the snapshot covering `index` for the process `owner_pid`."""
    base = "%s.tmp.%d" % (snapshot_path(data_dir, index), owner_pid)
    return base + "." + token if token else base


def temp_owner(path):
    """The pid a temporary snapshot file was written for, or None when the name is not one."""
    base, sep, rest = os.path.basename(path).partition(".tmp.")
    if not sep or not SNAPSHOT_RE.match(base):
        return None
    pid = rest.split(".", 1)[0]
    return int(pid) if pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(data_dir):
    """Deletes temporary snapshot files whose owner is no longer running (or is a previous process that had
    our pid). Returns the deleted paths."""
    sdir = snapshots_dir(data_dir)
    try:
        names = os.listdir(sdir)
    except FileNotFoundError:
        return []
    deleted = []
    me = os.getpid()
    for name in names:
        path = os.path.join(sdir, name)
        owner = temp_owner(path)
        if owner is None or (owner != me and _alive(owner)):
            continue
        try:
            os.unlink(path)
            deleted.append(path)
            log.info("removed %s (the snapshot builder that wrote it is gone; it was never adopted)", path)
        except FileNotFoundError:
            pass
    return deleted


def journal_needed_from(data_dir, keep: int = 2) -> int:
    """The first journal index start-up may need: the oldest kept snapshot's index + 1, or 1 while fewer
    than `keep` snapshots exist (the fallback is then the empty state plus the whole journal)."""
    kept = list_snapshots(data_dir)[:keep]
    return kept[keep - 1][0] + 1 if len(kept) >= keep else 1


def prune_snapshots(data_dir, keep: int = 2, keep_index=None):
    """Deletes every snapshot but the newest `keep`, where the newest one and `keep_index` (the snapshot a
    new one was built from, which the builder just verified) always count among them. Returns the deleted
    paths."""
    snaps = list_snapshots(data_dir)
    present = [i for i, _ in snaps]
    kept = present[:1]
    if keep_index and keep_index in present and keep_index not in kept and len(kept) < keep:
        kept.append(keep_index)
    for i in present:
        if len(kept) >= keep:
            break
        if i not in kept:
            kept.append(i)
    deleted = []
    for index, path in snaps:
        if index in kept:
            continue
        try:
            os.unlink(path)
            deleted.append(path)
        except FileNotFoundError:
            pass
    if deleted:
        fsync_dir(snapshots_dir(data_dir))
    return deleted


def _discard(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def adopt_snapshot(data_dir, tmp_path, index: int, base_index: int = 0, keep: int = 2) -> Adopted:
    """Puts the builder's verified temporary file in place as the snapshot covering `index`: checks that it
    was written for this process, verifies it, renames it, fsyncs the directory, verifies it again under
    its final name, then prunes older snapshots (keeping the one it was built from). Raises (and removes the
    file) when any check fails; the snapshots already there are then untouched."""
    owner = temp_owner(tmp_path)
    if owner != os.getpid():
        raise RuntimeError("snapshot %s was not written for this process (pid %d), not adopting it"
                           % (tmp_path, os.getpid()))
    try:
        got = verify_snapshot(tmp_path)[0]
        if got != index:
            raise SnapshotCorrupt("snapshot %s covers index %d, not %d" % (tmp_path, got, index))
    except BaseException:
        _discard(tmp_path)
        raise
    final = snapshot_path(data_dir, index)
    sdir = snapshots_dir(data_dir)
    os.rename(tmp_path, final)
    fsync_dir(sdir)
    try:
        verify_snapshot(final)  # read back under its final name before anything older is let go
    except BaseException:
        _discard(final)
        fsync_dir(sdir)
        raise
    deleted = prune_snapshots(data_dir, keep, keep_index=base_index or None)
    deleted += remove_stale_temps(data_dir)
    return Adopted(index, final, journal_needed_from(data_dir, keep), deleted)


async def _read_bounded(stream, limit=_OUTPUT_LIMIT):
    kept = bytearray()
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(kept)
        kept += chunk
        if len(kept) > limit:
            del kept[:len(kept) - limit]


async def build_snapshot(data_dir, upto: int, databases: int = 16, keep: int = 2, key_save_delay_us=0) -> Adopted:
    """Runs the builder process for the snapshot covering journal index `upto` and adopts its file. The
    builder gets a pipe as stdin that this process never writes (it exits at end of file, i.e. when we
    die) and dies with us. Returns Adopted; the caller truncates the journal before `journal_from`."""
    data_dir = os.fspath(data_dir)
    os.makedirs(snapshots_dir(data_dir), exist_ok=True)
    tmp = temp_path(data_dir, upto, os.getpid(), os.urandom(6).hex())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durakv.recovery.builder", "--dir", data_dir, "--upto", str(upto),
        "--databases", str(databases), "--keep", str(keep), "--out", tmp, "--parent-pid", str(os.getpid()),
        "--key-save-delay", str(key_save_delay_us),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.gather(_read_bounded(proc.stdout), _read_bounded(proc.stderr))
        code = await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled (shutdown): the builder must not go on alone
            proc.kill()
            await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
    if code != 0:
        _discard(tmp)
        raise RuntimeError("snapshot builder failed (exit %d): %s" % (code, err.decode(errors="replace")[-500:]))
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        _discard(tmp)
        raise RuntimeError("snapshot builder printed no result: %r" % out[-200:]) from None
    if result.get("already"):
        return Adopted(result["index"], result["path"], journal_needed_from(data_dir, keep), [])
    if result.get("index") != upto or result.get("path") != tmp:
        _discard(tmp)
        raise RuntimeError("snapshot builder wrote %r for index %r, not %s for %d"
                           % (result.get("path"), result.get("index"), tmp, upto))
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, adopt_snapshot, data_dir, tmp, upto, result.get("base_index", 0), keep)
