"""The data-directory lock: one durakv process per --dir.

Two servers appending to one journal interleave records that each believes it numbered, and both
acknowledge; the next start-up then finds an index gap and nothing of either is usable. So a server takes an
exclusive flock on `<dir>/durakv.lock` before it reads anything in the directory and holds it for the life of
the process (the kernel drops it when the process dies, kill -9 included, so a stale lock file never blocks a
restart). The holder's pid is written into the file so that the refusal can name it.

The descriptor is close-on-exec: a deposed primary that re-executes itself (replication/promotion.py) releases
the lock at exec and takes it again as its new image starts, and the snapshot builder (a child process)
never inherits it; the builder takes no lock of its own and only reads the journal up to the index it was
given and writes its own temporary file.
"""

import errno
import fcntl
import os

from ..errors import DataDirInUse, with_path

LOCK_NAME = "durakv.lock"


class DataDirLock:
    """An acquired lock; keep a reference for as long as the process serves the directory."""

    __slots__ = ("path", "fd", "pid")

    def __init__(self, path, fd, pid):
        self.path = path
        self.fd = fd
        self.pid = pid

    def release(self):
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor of the open file drops the flock
            self.fd = -1

    def __repr__(self):
        return "DataDirLock(%s, pid %d)" % (self.path, self.pid)


def _read_holder(fd) -> str:
    try:
        data = os.pread(fd, 64, 0)
    except OSError:
        return ""
    text = data.decode("ascii", "replace").strip()
    return text if text.isdigit() else ""


def lock_data_dir(data_dir) -> DataDirLock:
    """Creates data_dir if needed and locks it for this process. Raises DataDirInUse naming the holder's pid
    when another process holds it, OSError when the lock file cannot be created."""
    data_dir = os.fspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _read_holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = "pid %s" % holder if holder else "a process that has not written its pid yet"
            raise DataDirInUse("the data directory %s is in use by another durakv process (%s, lock file %s); "
                               "two servers must never share a --dir" % (os.path.abspath(data_dir), who, path),
                               holder_pid=int(holder) if holder else None) from None
        raise
    pid = os.getpid()
    text = b"%d\n" % pid
    try:
        # Write before cutting, so a contender reading meanwhile sees a whole pid (old or new), never "".
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
    except OSError as exc:
        os.close(fd)
        raise with_path(exc, path) from exc
    return DataDirLock(path, fd, pid)
