"""The launcher's stop (cluster/processes.py stop_many, stop_pid): SIGTERM, one deadline, then SIGKILL, and a
process that outlived its SIGTERM is named with what its threads were waiting on before it is killed (the
suite's teardowns that took the whole 10 s bound had no other trace)."""

import logging
import subprocess
import sys

from durakv.cluster.processes import pid_alive, process_start_time, stop_many, stop_pid, threads_of

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
        reports = [r.getMessage() for r in caplog.records if "of SIGTERM" in r.getMessage()]
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
