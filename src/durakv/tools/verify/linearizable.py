"""Linearizability of a map of registers (read / write / compare-and-set), checked per key.

Linearizability is compositional (Herlihy & Wing's P-compositionality), so the history is split per key and each
key is checked alone. Each key is searched the way Wing & Gong describe and Porcupine implements: the invoke and
completion events sit in one doubly linked list in time order; the search linearizes any call that comes before
the first remaining completion, lifts it (and its completion) out of the list, and backtracks through an undo
stack when it reaches a completion whose operation it could not place. Lowe's memoization skips a step that
leads to a (set of linearized operations, register value) pair already explored.

Operation outcomes (Jepsen's convention):
- `ok`: took effect exactly once, between its invoke and its completion.
- `fail`: took no effect: dropped. (A CAS whose comparison failed, an aborted EXEC, an error reply.)
- `info`: may have taken effect at any time after its invoke, or never. It has no completion event, so the
  search may linearize it anywhere later but never has to; success is "every ok operation placed". An info read
  constrains nothing and is dropped.

An info write or CAS whose written value no remaining operation can observe (no read returns it, no CAS expects
it) is dropped before the search: in any linearization the next operation after it must be a write, so leaving
it out changes nothing observable. Such timed-out writes are common around faults, and each one left in would
double the states the search can reach.

Values are compared as Valkey stores them: bytes and numbers become text (valkey-py sends 5 as "5"), None is
a missing key.

Pure: no sockets, no asyncio. The time bound is a deadline checked inside the search; a key that runs out is
`unknown`, never guessed.
"""

import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from .history import CAS, FAIL, INFO, OK, READ, WRITE, History, Operation, pair, plain

LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN = "ok", "fail", "unknown"
REGISTER_FS = (READ, WRITE, CAS)

_READ, _WRITE, _CAS = 0, 1, 2
_CHECK_EVERY = 2048  # search steps between deadline checks: time.monotonic() costs as much as ~20 steps


