"""The dirty-reads check: no client may observe a write that was never acknowledged and is gone after recovery.

Writers write unique values: `write-key` (SET of a key written once) and `xadd` (XADD of a unique field value
to a stream). Readers record every value they saw as an `observe` operation: the invoke names the channel it
came through (GET, XREAD BLOCK, a keyspace notification, the SYNC feed or its RDB file) and the completion, at
the time it arrived, carries what was seen: the value (GET, XREAD, the feed) or the event name (a keyspace
notification names only the key, and a key written once names its write).

Per observation, the write it shows is looked up by (key, value), or by key alone for a notification. It is a
**dirty read** when that write was never acknowledged (its completion is fail or info, or none was recorded)
and its value is not there after recovery: a client was shown a write that a failover took back. Observed
before its acknowledgement but acknowledged later (and kept) is reported as `early`, not failed: a reply and a
push released by one commit reach two sockets in either order. A value no recorded write made is `stray`.

Pure: a function of the history and the read-back (`final`: key -> value, None when missing; for a stream,
the list of the values its entries hold).
"""

from dataclasses import dataclass, field
from typing import Any

from .history import FAIL, INFO, OK, WRITE_KEY, History, pair, plain

XADD = "xadd"
OBSERVE = "observe"
WRITE_FS = (WRITE_KEY, XADD)

# The channels an observation comes through (the invoke's value), in report order.
VIA_GET, VIA_XREAD, VIA_NOTIFY, VIA_FEED, VIA_RDB = "GET", "XREAD BLOCK", "keyspace notification", \
    "SYNC feed", "SYNC RDB"
CHANNELS = (VIA_GET, VIA_XREAD, VIA_NOTIFY, VIA_FEED, VIA_RDB)


