#!/usr/bin/env python3
"""Micro-benchmark of the request parser, the hottest path of a connection.

Feeds 200k pipelined GET/SET requests through RequestParser in 16 KiB chunks (what a pipelining client's
reads look like) and one request per feed (an unpipelined client), and prints requests per second, the
best of --repeat runs (the machine is shared: the best run is the least disturbed one). --src picks the
source tree to measure (default: this checkout), to compare two versions in the same session.

    python scripts/bench_parser.py [--src DIR] [--requests 200000] [--chunk 16384] [--repeat 7]
"""

import argparse
import os
import sys
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def make_requests(n):
    """Alternating SET key:i value-i and GET key:i, as redis-benchmark's keyspace would."""
    out = []
    for i in range(n):
        key = b"key:%06d" % i
        if i % 2:
            out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$10\r\nvalue-%04d\r\n" % (len(key), key, i % 10000))
        else:
            out.append(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
    return out


def run(parser_class, chunks, expected):
    parser = parser_class()
    feed = parser.feed
    n = 0
    t0 = time.process_time()
    for chunk in chunks:
        cmds, err = feed(chunk)
        n += len(cmds)
    elapsed = time.process_time() - t0
    if err is not None or n != expected:
        raise SystemExit(f"parser returned {n} commands (expected {expected}), error {err!r}")
    return n / elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=SRC, help="the src/ directory to import durakv from")
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--chunk", type=int, default=16384)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.src))
    from durakv.protocol import parser as mod
    requests = make_requests(args.requests)
    stream = b"".join(requests)
    pipelined = [stream[i:i + args.chunk] for i in range(0, len(stream), args.chunk)]
    print(f"parser: {mod.__file__}")
    for name, chunks in ((f"pipelined, {args.chunk // 1024} KiB chunks", pipelined),
                         ("one request per feed", requests)):
        rates = [run(mod.RequestParser, chunks, args.requests) for _ in range(args.repeat)]
        median = sorted(rates)[len(rates) // 2]
        print(f"{name:28s} best {max(rates):>11,.0f} req/s   median {median:>11,.0f} req/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
