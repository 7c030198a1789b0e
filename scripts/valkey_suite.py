"""Runs Valkey's own TCL test suite against durakv, one fresh server per unit, and tallies the results.

The suite is never committed: check Valkey out somewhere outside the project, e.g.

    git clone --branch 8.0.1 https://github.com/valkey-io/valkey /work/valkey-8.0.1     (or git archive 8.0.1)
    ln -s "$(command -v redis-cli)" /work/valkey-8.0.1/src/valkey-cli              (unless Valkey is built)
    ln -s "$(command -v redis-benchmark)" /work/valkey-8.0.1/src/valkey-benchmark

It needs `tclsh` 8.5+ (Debian: tcl). Then, from the project's root (with the project's venv):

    .venv/bin/python scripts/valkey_suite.py /work/valkey-8.0.1 --json /tmp/suite.json
    .venv/bin/python scripts/valkey_suite.py /work/valkey-8.0.1 --units type/list,unit/sort
    .venv/bin/python scripts/valkey_suite.py /work/valkey-8.0.1 --server-binary /work/valkey-8.0.1/src/valkey-server

For every unit (the list `runtest --list-tests` prints, i.e. test_helper.tcl's all_tests, plus any other
tests/unit/**/*.tcl except unit/moduleapi, whose tests load Valkey modules and belong to runtest-moduleapi) it
starts a FRESH server on a free port with its own temporary directory (durakv with `--durability none` by
default; `--server-binary` runs a valkey-server or redis-server the same way, for reference counts), runs

    ./runtest --host 127.0.0.1 --port P --single unit/X --tags -slow

inside the checkout with a per-unit timeout (240 s; on expiry the runtest process group is killed), stops the
server by its pid, and parses the output: `[ok]: name (N ms)`, `[err]: name in file` followed by the message
lines, `[exception]: ...` (the unit stops there), `[skip]: name`, `[ignore]: name: reason`. It prints per-unit
ok / err / exception / timeout counts, the failing tests with their first error line, and the totals; --json
writes all of it (plus each unit's raw output tail) to a file.

    .venv/bin/python scripts/valkey_suite.py --compare before.json after.json valkey.json

prints the per-unit counts of several such files side by side. `--runtest-arg=--durable` makes runtest go on
after an exception (useful to see every failure of a unit; not the configuration the totals are quoted in).
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from durakv.protocol.client import RespError, command  # noqa: E402

# The suite prints colours only on a terminal; strip them anyway in case TERM makes it think it is on one.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STATUS = re.compile(r"^\[(ok|err|exception|skip|ignore|timeout|TIMEOUT)\]: ?(.*)$")
_ELAPSED = re.compile(r"^(.*) \((\d+) ms\)$")
_DONE = re.compile(r"^\[\d+/\d+ done\]: ")

UNIT_TIMEOUT_S = 240
SERVER_READY_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def list_units(checkout):
    """test_helper.tcl's all_tests (as runtest --list-tests prints it) plus any other tests/unit/**/*.tcl."""
    out = subprocess.run(["tclsh", "tests/test_helper.tcl", "--list-tests"], cwd=checkout, capture_output=True,
                         text=True, timeout=60)
    units = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    base = os.path.join(checkout, "tests")
    for path in glob.glob(os.path.join(base, "unit", "**", "*.tcl"), recursive=True):
        name = os.path.relpath(path, base)[: -len(".tcl")]
        if name.startswith("unit/moduleapi/"):
            continue
        if name not in units:
            units.append(name)
    return sorted(set(units))


def normalize_unit(name):
    name = name.strip().removesuffix(".tcl")
    if name.startswith("tests/"):
        name = name[len("tests/"):]
    if not name.startswith(("unit/", "integration/")):
        name = "unit/" + name
    return name


def ping(port, timeout_s=1.0) -> bool:
    try:
        # -LOADING or -NOAUTH still means "up", but the suite needs a serving server: only +PONG counts.
        return command("127.0.0.1", port, "PING", timeout_s=timeout_s) == b"PONG"
    except (OSError, RespError):
        return False


