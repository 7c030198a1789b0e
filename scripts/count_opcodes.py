"""Python bytecodes the server executes per unpipelined SET and GET (or --commands), by function: a measure of the per-command
interpreter work that, unlike ops/s on a shared machine, does not move with the load of other processes.

Starts a Server in this process (the sources on PYTHONPATH) with --durability MODE on uvloop, as `durakv server`
runs, feeds one connection (a stand-in transport: no sockets) one request per data_received, as an unpipelined
client does (--pipeline N: N at a time), lets the loop run until that request's reply is written (in sync mode: the
batch's close, the journal's write and fsync, the commit's completion and the release), and counts the opcodes
executed under sys.settrace, with the number of calls of each function. The count's own frames (this file,
asyncio's sleep, uvloop.run's wrapper, resumed once per loop iteration while the fsync runs) are left out. Time
that passes nothing in C (the compiled core, hiredis, dict lookups, syscalls) is not counted: compare trees with
it, not with redis-server. Run it with PYTHONPATH pointing at two trees to compare them (issue 18: the unpipelined
regression).

    PYTHONPATH=src python scripts/count_opcodes.py [--durability none|async|sync] [--pipeline 16] [--top 15]
"""

import argparse
import asyncio
import collections
import os
import sys
import tempfile

import uvloop

from durakv.cli import load_config
from durakv.server.connection import Connection
from durakv.server.server import Server


class Transport:
    """What Connection uses of an asyncio transport; writes are counted, not sent."""

    def __init__(self):
        self.written_bytes = 0
        self.writes = 0

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 6379)}.get(name, default)

    def write(self, data):
        self.written_bytes += len(data)
        self.writes += 1

    def is_closing(self):
        return False

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        pass


def request(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


async def count(conn, transport, requests, by_line):
    """(opcodes, calls) per function over `requests`, each followed until its reply is written."""
    counts, calls = collections.Counter(), collections.Counter()
    skip = {os.path.abspath(f) for f in (__file__, asyncio.sleep.__code__.co_filename, uvloop.__file__)}

    def tracer(frame, event, _arg):
        code = frame.f_code
        if code.co_filename in skip:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        where = "%s (%s)" % (code.co_qualname, os.path.basename(code.co_filename))
        if event == "call":
            calls[where] += 1
        elif event == "opcode":
            counts[where if not by_line else "%s:%s" % (where, frame.f_lineno)] += 1
        return tracer
    sys.settrace(tracer)
    try:
        for data in requests:
            written = transport.writes
            conn.data_received(data)
            # held replies: the loop closes, writes and commits their batch, then they leave
            while transport.writes == written or conn.outbox.held:
                await asyncio.sleep(0)
    finally:
        sys.settrace(None)
    return counts, calls


async def main(args):
    with tempfile.TemporaryDirectory() as data_dir:
        server = Server(load_config(["--port", "0", "--dir", data_dir, "--durability", args.durability]))
        await server.start()
        server.keyspace.lru_tick()   # the cron's first tick (the count below never yields to the loop to run it)
        conn = Connection(server)
        transport = Transport()
        conn.connection_made(transport)
        value = b"x" * args.data_size
        makers = {
            "SET": lambda i: request(b"SET", b"key:%012d" % i, value),
            "GET": lambda i: request(b"GET", b"key:%012d" % i),
            # commands whose handlers run in Python (not in the compiled core's fast path)
            "INCR": lambda i: request(b"INCR", b"n:%012d" % i),
            "LPUSH": lambda i: request(b"LPUSH", b"l:%03d" % (i % 100), value),
            "HSET": lambda i: request(b"HSET", b"h:%03d" % (i % 100), b"f%d" % i, value),
            "SADD": lambda i: request(b"SADD", b"s:%03d" % (i % 100), b"m%d" % i),
            "ZADD": lambda i: request(b"ZADD", b"z:%03d" % (i % 100), b"%d" % i, b"m%d" % i),
        }
        for name in args.commands.split(","):
            make = makers[name.upper()]
            commands = [make(i) for i in range(args.requests)]
            requests = [b"".join(commands[i:i + args.pipeline]) for i in range(0, len(commands), args.pipeline)]
            # warm: the command caches, the first batch of the journal
            await count(conn, transport, [make(i) for i in range(50)], args.by_line)
            counts, calls = await count(conn, transport, requests, args.by_line)
            print("%s: %.1f opcodes and %.1f Python calls per command (%d requests, pipeline %d, durability %s)"
                  % (name, sum(counts.values()) / args.requests, sum(calls.values()) / args.requests,
                     args.requests, args.pipeline, args.durability))
            for where, n in counts.most_common(args.top):
                print("  %7.1f %s%s" % (n / args.requests, where,
                                        "" if args.by_line else "  (%.2f calls)" % (calls[where] / args.requests)))
        os._exit(0)   # the server's tasks and journal thread need no orderly stop for a count


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--durability", default="none", choices=["none", "async", "sync"])
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--data-size", type=int, default=256)
    p.add_argument("--pipeline", type=int, default=1, help="requests per data_received (default 1)")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--commands", default="SET,GET", help="of SET,GET,INCR,LPUSH,HSET,SADD,ZADD")
    p.add_argument("--by-line", action="store_true", help="count by source line instead of by function")
    uvloop.run(main(p.parse_args()))
