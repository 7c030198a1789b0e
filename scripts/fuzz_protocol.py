#!/usr/bin/env python3
"""Long protocol fuzz run against a real durakv server (the bounded one is tests/server/test_protocol_fuzz.py).

Starts a server with --requirepass, then for --minutes sends random and damaged RESP frames (valid commands
with flipped bytes, truncated frames, huge counts and lengths, wrong type bytes, inline junk, random bytes,
64 KiB lines), authenticated first or not, in random splits, on one or a few connections at a time. After
each round: every fuzzing connection must be closed by the server within 5 s of its EOF, a separate
connection must get PONG within 2 s and read back a known key, and the keys acknowledged so far (one more
every 20 rounds) are read back now and then. Prints a summary; exits 1 on a hang, a lost key or a dead
server, 2 if the server does not start.

    python scripts/fuzz_protocol.py --minutes 10 [--seed N] [--port P] [--keep]
"""

import argparse
import collections
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from durakv.protocol.client import RespClient  # noqa: E402
from durakv.protocol.resp import encode_command  # noqa: E402
PASSWORD = b"fuzzpw"
PING_BOUND_S = 2.0
CLOSE_BOUND_S = 5.0
PROTOCOL_ERROR = re.compile(rb"-ERR (Protocol error: [^\r\n]*)\r\n")


encode = encode_command


class Fuzzer:
    """Frames from one seeded generator. No template names a key the checker uses (`known`, `ack:*`), and
    three edits cannot turn one into a command that removes them or stops the server."""

    SPECIAL = [
        b"*2147483647\r\n", b"*4294967295\r\n", b"*1048577\r\n", b"*1\r\n*2147483647\r\n",
        b"*1\r\n~2147483647\r\n",
        b"*1\r\n>2147483647\r\n", b"*1\r\n|2147483647\r\n", b"*1\r\n$2147483647\r\n", b"*1\r\n$536870913\r\n",
        b"*11\r\n", b"*1\r\n$16385\r\n", b"*-1\r\n", b"*-5\r\n", b"*0\r\n", b"*1\r\nX\r\n", b"*1\r\n+x\r\n",
        b"*1\r\n:5\r\n", b"*1\r\n$-1\r\n", b"*1\r\n_\r\n", b"*1\r\n\x00\r\n", b"\x00\r\n", b'GET "a\r\n', b"\r\n",
        b"*1\rX$4\rXPINGxy", b"*3\r\n$3\r\nSET\r\n$1\r\nf\r\n$100000\r\n",
    ]

    def __init__(self, seed):
        self.r = random.Random(seed)

    def value(self):
        r = self.r
        return bytes(r.getrandbits(8) for _ in range(r.choice([0, 1, 3, 8, 20])))

    def command(self):
        r = self.r
        k = r.randrange(16)
        v = self.value
        return [
            [b"PING"], [b"ECHO", v()], [b"SET", r.choice([b"f:1", b"f:2"]), v()], [b"GET", b"f:1"],
            [b"INCR", b"f:n"], [b"HSET", b"f:h", v(), v()], [b"LPUSH", b"f:l", v()], [b"DEL", b"f:1"],
            [b"MULTI"], [b"EXEC"], [b"HELLO", b"3"], [b"SELECT", b"1"], [b"AUTH", PASSWORD],
            [b"AUTH", b"wrong"], [b"RESET"], [b"SET", b"f:big", b"x" * r.choice([16384, 16385, 70000])],
        ][k]

    def frame(self):
        r = self.r
        kind = r.random()
        if kind < 0.25:
            return encode(self.command())
        if kind < 0.35:
            return b" ".join(self.command()) + r.choice([b"\r\n", b"\n"])
        if kind < 0.50:
            return r.choice(self.SPECIAL)
        if kind < 0.57:
            return bytes(r.getrandbits(8) for _ in range(r.randrange(60))) + b"\r\n"
        if kind < 0.62:
            return bytes(r.getrandbits(8) for _ in range(r.randrange(300)))
        if kind < 0.65:
            return r.choice([b"*", b"$", b"G", b"*1\r\n$"]) + r.choice([b"9", b"a"]) * r.choice([65536, 70000])
        blob = bytearray(encode(self.command()))
        for _ in range(r.randint(1, 3)):
            if not blob:
                break
            i = r.randrange(len(blob))
            op = r.randrange(5)
            if op == 0:
                blob[i] = r.getrandbits(8)
            elif op == 1:
                blob[i:i] = r.choice([b"*", b"$", b"+", b":", b"-", b"\r\n", b"\r", b"\0", b"9999999999"])
            elif op == 2:
                del blob[i]
            elif op == 3:
                del blob[i:]
            else:
                blob[1:2] = r.choice([b"2147483647", b"-1", b"0", b"1048576", b"11"])
        return bytes(blob)

    def session(self):
        """(chunks to send, authenticated first)."""
        r = self.r
        auth_first = r.random() < 0.5
        stream = b"".join(self.frame() for _ in range(r.randint(1, 6)))
        if auth_first:
            stream = encode([b"AUTH", PASSWORD]) + stream
        cuts = sorted(set(r.randrange(len(stream) + 1) for _ in range(r.randint(0, 4))))
        return [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)]) if a < b], auth_first


