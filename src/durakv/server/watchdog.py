"""watchdog-period: Valkey's software watchdog (debug.c watchdogSignalHandler), for finding what blocks the loop.

Valkey arms a SIGALRM timer; when the main thread does not get back to its event loop within the period, the
handler logs "--- WATCHDOG TIMER EXPIRED ---" and the main thread's stack. durakv's event loop beats every
100 ms (loopstats.py); a daemon thread here checks the beat and, once it is late by more than the period, logs
the same banner with the Python stack of the loop's thread (sys._current_frames), once per stall, plus
debug-context when it is set.
"""

import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("durakv.server")

BANNER = "--- WATCHDOG TIMER EXPIRED ---"


def report(server, thread_id, stuck_ms) -> str:
    """The log text of one expired watchdog: banner, how long, the stack of the loop's thread, debug-context."""
    frame = sys._current_frames().get(thread_id)
    stack = "".join(traceback.format_stack(frame)) if frame is not None else "(the loop's thread is gone)\n"
    lines = [BANNER, "the event loop has not run for %d ms; its thread's stack:" % stuck_ms, stack.rstrip()]
    context = server.config["debug-context"]
    if context:
        lines.append("debug-context: %s" % context)
    lines.append("--------")
    return "\n".join(lines)


class Watchdog:
    def __init__(self, server):
        self.server = server
        self.thread = None
        self.stop_event = threading.Event()
        self.loop_thread_id = None
        self.reports = 0

    def configure(self):
        """Starts, keeps or stops the checking thread after watchdog-period changed."""
        period_ms = self.server.config["watchdog-period"]
        if period_ms and self.thread is None:
            self.loop_thread_id = threading.get_ident()    # configure() runs on the loop's thread
            self.stop_event = threading.Event()
            self.thread = threading.Thread(target=self._run, args=(self.stop_event,), daemon=True,
                                           name="durakv-watchdog")
            self.thread.start()
        elif not period_ms and self.thread is not None:
            self.stop()

    def stop(self):
        self.stop_event.set()
        self.thread = None

    def _run(self, stop_event):
        reported_beat = None
        while not stop_event.is_set():
            period_ms = self.server.config["watchdog-period"]
            if not period_ms:
                return
            stop_event.wait(min(max(period_ms / 4000.0, 0.01), 0.25))
            beat_ms = self.server.loop_stats.beat_ms
            late_ms = int(time.monotonic() * 1000) - beat_ms
            # the beat is due every 100 ms: later than that by the period means the loop is stuck
            if late_ms - 100 > period_ms and beat_ms != reported_beat:
                reported_beat = beat_ms
                self.reports += 1
                log.warning("%s", report(self.server, self.loop_thread_id, late_ms))
