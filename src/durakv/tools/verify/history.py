"""The history of a verification run, Jepsen/Maelstrom style: every client operation is an `invoke` followed by
one completion, `ok` (it happened), `fail` (it certainly did not happen) or `info` (unknown: a timeout or a lost
connection; the request may still be applied later, so a checker keeps it open forever).

A process is one logical client doing one operation at a time; its completion pairs with its open invoke. After
an `info` the process may go on (Jepsen would give it a new id; pairing by process stays unambiguous because
the info record closes the slot, while the checker still treats the operation as open).

Nemesis (fault) events are recorded in the same history under process "nemesis", so reports can shade the
windows in which a fault was active.

Pure: no sockets, no asyncio. `Recorder` is safe to share between threads and between asyncio tasks.
"""

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = (INVOKE, OK, FAIL, INFO)
READ, WRITE, CAS = "read", "write", "cas"
# One write of a unique key (acked-writes scenario); "add" is Jepsen's name for the same operation.
WRITE_KEY, ADD = "write-key", "add"
NEMESIS = "nemesis"
FAULT_START, FAULT_STOP = "start", "stop"

FORMAT = "durakv-history"
FORMAT_VERSION = 1

_SAME = object()


def plain(value):
    """A JSON-safe copy of a client value: bytes become text (undecodable bytes survive as surrogate escapes),
    tuples become lists."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Op:
    """One history record. `time_ns` comes from a monotonic clock: only differences mean anything."""
    index: int
    process: Any
    type: str
    f: str
    key: Any = None
    value: Any = None
    time_ns: int = 0
    error: Optional[str] = None

    def to_dict(self) -> dict:
        d = {"index": self.index, "process": self.process, "type": self.type, "f": self.f,
             "key": plain(self.key), "value": plain(self.value), "time_ns": self.time_ns}
        if self.error is not None:
            d["error"] = self.error
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Op":
        typ = d["type"]
        if typ not in TYPES:
            raise ValueError(f"history record {d.get('index')}: unknown type {typ!r}")
        return cls(index=int(d["index"]), process=d["process"], type=typ, f=d["f"], key=d.get("key"),
                   value=d.get("value"), time_ns=int(d["time_ns"]), error=d.get("error"))


@dataclass(frozen=True)
class Operation:
    """An invoke paired with its completion. `type` is the completion's (ok/fail/info). `output` is the
    completion's value (what a read returned). For info, `complete_ns` is when the client gave up (None when the
    history ended with the operation still open); a checker must not read it as the operation's end."""
    index: int
    process: Any
    f: str
    key: Any
    value: Any
    output: Any
    type: str
    invoke_ns: int
    complete_ns: Optional[int]
    error: Optional[str] = None

    def to_dict(self) -> dict:
        d = {"index": self.index, "process": self.process, "f": self.f, "key": plain(self.key),
             "value": plain(self.value), "output": plain(self.output), "type": self.type,
             "invoke_ns": self.invoke_ns, "complete_ns": self.complete_ns}
        if self.error is not None:
            d["error"] = self.error
        return d


@dataclass(frozen=True)
class FaultWindow:
    start_ns: int
    stop_ns: Optional[int]  # None: the fault was still active when the history ended
    description: Any = None


