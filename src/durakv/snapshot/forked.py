"""Work on an image of memory in a forked child, as Valkey forks for BGSAVE and for a replica's RDB.

A child sees memory as it was at the fork (copy-on-write), so it can encode the whole dataset while the parent's
event loop goes on serving and changing it. What the child may do is narrow: it drops every inherited descriptor
but the ones it is given (client sockets, listeners, NATS connections, the journal: a connection the parent
closes must not stay open in the child), turns the collector off (no finalizer of a copied object, a transport or
a file, may run there), asks the kernel to kill it if the parent dies (PR_SET_PDEATHSIG: it never outlives its
server), runs its work and `os._exit`s without logging or flushing anything the parent owns. The parent learns of
its exit from a pidfd on the loop, so nothing blocks while the child works.

Used by a replica's periodic snapshot (replication/snapshots.py: `write_snapshot_forked`) and by the RDB that
opens a SYNC stream (server/replfeed.py).
"""

import asyncio
import ctypes
import gc
import os
import signal
import sys
import time

from ..config import delay_hook
from .format import write_snapshot_file

_PR_SET_PDEATHSIG = 1


class ChildFailed(Exception):
    """A forked child's work failed (its exit status is not 0)."""


def _die_with_parent():
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass      # the parent's pidfd wait still reaps it; it only may outlive a parent killed meanwhile


# A child whose work failed with an OSError exits with ERRNO_STATUS + its errno (errnos are below 134 on Linux),
# so that the parent can say what failed (a full disk) and where; any other failure exits 1.
ERRNO_STATUS = 100


def fork_child(work, keep_fd=None):
    """Forks; the child runs work() on its copy of memory and exits 0 (ERRNO_STATUS + errno if work raised an
    OSError, else 1 if it raised), keeping only descriptor `keep_fd` (None: none). Returns (pid, fork_usec) in
    the parent: how long the fork took (INFO stats latest_fork_usec)."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            gc.disable()
            _die_with_parent()
            top = os.sysconf("SC_OPEN_MAX")
            if keep_fd is None:
                os.closerange(0, top)
            else:
                os.closerange(0, keep_fd)
                os.closerange(keep_fd + 1, top)
            work()
            status = 0
        except OSError as exc:
            if exc.errno and 0 < exc.errno < 256 - ERRNO_STATUS:
                status = ERRNO_STATUS + exc.errno
        finally:
            os._exit(status)
    return pid, int((time.perf_counter() - started) * 1e6)


def child_error(code, path):
    """What a child's exit status says failed: an OSError naming `path` (the file it wrote), else ChildFailed."""
    if code > ERRNO_STATUS:
        errno = code - ERRNO_STATUS
        return OSError(errno, os.strerror(errno), str(path))
    return ChildFailed("writing %s failed in a child process (exit status %d)" % (path, code))


def watch_exit(loop, pid, callback):
    """Calls callback(exit_code) on the loop once child `pid` has exited (and is reaped). Returns a function
    that kills the child and stops watching (for a caller that gives up on it)."""
    pidfd = os.pidfd_open(pid)
    state = {"open": True}

    def exited():
        loop.remove_reader(pidfd)
        os.close(pidfd)
        state["open"] = False
        _pid, status = os.waitpid(pid, 0)
        callback(os.waitstatus_to_exitcode(status))

    def cancel():
        if state["open"]:
            state["open"] = False
            loop.remove_reader(pidfd)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(pidfd)

    loop.add_reader(pidfd, exited)
    return cancel


async def write_snapshot_forked(path, keyspace, index: int, journal_follows=False, forked=None,
                                key_save_delay_us=0) -> int:
    """write_snapshot_file(path, keyspace, index) in a forked child: the image is memory at the moment of the
    call, whatever the loop changes while the child writes. Returns the file's size; raises (the file removed)
    an OSError naming path if the child's write failed (a full disk), else ChildFailed if the child failed.
    forked(usec): told how long the fork took. key_save_delay_us: rdb-key-save-delay, waited in the child before
    each key. Cancelled, it kills the child."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    on_key = delay_hook(key_save_delay_us)
    pid, fork_usec = fork_child(lambda: write_snapshot_file(path, keyspace, index, journal_follows=journal_follows,
                                                            on_key=on_key))
    if forked is not None:
        forked(fork_usec)
    cancel = watch_exit(loop, pid, lambda code: done.done() or done.set_result(code))
    try:
        code = await done
    except asyncio.CancelledError:
        cancel()
        _remove(path)
        raise
    if code != 0:
        _remove(path)
        raise child_error(code, path)
    return os.path.getsize(path)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