def register_value(v):
    """The value as Valkey holds it: text, a tuple for structured values, None for a missing key."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "surrogateescape")
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return tuple(register_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), register_value(x)) for k, x in v.items()))
    return v


@dataclass(frozen=True)
class _P:
    """One operation prepared for the search. ret None: optional (an info operation, or a weakened one)."""
    src: Operation
    kind: int
    a: Any
    b: Any
    call: int
    ret: Optional[int]

    def written(self):
        return self.a if self.kind == _WRITE else self.b


def _cas_args(op):
    v = op.value
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError(f"history record {op.index}: cas value must be [expected, new], got {v!r}")
    return register_value(v[0]), register_value(v[1])


def _prepare(ops) -> list:
    out = []
    for o in ops:
        if o.type == FAIL:
            continue
        if o.type == OK and (o.complete_ns is None or o.complete_ns < o.invoke_ns):
            raise ValueError(f"history record {o.index}: completion time before its invoke")
        ret = o.complete_ns if o.type == OK else None
        if o.f == READ:
            if o.type == OK:
                out.append(_P(o, _READ, register_value(o.output), None, o.invoke_ns, ret))
        elif o.f == WRITE:
            out.append(_P(o, _WRITE, register_value(o.value), None, o.invoke_ns, ret))
        elif o.f == CAS:
            exp, new = _cas_args(o)
            out.append(_P(o, _CAS, exp, new, o.invoke_ns, ret))
        else:
            raise ValueError(f"history record {o.index}: {o.f!r} is not a register operation")
    return out


def _prune(ps: list) -> list:
    """Drops optional writes/CAS whose value nothing observes, to a fixpoint (a dropped CAS may have been
    the only observer of another optional write's value)."""
    while True:
        observed = {p.a for p in ps if p.kind != _WRITE}
        keep = [p for p in ps if p.ret is not None or p.kind == _READ or p.written() in observed]
        if len(keep) == len(ps):
            return ps
        ps = keep


class _OutOfTime(Exception):
    pass


def _search(ps: list, initial, deadline: float, clock=time.monotonic, want_longest=False):
    """WGL over one key. Returns (status, order): the linearization (indices into ps) when ok, the longest
    partial one found when want_longest, else None."""
    n = len(ps)
    remaining = sum(1 for p in ps if p.ret is not None)
    if remaining == 0:
        return LINEARIZABLE, []
    events = []
    for i, p in enumerate(ps):
        events.append((p.call, 0, i))  # at equal times calls sort first: treated as concurrent
        if p.ret is not None:
            events.append((p.ret, 1, i))
    events.sort()
    tail = len(events) + 1
    nxt = list(range(1, tail + 1)) + [tail]
    prv = [0] + list(range(0, tail))
    node_op = [-1] * (tail + 1)
    is_ret = [False] * (tail + 1)
    ret_node = [0] * n
    for pos, (_, r, i) in enumerate(events, 1):
        node_op[pos] = i
        if r:
            is_ret[pos] = True
            ret_node[i] = pos
    kinds = [p.kind for p in ps]
    arg_a = [p.a for p in ps]
    arg_b = [p.b for p in ps]
    masks = [1 << i for i in range(n)]

    state, bits = initial, 0
    stack = []          # (call node, state before it): the undo stack
    cache = set()       # (linearized bitset, state) already explored
    longest = []
    countdown = _CHECK_EVERY
    e = nxt[0]
    while True:
        if is_ret[e]:
            # The first remaining completion: its operation was not placed before it. Undo the last step.
            if not stack:
                return NOT_LINEARIZABLE, (longest if want_longest else None)
            if want_longest and len(stack) > len(longest):
                longest = [node_op[x] for x, _ in stack]
            e, state = stack.pop()
            i = node_op[e]
            bits ^= masks[i]
            r = ret_node[i]
            if r:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                remaining += 1
            nxt[prv[e]] = e
            prv[nxt[e]] = e
            e = nxt[e]
            countdown -= 1
            if not countdown:
                countdown = _CHECK_EVERY
                if clock() > deadline:
                    return UNKNOWN, None
            continue
        if e == tail:  # only reachable with no completion left, which returned above
            raise AssertionError("search ran past the last completion")
        i = node_op[e]
        k = kinds[i]
        if k == _WRITE:
            ok, new_state = True, arg_a[i]
        elif k == _READ:
            ok, new_state = state == arg_a[i], state
        else:
            ok, new_state = state == arg_a[i], arg_b[i]
        if ok:
            nb = bits | masks[i]
            memo = (nb, new_state)
            if memo not in cache:
                cache.add(memo)
                stack.append((e, state))
                state, bits = new_state, nb
                nxt[prv[e]] = nxt[e]
                prv[nxt[e]] = prv[e]
                r = ret_node[i]
                if r:
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                    remaining -= 1
                    if not remaining:
                        return LINEARIZABLE, [node_op[x] for x, _ in stack]
                e = nxt[0]
                countdown -= 1
                if not countdown:
                    countdown = _CHECK_EVERY
                    if clock() > deadline:
                        return UNKNOWN, None
                continue
        e = nxt[e]


# --- results ---------------------------------------------------------------------------------------------

def describe(op: Operation) -> str:
    """One operation as a person reads it: `write 'v1'`, `read -> 'v1'`, `cas 'v1' -> 'v2'`, with its outcome."""
    if op.f == READ:
        what = f"read -> {_show(op.output)}" if op.type == OK else "read"
    elif op.f == CAS:
        exp, new = (op.value if isinstance(op.value, (list, tuple)) and len(op.value) == 2 else (op.value, "?"))
        what = f"cas {_show(exp)} -> {_show(new)}"
    elif op.f == WRITE:
        what = f"write {_show(op.value)}"
    else:
        what = f"{op.f} {_show(op.value)}"
    if op.type == INFO:
        return what + "  (info: may have happened)"
    if op.type == FAIL:
        return what + "  (fail)"
    return what


def _show(v):
    v = plain(v)
    return "nil" if v is None else repr(v)


@dataclass
class Counterexample:
    """Operations of one key that admit no linearization. Minimal (when `minimal`): turning any one of the
    ok operations into info (may or may not have happened) makes them linearizable."""
    key: Any
    ops: list
    initial: Any
    explanation: str
    minimal: bool
    longest_prefix: list = field(default_factory=list)

    def render(self) -> str:
        t0 = min(o.invoke_ns for o in self.ops) if self.ops else 0
        rows = []
        for o in sorted(self.ops, key=lambda o: (o.invoke_ns, o.index)):
            end = "never" if o.type == INFO or o.complete_ns is None else f"{(o.complete_ns - t0) / 1e6:.3f}"
            rows.append((f"#{o.index}", f"p{o.process}", f"{(o.invoke_ns - t0) / 1e6:.3f}", end, describe(o)))
        widths = [max(len(h), *(len(r[c]) for r in rows)) for c, h in
                  enumerate(("op", "process", "invoked ms", "completed ms", "operation"))]
        head = ("op", "process", "invoked ms", "completed ms", "operation")
        lines = [f"key {_show(self.key)}: not linearizable"
                 + ("" if self.minimal else " (counterexample not minimized: out of time)")]
        lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
        for r in rows:
            lines.append("  " + "  ".join((c.rjust(w) if 1 < j < 4 else c.ljust(w)) for j, (c, w)
                                          in enumerate(zip(r, widths))).rstrip())
        lines.append("  " + self.explanation)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"key": plain(self.key), "initial": plain(self.initial), "minimal": self.minimal,
                "explanation": self.explanation, "ops": [o.to_dict() for o in self.ops],
                "longest_prefix": [o.index for o in self.longest_prefix]}


