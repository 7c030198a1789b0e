"""Stopping processes. The launcher's stop (cluster/processes.py stop_many, stop_pid): SIGTERM, one deadline, then
SIGKILL, and a process that outlived its SIGTERM is named with what its threads were waiting on before it is
killed (the suite's teardowns that took the whole 10 s bound had no other trace). And a server's own end after a
SIGTERM, which nothing left on its loop may hold up."""

import logging
import signal
import subprocess
import sys

import valkey

from durakv.cluster.processes import SLOW_STOP, pid_alive, process_start_time, stop_many, stop_pid, threads_of
from helpers.servers import free_port
from helpers.waiting import scaled, wait_until

IGNORES_SIGTERM = """
import signal, sys, threading, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
print("ready", flush=True)
time.sleep(120)
"""


def stubborn():
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_a_process_that_ignores_sigterm_is_killed_and_its_threads_are_named(caplog):
    procs = [stubborn(), stubborn()]
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert threads_of(procs[0].pid).count("(") == 2           # the main thread and the sleeper
        with caplog.at_level(logging.WARNING, logger="durakv.cluster"):
            out = stop_many({"a": (procs[0].pid, process_start_time(procs[0].pid)),
                             "polite": (polite.pid, process_start_time(polite.pid))}, timeout_s=1.0)
            assert stop_pid(procs[1].pid, process_start_time(procs[1].pid), timeout_s=1.0) == "killed"
        assert out == {"a": "killed", "polite": "terminated"}
        reports = [r.getMessage() for r in caplog.records if r.msg == SLOW_STOP]
        assert len(reports) == 2, reports
        assert reports[0].startswith(f"a (pid {procs[0].pid}) did not exit within 1 s of SIGTERM; killing it. "
                                     "Its threads: ")
        assert reports[1].startswith(f"process (pid {procs[1].pid}) did not exit within 1 s of SIGTERM")
        assert all(report.count("(") == 3 for report in reports), reports   # (pid ...) and the two threads
        for p in procs + [polite]:
            p.wait(10)
            assert not pid_alive(p.pid)
        assert threads_of(procs[0].pid) == "?"                     # gone: nothing to read
    finally:
        for p in procs + [polite]:
            p.kill()
            p.wait()


# A server whose event loop holds a task that swallows its cancellation (as a retry loop that catches the wrong
# exception would: the slot migrator's rounds kept a cluster node running 10 s after "durakv stopped" until the
# launcher killed it, tests/cluster/test_planned_failover.py's teardown).
STUBBORN_TASK_SERVER = """
import asyncio, sys
from durakv import cli
from durakv.server.server import Server

started = Server.start

async def start(self):
    await started(self)

    async def stubborn():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    self.loop.create_task(stubborn())

Server.start = start
sys.exit(cli.main(["server"] + sys.argv[1:]))
"""


def test_sigterm_ends_the_server_even_with_a_task_that_ignores_cancellation(tmp_path):
    """A graceful shutdown ends the process once Server.close() has run (the journal closed, every
    acknowledged write on disk): it does not wait for the loop's other tasks to finish their cancellation."""
    port = free_port()
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", STUBBORN_TASK_SERVER, "--port", str(port), "--bind",
                                 "127.0.0.1", "--dir", str(tmp_path), "--durability", "sync"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def ready():
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=scaled(1)) as c:
                return c.set("k", "v")
        wait_until(ready, 20, what="the server to answer")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None, 10, what="the server to exit after SIGTERM")
        assert proc.returncode == 0
        assert "durakv stopped" in (tmp_path / "server.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
