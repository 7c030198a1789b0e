"""The acked-writes check (the seed's Test 1 and 2): every acknowledged write must be there after recovery.

Writers record each write of a unique key (`write-key`, or Jepsen's `add`) with its value: ok = acknowledged,
fail = certainly not applied, info = unknown. After the fault heals, every key is read back. Per key:

- acked: some attempt was ok. The key must hold the value of an ok or info attempt, else it is **lost**
  (missing, or holding another value).
- failed: every attempt failed. The key must be missing, else it is **unexpected**: a write the server said it
  refused did happen, which is a bug too (a client would retry it, and might apply it twice).
- indefinite: no attempt ok, at least one info. Either outcome is fine; how many landed is reported.

A retried key (fail then ok, as the async-rpo writers do after a buffer-exceeded rejection) counts once, as its
best outcome. Write-unavailability comes from the acknowledgement times: the longest gap between consecutive
acknowledged writes, and every gap at least `min_window_s` long (the stretches in which no write succeeded),
from the first write's invoke to the last write's completion.

Pure: a function of the history and the read-back.
"""

import bisect
from dataclasses import dataclass, field
from typing import Any, Optional

from .history import ADD, FAIL, INFO, OK, WRITE_KEY, History, Operation, pair, plain

WRITE_FS = (WRITE_KEY, ADD)


@dataclass(frozen=True)
class LostKey:
    key: Any
    expected: Any       # the acknowledged value (the last ok attempt's)
    found: Any          # None: missing
    acked_ns: int       # when the acknowledgement arrived

    def to_dict(self):
        return {"key": plain(self.key), "expected": plain(self.expected), "found": plain(self.found),
                "acked_ns": self.acked_ns}


@dataclass(frozen=True)
class Window:
    """A stretch with no acknowledged write: from one acknowledgement (or the start) to the next (or the end)."""
    start_ns: int
    end_ns: int
    failed: int = 0       # attempts that completed as fail inside the window
    indefinite: int = 0   # attempts that completed (or gave up) as info inside the window

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def to_dict(self, t0_ns=0):
        return {"start_s": round((self.start_ns - t0_ns) / 1e9, 6), "end_s": round((self.end_ns - t0_ns) / 1e9, 6),
                "duration_s": round(self.duration_s, 6), "failed": self.failed, "indefinite": self.indefinite}


@dataclass
class AckedWritesResult:
    attempts: int
    keys: int
    acked: int
    failed: int
    indefinite: int
    indefinite_present: int      # indefinite keys found after recovery (the write did land)
    lost: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)   # (key, found) of failed keys found present
    stray_keys: int = 0          # keys in the read-back that no recorded write touched
    longest_gap: Optional[Window] = None
    windows: list = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0
    min_window_s: float = 1.0

    @property
    def ok(self) -> bool:
        return not self.lost and not self.unexpected

    def to_dict(self) -> dict:
        t0 = self.start_ns
        return {"ok": self.ok, "attempts": self.attempts, "keys": self.keys, "acked": self.acked,
                "failed": self.failed, "indefinite": self.indefinite,
                "indefinite_present": self.indefinite_present, "lost": len(self.lost),
                "unexpected": len(self.unexpected), "stray_keys": self.stray_keys,
                "lost_keys": [x.to_dict() for x in self.lost],
                "unexpected_keys": [{"key": plain(k), "found": plain(v)} for k, v in self.unexpected],
                "duration_s": round((self.end_ns - self.start_ns) / 1e9, 6),
                "longest_gap": self.longest_gap.to_dict(t0) if self.longest_gap else None,
                "unavailable_windows": [w.to_dict(t0) for w in self.windows],
                "min_window_s": self.min_window_s}


