"""Logging of recurring conditions: once when it starts, then a count at most every interval, once when it ends.

A NATS server going away makes nats-py report every reconnect attempt, and a journal append retried during a
stream leader election fails every few milliseconds; logging each one buries what matters (46 lines in 2 s
were seen). `Recurring` logs the first occurrence of a condition (by key), then "... N more times in the last
S s" no more than every `interval_s`, and `clear(key)` logs how often and how long it lasted.
"""

import logging
import time


class Recurring:
    def __init__(self, logger, level=logging.WARNING, interval_s=10.0, clock=time.monotonic):
        self.log = logger
        self.level = level
        self.interval_s = interval_s
        self.clock = clock
        self._open = {}     # key -> [first_at, last_report_at, count_since_report, total]

    def __call__(self, key, msg, *args):
        now = self.clock()
        state = self._open.get(key)
        if state is None:
            self._open[key] = [now, now, 0, 1]
            self.log.log(self.level, msg, *args)
            return
        state[2] += 1
        state[3] += 1
        if now - state[1] >= self.interval_s:
            self.log.log(self.level, msg + " (%d more times in the last %.0f s)", *args, state[2], now - state[1])
            state[1], state[2] = now, 0

    def clear(self, key, msg=None, *args):
        """The condition ended: one line saying how many times it occurred and for how long."""
        state = self._open.pop(key, None)
        if state is None:
            return
        if msg is not None:
            self.log.info(msg + " (after %d occurrences over %.1f s)", *args, state[3], self.clock() - state[0])

    def active(self, key) -> bool:
        return key in self._open


class _NoSslEofNotice(logging.Filter):
    """asyncio logs "returning true from eof_received() has no effect when using ssl" whenever a TLS peer closes a
    connection whose protocol (nats-py's) returns True from eof_received: a harmless notice about the protocol's
    return value, which reads like an error on every `durakv cluster --tls` command. Dropped; every other asyncio
    record passes."""

    def filter(self, record):
        return "eof_received()" not in record.getMessage()


def quiet_asyncio_ssl_notice():
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _NoSslEofNotice) for f in logger.filters):
        logger.addFilter(_NoSslEofNotice())