class Checker:
    """One authenticated connection (the RESP client of protocol/client.py) that asks the server whether it is
    still well: call() answers the reply, an error reply as a RespError value."""

    def __init__(self, port):
        self.port = port
        self.client = None

    def connect(self):
        self.close()
        self.client = RespClient("127.0.0.1", self.port, timeout_s=PING_BOUND_S)
        assert self.call([b"AUTH", PASSWORD]) == b"OK"

    def call(self, args):
        if self.client is None:
            self.connect()
        self.client.send(*args)
        return self.client.read()

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None


def fuzz_connection(port, chunks, result):
    """Sends the chunks, EOF, reads until the server closes. result: dict filled in."""
    sent = 0
    out = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_BOUND_S) as s:
            try:
                for chunk in chunks:
                    s.sendall(chunk)
                    sent += len(chunk)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                result.update(sent=sent, out=out, closed=True)   # refused and closed while we sent
                return
            deadline = time.monotonic() + CLOSE_BOUND_S
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    result.update(sent=sent, out=out, closed=False)
                    return
                s.settimeout(left)
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    result.update(sent=sent, out=out, closed=True)
                    return
                out += chunk
    except OSError as exc:
        result.update(sent=sent, out=out, closed=False, error=repr(exc))


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    except (OSError, AttributeError):
        return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port, data_dir):
    log = open(os.path.join(data_dir, "server.log"), "ab")
    env = dict(os.environ)
    src = os.path.join(ROOT, "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1",
                             "--dir", data_dir, "--requirepass", PASSWORD.decode()],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            c = Checker(port)
            c.connect()
            if c.call([b"PING"]) == b"PONG":
                c.close()
                return proc
        except (OSError, AssertionError, TimeoutError, ConnectionError):
            time.sleep(0.05)  # the server is still starting up
    stop_server(proc)
    return None