class Server:
    """One fresh server for one unit: durakv (default) or a valkey-server/redis-server binary."""

    def __init__(self, binary=None, durability="none", extra_args=()):
        self.binary = binary
        self.durability = durability
        self.extra_args = list(extra_args)
        self.port = None
        self.dir = None
        self.proc = None
        self.log = None

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="valkey-suite-")
        self.port = free_port()
        if self.binary:
            cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                   "--save", "", "--appendonly", "no", "--enable-debug-command", "yes"]
        else:
            cmd = [sys.executable, "-m", "durakv", "server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--dir", self.dir, "--durability", self.durability, "--enable-debug-command", "yes"]
        cmd += self.extra_args
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env=env)
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            if ping(self.port):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"server on port {self.port} not ready after {SERVER_READY_TIMEOUT_S} s")

    def log_tail(self, n=2000):
        try:
            with open(os.path.join(self.dir, "server.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        if self.log:
            self.log.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def parse_output(text):
    """Counts and failing tests from one runtest output. Pure: unit tests feed it canned text."""
    res = {"ok": 0, "err": 0, "exception": 0, "skip": 0, "ignore": 0, "failures": [], "exceptions": [],
           "passed": []}
    lines = [_ANSI.sub("", line.rstrip("\r")) for line in text.splitlines()]
    i = 0
    while i < len(lines):
        m = _STATUS.match(lines[i])
        if not m:
            i += 1
            continue
        status, rest = m.group(1).lower(), m.group(2)
        i += 1
        if status == "ok":
            res["ok"] += 1
            em = _ELAPSED.match(rest)
            res["passed"].append(em.group(1) if em else rest)
        elif status in ("skip", "ignore"):
            res[status] += 1
        elif status == "err":
            res["err"] += 1
            name = rest
            # `[err]: NAME in tests/unit/x.tcl` then the message: the first non-empty line that is not
            # another status line.
            first = ""
            while i < len(lines) and not _STATUS.match(lines[i]) and not _DONE.match(lines[i]):
                if lines[i].strip() and not first:
                    first = lines[i].strip()
                i += 1
            name = re.sub(r" in tests/\S+\.tcl$", "", name)
            res["failures"].append({"test": name, "error": first[:300]})
        elif status == "exception":
            res["exception"] += 1
            detail = [rest]
            while i < len(lines) and len(detail) < 12 and not _STATUS.match(lines[i]):
                if lines[i].strip():
                    detail.append(lines[i].strip())
                i += 1
            res["exceptions"].append({"error": detail[0][:300], "context": [d[:300] for d in detail[1:]]})
        elif status == "timeout":
            # runtest's own no-progress timeout (20 min by default): treated like ours.
            res["exception"] += 1
            res["exceptions"].append({"error": "runtest TIMEOUT: " + rest[:200], "context": []})
    # The test that was running when the unit stopped (exception or timeout) is the last `testing` one;
    # runtest does not print it, so name the last test that passed instead.
    res["last_ok"] = res["passed"][-1] if res["passed"] else None
    return res


def run_unit(checkout, unit, server_factory, tags, timeout_s, extra_runtest_args=()):
    started = time.monotonic()
    srv = server_factory()
    try:
        srv.start()
    except Exception as exc:  # noqa: BLE001 - a server that cannot start is one failed unit, not the run
        srv.stop()
        return {"unit": unit, "ok": 0, "err": 0, "exception": 1, "skip": 0, "ignore": 0, "timeout": False,
                "failures": [], "exceptions": [{"error": f"server did not start: {exc}", "context": []}],
                "passed": [], "last_ok": None, "seconds": round(time.monotonic() - started, 1), "tail": ""}
    cmd = ["./runtest", "--host", "127.0.0.1", "--port", str(srv.port), "--single", unit, "--tags", tags]
    cmd += list(extra_runtest_args)
    env = dict(os.environ)
    env.pop("TERM", None)
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        # runtest starts a test-server tclsh and a client tclsh in its session: end that whole group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate(timeout=30)
    finally:
        server_alive = srv.alive()
        server_log = srv.log_tail(1500)
        srv.stop()
    text = out.decode("utf-8", "replace")
    res = parse_output(text)
    res.update({"unit": unit, "timeout": timed_out, "returncode": proc.returncode,
                "seconds": round(time.monotonic() - started, 1), "server_survived": server_alive,
                "tail": text[-3000:]})
    if not server_alive:
        res["server_log_tail"] = server_log
    return res


def summarize(results):
    total = {"units": len(results), "ok": 0, "err": 0, "exception": 0, "timeout": 0, "skip": 0, "ignore": 0,
             "units_stopped": 0, "units_zero_ok_stopped": 0}
    for r in results:
        for k in ("ok", "err", "exception", "skip", "ignore"):
            total[k] += r[k]
        total["timeout"] += 1 if r["timeout"] else 0
        if r["exception"] or r["timeout"]:
            total["units_stopped"] += 1
            if r["ok"] == 0:
                total["units_zero_ok_stopped"] += 1
    return total


def print_unit(r, out=sys.stdout):
    flag = " TIMEOUT" if r["timeout"] else ""
    flag += "" if r.get("server_survived", True) else " SERVER-DIED"
    print(f"{r['unit']:<40} ok {r['ok']:>4}  err {r['err']:>3}  exc {r['exception']}  "
          f"skip {r['skip'] + r['ignore']:>3}  {r['seconds']:>6.1f}s{flag}", file=out, flush=True)


def print_report(results, out=sys.stdout, failures=True):
    if failures:
        for r in results:
            if not (r["failures"] or r["exceptions"] or r["timeout"]):
                continue
            print(f"\n== {r['unit']}", file=out)
            for f in r["failures"]:
                print(f"  [err] {f['test']}: {f['error']}", file=out)
            for e in r["exceptions"]:
                print(f"  [exception] {e['error']}", file=out)
                for c in e["context"][:3]:
                    print(f"      {c}", file=out)
                print(f"      (last ok: {r['last_ok']})", file=out)
            if r["timeout"]:
                print(f"  [timeout] after the last ok: {r['last_ok']}", file=out)
    print("", file=out)
    for r in results:
        print_unit(r, out)
    t = summarize(results)
    print(f"\nTOTAL {t['units']} units: ok {t['ok']}  err {t['err']}  exception {t['exception']}  "
          f"timeout {t['timeout']}  (skipped/ignored {t['skip'] + t['ignore']}; units stopped early "
          f"{t['units_stopped']}, of which with 0 ok {t['units_zero_ok_stopped']})", file=out)


def compare(paths, out=sys.stdout):
    """A per-unit table of ok / err / exc / timeout from several --json result files, side by side."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append({u["unit"]: u for u in json.load(f)["units"]})
    units = sorted(set().union(*runs))
    head = "".join(f" | {os.path.basename(p)[:26]:>26}" for p in paths)
    print(f"{'unit':<40}{head}", file=out)

    def cell(r):
        if r is None:
            return f"{'-':>26}"
        text = f"{r['ok']} ok {r['err']} err {r['exception']} exc" + (" T" if r["timeout"] else "")
        return f"{text:>26}"
    for unit in units:
        rows = [run.get(unit) for run in runs]
        if all(r is not None and not (r["ok"] or r["err"] or r["exception"] or r["timeout"]) for r in rows):
            continue  # skipped everywhere (external:skip units)
        print(f"{unit:<40}" + "".join(f" | {cell(r)}" for r in rows), file=out)
    totals = [summarize(list(run.values())) for run in runs]
    print(f"{'TOTAL':<40}" + "".join(
        f" | {str(t['ok']) + ' ok ' + str(t['err']) + ' err ' + str(t['exception']) + ' exc ' + str(t['timeout']) + ' T':>26}"
        for t in totals), file=out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--compare":
        compare(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("checkout", help="a Valkey source checkout (e.g. tag 8.0.1) with src/valkey-cli")
    ap.add_argument("--units", action="append", default=[],
                    help="comma-separated units (unit/type/list, type/list, sort, integration/valkey-cli); "
                         "default: all")
    ap.add_argument("--json", help="write every unit's result to this file")
    ap.add_argument("--jobs", type=int, default=1, help="units run at the same time (default 1)")
    ap.add_argument("--timeout", type=int, default=UNIT_TIMEOUT_S, help="per-unit timeout in seconds")
    ap.add_argument("--tags", default="-slow", help="runtest --tags value (default -slow)")
    ap.add_argument("--durability", default="none", help="durakv --durability for every unit (default none)")
    ap.add_argument("--server-binary", help="run this valkey-server/redis-server instead of durakv")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for the server command line (repeatable)")
    ap.add_argument("--runtest-arg", action="append", default=[],
                    help="extra argument for runtest (repeatable), e.g. --runtest-arg=--durable")
    ap.add_argument("--quiet", action="store_true", help="print only the per-unit lines and the totals")
    args = ap.parse_args(argv)

    checkout = os.path.abspath(args.checkout)
    if not os.path.exists(os.path.join(checkout, "runtest")):
        ap.error(f"{checkout} has no runtest")
    for tool in ("valkey-cli", "valkey-benchmark"):
        if not os.path.exists(os.path.join(checkout, "src", tool)):
            print(f"warning: {checkout}/src/{tool} is missing (link redis-cli / redis-benchmark there)",
                  file=sys.stderr)
    if args.units:
        units = [normalize_unit(u) for spec in args.units for u in spec.split(",") if u.strip()]
    else:
        units = list_units(checkout)

    def factory():
        return Server(args.server_binary, args.durability, args.server_arg)

    results = []
    if args.jobs <= 1:
        for unit in units:
            r = run_unit(checkout, unit, factory, args.tags, args.timeout, args.runtest_arg)
            results.append(r)
            print_unit(r)
    else:
        import queue
        from concurrent.futures import ThreadPoolExecutor
        free_slots = queue.Queue()
        for slot in range(args.jobs):
            free_slots.put(slot)

        def one(unit):
            # Each runtest picks its test-server port from --baseport on: a slot per running unit keeps parallel
            # runs apart (a unit's index modulo jobs did not: units finish out of order, and two runs on one
            # port ended at once with nothing run).
            slot = free_slots.get()
            try:
                extra = list(args.runtest_arg) + ["--baseport", str(21111 + 200 * slot),
                                                  "--portcount", "150", "--dont-clean", "--dont-pre-clean"]
                r = run_unit(checkout, unit, factory, args.tags, args.timeout, extra)
            finally:
                free_slots.put(slot)
            print_unit(r)
            return r
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(one, units))
    print_report(results, failures=not args.quiet)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"checkout": checkout, "tags": args.tags,
                       "server": args.server_binary or f"durakv --durability {args.durability}",
                       "total": summarize(results), "units": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
