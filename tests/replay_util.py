"""Checks that a sequence of commands' effects, replayed on an empty keyspace, rebuild the same state.

This is the determinism contract of the journal: effects are replayed with expiry disabled, exactly
as recovery and replicas apply them.
"""

from collections import deque

from durakv.commands import load_all
from durakv.commands.dispatch import Dispatcher
from durakv.commands.session import Session
from durakv.keyspace import Keyspace, ZSet

load_all()

NOW = 1_700_000_000_000


class Direct:
    """Commands run in-process on a Dispatcher with a settable clock (exact TTLs, no sleeping)."""

    def __init__(self, now=NOW):
        import random
        self.now = now
        self.ks = Keyspace(clock_ms=lambda: self.now, rng=random.Random(7))
        self.d = Dispatcher(self.ks)
        self.s = Session()
        self.effects = []

    def __call__(self, *args):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        reply, eff, _ = self.d.execute(self.s, argv)
        self.effects.extend(eff)
        return reply

    def db(self, n=0):
        return self.ks.dbs[n]


def dump(keyspace):
    out = {}
    for db in keyspace.dbs:
        for key, value in db.data.items():
            if isinstance(value, ZSet):
                v = ("zset", sorted(value.scores.items()))
            elif isinstance(value, deque):
                v = ("list", list(value))
            elif isinstance(value, set):
                v = ("set", sorted(value))
            elif isinstance(value, dict):
                v = ("hash", sorted(value.items()))
            else:
                v = ("string", value)
            out[(db.id, key)] = (v, db.expires.get(key))
    return out


def apply_effects(keyspace, effects):
    d = Dispatcher(keyspace)
    s = Session()
    for db_id, argv in effects:
        s.db_id = db_id
        ctx = s.ctx or d.new_context(s)
        ctx.db = keyspace.dbs[db_id]
        reply, _eff, _cmd = d.execute(s, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        assert not hasattr(reply, "text"), f"effect {argv!r} failed on replay: {reply.text}"


def run_and_replay(commands, clock_ms=None, seed=1):
    """Runs commands (lists of bytes/str) on a fresh keyspace; returns (replies, effects) after
    asserting that replaying the effects on another fresh keyspace gives the same state."""
    import random
    clock = clock_ms or (lambda: 1_700_000_000_000)
    ks = Keyspace(clock_ms=clock, rng=random.Random(seed))
    d = Dispatcher(ks)
    s = Session()
    replies, effects = [], []
    for c in commands:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in c]
        reply, eff, _ = d.execute(s, argv)
        replies.append(reply)
        effects.extend(eff)
    ks2 = Keyspace(clock_ms=clock, rng=random.Random(seed + 1))
    ks2.expire_enabled = False
    apply_effects(ks2, effects)
    assert dump(ks2) == dump(ks), "replayed effects diverge from the original state"
    return replies, effects
