"""Long pipelines through the compiled core (fastpath/_core.c) give Valkey 9.1.2's replies and keep its counters.

The core prefetches the first key of the next commands of a batch (keyspace/_keytable.c api_prefetch) and keeps
LATENCY HISTOGRAM counts pending while a batch's commands share a command and a bucket. Neither may change a
reply or a count: a batch longer than one prefetch window (KT_PREFETCH_MAX, 32), sent in one write, with odd
keys (empty, binary, CRLF), arguments that are no key (PING's and ECHO's messages), keys absent and present, an
empty table and a full one, answers as Valkey does, and every command it ran is in LATENCY HISTOGRAM once.
"""

import socket

import pytest

from durakv import fastpath
from durakv.protocol.resp import encode_command

from conftest import scaled
from helpers.wire import _read_reply as read_reply

pytestmark = pytest.mark.skipif(fastpath.core is None, reason="needs the compiled core (pip install with gcc)")

ODD_KEYS = [b"", b"\x00", b"a\r\nb", b"\xff" * 40, b"k" * 300]


def _batch(n_keys):
    keys = [b"key:%06d" % i for i in range(n_keys)] + ODD_KEYS
    cmds = [[b"PING", b"key:000001"], [b"ECHO", b"key:000002"]]
    cmds += [[b"GET", k] for k in keys]                           # all absent (an empty table at first)
    cmds += [[b"SET", k, b"v" + k] for k in keys]
    cmds += [[b"GET", k] for k in reversed(keys)]
    cmds += [[b"MGET"] + keys[:5], [b"EXISTS"] + keys[:7], [b"PING"], [b"DEL", keys[1], keys[3]]]
    cmds += [[b"GET", k] for k in keys[:6]]
    cmds += [[b"INCR", b"counter"] for _ in range(40)]
    return cmds


def _send_in_one_write(port, cmds):
    payload = b"".join(encode_command(c) for c in cmds)
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as s:
        s.sendall(payload)
        f = s.makefile("rb")
        return [read_reply(f) for _ in cmds]


def _histogram_calls(client, *names):
    reply = client.execute_command("LATENCY", "HISTOGRAM", *names)
    out = {}
    for name, body in zip(reply[::2], reply[1::2]):
        fields = dict(zip(body[::2], body[1::2]))
        buckets = fields[b"histogram_usec"]
        counts = buckets[1::2]
        # the histogram is cumulative: its last bucket's count is every call
        out[name.decode()] = (fields[b"calls"], counts[-1] if counts else 0)
    return out


def test_long_pipeline_matches_valkey(server_factory, valkey91):
    srv = server_factory()
    with valkey91.client() as v:
        v.flushall()
    cmds = _batch(60)
    # twice: on the empty table (no buckets yet) and on the filled one
    for _ in range(2):
        assert _send_in_one_write(srv.port, cmds) == _send_in_one_write(valkey91.port, cmds)
    with srv.client() as c, valkey91.client() as v:
        assert sorted(c.keys("*")) == sorted(v.keys("*"))


def test_latency_histogram_counts_each_pipelined_command(server_factory):
    srv = server_factory()
    cmds = _batch(60)
    _send_in_one_write(srv.port, cmds)
    with srv.client() as c:
        stats = c.info("commandstats")
        got = _histogram_calls(c, "get", "set", "incr", "mget")
    for name in ("get", "set", "incr", "mget"):
        sent = sum(1 for cmd in cmds if cmd[0].lower() == name.encode())
        assert stats["cmdstat_" + name]["calls"] == sent
        assert got[name] == (sent, sent)
