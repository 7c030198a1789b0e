"""Python bytecodes the server executes per unpipelined SET and GET (or --commands), by function: a measure of the per-command
interpreter work that, unlike ops/s on a shared machine, does not move with the load of other processes.

Starts a Server in this process (the sources on PYTHONPATH) with --durability MODE, feeds one connection (a
stand-in transport: no sockets) one request per data_received, as an unpipelined client does, and counts the
opcodes executed under sys.settrace. Time that passes nothing in C (hiredis, dict lookups, syscalls) is not
counted: compare trees with it, not with redis-server. Run it with PYTHONPATH pointing at two trees to
compare them (issue 18: the unpipelined regression).

    PYTHONPATH=src python scripts/count_opcodes.py [--durability none|async|sync] [--top 15]
"""

import argparse
import asyncio
import collections
import os
import sys
import tempfile

from durakv.cli import load_config
from durakv.server.connection import Connection
from durakv.server.server import Server


class Transport:
    """What Connection uses of an asyncio transport; writes are counted, not sent."""

    def __init__(self):
        self.written_bytes = 0

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 6379)}.get(name, default)

    def write(self, data):
        self.written_bytes += len(data)

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


def count(conn, requests, by_line):
    counts = collections.Counter()

    def tracer(frame, event, _arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            code = frame.f_code
            where = frame.f_lineno if by_line else os.path.basename(code.co_filename)
            counts["%s (%s)" % (code.co_qualname, where)] += 1
        return tracer
    sys.settrace(tracer)
    try:
        for data in requests:
            conn.data_received(data)
    finally:
        sys.settrace(None)
    return counts


async def main(args):
    with tempfile.TemporaryDirectory() as data_dir:
        server = Server(load_config(["--port", "0", "--dir", data_dir, "--durability", args.durability]))
        await server.start()
        server.keyspace.lru_tick()   # the cron's first tick (the count below never yields to the loop to run it)
        conn = Connection(server)
        conn.connection_made(Transport())
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
            requests = [make(i) for i in range(args.requests)]
            for data in requests[:50]:      # warm: the command caches, the first batch of the journal
                conn.data_received(data)
            counts = count(conn, requests, args.by_line)
            total = sum(counts.values())
            print("%s: %.1f opcodes/command (%d requests, durability %s)"
                  % (name, total / args.requests, args.requests, args.durability))
            for where, n in counts.most_common(args.top):
                print("  %7.1f %s" % (n / args.requests, where))
        os._exit(0)   # the server's tasks and journal thread need no orderly stop for a count


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--durability", default="none", choices=["none", "async", "sync"])
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--data-size", type=int, default=256)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--commands", default="SET,GET", help="of SET,GET,INCR,LPUSH,HSET,SADD,ZADD")
    p.add_argument("--by-line", action="store_true", help="count by source line instead of by function")
    asyncio.run(main(p.parse_args()))
