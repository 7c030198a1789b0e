"""The nemesis' event log: one JSON object per line in DIR/chaos/events.jsonl, and the same line printed.

Every fault writes `start` when it takes effect, `stop` when it is undone (the heal), `recovered` once what it
broke serves again, and `step` lines in between. Each record carries the wall clock (for people) and
CLOCK_MONOTONIC in ns (for `durakv verify`, whose history is on the same clock: CLOCK_MONOTONIC is one clock for
every process of the machine), so verify can shade the exact fault window of a run it did not inject itself.
"""

import json
import os
import sys
import threading
import time
import uuid

START, STOP, STEP, RECOVERED, ERROR = "start", "stop", "step", "recovered", "error"
LOG_NAME = os.path.join("chaos", "events.jsonl")


def events_path(cluster_dir) -> str:
    return os.path.join(os.path.abspath(str(cluster_dir)), LOG_NAME)


def _stamp(wall_s) -> str:
    lt = time.localtime(wall_s)
    return time.strftime("%Y-%m-%d %H:%M:%S", lt) + f".{int(wall_s * 1000) % 1000:03d}"


class EventLog:
    """Appends events of one fault (one `id`) to the log and prints them, timestamped."""

    def __init__(self, path, fault, out=sys.stdout, clock_ns=time.monotonic_ns, wall=time.time):
        self.path = path
        self.fault = fault
        self.id = uuid.uuid4().hex[:12]
        self.out = out
        self._clock_ns = clock_ns
        self._wall = wall
        self._lock = threading.Lock()
        if path:
            os.makedirs(os.path.dirname(path), exist_ok=True)

    def now(self):
        """(monotonic ns, wall s) now: a fault takes it just before it acts and passes it to emit(at=...)."""
        return self._clock_ns(), self._wall()

    def emit(self, event, message, at=None, **detail) -> dict:
        with self._lock:
            mono, wall = at if at is not None else self.now()
            rec = {"ts": _stamp(wall), "wall_s": round(wall, 6), "monotonic_ns": mono,
                   "fault": self.fault, "id": self.id, "event": event, "message": message}
            if detail:
                rec["detail"] = detail
            if self.path:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, default=str) + "\n")
            if self.out is not None:
                print(f"{rec['ts']} chaos {self.fault} {event}: {message}", file=self.out, flush=True)
            return rec


def read_events(path, offset=0, end=None):
    """(events, next offset) from byte `offset` on (up to `end`): verify notes the size before the fault and
    reads after."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read() if end is None else f.read(max(0, end - offset))
    except FileNotFoundError:
        return [], offset
    events = []
    end = data.rfind(b"\n") + 1    # a line still being written is read next time
    for line in data[:end].splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events, offset + end


def log_size(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
