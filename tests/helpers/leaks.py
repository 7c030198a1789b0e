"""Helpers of the "nothing uncommitted leaves" tests (test_no_uncommitted_leaks*.py): a write parked on a
stalled local journal, raw one-shot replies, subscribers and a tracking connection.

StalledWrite stalls the local journal's fsync (DEBUG JOURNAL-STALL), lets a writer's command run (its effects
are in memory, `journal_applied_index` > `journal_commit_index`); an observer on another connection then
receives what it asked for, and the moment it has, `assert_committed_now` reads the commit index on a probe
connection: it must already cover the write. Had the observer been sent anything before the commit, the probe
would see the index still short of it (the fsync sleeps far longer than a probe's round trip)."""

import queue
import socket
import threading
import time

from helpers.waiting import wait_until
from helpers.wire import _encode, _read_reply

STALL_MS = 1500


def indices(probe):
    """(journal_commit_index, journal_applied_index) from INFO durability, which never waits for a commit."""
    info = probe.info("durability")
    return info["journal_commit_index"], info["journal_applied_index"]


class StalledWrite:
    """A write sent on its own connection while every fsync sleeps STALL_MS: `index` is its journal entry,
    known once it ran (applied past committed) and before it commits."""

    def __init__(self, srv, probe, *command):
        self.srv = srv
        self.probe = probe
        self.reply = queue.Queue()
        probe.execute_command("DEBUG", "JOURNAL-STALL", str(STALL_MS))
        committed, _applied = indices(probe)
        self.thread = threading.Thread(target=self._run, args=(command,), daemon=True)
        self.thread.start()

        def ran():
            c, a = indices(probe)
            return a if a > c and a > committed else None
        self.index = wait_until(ran, 10, interval_s=0.001, what="the write ran, uncommitted")

    def _run(self, command):
        with self.srv.client() as c:
            try:
                self.reply.put(c.execute_command(*command))
            except Exception as exc:  # noqa: BLE001 - handed to the test
                self.reply.put(exc)

    def assert_committed_now(self, what):
        """Called the moment an observer received `what`: the write's entry must be committed already."""
        committed, _applied = indices(self.probe)
        assert committed >= self.index, (
            f"{what} reached another client before the write committed "
            f"(commit index {committed}, the write's entry {self.index})")

    def finish(self):
        reply = self.reply.get(timeout=30)
        assert not isinstance(reply, Exception), reply
        self.probe.execute_command("DEBUG", "JOURNAL-STALL", "0")
        return reply


def raw_reply(port, *command, host="127.0.0.1"):
    """The exact bytes of the reply to one command on a fresh connection."""
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(_encode(command))
        return _read_reply(s.makefile("rb"))


def subscribed(client, channel):
    """A valkey-py PubSub of `client` subscribed to `channel` (its confirmation read)."""
    p = client.pubsub()
    p.subscribe(channel)
    assert p.get_message(timeout=10)["type"] == "subscribe"
    return p


def next_message(p, timeout_s=30):
    """The next pub/sub message, or None when none came within timeout_s (get_message also answers None for
    what it consumes itself, so it is asked again until the deadline)."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        msg = p.get_message(timeout=max(0.0, deadline_s - time.monotonic()))
        if msg is not None or time.monotonic() >= deadline_s:
            return msg


def tracking_connection(port, host="127.0.0.1"):
    """(socket, file) of a RESP3 connection with CLIENT TRACKING ON: invalidations arrive as `>` pushes."""
    s = socket.create_connection((host, port), timeout=30)
    f = s.makefile("rb")
    for command in (("HELLO", "3"), ("CLIENT", "TRACKING", "ON")):
        s.sendall(_encode(command))
        _read_reply(f)
    return s, f
