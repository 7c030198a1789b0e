"""Loading a dataset without stopping the event loop, and what INFO says meanwhile.

Valkey loads an RDB or AOF with the server in its loading state and processes events every
`loading-process-events-interval-bytes` (2 MB) loaded: clients are answered (-LOADING to data commands, INFO
with the `loading_*` fields) while the load goes on. durakv's loads are generators that do their work in small
steps (snapshot/format.py `load_snapshot_steps`, recovery `recover_steps`, a replica's journal entries, a
REPLICAOF full sync's RDB): `Slicer` runs such a generator and yields to the loop whenever a slice of
SLICE_MAX_MS has been used, so the loop never waits longer than one step past that (a step is one command
applied or one chunk read). `LoadProgress` is the state behind INFO persistence's loading fields.
"""

import asyncio
import time

from ..snapshot.format import run_steps  # noqa: F401 - the loop-less driver, beside Slicer.run

# One slice of a load between two yields to the loop: short enough that other clients are answered within a few
# milliseconds, long enough that the yields cost little of the load's time (measured on the REPLICAOF load:
# 1,000,000 keys at about the same keys/s as the load without yielding).
SLICE_MAX_MS = 5


class LoadProgress:
    """One load under way (Valkey's server.loading_* fields). `total_bytes` and `loaded_bytes` are counted by
    the steps of the load as they go; `rdb_used_mem` is the saver's used memory when an RDB names it (aux
    field `used-mem`), else 0."""

    __slots__ = ("start_time", "total_bytes", "loaded_bytes", "rdb_used_mem")

    def __init__(self, total_bytes=0, wall_clock_s=time.time):
        self.start_time = int(wall_clock_s())
        self.total_bytes = total_bytes
        self.loaded_bytes = 0
        self.rdb_used_mem = 0

    def start_over(self):
        """The load begins again from nothing (a shard member that found the journal purged under it loads a
        newer snapshot): the counts restart, the start time stays."""
        self.total_bytes = self.loaded_bytes = self.rdb_used_mem = 0

    def info_fields(self, now_s=None) -> dict:
        """INFO persistence's loading_* lines, computed as Valkey's genValkeyInfoString does (server.c)."""
        perc = 0.0
        remaining = 1
        if self.total_bytes:
            perc = self.loaded_bytes / self.total_bytes * 100
            remaining = self.total_bytes - self.loaded_bytes
        elif self.rdb_used_mem:
            # used memory is a poor estimate of the file's size: never past 99.99%
            perc = min(99.99, self.loaded_bytes / self.rdb_used_mem * 100)
            remaining = max(1, self.rdb_used_mem - self.loaded_bytes)
        elapsed = int(time.time() if now_s is None else now_s) - self.start_time
        eta = 1 if elapsed == 0 else elapsed * remaining // (self.loaded_bytes + 1)
        return {"loading_start_time": self.start_time, "loading_total_bytes": self.total_bytes,
                "loading_rdb_used_mem": self.rdb_used_mem, "loading_loaded_bytes": self.loaded_bytes,
                "loading_loaded_perc": "%.2f" % perc, "loading_eta_seconds": eta}


class LoadStopped(Exception):
    """The load was given up between two slices because the server is shutting down (SHUTDOWN while loading,
    as Valkey's SHUTDOWN during a load exits without saving)."""


class Slicer:
    """Time slices of a load on the event loop: `due()` says the slice is used up, `await pause()` lets the loop
    run once (clients, timers, NATS) and starts the next slice. One Slicer may run several generators in turn
    (a snapshot, then journal entries), so the slice is counted across them. `stop()`, if given, is asked after
    each pause: True raises LoadStopped."""

    __slots__ = ("slice_s", "end", "pauses", "stop", "longest_s", "longest_cpu_s", "_perf_counter", "_started",
                 "_started_cpu")

    def __init__(self, slice_ms=SLICE_MAX_MS, perf_counter=time.perf_counter, stop=None):
        self.slice_s = slice_ms / 1000.0
        self._perf_counter = perf_counter
        self._started = perf_counter()
        self._started_cpu = time.thread_time()
        self.end = self._started + self.slice_s
        self.pauses = 0
        self.stop = stop
        # the longest slice so far, by the clock and in this thread's CPU time: on a machine whose cores are all
        # busy the first includes the time the process waited for a core, the second is the load's own
        self.longest_s = 0.0
        self.longest_cpu_s = 0.0

    def due(self) -> bool:
        return self._perf_counter() >= self.end

    def stopped(self) -> bool:
        return self.stop is not None and self.stop()

    def summary(self) -> str:
        return "%d pauses for the loop, longest slice %.1f ms (%.1f ms of CPU)" % (
            self.pauses, self.longest_s * 1000, self.longest_cpu_s * 1000)

    async def pause(self):
        self._measure()
        await asyncio.sleep(0)
        self.pauses += 1
        if self.stopped():
            raise LoadStopped("the server is shutting down")
        self._started = self._perf_counter()
        self._started_cpu = time.thread_time()
        self.end = self._started + self.slice_s

    async def run(self, steps):
        """Drives the generator `steps` to its end, pausing between steps whenever the slice is used up; returns
        what the generator returns."""
        perf_counter = self._perf_counter
        if perf_counter() >= self.end:
            # the loop ran other work since the last run (entries arrive one by one): a new slice
            self._started = perf_counter()
            self._started_cpu = time.thread_time()
            self.end = self._started + self.slice_s
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                self._measure()
                return stop.value
            if perf_counter() >= self.end:
                await self.pause()

    def _measure(self):
        self.longest_s = max(self.longest_s, self._perf_counter() - self._started)
        self.longest_cpu_s = max(self.longest_cpu_s, time.thread_time() - self._started_cpu)

