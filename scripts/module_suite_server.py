#!/usr/bin/env python3
"""A `valkey-server` stand-in that starts durakv, for the valkey-bundle modules' own Python suites.

valkey-search's integration tests (and valkey-json's, valkey-bloom's) start `$VALKEY_SERVER_PATH conf --logfile
F ...` with `loadmodule` lines in the conf and wait for "Ready to accept connections" in F. durakv serves those
modules natively, so this script drops `loadmodule` lines, module options (`search.*`, `json.*`, `bf.*`) and the
directives durakv does not have (listed below), starts `python -m durakv server` with the rest, writes that line
into the log file once durakv answers PING, and forwards SIGTERM/SIGINT to it. Usage, from a checkout of the
module's tests (never committed here):

    VALKEY_SERVER_PATH=/path/to/scripts/module_suite_server.py MODULE_PATH=x JSON_MODULE_PATH=x \\
        python -m pytest integration/test_...py

It runs durakv from the source tree it lives in (PYTHONPATH=<this tree>/src) with durability none, the suites'
own servers having no persistence either.
"""

import os
import signal
import socket
import subprocess
import sys
import time

TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(TREE, "src")
# the interpreter with durakv's dependencies: $DURAKV_PYTHON, else the tree's .venv, else this one
PYTHON = os.environ.get("DURAKV_PYTHON") or next(
    (p for p in (os.path.join(TREE, ".venv", "bin", "python"),) if os.path.exists(p)), sys.executable)
DROP = {"loadmodule", "enable-debug-command", "enable-module-command", "enable-protected-configs", "dbfilename",
        "appenddirname"}
MODULE_PREFIXES = ("search.", "json.", "bf.")


def _keep(name):
    name = name.lower()
    return name not in DROP and not name.startswith(MODULE_PREFIXES)


def main(argv):
    conf_lines, args = [], []
    i = 0
    if argv and not argv[0].startswith("--"):
        with open(argv[0]) as f:
            for line in f:
                words = line.split()
                if words and not words[0].startswith("#") and _keep(words[0]):
                    conf_lines.append(line.rstrip("\n"))
        i = 1
    logfile, port = None, 6379
    while i < len(argv):
        name = argv[i][2:]
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        values = argv[i + 1:j]
        if name == "logfile":
            logfile = values[0] if values else None
        elif name == "port" and values:
            port = int(values[0])
        if _keep(name) and name != "logfile":
            args += ["--" + name] + values
        i = j
    conf = os.path.abspath("durakv-%d.conf" % port)
    with open(conf, "w") as f:
        f.write("\n".join(conf_lines) + "\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    log = open(logfile, "ab") if logfile else None
    proc = subprocess.Popen([PYTHON, "-m", "durakv", "server", conf, "--durability", "none", *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env)

    def forward(signum, _frame):
        if proc.poll() is None:
            proc.send_signal(signum)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith((b"+PONG", b"-LOADING")):
                    break
        except OSError:
            pass
        time.sleep(0.05)
    if log is not None and proc.poll() is None:
        log.write(b"%d:M * Ready to accept connections tcp\n" % os.getpid())
        log.flush()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
