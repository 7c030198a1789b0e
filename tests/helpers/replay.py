"""Checks that a sequence of commands' effects, replayed on an empty keyspace, rebuild the same state.

This is the determinism contract of the journal: effects are replayed with expiry disabled, exactly
as recovery and replicas apply them.
"""

from collections import deque

from durakv.commands import load_all
from durakv.commands.pipeline import Pipeline
from durakv.commands.session import Session
from durakv.keyspace import Keyspace, ZSet
from durakv.keyspace.jsondoc import JsonDoc, dumps as json_dumps

load_all()

NOW = 1_700_000_000_000


class EffectLog:
    """Durability for an in-process pipeline in tests: keeps what each command submitted, answers every
    ticket 0 (nothing is journaled, so nothing waits)."""

    def __init__(self):
        self.effects = []
        self.last = []
        self.touched = []
        self.pending = False
        self.refusing = False
        self.needs_touched = True
        self.assigned = 0
        self.committed = 0

    def submit(self, effects, touched):
        self.last = list(effects)
        self.effects.extend(effects)
        self.touched.append(touched)
        self.assigned += 1
        return 0

    def read_ticket(self, db_id, keys):
        return 0

    def barrier_ticket(self):
        return 0

    def refuse_writes(self):
        return None


def make_pipeline(keyspace):
    """A Pipeline on keyspace whose durability is an EffectLog."""
    pipeline = Pipeline(keyspace)
    pipeline.durability = EffectLog()
    return pipeline


def execute(pipeline, session, argv):
    """One client request through pipeline.process: (reply, the effects it submitted, Command)."""
    log = pipeline.durability
    log.last = []
    reply, _ticket, cmd = pipeline.process(session, argv)
    return reply, log.last, cmd


class Direct:
    """Commands run in-process on a pipeline with a settable clock (exact TTLs, no sleeping)."""

    def __init__(self, now=NOW, seed=7):
        import random
        self.now = now
        self.ks = Keyspace(clock_ms=lambda: self.now, rng=random.Random(seed))
        self.d = make_pipeline(self.ks)
        self.s = Session()
        self.effects = []

    def __call__(self, *args):
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        reply, eff, _ = execute(self.d, self.s, argv)
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
            elif isinstance(value, JsonDoc):
                v = ("json", json_dumps(value.root), value.size)
            else:
                v = ("string", value)
            out[(db.id, key)] = (v, db.expires.get(key))
    return out


def apply_effects(keyspace, effects):
    d = make_pipeline(keyspace)
    s = Session()
    for db_id, argv in effects:
        reply = d.apply(s, db_id, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        assert not hasattr(reply, "text"), f"effect {argv!r} failed on replay: {reply.text}"


def run_and_replay(commands, clock_ms=None, seed=1):
    """Runs commands (lists of bytes/str) on a fresh keyspace; returns (replies, effects) after
    asserting that replaying the effects on another fresh keyspace gives the same state."""
    import random
    clock = clock_ms or (lambda: 1_700_000_000_000)
    ks = Keyspace(clock_ms=clock, rng=random.Random(seed))
    # No cron here to tick the LRU clock: a fixed one, so that access times read no clock (a ticking clock_ms
    # of these tests counts its reads: one per command's time, not one per key looked up)
    ks.lru_second = ks.lru_stamp = 0
    d = make_pipeline(ks)
    s = Session()
    replies, effects = [], []
    for c in commands:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in c]
        reply, eff, _ = execute(d, s, argv)
        replies.append(reply)
        effects.extend(eff)
    ks2 = Keyspace(clock_ms=clock, rng=random.Random(seed + 1))
    ks2.expire_enabled = False
    apply_effects(ks2, effects)
    assert dump(ks2) == dump(ks), "replayed effects diverge from the original state"
    return replies, effects
