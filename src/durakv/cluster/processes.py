"""The small process toolkit a local cluster shares: free ports, spawn detached, is-alive by pid, signal, stop.

Processes outlive the command that started them, so everything is addressed by pid (plus the kernel's start time
of that pid, so a recycled pid is never mistaken for ours). Every wait is a poll with a deadline. It sits below
every other module of cluster/ that starts or watches a process (nats_procs.py, procs.py, proxyctl.py, tls.py),
so none of them needs another to reach it.
"""

import logging
import os
import signal
import socket
import subprocess
import time

from ..intstring import string2ll

log = logging.getLogger("durakv.cluster")


class ProcessError(RuntimeError):
    pass


# -- processes ------------------------------------------------------------------------------------------

def free_port(host="127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def parse_port_range(text) -> tuple:
    """`LOW-HIGH` (both included) -> (low, high); ValueError says what is wrong."""
    low_text, sep, high_text = str(text).partition("-")
    low, high = string2ll(low_text.encode()), string2ll(high_text.encode())
    if not sep or low is None or high is None:
        raise ValueError(f"port range {text!r}: expected LOW-HIGH, e.g. 30000-30999")
    return check_port_range((low, high))


def check_port_range(port_range) -> tuple:
    low, high = port_range
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"port range {low}-{high}: need 1 <= LOW <= HIGH <= 65535")
    return low, high


def free_ports(count, host="127.0.0.1", exclude=(), port_range=None) -> list:
    """count distinct free ports. Without port_range the kernel picks them from its ephemeral range (all held open
    while choosing, so none is handed out twice); a port from there, once its process stops, may be taken by any
    outgoing connection's source port or another program's free port before the process is started again at it.
    With port_range (low, high), the lowest free ones of low..high not in exclude: a layout whose processes
    restart at their ports (a local cluster's nodes) keeps them out of the ephemeral range."""
    if port_range is not None:
        low, high = check_port_range(port_range)
        ports = []
        for port in range(low, high + 1):
            if port not in exclude and port_is_free(port, host):
                ports.append(port)
                if len(ports) == count:
                    return ports
        raise ProcessError(f"fewer than {count} free ports in {low}-{high}")
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in exclude:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def port_is_free(port, host="127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_for(predicate, timeout_s, what, interval_s=0.05):
    """Poll predicate() until it returns a truthy value (returned) or the deadline passes (TimeoutError)."""
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ProcessError:
            raise
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last_exc = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                               + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval_s)


def _proc_stat(pid):
    """(state, start_time_ticks) from /proc, or None when the pid does not exist (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()   # fields after the command name (which may hold spaces)
    return rest[0], int(rest[19])


def process_start_time(pid):
    st = _proc_stat(pid)
    return st[1] if st else None


def pid_state(pid, start_time=None) -> str:
    """'running', 'paused' (SIGSTOPped) or 'dead'. A pid now used by another process counts as dead."""
    if not pid:
        return "dead"
    try:   # reap it if it is our own child that has exited (else it lingers as a zombie)
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return "dead"
    except ChildProcessError:
        pass
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass
    st = _proc_stat(pid)
    if st is None:
        return "running" if not os.path.isdir("/proc") else "dead"
    state, started = st
    if start_time is not None and started != start_time:
        return "dead"
    if state in ("Z", "X", "x"):
        return "dead"
    if state in ("T", "t"):
        return "paused"
    return "running"


def pid_alive(pid, start_time=None) -> bool:
    return pid_state(pid, start_time) != "dead"


def spawn(argv, log_path, cwd=None, env=None):
    """Start argv detached (own session, stdin from /dev/null, stdout+stderr appended to log_path).
    Returns (pid, start_time)."""
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True, close_fds=True)
    # The Popen object is dropped on purpose: the process belongs to the cluster, not to this Python object
    # (pid_state reaps it if it exits while we are its parent).
    proc.returncode = 0   # silence "subprocess still running" ResourceWarning on garbage collection
    return proc.pid, process_start_time(proc.pid)


def signal_pid(pid, sig, start_time=None) -> bool:
    """Send sig if the process is ours and alive; False if it was already gone."""
    if not pid_alive(pid, start_time):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def threads_of(pid) -> str:
    """Each live thread of pid as `name(wait channel)`, from /proc: what a process that outlived its SIGTERM was
    still doing, said before it is killed (a thread's name is its process's unless it set one: uvloop's are
    `libuv-worker`)."""
    threads = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return "?"
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read().strip() or "running"
        except OSError:
            continue
        threads.append(f"{name}({'running' if wchan == '0' else wchan})")
    return ", ".join(threads)


# The report of a process killed after its stop deadline (the test harness collects these by this format).
SLOW_STOP = "%s (pid %d) did not exit within %g s of SIGTERM; killing it. Its threads: %s"


def _killing(what, pid, timeout_s):
    log.warning(SLOW_STOP, what, pid, timeout_s, threads_of(pid))


def stop_pid(pid, start_time=None, timeout_s=10.0) -> str:
    """SIGTERM (resuming it first if paused), then SIGKILL after the deadline. Returns what happened:
    'already-dead', 'terminated' or 'killed'."""
    state = pid_state(pid, start_time)
    if state == "dead":
        return "already-dead"
    try:
        os.kill(pid, signal.SIGTERM)
        if state == "paused":
            os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return "terminated"
    try:
        wait_for(lambda: not pid_alive(pid, start_time), timeout_s, f"pid {pid} to exit")
        return "terminated"
    except TimeoutError:
        _killing("process", pid, timeout_s)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "terminated"
    wait_for(lambda: not pid_alive(pid, start_time), 10.0, f"pid {pid} to die after SIGKILL")
    return "killed"


def stop_many(procs, timeout_s=10.0) -> dict:
    """Stop several processes at once: SIGTERM to all (SIGCONT to paused ones), one shared deadline, then
    SIGKILL to whatever is left. procs: {key: (pid, start_time)}. Returns {key: outcome} like stop_pid."""
    outcome = {}
    pending = {}
    for key, (pid, start_time) in procs.items():
        state = pid_state(pid, start_time)
        if state == "dead":
            outcome[key] = "already-dead"
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            if state == "paused":
                os.kill(pid, signal.SIGCONT)
            pending[key] = (pid, start_time)
        except ProcessLookupError:
            outcome[key] = "terminated"

    def all_gone():
        for key in [k for k, (pid, st) in pending.items() if not pid_alive(pid, st)]:
            outcome[key] = "terminated"
            del pending[key]
        return not pending
    try:
        wait_for(all_gone, timeout_s, "processes to exit after SIGTERM")
    except TimeoutError:
        for key, (pid, _st) in pending.items():
            _killing(key, pid, timeout_s)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            outcome[key] = "killed"
        wait_for(lambda: not any(pid_alive(p, st) for p, st in pending.values()), 10.0,
                 "processes to die after SIGKILL")
    return outcome