def _norm(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")
    return v


@dataclass(frozen=True)
class DirtyRead:
    via: str
    key: Any
    value: Any
    observed_ns: int
    write_outcome: str          # fail | info (info also when no completion was recorded)
    write_invoke_ns: int
    write_process: Any

    def to_dict(self, t0_ns=0):
        return {"via": self.via, "key": plain(self.key), "value": plain(self.value),
                "observed_s": round((self.observed_ns - t0_ns) / 1e9, 6), "write_outcome": self.write_outcome,
                "write_invoked_s": round((self.write_invoke_ns - t0_ns) / 1e9, 6),
                "write_process": plain(self.write_process)}


@dataclass
class ChannelCount:
    observed: int = 0            # observations of a recorded write
    of_acked: int = 0            # ... whose write was acknowledged
    early: int = 0               # ... seen before that acknowledgement arrived
    early_max_ms: float = 0.0    # how much earlier, at most
    of_unacked_kept: int = 0     # ... of a write never acknowledged that is there after recovery
    dirty: int = 0               # ... of a write never acknowledged that is gone after recovery
    stray: int = 0               # observations no recorded write explains

    def to_dict(self):
        return {"observed": self.observed, "of_acked": self.of_acked, "early": self.early,
                "early_max_ms": round(self.early_max_ms, 3), "of_unacked_kept": self.of_unacked_kept,
                "dirty": self.dirty, "stray": self.stray}


@dataclass
class DirtyReadsResult:
    writes: int = 0
    acked: int = 0
    failed: int = 0
    indefinite: int = 0
    unacked_gone: int = 0        # writes never acknowledged that are not there after recovery
    lost: list = field(default_factory=list)     # acknowledged writes missing after recovery: (key, value)
    dirty: list = field(default_factory=list)    # DirtyRead, in observation order
    channels: dict = field(default_factory=dict)  # via -> ChannelCount
    start_ns: int = 0

    @property
    def ok(self) -> bool:
        return not self.dirty and not self.lost

    def to_dict(self) -> dict:
        return {"ok": self.ok, "writes": self.writes, "acked": self.acked, "failed": self.failed,
                "indefinite": self.indefinite, "unacked_gone": self.unacked_gone, "lost": len(self.lost),
                "lost_writes": [{"key": plain(k), "value": plain(v)} for k, v in self.lost],
                "dirty": len(self.dirty), "dirty_reads": [d.to_dict(self.start_ns) for d in self.dirty],
                "channels": {k: v.to_dict() for k, v in self.channels.items()}}


def _present(final_n, key, value) -> bool:
    found = final_n.get(key)
    if isinstance(found, (list, tuple, set, frozenset)):
        return value in found
    return found is not None and found == value


def check_dirty_reads(history, final: dict) -> DirtyReadsResult:
    """history: a History (or its records) holding the writes and the observations; final: the read-back."""
    ops = history.operations() if isinstance(history, History) else pair(history)
    final_n = {}
    for k, v in final.items():
        if isinstance(v, (list, tuple, set, frozenset)):
            final_n[_norm(k)] = {_norm(x) for x in v}
        else:
            final_n[_norm(k)] = _norm(v)
    writes = [o for o in ops if o.f in WRITE_FS]
    res = DirtyReadsResult(writes=len(writes), start_ns=min((o.invoke_ns for o in ops), default=0))
    by_value, by_key = {}, {}
    for w in writes:
        key, value = _norm(w.key), _norm(w.value)
        by_value[(key, value)] = w
        if w.f == WRITE_KEY:
            by_key.setdefault(key, []).append(w)
        present = _present(final_n, key, value)
        if w.type == OK:
            res.acked += 1
            if not present:
                res.lost.append((key, value))
        else:
            res.failed += w.type == FAIL
            res.indefinite += w.type == INFO
            res.unacked_gone += not present
    for via in CHANNELS:
        res.channels[via] = ChannelCount()
    for o in ops:
        if o.f != OBSERVE or o.type != OK or o.complete_ns is None or o.output is None:
            continue    # a read that failed, or found nothing: no value was shown
        via = o.value
        count = res.channels.setdefault(via, ChannelCount())
        key = _norm(o.key)
        if via == VIA_NOTIFY:
            # A notification names the key only; a key written once names its write (else: any of them).
            candidates = by_key.get(key, [])
            w = next((c for c in candidates if c.type != OK), candidates[0]) if candidates else None
        else:
            w = by_value.get((key, _norm(o.output)))
        if w is None:
            count.stray += 1
            continue
        count.observed += 1
        seen = o.complete_ns
        if w.type == OK:
            count.of_acked += 1
            if seen < w.complete_ns:
                count.early += 1
                count.early_max_ms = max(count.early_max_ms, (w.complete_ns - seen) / 1e6)
            continue
        if _present(final_n, _norm(w.key), _norm(w.value)):
            count.of_unacked_kept += 1
            continue
        count.dirty += 1
        res.dirty.append(DirtyRead(via, key, _norm(w.value), seen, FAIL if w.type == FAIL else INFO,
                                   w.invoke_ns, w.process))
    res.dirty.sort(key=lambda d: d.observed_ns)
    return res


def dirty_reads_table_rows(result: DirtyReadsResult) -> list:
    """One row per channel: observed, of acknowledged writes, early (and by how much), of unacknowledged
    writes that were kept, dirty."""
    rows = []
    for via, c in result.channels.items():
        rows.append([via, c.observed, c.of_acked, c.early, c.early_max_ms if c.early else None,
                     c.of_unacked_kept, c.dirty, c.stray])
    return rows


DIRTY_COLUMNS = ["Channel", "Observed", "Of acked writes", "Seen before the ack", "Earliest by (ms)",
                 "Of unacked writes kept", "Dirty reads", "Stray"]


def first_dirty(result: DirtyReadsResult, limit=5) -> list:
    """Lines describing the first dirty reads (for the reasons of a failed run)."""
    out = []
    for d in result.dirty[:limit]:
        out.append(f"{d.via}: saw {d.key!r} = {d.value!r} at {(d.observed_ns - result.start_ns) / 1e9:.3f}s; its "
                   f"write (process {d.write_process}, invoked at {(d.write_invoke_ns - result.start_ns) / 1e9:.3f}s) "
                   f"ended {d.write_outcome} and is gone after recovery")
    return out
