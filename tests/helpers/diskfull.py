"""A durakv server whose data directory is on a nearly full 3 MiB tmpfs, in a mount namespace of its own (the
disk-full tests of test_hardening.py and test_journal_errors.py)."""

import contextlib
import os
import shutil
import subprocess
import sys

import pytest
import valkey

from helpers.servers import free_port
from helpers.waiting import wait_until


def tmpfs_supported(mnt):
    """None when a tmpfs can be mounted in a new mount namespace here, else why not."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "unshare/nsenter are not installed"
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs %s" % mnt],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        return "mounting a tmpfs is not allowed here: %s" % probe.stderr.decode(errors="replace").strip()
    return None


class FullDisk:
    """The running server: `client`, `proc`, `log_path`; fill_rest() takes what is left of the disk,
    free_space() deletes the fillers."""

    def __init__(self, client, proc, log_path, mnt):
        self.client, self.proc, self.log_path, self.mnt = client, proc, log_path, mnt

    def fill_rest(self):
        """Takes every byte still free (a second filler): the journal cut back what it failed to write, so its
        own retries could otherwise succeed for a small write and take writes again before the test looks."""
        subprocess.run(["nsenter", "--target", str(self.proc.pid), "--mount", "sh", "-c",
                        "dd if=/dev/zero of=%s bs=4k 2>/dev/null; true" % (self.mnt / "filler-rest")],
                       check=True, timeout=30)

    def free_space(self):
        subprocess.run(["nsenter", "--target", str(self.proc.pid), "--mount", "rm", "-f", str(self.mnt / "filler"),
                        str(self.mnt / "filler-rest")], check=True, timeout=10)

    def wait_writable(self, timeout_s):
        """Polls until a SET is accepted again (the journal healed by itself after free_space())."""
        def writable():
            try:
                return self.client.set("after", "1")
            except valkey.exceptions.ResponseError:
                return False
        wait_until(writable, timeout_s, what="writes accepted again")


@contextlib.contextmanager
def server_on_full_disk(tmp_path):
    """A sync server on a 3 MiB tmpfs, 2 MiB of it taken by a filler file; skips where no tmpfs can be
    mounted; the server's process group is killed at the end."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    why = tmpfs_supported(mnt)
    if why:
        pytest.skip(why)
    port = free_port()
    data = mnt / "data"
    script = ("mount -t tmpfs -o size=3m tmpfs {mnt} && mkdir {data} && "
              "dd if=/dev/zero of={mnt}/filler bs=1k count=2048 2>/dev/null && "
              "exec {py} -m durakv server --port {port} --bind 127.0.0.1 --dir {data} --durability sync "
              "--journal-segment-bytes 256kb --enable-debug-command yes").format(mnt=mnt, data=data, py=sys.executable, port=port)
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["unshare", "--mount", "sh", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=20)
        wait_until(lambda: c.ping(), 20, what="server up")
        yield FullDisk(c, proc, log_path, mnt)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(10)


def run_in_private_tmpfs(tmp_path, script, size="4m", timeout_s=300):
    """Runs python `script` in a mount namespace of its own with a `size` tmpfs mounted at tmp_path/mnt (its
    path in the script's MNT variable); returns the CompletedProcess. Skips where no tmpfs can be mounted. Every
    process the script starts lives in that namespace: the script stops them by pid before it ends."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    why = tmpfs_supported(mnt)
    if why:
        pytest.skip(why)
    prologue = ("import os, subprocess, sys\nMNT = %r\nsubprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%s', "
                "'tmpfs', MNT], check=True)\n" % (str(mnt), size))
    path = tmp_path / "in_tmpfs.py"
    path.write_text(prologue + script)
    return subprocess.run(["unshare", "--mount", sys.executable, str(path)], capture_output=True, text=True,
                          timeout=timeout_s, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