@dataclass
class KeyResult:
    key: Any
    status: str
    ops: int            # operations the search considered (after dropping fail, info reads, unobserved info)
    recorded: int       # operations recorded for the key
    elapsed_s: float
    counterexample: Optional[Counterexample] = None

    def to_dict(self) -> dict:
        return {"key": plain(self.key), "status": self.status, "ops": self.ops, "recorded": self.recorded,
                "elapsed_s": round(self.elapsed_s, 6),
                "counterexample": self.counterexample.to_dict() if self.counterexample else None}


@dataclass
class LinearizabilityResult:
    status: str
    keys: list
    elapsed_s: float
    time_limit_s: float
    ops: int
    ignored: int = 0    # recorded operations that are not register operations (not checked)

    @property
    def ok(self) -> bool:
        return self.status == LINEARIZABLE

    @property
    def failures(self) -> list:
        return [k for k in self.keys if k.status == NOT_LINEARIZABLE]

    @property
    def unknown_keys(self) -> list:
        return [k for k in self.keys if k.status == UNKNOWN]

    def to_dict(self) -> dict:
        return {"status": self.status, "ops": self.ops, "ignored": self.ignored, "keys_checked": len(self.keys),
                "elapsed_s": round(self.elapsed_s, 6), "time_limit_s": self.time_limit_s,
                "keys": [k.to_dict() for k in self.keys]}

    def render(self) -> str:
        word = {LINEARIZABLE: "linearizable", NOT_LINEARIZABLE: "NOT linearizable",
                UNKNOWN: "unknown (time bound reached)"}[self.status]
        lines = [f"{self.ops} operations on {len(self.keys)} keys: {word} ({self.elapsed_s:.2f} s)"]
        for k in self.unknown_keys:
            lines.append(f"key {_show(k.key)}: unknown after {k.elapsed_s:.2f} s ({k.ops} operations)")
        for k in self.failures:
            lines.append(k.counterexample.render())
        return "\n".join(lines)


# --- the checker -----------------------------------------------------------------------------------------

def check_registers(history, time_limit_s: float = 30.0, initial=None, minimize_s: float = 5.0,
                    clock=time.monotonic) -> LinearizabilityResult:
    """Checks a history of read/write/cas operations on keys of registers.

    history: a History, a list of Op records, or a list of paired Operations. Non-register operations are
    counted in `ignored`. initial: the value of every key before the history (None: missing), or a dict per key.
    time_limit_s bounds the search over all keys: each key gets a fair share of what is left when its turn
    comes, so a key that finishes early leaves its time to the others. minimize_s bounds the shrinking of each
    counterexample (on top of the search bound).
    """
    started = clock()
    deadline = started + time_limit_s
    operations = _operations(history)
    by_key, ignored = {}, 0
    for o in operations:
        if o.f not in REGISTER_FS:
            ignored += 1
            continue
        by_key.setdefault(register_value(o.key), []).append(o)
    order = sorted(by_key, key=lambda k: (len(by_key[k]), str(k)))
    results = []
    for n_left, key in zip(range(len(order), 0, -1), order):
        ops = by_key[key]
        init = register_value(initial.get(key) if isinstance(initial, dict) else initial)
        ps = _prune(_prepare(ops))
        t = clock()
        key_deadline = t + max(0.0, deadline - t) / n_left
        status, _ = _search(ps, init, key_deadline, clock)
        cex = None
        if status == NOT_LINEARIZABLE:
            cex = _counterexample(key, ops, ps, init, clock() + minimize_s, clock)
        results.append(KeyResult(key, status, len(ps), len(ops), clock() - t, cex))
    statuses = {r.status for r in results}
    status = (NOT_LINEARIZABLE if NOT_LINEARIZABLE in statuses else UNKNOWN if UNKNOWN in statuses
              else LINEARIZABLE)
    results.sort(key=lambda r: str(r.key))
    return LinearizabilityResult(status, results, clock() - started, time_limit_s,
                                 sum(r.recorded for r in results), ignored)


