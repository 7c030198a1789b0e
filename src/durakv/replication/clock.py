"""The lease clock: durations on this node's own monotonic clock (cluster/controller.py says why)."""

import time


def monotonic_ms() -> int:
    """The lease clock: durations on this node's own clock (cluster/controller.py says why)."""
    return int(time.monotonic() * 1000)