def _norm(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return v


def write_ops(history) -> list:
    """The paired write-key operations of a History, a list of Op records or of Operations."""
    if isinstance(history, History):
        ops = history.operations()
    else:
        items = list(history)
        ops = items if items and isinstance(items[0], Operation) else pair(items)
    return [o for o in ops if o.f in WRITE_FS]


def check_acked_writes(history, final: dict, min_window_s: float = 1.0) -> AckedWritesResult:
    """final maps each key to the value read back after recovery; None, or a key absent from it, is missing
    (so a partial read-back errs towards reporting loss, never hides it)."""
    ops = write_ops(history)
    final_n = {_norm(k): _norm(v) for k, v in final.items()}
    by_key = {}
    for o in ops:
        by_key.setdefault(_norm(o.key), []).append(o)
    res = AckedWritesResult(attempts=len(ops), keys=len(by_key), acked=0, failed=0, indefinite=0,
                            indefinite_present=0, min_window_s=min_window_s)
    for key, attempts in by_key.items():
        found = final_n.get(key)
        oks = [o for o in attempts if o.type == OK]
        infos = [o for o in attempts if o.type == INFO]
        if oks:
            res.acked += 1
            allowed = {_norm(o.value) for o in oks + infos}
            if found is None or found not in allowed:
                last = max(oks, key=lambda o: o.complete_ns)
                res.lost.append(LostKey(key, _norm(last.value), found, last.complete_ns))
        elif infos:
            res.indefinite += 1
            if found is not None:
                res.indefinite_present += 1
        else:
            res.failed += 1
            if found is not None:
                res.unexpected.append((key, found))
    res.lost.sort(key=lambda x: x.acked_ns)
    res.stray_keys = sum(1 for k, v in final_n.items() if v is not None and k not in by_key)
    _unavailability(res, ops, min_window_s)
    return res


def _unavailability(res, ops, min_window_s):
    if not ops:
        return
    start = min(o.invoke_ns for o in ops)
    end = max(max(o.complete_ns for o in ops if o.complete_ns is not None), start)
    res.start_ns, res.end_ns = start, end
    marks = [start] + sorted(o.complete_ns for o in ops if o.type == OK) + [end]
    misses = sorted((o.complete_ns, o.type) for o in ops if o.type in (FAIL, INFO) and o.complete_ns is not None)
    gaps = []
    for a, b in zip(marks, marks[1:]):
        if b > a:
            gaps.append((a, b))
    if not gaps:
        return
    times = [t for t, _ in misses]

    def window(a, b):
        lo, hi = bisect.bisect_left(times, a), bisect.bisect_right(times, b)
        failed = sum(1 for _, typ in misses[lo:hi] if typ == FAIL)
        return Window(a, b, failed, (hi - lo) - failed)
    a, b = max(gaps, key=lambda g: g[1] - g[0])
    res.longest_gap = window(a, b)
    res.windows = [window(a, b) for a, b in gaps if (b - a) / 1e9 >= min_window_s]


@dataclass(frozen=True)
class RatePoint:
    t_s: float      # bucket start, seconds from t0
    acked: int      # acknowledgements that arrived in the bucket
    failed: int
    indefinite: int


def write_rate(history_or_ops, bucket_s: float = 1.0, t0_ns: Optional[int] = None,
               end_ns: Optional[int] = None) -> list:
    """Acknowledged / failed / info write completions per bucket (for the writes-per-second plot). Empty
    buckets are included, so a stall shows as zeros."""
    ops = write_ops(history_or_ops)
    if not ops:
        return []
    t0 = min(o.invoke_ns for o in ops) if t0_ns is None else t0_ns
    last = max(o.complete_ns for o in ops if o.complete_ns is not None) if end_ns is None else end_ns
    width = int(bucket_s * 1e9)
    n = max(1, (last - t0) // width + 1)
    counts = [[0, 0, 0] for _ in range(n)]
    col = {OK: 0, FAIL: 1, INFO: 2}
    for o in ops:
        if o.complete_ns is None or o.complete_ns < t0:
            continue
        i = (o.complete_ns - t0) // width
        if i < n:
            counts[i][col[o.type]] += 1
    return [RatePoint(round(i * bucket_s, 9), *c) for i, c in enumerate(counts)]
