"""The compiled core's pure functions against their Python references: the request parser's fast path
(protocol/parser.py), the effect encoder and the batch-size count (journal/codec.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durakv import fastpath
from durakv.journal import codec
from durakv.protocol import parser as parser_mod
from durakv.protocol.parser import RequestParser

pytestmark = pytest.mark.skipif(fastpath.core is None, reason="needs the compiled core (pip install with gcc)")

core = fastpath.core
argv = st.lists(st.binary(max_size=40), min_size=1, max_size=6)
effects = st.lists(st.tuples(st.sampled_from([0, 1, 9, 10, 15, 63, 64, 100]), argv.map(tuple)), min_size=1,
                   max_size=5)


@given(effects)
def test_encode_effects_is_the_python_encoding(effs):
    assert core.encode_effects(effs) == b"".join(codec.effect_pieces(effs))


@given(effects, st.sampled_from([None, 0, 1, 64]))
def test_effects_size_is_the_python_count(effs, db):
    want = codec.PYTHON["effects_size"](effs, db)
    assert core.effects_size(effs, db) == want
    assert core.effects_size(effs, None)[0] == len(core.encode_effects(effs))


def _canonical(cmd):
    return b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd)


# Bytes a client may send: canonical requests, and the damage the exact parser must judge (the compiled parse
# must stop there, before it, never take it).
pieces = st.one_of(
    argv.map(_canonical),
    st.sampled_from([b"*0\r\n", b"*-1\r\n", b"*01\r\n$1\r\na\r\n", b"*1\r\n$01\r\na\r\n", b"*1\r\n$-1\r\n",
                     b"*1\r\n$+1\r\na\r\n", b"*1\r\n:1\r\n", b"PING\r\n", b"*1\r\n$3\r\nab", b"*2\r\n$1\r\na\r\n",
                     b"*1\r\n$4\r\nabcdXY", b"*1\r", b"*", b"*1\r\n$2\r\nab\r\n", b"*3000000\r\n",
                     b"*1\r\n$99999999999\r\n", b"\r\n", b"*1\n$1\na\n"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(pieces, max_size=6), st.integers(1, 64))
def test_parser_with_the_compiled_fast_path_reads_what_the_python_one_reads(chunks, cut):
    """The same stream, fed in the same slices, through a parser using the compiled fast path and one using
    hiredis alone: the same requests and the same error, read for read."""
    data = b"".join(chunks)
    slices = [data[i:i + cut] for i in range(0, len(data), cut)] or [b""]
    saved = parser_mod._compiled_parse
    try:
        results = []
        for parse in (core.parse, None):
            parser_mod.use_compiled(parse)
            p = RequestParser(max_bulk_len=1000)
            out = []
            for s in slices:
                commands, error = p.feed(s)
                out.append((commands, error))
                if error is not None:
                    break
            results.append(out)
    finally:
        parser_mod.use_compiled(saved)
    assert results[0] == results[1]


def test_compiled_parse_stops_at_what_it_cannot_vouch_for():
    buf = _canonical([b"SET", b"k", b"v"]) + b"*1\r\n$01\r\na\r\n"
    commands = []
    assert core.parse(buf, 0, len(buf), commands, 1000) == len(_canonical([b"SET", b"k", b"v"]))
    assert commands == [[b"SET", b"k", b"v"]]
    big = _canonical([b"SET", b"k", b"x" * 20])
    assert core.parse(big, 0, len(big), [], 10) == 0      # over proto-max-bulk-len: the exact parser refuses it


def test_a_core_and_the_server_objects_it_holds_are_freed():
    # The core holds its own bound end_turn (a cycle) and the pipeline, keyspace and durability; the server holds
    # it. Without tp_traverse / tp_clear the collector cannot see that cycle and none of them is ever freed.
    import gc
    import weakref

    from durakv.commands import load_all
    from durakv.commands.pipeline import Pipeline
    from durakv.keyspace import Keyspace
    load_all()
    pipeline = Pipeline(Keyspace())
    fast = fastpath.batch_core(pipeline, pipeline.durability, None)
    assert gc.is_tracked(fast)
    pipeline.fast = fast              # the server's own cycle: server.fast, server.pipeline
    gone = weakref.ref(pipeline)
    del pipeline, fast
    gc.collect()
    assert gone() is None


# -- the Outbox API (durability/release.py Outbox; fastpath/_core.c "The Outbox API") -------------------------
outbox_ops = st.lists(st.one_of(
    st.tuples(st.just("emit"), st.integers(0, 6), st.binary(max_size=20)),
    st.tuples(st.just("hold"), st.integers(0, 6), st.binary(max_size=20), st.integers(0, 300)),
    st.tuples(st.just("take")),
    st.tuples(st.just("commit"), st.integers(0, 6)),
    st.tuples(st.just("fail"), st.integers(1, 6)),
    st.tuples(st.just("push"), st.integers(0, 6), st.binary(max_size=20)),
    st.tuples(st.just("defer")),
    st.tuples(st.just("resolve"), st.integers(0, 20), st.integers(0, 6)),
    st.tuples(st.just("release")),
    st.tuples(st.just("close")),
), max_size=30)


def _outbox_run(cls, ops, limit_bytes):
    from durakv.durability.release import Durability
    from durakv.protocol.resp import Deferred
    dur = Durability()
    written, limits, taken = [], [], []
    box = cls(dur, written.append, lambda reply: b"<%r>" % (reply,))
    box.limit_bytes = limit_bytes
    box.on_limit = limits.append
    drained, deferreds = [], []
    box.on_drained = lambda: drained.append(len(written))
    for op in ops:
        if op[0] == "push":
            box.push(op[2], op[1])
        elif op[0] == "defer":
            deferreds.append(Deferred())
            box.hold_deferred(deferreds[-1])
        elif op[0] == "resolve" and deferreds:
            deferreds[op[1] % len(deferreds)].resolve(b"r%d" % op[1], op[2])   # (its listener releases)
        elif op[0] == "release":
            box.release()
        elif op[0] == "close":
            box.close()
        elif op[0] == "emit":
            box.emit(op[1], op[2])
        elif op[0] == "hold":
            box.hold(op[1], op[2], op[3])
        elif op[0] == "take":
            taken.append(box.take_ready())
        elif op[0] == "commit" and op[1] > dur.committed:
            dur.committed = op[1]
            dur.on_commit(op[1])
        elif op[0] == "fail":
            dur.on_failure(op[1], OSError("disk"))
    return (written, limits, taken, drained, box.ready, [(t, type(x).__name__, getattr(x, "reply", x))
                                                           for t, x in box.held],
            box.held_bytes, box.carried_bytes, dict(box.carried_by_ticket), box.over_limit, box in dur.waiting)


@settings(max_examples=300, deadline=None)
@given(outbox_ops, st.sampled_from([0, 300, 1000]))
def test_the_outbox_api_in_c_does_what_the_python_one_does(ops, limit_bytes):
    from durakv.durability import release
    fastpath.install()
    assert all(type(release.Outbox.__dict__[name]).__name__ == "method_descriptor"
               for name in ("hold", "emit", "take_ready", "release"))

    PythonOutbox = type("PythonOutbox", (release.Outbox,), {"__slots__": (), **release.PYTHON_OUTBOX_METHODS})
    assert _outbox_run(release.Outbox, ops, limit_bytes) == _outbox_run(PythonOutbox, ops, limit_bytes)


def test_the_outbox_api_in_c_takes_arguments_as_the_python_one_does():
    """By position or by name, and the same refusals: a caller passing `carried=` by keyword worked with the
    Python methods and broke once the compiled ones were installed."""
    from durakv.durability import release
    from durakv.durability.release import Durability
    fastpath.install()
    PythonOutbox = type("PythonOutbox", (release.Outbox,), {"__slots__": (), **release.PYTHON_OUTBOX_METHODS})
    calls = [("hold", (3, b"a"), {"carried": 7}), ("hold", (), {"ticket": 3, "data": b"b", "carried": 1}),
             ("hold", (3,), {"data": b"c"}), ("emit", (), {"ticket": 0, "data": b"d"}), ("emit", (0,), {"data": b"e"})]
    refused = [("hold", (3, b"a"), {"ticket": 4}), ("hold", (3,), {}), ("hold", (3, b"a"), {"carry": 1}),
               ("hold", (3, b"a", 1, 2), {}), ("emit", (0,), {}), ("emit", (0, b"x"), {"carried": 1})]
    outcome = {}
    for cls in (release.Outbox, PythonOutbox):
        dur = Durability()
        box = cls(dur, [].append, None)
        for name, args, kwargs in calls:
            getattr(box, name)(*args, **kwargs)
        errors = []
        for name, args, kwargs in refused:
            with pytest.raises(TypeError):
                getattr(box, name)(*args, **kwargs)
            errors.append(name)
        outcome[cls] = (list(box.held), list(box.ready), box.held_bytes, box.carried_bytes,
                        dict(box.carried_by_ticket), errors)
    assert outcome[release.Outbox] == outcome[PythonOutbox]