@dataclass
class History:
    ops: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def __len__(self):
        return len(self.ops)

    def __iter__(self):
        return iter(self.ops)

    def client_ops(self) -> list:
        return [op for op in self.ops if op.process != NEMESIS]

    def operations(self) -> list:
        """Client operations paired invoke -> completion, in invoke order. An invoke with no completion is
        returned as `info` with complete_ns None."""
        return pair(self.ops)

    def fault_windows(self) -> list:
        """Nemesis `start`/`stop` records paired in order (a stop closes the oldest open start)."""
        windows, open_starts = [], []
        for op in self.ops:
            if op.process != NEMESIS:
                continue
            if op.f == FAULT_START:
                open_starts.append(op)
            elif op.f == FAULT_STOP and open_starts:
                s = open_starts.pop(0)
                windows.append(FaultWindow(s.time_ns, op.time_ns, s.value))
        windows.extend(FaultWindow(s.time_ns, None, s.value) for s in open_starts)
        return sorted(windows, key=lambda w: w.start_ns)

    def start_ns(self) -> Optional[int]:
        return self.ops[0].time_ns if self.ops else None

    # --- persistence -------------------------------------------------------------------------------------

    def save_jsonl(self, path) -> None:
        """One JSON object per line: a header, then every record in order."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "meta": plain(self.meta)}) + "\n")
            for op in self.ops:
                f.write(json.dumps(op.to_dict()) + "\n")

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "meta": plain(self.meta),
                           "ops": [op.to_dict() for op in self.ops]})

    @classmethod
    def load(cls, path) -> "History":
        """Reads what save_jsonl or to_json wrote, or a bare JSON array / JSONL of records."""
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
        return cls.loads(text)

    @classmethod
    def loads(cls, text: str) -> "History":
        stripped = text.lstrip()
        if not stripped:
            return cls()
        if stripped[0] == "[":
            return cls([Op.from_dict(d) for d in json.loads(stripped)])
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError:
            doc = None  # more than one JSON value: JSONL
        if isinstance(doc, dict) and "ops" in doc:
            _check_header(doc)
            return cls([Op.from_dict(d) for d in doc["ops"]], dict(doc.get("meta") or {}))
        ops, meta = [], {}
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"history line {lineno}: {exc}") from None
            if "format" in d:
                _check_header(d)
                meta = dict(d.get("meta") or {})
            else:
                ops.append(Op.from_dict(d))
        return cls(ops, meta)


def _check_header(d):
    if d.get("format") != FORMAT:
        raise ValueError(f"not a durakv history (format {d.get('format')!r})")
    if d.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"history version {d.get('version')} is newer than this reader ({FORMAT_VERSION})")


def pair(ops: Iterable[Op]) -> list:
    """Pairs each client invoke with the next completion of the same process."""
    open_by_process = {}
    done = []
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == INVOKE:
            if op.process in open_by_process:
                raise ValueError(f"history record {op.index}: process {op.process!r} invoked while its "
                                 f"operation {open_by_process[op.process].index} is still open")
            open_by_process[op.process] = op
            continue
        inv = open_by_process.pop(op.process, None)
        if inv is None:
            raise ValueError(f"history record {op.index}: {op.type} from process {op.process!r} with no open invoke")
        if inv.f != op.f:
            raise ValueError(f"history record {op.index}: completes {op.f!r} but the open invoke is {inv.f!r}")
        done.append(Operation(index=inv.index, process=inv.process, f=inv.f, key=inv.key, value=inv.value,
                              output=op.value, type=op.type, invoke_ns=inv.time_ns, complete_ns=op.time_ns,
                              error=op.error))
    for inv in open_by_process.values():
        done.append(Operation(index=inv.index, process=inv.process, f=inv.f, key=inv.key, value=inv.value,
                              output=None, type=INFO, invoke_ns=inv.time_ns, complete_ns=None,
                              error="no completion recorded"))
    done.sort(key=lambda o: o.index)
    return done


class Recorder:
    """Collects a history from concurrent clients (threads or asyncio tasks).

    The clock is read under the lock, so record order and time order agree: an invoke recorded after a
    completion never carries an earlier time, which is what real-time precedence in the checker relies on.
    A client must call invoke() before it sends the request and complete only after the reply arrived.
    """

    def __init__(self, clock_ns: Callable[[], int] = time.monotonic_ns, meta: Optional[dict] = None):
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._ops = []
        self._open = {}
        self.meta = dict(meta or {})

    def _append(self, process, typ, f, key, value, error):
        with self._lock:
            if process != NEMESIS:
                if typ == INVOKE:
                    if process in self._open:
                        raise ValueError(f"process {process!r} already has an open operation")
                else:
                    inv = self._open.pop(process, None)
                    if inv is None:
                        raise ValueError(f"process {process!r} has no open operation to complete")
                    f, key = inv.f, inv.key
                    if value is _SAME:
                        value = inv.value
            if value is _SAME:
                value = None
            op = Op(len(self._ops), process, typ, f, key, value, self._clock_ns(), error)
            self._ops.append(op)
            if typ == INVOKE and process != NEMESIS:
                self._open[process] = op
            return op

    def invoke(self, process, f, key=None, value=None) -> Op:
        return self._append(process, INVOKE, f, key, value, None)

    def ok(self, process, value=_SAME) -> Op:
        """The operation happened. For a read, `value` is what it returned; otherwise it defaults to the
        invoke's value."""
        return self._append(process, OK, None, None, value, None)

    def fail(self, process, error=None) -> Op:
        """The operation certainly did not take effect (an error reply before execution, a CAS whose
        comparison failed, an aborted EXEC)."""
        return self._append(process, FAIL, None, None, _SAME, _error_text(error))

    def info(self, process, error=None) -> Op:
        """Unknown outcome: a timeout, a lost connection, anything after the request may have been sent."""
        return self._append(process, INFO, None, None, _SAME, _error_text(error))

    def nemesis(self, f, value=None) -> Op:
        """A fault event: f is `start` or `stop` (windows) or any other word for a one-off event."""
        return self._append(NEMESIS, INFO, f, None, value, None)

    def operation(self, process, f, key=None, value=None) -> "_OpScope":
        """`with rec.operation(p, "write", k, v) as op: client.set(k, v); op.ok()` — leaving the block
        without ok()/fail() records `info` (an exception after the request went out may hide a success)."""
        return _OpScope(self, process, f, key, value)

    def history(self) -> History:
        with self._lock:
            return History(list(self._ops), dict(self.meta))

    def open_processes(self) -> list:
        with self._lock:
            return list(self._open)


class _OpScope:
    def __init__(self, rec, process, f, key, value):
        self._rec, self._process = rec, process
        self._args = (f, key, value)
        self.done = False

    def __enter__(self):
        self._rec.invoke(self._process, *self._args)
        return self

    def ok(self, value=_SAME):
        self._rec.ok(self._process, value)
        self.done = True

    def fail(self, error=None):
        self._rec.fail(self._process, error)
        self.done = True

    def info(self, error=None):
        self._rec.info(self._process, error)
        self.done = True

    def __exit__(self, exc_type, exc, tb):
        if not self.done:
            self._rec.info(self._process, exc if exc is not None else "left without a completion")
        return False


def _error_text(error):
    if error is None or isinstance(error, str):
        return error
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)