def stop_server(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the data directory and server log")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    port = args.port or free_port()
    data_dir = tempfile.mkdtemp(prefix="durakv-fuzz-")
    print(f"fuzz_protocol: seed {seed}, port {port}, {args.minutes:g} min, data {data_dir}", flush=True)
    proc = start_server(port, data_dir)
    if proc is None:
        print("the server did not start; log:\n" + open(os.path.join(data_dir, "server.log")).read()[-3000:])
        return 2
    fuzzer = Fuzzer(seed)
    checker = Checker(port)
    failures = []
    stats = collections.Counter()
    errors = collections.Counter()
    ping_ms = []
    acked = {}
    rss_start = rss_peak = rss_kb(proc.pid)
    t_start = time.monotonic()
    deadline = t_start + args.minutes * 60
    rounds = 0
    try:
        assert checker.call([b"SET", b"known", b"value"]) == b"OK"
        while time.monotonic() < deadline and not failures:
            rounds += 1
            width = 1 if fuzzer.r.random() < 0.85 else fuzzer.r.randint(2, 4)
            sessions = [fuzzer.session() for _ in range(width)]
            results = [{} for _ in sessions]
            threads = [threading.Thread(target=fuzz_connection, args=(port, chunks, res))
                       for (chunks, _), res in zip(sessions, results)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(CLOSE_BOUND_S + 5)
            for (chunks, auth_first), res in zip(sessions, results):
                stats["connections"] += 1
                stats["bytes sent"] += res.get("sent", 0)
                stats["authenticated first" if auth_first else "not authenticated"] += 1
                if not res.get("closed"):
                    sent = b"".join(chunks)[:300]
                    failures.append(f"round {rounds}: the server did not close a connection {CLOSE_BOUND_S} s"
                                    f" after EOF ({res.get('error', 'no error')}); sent {sent!r}")
                found = PROTOCOL_ERROR.findall(res.get("out", b""))
                if found:
                    errors[found[-1].decode("utf-8", "replace")[:70]] += 1
                else:
                    stats["closed without a protocol error"] += 1
            t0 = time.monotonic()
            try:
                if checker.call([b"PING"]) != b"PONG":
                    failures.append(f"round {rounds}: PING did not answer PONG")
                ping_ms.append((time.monotonic() - t0) * 1000)
                if checker.call([b"GET", b"known"]) != b"value":
                    failures.append(f"round {rounds}: the known key was lost")
                if rounds % 20 == 0:
                    key = b"ack:%d" % rounds
                    if checker.call([b"SET", key, key]) == b"OK":
                        acked[key] = key
                if rounds % 500 == 0:
                    for key, value in acked.items():
                        if checker.call([b"GET", key]) != value:
                            failures.append(f"round {rounds}: acknowledged key {key!r} was lost")
                    rss_peak = max(rss_peak, rss_kb(proc.pid))
            except (OSError, TimeoutError, ConnectionError) as exc:
                failures.append(f"round {rounds}: the checker got no answer within {PING_BOUND_S} s: {exc!r}")
            if proc.poll() is not None:
                failures.append(f"round {rounds}: the server exited with {proc.returncode}")
        if not failures:
            for key, value in acked.items():
                if checker.call([b"GET", key]) != value:
                    failures.append(f"at the end: acknowledged key {key!r} was lost")
    finally:
        checker.close()
        rss_end = rss_kb(proc.pid)
        rss_peak = max(rss_peak, rss_end)
        elapsed = time.monotonic() - t_start
        stop_server(proc)
    log_text = open(os.path.join(data_dir, "server.log"), encoding="utf-8", errors="replace").read()
    tracebacks = log_text.count("Traceback")
    if tracebacks:
        failures.append(f"the server log holds {tracebacks} traceback(s)")
    ping_ms.sort()
    print(f"ran {elapsed:.0f} s: {rounds} rounds, {stats['connections']} connections "
          f"({stats['authenticated first']} authenticated first), {stats['bytes sent'] / 1e6:.1f} MB sent")
    print(f"replies: {sum(errors.values())} protocol errors, {stats['closed without a protocol error']} "
          f"connections closed on EOF without one")
    for text, n in errors.most_common(14):
        print(f"  {n:7d}  {text}")
    if ping_ms:
        median, p99 = ping_ms[len(ping_ms) // 2], ping_ms[int(len(ping_ms) * 0.99)]
        print(f"checker PING: median {median:.2f} ms, p99 {p99:.2f} ms, max {ping_ms[-1]:.2f} ms "
              f"(bound {PING_BOUND_S * 1000:.0f} ms)")
    print(f"acknowledged keys read back: {len(acked)}; server RSS start {rss_start / 1024:.0f} MB, "
          f"peak {rss_peak / 1024:.0f} MB, end {rss_end / 1024:.0f} MB; tracebacks in log: {tracebacks}")
    if args.keep:
        print(f"kept {data_dir}")
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    if failures:
        print("FAILED:")
        for f in failures[:10]:
            print("  " + f)
        return 1
    print("OK: no hang, nothing lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
