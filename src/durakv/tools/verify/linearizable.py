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

Reductions that keep the verdict exact and make many clients on one key tractable (each was checked against
plain WGL and against brute force on small histories, see tests/server/test_verify_checker.py):
- An info write or CAS whose value nothing can observe is dropped before the search: the next operation after
  it in any linearization must be a write, so leaving it out changes nothing. Timed-out writes are common around
  faults, and each one left in would double the states the search can reach.
- A read that matches the register when it is a candidate is placed at once, without branching: every
  operation that must precede it is placed already, and a read changes nothing, so any linearization from there
  can start with it. If that leads nowhere, the state is dead.
- When a value has a single producer, that producer is the last state change before each of its observers.
  So it must take effect before its first observer completes (an info write that was read becomes mandatory),
  and after every state change that must precede one of its observers.

Values are compared as Valkey stores them: bytes and numbers become text (valkey-py sends 5 as "5"), None is
a missing key.

Pure: no sockets, no asyncio. The time bound is a deadline checked inside the search; a key that runs out is
`unknown`, never guessed.
"""

import bisect
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from .history import CAS, FAIL, INFO, OK, READ, WRITE, History, Operation, pair, plain

LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN = "ok", "fail", "unknown"
REGISTER_FS = (READ, WRITE, CAS)

_READ, _WRITE, _CAS = 0, 1, 2
_CHECK_EVERY = 2048  # search steps between deadline checks (reading the clock every step would dominate)


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
    """Drops optional writes/CAS whose value nothing can observe. A value is observable when an ok read
    returns it or an ok CAS expects it, or when a kept optional CAS expects it (that CAS can only take effect
    after some write of it): a reachability from the ok operations, linear in the history."""
    writers = {}
    live, todo = set(), []
    for i, p in enumerate(ps):
        if p.ret is None:
            writers.setdefault(p.written(), []).append(i)
        elif p.kind != _WRITE and p.a not in live:
            live.add(p.a)
            todo.append(p.a)
    keep = set()
    while todo:
        for i in writers.get(todo.pop(), ()):
            keep.add(i)
            p = ps[i]
            if p.kind == _CAS and p.a not in live:
                live.add(p.a)
                todo.append(p.a)
    if len(keep) == len(ps) - sum(1 for p in ps if p.ret is not None):
        return ps
    return [p for i, p in enumerate(ps) if p.ret is not None or i in keep]


def _deadlines(ps: list, initial) -> list:
    """The completion bound of each operation for the search: its own, or a tighter one implied by the others.
    When an ok read or CAS observes a value v (other than the initial one) that exactly one operation
    produces, that producer must take effect before the observer completes: an info write that was read becomes
    mandatory with that bound. A producer made mandatory that is a CAS observes its expected value in turn.
    Derived from the given operations only, so it holds for every weakened variant the shrinking builds."""
    rets = [p.ret for p in ps]
    producers = {}
    for i, p in enumerate(ps):
        if p.kind != _READ:
            producers.setdefault(p.written(), []).append(i)
    bound, todo = {}, []

    def observe(v, t):
        if v != initial and (v not in bound or t < bound[v]):
            bound[v] = t
            todo.append(v)
    for p in ps:
        if p.ret is not None and p.kind != _WRITE:
            observe(p.a, p.ret)
    while todo:
        v = todo.pop()
        prods = producers.get(v, ())
        if len(prods) != 1:
            continue
        j = prods[0]
        t = bound[v]
        if t < ps[j].call:  # cannot be met: the search will find that out and fail
            continue
        if rets[j] is None or t < rets[j]:
            rets[j] = t
            if ps[j].kind == _CAS:
                observe(ps[j].a, t)
    return rets


def _predecessors(ps: list, rets: list, initial):
    """For a write/CAS p that is the only producer of a value v some mandatory operation observes: every
    mandatory state-changing operation x that must precede an observer (x completes before the observer's
    invoke) must also precede p, since p is the last state change before each observer. Only the frontier of
    those is returned (the ones completing at or after the latest invoke among them): the rest are placed
    before the frontier by real-time order alone. Returns (per op: tuple of indices or None, per op: the
    latest observer invoke the rule came from)."""
    n = len(ps)
    before, before_ns = [None] * n, [0] * n
    producers = {}
    for i, p in enumerate(ps):
        if p.kind != _READ:
            producers.setdefault(p.written(), []).append(i)
    last_observer = {}
    for i, p in enumerate(ps):
        if p.kind != _WRITE and rets[i] is not None and p.a != initial:
            if p.call > last_observer.get(p.a, -1):
                last_observer[p.a] = p.call
    changing = sorted((rets[i], ps[i].call, i) for i in range(n) if ps[i].kind != _READ and rets[i] is not None)
    ret_list = [r for r, _, _ in changing]
    prefix_max_call = []
    m = -1
    for _, c, _ in changing:
        m = c if c > m else m
        prefix_max_call.append(m)
    for v, t in last_observer.items():
        prods = producers.get(v, ())
        if len(prods) != 1:
            continue
        p = prods[0]
        k = bisect.bisect_left(ret_list, t)     # changing[:k] complete before the last observer's invoke
        if k == 0:
            continue
        latest_call = prefix_max_call[k - 1]
        frontier = []
        j = k - 1
        while j >= 0 and ret_list[j] >= latest_call:
            if changing[j][2] != p:
                frontier.append(changing[j][2])
            j -= 1
        if frontier:
            before[p] = tuple(frontier)
            before_ns[p] = t
    return before, before_ns


class _OutOfTime(Exception):
    pass


def _search(ps: list, initial, deadline: float, clock=time.monotonic, want_longest=False, derived=True):
    """WGL over one key. Returns (status, order, reach_ns): order is the linearization (indices into ps) when
    ok, the longest partial one found when want_longest, else None; reach_ns, when it fails, is the latest
    event time the search looked at (operations invoked after it took no part in the failure: the shrinking
    starts by weakening them). derived=False searches with the recorded bounds only (no _deadlines /
    _predecessors), so a longest partial order reads naturally."""
    n = len(ps)
    if derived:
        rets = _deadlines(ps, initial)
        before, before_ns = _predecessors(ps, rets, initial)
    else:
        rets, before, before_ns = [p.ret for p in ps], [None] * n, [0] * n
    remaining = sum(1 for t in rets if t is not None)
    if remaining == 0:
        return LINEARIZABLE, [], None
    events = []
    for i, p in enumerate(ps):
        events.append((p.call, 0, i))  # at equal times calls sort first: treated as concurrent
        if rets[i] is not None:
            events.append((rets[i], 1, i))
    events.sort()
    tail = len(events) + 1
    nxt = list(range(1, tail + 1)) + [tail]
    prv = [0] + list(range(0, tail))
    node_op = [-1] * (tail + 1)
    is_ret = [False] * (tail + 1)
    ret_node = [0] * n
    node_ns = [0] * (tail + 1)
    for pos, (t, r, i) in enumerate(events, 1):
        node_op[pos] = i
        node_ns[pos] = t
        if r:
            is_ret[pos] = True
            ret_node[i] = pos
    placed = bytearray(n)
    kinds = [p.kind for p in ps]
    arg_a = [p.a for p in ps]
    arg_b = [p.b for p in ps]
    masks = [1 << i for i in range(n)]

    state, bits = initial, 0
    stack = []          # (call node, state before it, forced read?): the undo stack
    cache = set()       # (linearized bitset, state) already explored
    longest = []
    reach = 0
    countdown = _CHECK_EVERY
    e = nxt[0]
    while True:
        if e == tail:  # only reachable with no completion left, which returned as linearizable
            raise AssertionError("search ran past the last completion")
        t = node_ns[e]
        if t > reach:
            reach = t
        if not is_ret[e]:
            i = node_op[e]
            k = kinds[i]
            if k == _READ:
                if state != arg_a[i]:
                    e = nxt[e]
                    continue
                # A read that matches the register can be placed now without losing anything: everything that
                # must precede it is placed already (it is a candidate) and it changes nothing, so any
                # linearization from here can be reordered to start with it. If that fails, this state is dead:
                # no sibling needs trying. This is what keeps many concurrent readers from branching.
                nb = bits | masks[i]
                memo = (nb, state)
                if memo not in cache:
                    cache.add(memo)
                    stack.append((e, state, True))
                    bits = nb
                    placed[i] = 1
                    nxt[prv[e]] = nxt[e]
                    prv[nxt[e]] = prv[e]
                    r = ret_node[i]
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                    remaining -= 1
                    if not remaining:
                        return LINEARIZABLE, [node_op[x] for x, _, _ in stack], None
                    e = nxt[0]
                    countdown -= 1
                    if not countdown:
                        countdown = _CHECK_EVERY
                        if clock() > deadline:
                            return UNKNOWN, None, None
                    continue
                # Already explored from there (and it failed, or we would have returned): dead too.
            else:
                if k == _WRITE:
                    new_state = arg_a[i]
                elif state == arg_a[i]:
                    new_state = arg_b[i]
                else:
                    e = nxt[e]
                    continue
                need = before[i]
                if need is not None:
                    blocked = False
                    for x in need:
                        if not placed[x]:
                            blocked = True
                            break
                    if blocked:
                        if before_ns[i] > reach:
                            reach = before_ns[i]
                        e = nxt[e]
                        continue
                nb = bits | masks[i]
                memo = (nb, new_state)
                if memo in cache:
                    e = nxt[e]
                    continue
                cache.add(memo)
                stack.append((e, state, False))
                state, bits = new_state, nb
                placed[i] = 1
                nxt[prv[e]] = nxt[e]
                prv[nxt[e]] = prv[e]
                r = ret_node[i]
                if r:
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                    remaining -= 1
                    if not remaining:
                        return LINEARIZABLE, [node_op[x] for x, _, _ in stack], None
                e = nxt[0]
                countdown -= 1
                if not countdown:
                    countdown = _CHECK_EVERY
                    if clock() > deadline:
                        return UNKNOWN, None, None
                continue
        # This state is dead (we stand at a completion whose operation is not placed, or a forced read
        # failed): undo steps until one that had alternatives.
        while True:
            if not stack:
                return NOT_LINEARIZABLE, (longest if want_longest else None), reach
            if want_longest and len(stack) > len(longest):
                longest = [node_op[x] for x, _, _ in stack]
            e, state, forced = stack.pop()
            i = node_op[e]
            bits ^= masks[i]
            placed[i] = 0
            r = ret_node[i]
            if r:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                remaining += 1
            nxt[prv[e]] = e
            prv[nxt[e]] = e
            if not forced:
                break
        e = nxt[e]
        countdown -= 1
        if not countdown:
            countdown = _CHECK_EVERY
            if clock() > deadline:
                return UNKNOWN, None, None


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
    """Operations of one key, shown as recorded, that admit no linearization. `required` are the indices of the
    ok operations the contradiction rests on; the other operations shown are writes they observe, needed only
    as "may have happened after its invoke". When `minimal`, turning any one required operation into info
    (may or may not have happened) leaves a linearizable set."""
    key: Any
    ops: list
    initial: Any
    explanation: str
    minimal: bool
    longest_prefix: list = field(default_factory=list)
    required: list = field(default_factory=list)

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
                "longest_prefix": [o.index for o in self.longest_prefix], "required": list(self.required)}


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
        status, _, reach_ns = _search(ps, init, key_deadline, clock)
        cex = None
        if status == NOT_LINEARIZABLE:
            cex = _counterexample(key, ops, ps, init, reach_ns, clock() + minimize_s, clock)
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


def _counterexample(key, recorded, ps, initial, reach_ns, deadline, clock) -> Counterexample:
    # Cut at the search's reach first: a weakening that leaves the failed search's states unchanged.
    cut = {i for i, p in enumerate(ps) if p.ret is not None and p.call > reach_ns}
    try:
        weak, minimal = _shrink(ps, initial, cut, deadline, clock), True
    except _OutOfTime as exc:
        weak, minimal = exc.args[0], False
    small = _variant(ps, weak)
    status, prefix, _ = _search(small, initial, float("inf"), clock, want_longest=True, derived=False)
    if status != NOT_LINEARIZABLE:
        raise AssertionError(f"key {key!r}: the shrunk counterexample is linearizable (checker bug)")
    prefix = prefix or []
    return Counterexample(key, [p.src for p in small], initial, _explain(small, prefix, initial, recorded),
                          minimal, [small[i].src for i in prefix],
                          sorted(p.src.index for p in small if p.ret is not None))


def _variant(ps, weak: set, relaxed=None) -> list:
    """ps with the operations in `weak` turned into info: reads dropped, writes/CAS made optional.
    relaxed: ps already made optional, index for index (saves rebuilding them on every call)."""
    out = []
    for i, p in enumerate(ps):
        if i in weak:
            if p.kind != _READ:
                out.append(relaxed[i] if relaxed is not None else replace(p, ret=None))
        else:
            out.append(p)
    return _prune(out)


def _shrink(ps, initial, cut, deadline, clock) -> set:
    """The set of ok operations to weaken, found by delta debugging with monotone steps: weakening an
    operation only adds linearizations, so once a weaker history still fails, every stronger one does too.
    `cut` is a set already known to keep the failure. Raises _OutOfTime(best set so far) at the deadline."""
    weak = set()
    relaxed = [replace(p, ret=None) if p.ret is not None and p.kind != _READ else p for p in ps]

    def fails(extra):
        if clock() > deadline:
            raise _OutOfTime(set(weak))
        status, _, _ = _search(_variant(ps, weak | extra, relaxed), initial, deadline, clock)
        if status == UNKNOWN:
            raise _OutOfTime(set(weak))
        return status == NOT_LINEARIZABLE

    # The cut is exact for the plain search; the derived bounds and predecessors can in principle let a
    # weaker variant explore differently, so it is checked once rather than trusted.
    if cut and fails(cut):
        weak |= cut

    # 1. A window ending at the cut: the K latest-completing ok operations before it, K galloping up from 2
    #    then bisected, so each check costs about the window, not the history.
    by_ret_desc = sorted((i for i, p in enumerate(ps) if p.ret is not None and i not in weak),
                         key=lambda i: (-ps[i].ret, -i))
    lo, hi = 0, len(by_ret_desc)    # keeping hi fails (known); keeping lo does not (nothing kept)
    k = 2
    while k < hi:
        if fails(set(by_ret_desc[k:])):
            hi = k
            break
        lo, k = k, k * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(set(by_ret_desc[mid:])):
            hi = mid
        else:
            lo = mid
    weak |= set(by_ret_desc[hi:])
    kept = by_ret_desc[:hi]
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