def _operations(history) -> list:
    if isinstance(history, History):
        return history.operations()
    items = list(history)
    if items and isinstance(items[0], Operation):
        return items
    return pair(items)


def _counterexample(key, recorded, ps, initial, deadline, clock) -> Counterexample:
    try:
        weak, minimal = _shrink(ps, initial, deadline, clock), True
    except _OutOfTime as exc:
        weak, minimal = exc.args[0], False
    small = _variant(ps, weak)
    _, prefix = _search(small, initial, float("inf"), clock, want_longest=True)
    prefix = prefix or []
    return Counterexample(key, [p.src for p in small], initial, _explain(small, prefix, initial, recorded),
                          minimal, [small[i].src for i in prefix])


def _variant(ps, weak: set) -> list:
    """ps with the operations in `weak` turned into info: reads dropped, writes/CAS made optional."""
    out = []
    for i, p in enumerate(ps):
        if i in weak:
            if p.kind != _READ:
                out.append(replace(p, ret=None))
        else:
            out.append(p)
    return _prune(out)


def _shrink(ps, initial, deadline, clock) -> set:
    """The set of ok operations to weaken, found by delta debugging with monotone steps: weakening an
    operation only adds linearizations, so once a weaker history still fails, every stronger one does too.
    Raises _OutOfTime(best set so far) at the deadline."""
    weak = set()

    def fails(extra):
        if clock() > deadline:
            raise _OutOfTime(set(weak))
        status, _ = _search(_variant(ps, weak | extra), initial, deadline, clock)
        if status == UNKNOWN:
            raise _OutOfTime(set(weak))
        return status == NOT_LINEARIZABLE

    det = [i for i, p in enumerate(ps) if p.ret is not None]
    # 1. The shortest prefix (by invoke) of ok operations that still fails with every later one weakened:
    #    gallop from the start (failures are usually local), then bisect.
    by_call = sorted(det, key=lambda i: (ps[i].call, i))
    lo, hi = 0, len(by_call)       # fails(after hi) is known; fails(after lo) unknown
    m = 1
    while m < hi:
        if fails(set(by_call[m:])):
            hi = m
            break
        lo, m = m, m * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(set(by_call[mid:])):
            hi = mid
        else:
            lo = mid
    weak |= set(by_call[hi:])
    kept = by_call[:hi]
    # 2. Weaken the earliest-completing ones as long as it still fails: reads first, since a weakened read
    #    disappears while a weakened write stays on show (and may then need an extra read to pin it).
    rest = []
    for group in ([i for i in kept if ps[i].kind == _READ], [i for i in kept if ps[i].kind != _READ]):
        by_ret = sorted(group, key=lambda i: (ps[i].ret, i))
        lo, hi = 0, len(by_ret) + 1    # fails(first lo weakened) holds; fails(first hi weakened) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(set(by_ret[:mid])):
                lo = mid
            else:
                hi = mid
        weak |= set(by_ret[:lo])
        rest.extend(by_ret[lo:])
    # 3. One at a time (reads first, as above): what is left is 1-minimal.
    for i in rest:
        if fails({i}):
            weak.add(i)
    return weak


def _explain(small, prefix, initial, recorded) -> str:
    written = set()
    failed_writes = set()
    for o in recorded:
        if o.f == WRITE:
            (written if o.type != FAIL else failed_writes).add(register_value(o.value))
        elif o.f == CAS:
            try:
                new = _cas_args(o)[1]
            except ValueError:
                continue
            (written if o.type != FAIL else failed_writes).add(new)
    for p in small:
        if p.kind == _READ and p.ret is not None and p.a != initial and p.a not in written:
            if p.a in failed_writes:
                return (f"read returned {_show(p.a)}, which only a failed write wrote (failed means it did "
                        "not take effect)")
            return f"read returned {_show(p.a)}, which no operation on this key ever wrote"
    state = initial
    for i in prefix:
        p = small[i]
        state = p.written() if p.kind != _READ else state
    placed = set(prefix)
    stuck = [small[i] for i in range(len(small)) if i not in placed and small[i].ret is not None]
    order = ", ".join(describe(small[i].src) for i in prefix) or "nothing"
    return (f"No order of these operations, each taking effect once between its invoke and its completion "
            f"(info ones: at any time after their invoke, or never), fits a register starting at "
            f"{_show(initial)}. Longest valid order: {order}; the register then holds {_show(state)}, and "
            f"no order places the rest after it: {'; '.join(describe(p.src) for p in stuck)}.")
