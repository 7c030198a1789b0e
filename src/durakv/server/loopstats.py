"""The event loop's figures for INFO stats (Valkey 8's eventloop_* fields) and its heartbeat.

Valkey times each turn of its event loop (ae.c: from epoll_wait returning to the next call): eventloop_cycles
counts them, eventloop_duration_sum adds up their lengths in microseconds, eventloop_duration_cmd_sum the part
spent running commands, and serverCron samples both 10 times a second for instantaneous_eventloop_cycles_per_sec
and instantaneous_eventloop_duration_usec (the average turn over the last 16 samples).

asyncio (uvloop) has no hook around a turn, so a turn is marked where durakv's work starts: the first socket read
(Connection.data_received) or cron tick of a turn calls `begin()`, which reads the clock once and schedules `_end`
with call_soon. A callback scheduled from a turn's callbacks runs at the start of the next turn, after the poll
(which does not block while a callback is ready), so `_end` sees the turn's length: its reads, its commands, its
replies. Later reads in the same turn cost one attribute test. Turns that only complete journal appends or NATS
messages are not counted; eventloop_duration_cmd_sum is the commands' own time (the sum of commandstats usec).

durakv's own: `eventloop_longest_stall_ms`, the longest time the loop went without starting a new turn. Two
measures, the larger wins: the longest turn, and the lateness of a heartbeat timer that fires every 100 ms (this
also catches a stall in work that is not marked, e.g. a long callback of the NATS client). The heartbeat's time
(`beat_ms`, monotonic) is the sign of life the lease renewer's thread checks (cluster/renewer.py): a loop that
does not beat for lease-renew-max-loop-stall-ms stops having its lease renewed.
"""

import collections
import logging
import time

from ..durability.tracker import Buckets

log = logging.getLogger("durakv.server")

BEAT_S = 0.1               # the heartbeat's period
STALL_LOG_MS = 1000        # a heartbeat later than this is logged (rate-limited)
SAMPLES = 16               # Valkey's STATS_METRIC_SAMPLES
# How late each heartbeat fired (the metrics port's durakv_event_loop_stall_seconds): on time is well under a
# millisecond; a lease is at risk past lease-renew-max-loop-stall-ms (seconds).
STALL_BOUNDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class LoopStats:
    # begin() and _end() have a compiled twin for socket reads (fastpath/_core.c begin_turn, end_turn), which
    # reads and writes these at their offsets
    __slots__ = ("open", "loop", "perf_counter", "turn_started_s", "cycles", "duration_s", "longest_stall_s",
                 "__dict__", "__weakref__")

    def __init__(self, perf_counter=time.perf_counter):
        self.perf_counter = perf_counter
        self.loop = None
        self.open = False              # a turn has begun and its end is scheduled
        self.turn_started_s = 0.0
        self.cycles = 0
        self.duration_s = 0.0          # the counted turns' total length
        self.longest_stall_s = 0.0
        self.beat_ms = _monotonic_ms()
        self._beat_due = 0.0
        self._samples = collections.deque(maxlen=SAMPLES)   # (monotonic s, cycles, duration_s)
        self._last_stall_log = 0.0
        self.stalls_logged = 0
        self.stall = Buckets(STALL_BOUNDS)

    def start(self, loop):
        self.loop = loop
        self.beat_ms = _monotonic_ms()
        self._beat_due = time.monotonic() + BEAT_S
        loop.call_later(BEAT_S, self._beat)

    # -- the hot path: one call per turn that reads from a client ---------------------------------------
    def begin(self):
        """The turn does durakv work; callers test `open` first (cheaper than the call)."""
        if self.open or self.loop is None:
            return
        self.open = True
        self.turn_started_s = self.perf_counter()
        self.loop.call_soon(self._end)

    def _end(self):
        took = self.perf_counter() - self.turn_started_s
        self.open = False
        self.cycles += 1
        self.duration_s += took
        if took > self.longest_stall_s:
            self.longest_stall_s = took

    # -- heartbeat -------------------------------------------------------------------------------------
    def _beat(self):
        now = time.monotonic()
        late = now - self._beat_due
        self.stall.observe(max(0.0, late))
        self.beat_ms = int(now * 1000)
        if late > self.longest_stall_s:
            self.longest_stall_s = late
        if late * 1000 >= STALL_LOG_MS and now - self._last_stall_log >= 10.0:
            self._last_stall_log = now
            self.stalls_logged += 1
            log.warning("the event loop did not run for %d ms (a script inside busy-reply-threshold, a long "
                        "command or export); INFO stats eventloop_longest_stall_ms has the longest", late * 1000)
        self._beat_due = now + BEAT_S
        self.loop.call_later(BEAT_S, self._beat)

    # -- serverCron's sampling and INFO ---------------------------------------------------------------------
    def sample(self):
        self._samples.append((time.monotonic(), self.cycles, self.duration_s))

    def reset(self):
        """CONFIG RESETSTAT."""
        self.cycles = 0
        self.duration_s = 0.0
        self.longest_stall_s = 0.0
        self._samples.clear()

    def info_fields(self, cmd_usec) -> dict:
        cycles_per_sec = duration_usec = 0
        s = self._samples
        if len(s) >= 2 and s[-1][0] > s[0][0]:
            cycles = s[-1][1] - s[0][1]
            cycles_per_sec = int(cycles / (s[-1][0] - s[0][0]))
            duration_usec = int((s[-1][2] - s[0][2]) * 1e6 / cycles) if cycles > 0 else 0
        return {"eventloop_cycles": self.cycles, "eventloop_duration_sum": int(self.duration_s * 1e6),
                "eventloop_duration_cmd_sum": cmd_usec,
                "instantaneous_eventloop_cycles_per_sec": cycles_per_sec,
                "instantaneous_eventloop_duration_usec": duration_usec,
                "eventloop_longest_stall_ms": int(self.longest_stall_s * 1000)}
