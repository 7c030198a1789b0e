"""Simulated registers that produce histories for testing checkers: a correct one, and buggy ones.

An event-driven simulation on a virtual clock: each step either invokes an operation for an idle client, applies
a pending one to the store (its linearization point, strictly between invoke and completion), completes an
applied one, or gives up on one. Giving up is `info` (the request may still be applied later, or never: it
becomes a "zombie") or `fail` (it is never applied). A CAS whose comparison fails completes as `fail`.

Bugs, each made certain to be observable, so a checker that accepts the history is wrong:
- `lost-writes`: the store acknowledges before it commits and a crash loses the last acknowledged writes.
  At the crash point the clients drain, one client writes u then v (both ok, one after the other), the store
  falls back to u on that key (and further back on others), and a read then returns u.
- `stale-replica`: some reads are served by a replica that lags the primary by a few writes; at one point, after
  a drained sequential write of u then v, a replica read returns u.
Every written value is unique, so no later write can explain a stale value.
"""

import random
from typing import Optional

from .history import CAS, READ, WRITE, History, Recorder

BUGS = (None, "lost-writes", "stale-replica")


class _Sim:
    def __init__(self, rng, keys, processes, p_info, p_fail, bug, replica_lag, zombie_rate=0.3):
        self.rng = rng
        self.now = 0
        self.rec = Recorder(clock_ns=self._clock, meta={"simulated": True, "bug": bug})
        self.keys = [f"k{i}" for i in range(keys)]
        self.store = {k: None for k in self.keys}
        self.log = {k: [] for k in self.keys}   # (write sequence number, value) per key
        self.seq = 0
        self.processes = list(range(processes))
        self.pending = {}     # process -> dict(f, key, value, applied, result)
        self.zombies = []     # timed-out operations that may still be applied
        self.p_info, self.p_fail = p_info, p_fail
        self.bug, self.replica_lag = bug, replica_lag
        self.counter = 0
        self.invoked = 0
        self.zombie_rate = zombie_rate

    def _clock(self):
        self.now += self.rng.randint(1, 1000)
        return self.now

    def _unique(self, p):
        self.counter += 1
        return f"v{p}.{self.counter}"

    def _set(self, key, value):
        self.seq += 1
        self.store[key] = value
        self.log[key].append((self.seq, value))

    def _replica_read(self, key):
        visible = self.seq - self.replica_lag
        for s, v in reversed(self.log[key]):
            if s <= visible:
                return v
        return None

    def _apply(self, op):
        key = op["key"]
        if op["f"] == READ:
            if self.bug == "stale-replica" and op.get("replica"):
                return self._replica_read(key)
            return self.store[key]
        if op["f"] == WRITE:
            self._set(key, op["value"])
            return op["value"]
        expected, new = op["value"]
        if self.store[key] == expected:
            self._set(key, new)
            return True
        return False

    def invoke(self, p):
        rng = self.rng
        key = rng.choice(self.keys)
        r = rng.random()
        if r < 0.5:
            op = {"f": READ, "key": key, "value": None, "replica": rng.random() < 0.5}
        elif r < 0.8:
            op = {"f": WRITE, "key": key, "value": self._unique(p)}
        else:
            expected = self.store[key] if rng.random() < 0.7 else rng.choice([v for _, v in self.log[key]] or [None])
            op = {"f": CAS, "key": key, "value": [expected, self._unique(p)]}
        op["applied"] = False
        self.invoked += 1
        self.rec.invoke(p, op["f"], key, op["value"])
        self.pending[p] = op

    def apply(self, p):
        op = self.pending[p]
        op["result"] = self._apply(op)
        op["applied"] = True

    def complete(self, p):
        op = self.pending.pop(p)
        if self.rng.random() < self.p_info:
            self.rec.info(p, "timeout (simulated: the reply was lost)")
        elif op["f"] == READ:
            self.rec.ok(p, op["result"])
        elif op["f"] == CAS and not op["result"]:
            self.rec.fail(p, "comparison failed")
        else:
            self.rec.ok(p)

    def give_up(self, p):
        op = self.pending.pop(p)
        if self.rng.random() < self.p_fail / (self.p_fail + self.p_info):
            self.rec.fail(p, "refused before execution (simulated)")
        else:
            self.rec.info(p, "timeout (simulated: the request may still run)")
            self.zombies.append(op)

    def step(self, may_invoke):
        rng = self.rng
        actions = []
        idle = [p for p in self.processes if p not in self.pending]
        if may_invoke:
            # One action per idle client: closed-loop clients start their next request at once, so nearly
            # every client is in flight, as in a real workload.
            actions.extend(("invoke", p) for p in idle)
        for p, op in self.pending.items():
            actions.append(("complete" if op["applied"] else "apply", p))
            if not op["applied"] and (self.p_info or self.p_fail) and rng.random() < self.p_info + self.p_fail:
                actions.append(("give_up", p))
        if self.zombies and rng.random() < self.zombie_rate:
            actions.append(("zombie", None))
        if not actions:
            return False
        kind, p = rng.choice(actions)
        if kind == "zombie":
            z = self.zombies.pop(rng.randrange(len(self.zombies)))
            if rng.random() < 0.7:  # a zombie may never run at all
                self._apply(z)
        else:
            getattr(self, kind)(p)
        return True

    def drain(self):
        """Lets every pending operation finish (ok/fail/info as usual); zombies stay where they are."""
        bound = 10 * (len(self.pending) + 1)
        for _ in range(bound):
            if not self.pending:
                return
            p = next(iter(self.pending))
            if not self.pending[p]["applied"]:
                self.apply(p)
            else:
                self.complete(p)
        raise AssertionError("drain did not finish")

    def _sequential(self, p, f, key, value, result_override=None):
        self.rec.invoke(p, f, key, value)
        result = self._apply({"f": f, "key": key, "value": value}) if result_override is None else result_override
        self.rec.ok(p, result if f == READ else value)

    def inject_bug(self):
        self.drain()
        p = self.rng.choice(self.processes)
        key = self.rng.choice(self.keys)
        u, v = self._unique(p), self._unique(p)
        self._sequential(p, WRITE, key, u)
        mark = {k: len(self.log[k]) for k in self.keys}
        self._sequential(p, WRITE, key, v)
        reader = self.rng.choice(self.processes)
        if self.bug == "lost-writes":
            # The crash: the unacknowledged-in-truth tail is gone, on this key back to u, elsewhere maybe more.
            for k in self.keys:
                keep = mark[k] if k == key else max(0, len(self.log[k]) - self.rng.randint(0, 2))
                self.log[k] = self.log[k][:keep]
                self.store[k] = self.log[k][-1][1] if self.log[k] else None
            self._sequential(reader, READ, key, None)
        else:
            self._sequential(reader, READ, key, None, result_override=u)


def simulate(n_ops: int = 100, keys: int = 2, processes: int = 3, p_info: float = 0.02, p_fail: float = 0.01,
             bug: Optional[str] = None, seed=None, rng: Optional[random.Random] = None, replica_lag: int = 2,
             zombie_rate: float = 0.3, bug_at: Optional[int] = None) -> History:
    """A history of about n_ops client operations. Deterministic for a given seed (or rng). zombie_rate: the
    chance per step that a timed-out request is picked to run late (or be dropped); bug_at: the number of
    invokes before the bug is shown (default: random)."""
    if bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS}")
    sim = _Sim(rng or random.Random(seed), keys, processes, p_info, p_fail, bug, replica_lag, zombie_rate)
    if bug and bug_at is None:
        bug_at = sim.rng.randint(0, max(0, n_ops - 1))
    elif not bug:
        bug_at = None
    for _ in range(20 * n_ops + 100):
        if bug_at is not None and sim.invoked >= bug_at:
            sim.inject_bug()
            bug_at = None
        if not sim.step(may_invoke=sim.invoked < n_ops) and sim.invoked >= n_ops:
            break
    if bug_at is not None:
        sim.inject_bug()
    sim.drain()
    return sim.rec.history()

