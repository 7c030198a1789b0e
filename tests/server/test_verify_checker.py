"""The pure parts of `durakv verify`: history model, linearizability checker, acked-writes checker, reports.

Histories are written by hand (known linearizable and known non-linearizable ones), produced by a simulated
correct register (the checker must accept all of them) and by simulated buggy ones (it must reject all of them),
and cross-checked against a brute-force reference on small random histories. One history is recorded from a
real durakv server through real clients. Every search has a time bound; every hypothesis run is bounded.
"""

import json
import random
import struct
import threading
import zlib

import pytest
import valkey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durakv.tools.pngplot import Chart
from durakv.tools.verify import (History, Op, Operation, Recorder, acked_writes_report, acked_writes_table,
                                 async_rpo_table, check_acked_writes, check_registers, failover_report,
                                 failover_table, latency_report, latency_table, linearizability_report,
                                 linearizability_table, write_rate, write_report)
from durakv.tools.verify.plots import FAULT_SHADE, GAP_COLOR
from durakv.tools.verify.simulate import simulate

LIMIT_S = 20.0  # every search in this file is bounded by this (the histories need milliseconds)


# --- building histories by hand --------------------------------------------------------------------------

def hist(*rows):
    """rows: (process, f, key, value, type, invoke_us, complete_us). For a read, value is what it returned;
    for cas, (expected, new). complete_us None: no completion recorded at all. Times are microseconds."""
    recs = []
    for p, f, key, value, typ, t0, t1 in rows:
        recs.append((t0 * 1000, 0, p, "invoke", f, key, None if f == "read" else value))
        if t1 is not None:
            recs.append((t1 * 1000, 1, p, typ, f, key, value))
    recs.sort(key=lambda r: (r[0], r[1]))
    return History([Op(i, p, typ, f, key, v, t) for i, (t, _, p, typ, f, key, v) in enumerate(recs)])


def invoke_index(h, process, f, value):
    """The history index of the invoke whose paired operation matches (for asserting on counterexamples)."""
    for o in h.operations():
        if o.process == process and o.f == f and (o.output if f == "read" else o.value) == value:
            return o.index
    raise KeyError((process, f, value))


def check(h, **kw):
    kw.setdefault("time_limit_s", LIMIT_S)
    return check_registers(h, **kw)


# --- a brute-force reference: every order, for tiny histories ---------------------------------------------

def brute_linearizable(ops, initial=None):
    """True when some order of the ops of ONE key is a valid register history: ok ops placed once each, in
    real-time order (a before b when a completed before b was invoked); info writes/CAS optional, anywhere
    after their invoke; fail ops and info reads ignored."""
    ps = [o for o in ops if o.type != "fail" and not (o.f == "read" and o.type != "ok")]
    must = {o.index for o in ps if o.type == "ok"}

    def step(state, o):
        if o.f == "read":
            return state == o.output, state
        if o.f == "write":
            return True, o.value
        exp, new = o.value
        return state == exp, new

    def dfs(state, placed):
        if must <= placed:
            return True
        for o in ps:
            if o.index in placed:
                continue
            if any(p.index not in placed and p.type == "ok" and p.complete_ns < o.invoke_ns for p in ps):
                continue
            ok, nxt = step(state, o)
            if ok and dfs(nxt, placed | {o.index}):
                return True
        return False
    return dfs(initial, frozenset())


def weakened(ops, index):
    """ops with the one at `index` turned into info (a read disappears)."""
    out = []
    for o in ops:
        if o.index != index:
            out.append(o)
        elif o.f != "read":
            out.append(Operation(o.index, o.process, o.f, o.key, o.value, o.output, "info", o.invoke_ns, None))
    return out


def assert_minimal_counterexample(cex):
    """The counterexample is not linearizable, and each of its required ok operations is needed."""
    assert len(cex.ops) <= 9, "brute force is only for small counterexamples"
    assert cex.minimal
    strong = set(cex.required)
    # What the checker proved: required ops as recorded, the other shown writes only "may have happened".
    base = [o if o.index in strong or o.type != "ok" else weakened([o], o.index)[0] for o in cex.ops]
    assert not brute_linearizable(base, cex.initial)
    for i in strong:
        assert brute_linearizable(weakened(base, i), cex.initial), f"op {i} is not needed"


# --- known linearizable histories ------------------------------------------------------------------------

def test_sequential_history_is_linearizable():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (1, "read", "x", "1", "ok", 20, 30),
             (1, "write", "x", "2", "ok", 40, 50), (1, "read", "x", "2", "ok", 60, 70),
             (1, "read", "y", None, "ok", 80, 90))
    res = check(h)
    assert res.status == "ok" and res.ok and res.ops == 5
    assert {k.key for k in res.keys} == {"x", "y"}


@pytest.mark.parametrize("seen", ["1", "2"])
def test_concurrent_overlapping_writes_either_order(seen):
    # Two overlapping writes: a later read may see either one, and a second read the same one again.
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 5, 15),
             (3, "read", "x", seen, "ok", 20, 30), (1, "read", "x", seen, "ok", 40, 50))
    assert check(h).status == "ok"


def test_reads_during_a_write_may_see_either_value_but_not_go_back():
    base = [(1, "write", "x", "1", "ok", 0, 5), (2, "write", "x", "2", "ok", 10, 30)]
    assert check(hist(*base, (3, "read", "x", "1", "ok", 12, 14), (4, "read", "x", "2", "ok", 16, 18))).ok
    assert check(hist(*base, (3, "read", "x", "2", "ok", 12, 20), (4, "read", "x", "2", "ok", 25, 40))).ok
    assert check(hist(*base, (3, "read", "x", "1", "ok", 12, 40), (4, "read", "x", "2", "ok", 13, 20))).ok
    # ... but once a read completed with the new value, a read that starts later cannot see the old one.
    res = check(hist(*base, (3, "read", "x", "2", "ok", 12, 20), (4, "read", "x", "1", "ok", 22, 28)))
    assert res.status == "fail"


def test_cas_chain_is_linearizable():
    h = hist((1, "write", "x", "0", "ok", 0, 10),
             (2, "cas", "x", ("0", "1"), "ok", 20, 40), (3, "cas", "x", ("1", "2"), "ok", 25, 45),
             (4, "cas", "x", ("0", "9"), "fail", 30, 50),          # lost the race: took no effect
             (1, "cas", "x", ("2", "3"), "ok", 60, 70), (2, "read", "x", "3", "ok", 80, 90))
    assert check(h).status == "ok"


def test_info_write_may_happen_late_or_never():
    # p2's write of "b" timed out: it may land any time after its invoke (even long after), or never.
    landed = hist((1, "write", "x", "a", "ok", 0, 10), (2, "write", "x", "b", "info", 20, 30),
                  (3, "read", "x", "a", "ok", 40, 50), (3, "read", "x", "b", "ok", 500, 510),
                  (1, "read", "x", "b", "ok", 600, 610))
    assert check(landed).status == "ok"
    never = hist((1, "write", "x", "a", "ok", 0, 10), (2, "write", "x", "b", "info", 20, 30),
                 (3, "read", "x", "a", "ok", 40, 50), (3, "read", "x", "a", "ok", 500, 510))
    assert check(never).status == "ok"
    unanswered = hist((1, "write", "x", "a", "ok", 0, 10), (2, "cas", "x", ("a", "c"), "info", 20, None),
                      (3, "read", "x", "c", "ok", 40, 50), (5, "read", "x", None, "info", 60, 70))
    assert check(unanswered).status == "ok"


def test_initial_value_needs_no_writer():
    # The read of "a" is answered by the initial value; the timed-out write of "a" (invoked after "b" was
    # written) must not be forced to have happened, or the read of "b" would have nothing left to explain it.
    h = hist((1, "write", "x", "b", "ok", 0, 5), (2, "write", "x", "a", "info", 10, 15),
             (3, "read", "x", "a", "ok", 0, 20), (1, "read", "x", "b", "ok", 30, 40))
    assert check(h, initial="a").status == "ok"
    assert check(h, initial={"x": "a"}).status == "ok"
    assert check(h).status == "fail"          # from nil, the read of "a" needs the write, which breaks "b"


def test_fail_ops_are_dropped_and_values_compare_as_valkey_stores_them():
    h = hist((1, "write", "x", 5, "ok", 0, 10), (2, "write", "x", "zzz", "fail", 12, 14),
             (3, "read", "x", b"5", "ok", 20, 30))
    assert check(h).status == "ok"


def test_keys_are_checked_independently():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "y", "2", "ok", 0, 10),
             (3, "read", "x", "1", "ok", 20, 30), (4, "read", "y", "2", "ok", 20, 30),
             (1, "write", "y", "3", "ok", 40, 50), (2, "read", "y", "2", "ok", 60, 70))   # y goes back: stale
    res = check(h)
    assert res.status == "fail"
    assert [k.key for k in res.failures] == ["y"]
    assert {k.key: k.status for k in res.keys} == {"x": "ok", "y": "fail"}


# --- known non-linearizable histories --------------------------------------------------------------------

def test_stale_read_after_a_write_completed():
    # A read served by a lagging replica after a failover: the new write had completed before it started.
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 20, 30),
             (3, "read", "x", "1", "ok", 40, 50), (1, "read", "x", "2", "ok", 60, 70))
    res = check(h)
    assert res.status == "fail"
    cex = res.failures[0].counterexample
    assert cex.key == "x"
    assert {o.index for o in cex.ops} == {invoke_index(h, 1, "write", "1"), invoke_index(h, 2, "write", "2"),
                                          invoke_index(h, 3, "read", "1")}
    text = cex.render()
    assert "key 'x': not linearizable" in text
    assert "write '1'" in text and "write '2'" in text and "read -> '1'" in text
    assert "the register then holds '2'" in text
    assert_minimal_counterexample(cex)


def test_lost_write_reads_older_value_after_newer_ok():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 20, 30),
             (3, "read", "x", "2", "ok", 35, 38), (1, "read", "x", "1", "ok", 45, 50),
             (2, "read", "x", "1", "ok", 55, 60))
    res = check(h)
    assert res.status == "fail"
    cex = res.failures[0].counterexample
    assert len(cex.ops) == 3 and invoke_index(h, 2, "write", "2") in cex.required
    assert_minimal_counterexample(cex)


def test_cas_succeeding_on_an_overwritten_value():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 20, 30),
             (3, "cas", "x", ("1", "3"), "ok", 40, 50))
    res = check(h)
    assert res.status == "fail"
    cex = res.failures[0].counterexample
    assert {o.index for o in cex.ops} == {o.index for o in h.operations()}
    assert "cas '1' -> '3'" in cex.render()
    assert_minimal_counterexample(cex)


def test_read_of_a_value_never_written():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "read", "x", "1", "ok", 20, 30),
             (3, "read", "x", "ghost", "ok", 40, 50), (1, "write", "x", "2", "ok", 60, 70))
    res = check(h)
    cex = res.failures[0].counterexample
    assert [o.index for o in cex.ops] == [invoke_index(h, 3, "read", "ghost")]
    assert "read returned 'ghost', which no operation on this key ever wrote" in cex.render()
    failed = hist((1, "write", "x", "1", "fail", 0, 10), (2, "read", "x", "1", "ok", 20, 30))
    cex = check(failed).failures[0].counterexample
    assert "only a failed write wrote" in cex.explanation


def test_info_ops_do_not_hide_a_violation():
    # The info write of "3" could land anywhere after its invoke, but nothing rewrites "1" after "2".
    h = hist((4, "write", "x", "3", "info", 0, 5), (1, "write", "x", "1", "ok", 0, 10),
             (2, "write", "x", "2", "ok", 20, 30), (3, "read", "x", "1", "ok", 40, 50),
             (4, "write", "x", "4", "info", 45, None))
    res = check(h)
    assert res.status == "fail"
    assert_minimal_counterexample(res.failures[0].counterexample)
    # An info write cannot take effect before its invoke: the read of "b" came first.
    early = hist((1, "read", "x", "b", "ok", 0, 10), (2, "write", "x", "b", "info", 20, 30))
    assert check(early).status == "fail"
    # ... and an info CAS only takes effect if its comparison holds at that moment.
    cas = hist((1, "write", "x", "a", "ok", 0, 10), (2, "cas", "x", ("z", "c"), "info", 20, 30),
               (3, "read", "x", "c", "ok", 40, 50))
    assert check(cas).status == "fail"


def test_result_rendering_and_json():
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 20, 30),
             (3, "read", "x", "1", "ok", 40, 50), (4, "read", "y", None, "ok", 0, 5))
    res = check(h)
    text = res.render()
    assert text.startswith("4 operations on 2 keys: NOT linearizable")
    d = json.loads(json.dumps(res.to_dict()))
    assert d["status"] == "fail" and d["keys_checked"] == 2
    by_key = {k["key"]: k for k in d["keys"]}
    assert by_key["y"]["status"] == "ok" and by_key["x"]["status"] == "fail"
    assert len(by_key["x"]["counterexample"]["ops"]) == 3
    table = linearizability_table(res)
    md = table.to_markdown()
    assert "| x | 3 | 3 | fail |" in md and "| y | 1 | 1 | ok |" in md
    assert "read -> '1'" in md


def test_linearizability_report_files(tmp_path):
    h = hist((1, "write", "x", "1", "ok", 0, 10), (2, "write", "x", "2", "ok", 20, 30),
             (3, "read", "x", "1", "ok", 40, 50))
    paths = write_report(tmp_path / "lin", linearizability_report(check(h)))
    md = open(paths["report.md"]).read()
    assert "| x | 3 | 3 | fail |" in md and "key 'x': not linearizable" in md
    doc = json.load(open(paths["report.json"]))
    assert doc["data"]["result"]["keys"][0]["counterexample"]["required"] == [0, 2, 4]
    assert "NOT linearizable" in open(paths["report.txt"]).read()


# --- time bound ------------------------------------------------------------------------------------------

def test_time_bound_gives_unknown_not_a_guess():
    h = simulate(3000, keys=1, processes=4, p_info=0.02, seed=11)
    res = check_registers(h, time_limit_s=0.0)
    assert res.status == "unknown"
    assert [k.status for k in res.keys] == ["unknown"]
    assert "unknown (time bound reached)" in res.render()
    assert check_registers(h, time_limit_s=LIMIT_S).status == "ok"


def test_a_failing_key_beats_an_unknown_one():
    big = simulate(3000, keys=1, processes=4, p_info=0.02, seed=12)
    ops = [Operation(o.index, o.process, o.f, "big", o.value, o.output, o.type, o.invoke_ns, o.complete_ns)
           for o in big.operations()]
    t = max(o.complete_ns or o.invoke_ns for o in ops) + 1000
    n = len(big.ops)
    ops += [Operation(n, "a", "write", "small", "1", "1", "ok", t, t + 10),
            Operation(n + 1, "a", "write", "small", "2", "2", "ok", t + 20, t + 30),
            Operation(n + 2, "b", "read", "small", None, "1", "ok", t + 40, t + 50)]
    # The fake clock: every reading advances one second, so the big key runs out while the small one,
    # checked first (fewest operations) and too short to ever look at the clock, fails.
    ticks = iter(range(10**9))
    res = check_registers(ops, time_limit_s=5.0, minimize_s=1e9, clock=lambda: float(next(ticks)))
    assert {k.key: k.status for k in res.keys} == {"small": "fail", "big": "unknown"}
    assert res.status == "fail"


# --- simulated registers ---------------------------------------------------------------------------------

SIM = dict(deadline=None, max_examples=40, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@settings(**SIM)
@given(rng=st.randoms(use_true_random=False), n_ops=st.integers(1, 80), keys=st.integers(1, 3),
       processes=st.integers(1, 6), p_info=st.sampled_from([0.0, 0.05, 0.2]),
       p_fail=st.sampled_from([0.0, 0.05]))
def test_correct_register_histories_are_accepted(rng, n_ops, keys, processes, p_info, p_fail):
    h = simulate(n_ops, keys=keys, processes=processes, p_info=p_info, p_fail=p_fail, rng=rng,
                 zombie_rate=rng.choice([0.3, 0.02]))
    res = check(h)
    assert res.status == "ok", res.render()


@settings(**SIM)
@given(rng=st.randoms(use_true_random=False), bug=st.sampled_from(["lost-writes", "stale-replica"]),
       n_ops=st.integers(1, 80), keys=st.integers(1, 3), processes=st.integers(1, 6),
       p_info=st.sampled_from([0.0, 0.05, 0.2]))
def test_buggy_register_histories_are_rejected(rng, bug, n_ops, keys, processes, p_info):
    h = simulate(n_ops, keys=keys, processes=processes, p_info=p_info, bug=bug, rng=rng)
    res = check(h)
    assert res.status == "fail", f"{bug}: {res.render()}"
    for k in res.failures:
        cex = k.counterexample
        assert cex.minimal and cex.ops and set(cex.required) <= {o.index for o in cex.ops}
        if len(cex.ops) <= 7:
            assert_minimal_counterexample(cex)


def test_large_histories_check_within_the_bound():
    # 2,000 operations over 5 keys, 6 clients with timeouts; speed is measured in
    # scripts/bench_verify_checker.py, here only the verdicts.
    good = simulate(2000, keys=5, processes=6, p_info=0.03, seed=5)
    assert check(good).status == "ok"
    for bug in ("lost-writes", "stale-replica"):
        bad = simulate(2000, keys=5, processes=6, p_info=0.03, bug=bug, seed=5, bug_at=1900)
        res = check(bad)
        assert res.status == "fail"
        assert all(len(k.counterexample.ops) <= 6 for k in res.failures), res.render()


# --- differential: the search against brute force on small arbitrary histories ----------------------------

@st.composite
def small_histories(draw):
    n = draw(st.integers(1, 6))
    vals = ["a", "b", "c"]
    ops = []
    for i in range(n):
        f = draw(st.sampled_from(["read", "write", "cas"]))
        typ = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
        start = draw(st.integers(0, 30))
        end = start + draw(st.integers(0, 12))
        if f == "read":
            value, output = None, (draw(st.sampled_from([None] + vals)) if typ == "ok" else None)
        elif f == "write":
            value = draw(st.sampled_from(vals))
            output = value
        else:
            value = (draw(st.sampled_from([None] + vals)), draw(st.sampled_from(vals)))
            output = value
        ops.append(Operation(i, i, f, "x", value, output, typ, start, end))
    return ops


@settings(deadline=None, max_examples=400, derandomize=True)
@given(ops=small_histories(), initial=st.sampled_from([None, "a"]))
def test_search_agrees_with_brute_force(ops, initial):
    res = check_registers(ops, time_limit_s=LIMIT_S, initial=initial)
    expected = brute_linearizable(ops, initial)
    assert res.status == ("ok" if expected else "fail")
    if not expected:
        assert_minimal_counterexample(res.failures[0].counterexample)


# --- the history model -----------------------------------------------------------------------------------

def test_recorder_is_safe_across_threads_and_round_trips(tmp_path):
    rec = Recorder(meta={"scenario": "unit"})
    n_threads, per_thread = 8, 250

    def client(p):
        for i in range(per_thread):
            rec.invoke(p, "write", f"k{i % 3}", f"{p}.{i}")
            if i % 10 == 9:
                rec.info(p, TimeoutError("timed out"))
            else:
                rec.ok(p)
    threads = [threading.Thread(target=client, args=(p,)) for p in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    h = rec.history()
    assert len(h) == 2 * n_threads * per_thread
    assert [op.index for op in h] == list(range(len(h)))
    assert all(a.time_ns <= b.time_ns for a, b in zip(h.ops, h.ops[1:]))
    ops = h.operations()
    assert len(ops) == n_threads * per_thread
    assert sum(1 for o in ops if o.type == "info") == n_threads * per_thread // 10
    assert all(o.error == "TimeoutError: timed out" for o in ops if o.type == "info")
    path = tmp_path / "h.jsonl"
    h.save_jsonl(path)
    back = History.load(path)
    assert back.ops == h.ops and back.meta == {"scenario": "unit"}
    assert History.loads(h.to_json()).ops == h.ops
    assert History.loads(json.dumps([op.to_dict() for op in h.ops[:4]])).ops == h.ops[:4]


def test_recorder_rules_and_open_operations():
    rec = Recorder(clock_ns=iter(range(0, 10**6, 10)).__next__)
    rec.invoke(1, "read", "x")
    with pytest.raises(ValueError, match="already has an open operation"):
        rec.invoke(1, "read", "x")
    rec.ok(1, b"v")
    with pytest.raises(ValueError, match="no open operation"):
        rec.ok(1)
    with pytest.raises(ConnectionError):
        with rec.operation(2, "write", "x", "v2"):
            raise ConnectionError("reset by peer")
    with rec.operation(3, "cas", "x", ["v", "w"]) as op:
        op.fail("comparison failed")
    rec.nemesis("start", "kill n1")
    rec.invoke(4, "write", "x", "v4")       # never completes: the history ends with it open
    rec.nemesis("stop", "kill n1")
    ops = rec.history().operations()
    assert [(o.process, o.type) for o in ops] == [(1, "ok"), (2, "info"), (3, "fail"), (4, "info")]
    assert ops[0].output == b"v"
    assert ops[1].error == "ConnectionError: reset by peer"
    assert ops[3].complete_ns is None
    (w,) = rec.history().fault_windows()
    assert (w.start_ns, w.stop_ns, w.description) == (60, 80, "kill n1")
    # Saved as text: bytes become str, and the checker compares them the same way.
    assert rec.history().ops[1].to_dict()["value"] == "v"
    with pytest.raises(ValueError, match="no open invoke"):
        History([Op(0, 1, "ok", "read", "x", "v", 5)]).operations()


def test_history_recorded_from_a_real_server_is_linearizable(server_factory):
    """Four clients of a real durakv (sync durability) read, write and compare-and-set three keys: with
    WATCH/MULTI/EXEC and with a Lua script. The recorded history must check linearizable."""
    srv = server_factory()
    rec = Recorder()
    keys = ["lin:a", "lin:b", "lin:c"]
    lua_cas = ("if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 "
               "else return 0 end")
    errors = []

    def client(p):
        rng = random.Random(p)
        c = srv.client(socket_timeout=10, decode_responses=True)
        try:
            for i in range(120):
                key = rng.choice(keys)
                r = rng.random()
                if r < 0.4:
                    with rec.operation(p, "read", key) as op:
                        op.ok(c.get(key))
                elif r < 0.75:
                    with rec.operation(p, "write", key, f"{p}.{i}") as op:
                        c.set(key, f"{p}.{i}")
                        op.ok()
                else:
                    expected = c.get(key)
                    new = f"{p}.{i}"
                    with rec.operation(p, "cas", key, [expected, new]) as op:
                        if expected is not None and rng.random() < 0.5:
                            if c.eval(lua_cas, 1, key, expected, new) == 1:
                                op.ok()
                            else:
                                op.fail("comparison failed")
                        else:
                            with c.pipeline() as pipe:
                                pipe.watch(key)
                                if pipe.get(key) != expected:
                                    pipe.unwatch()
                                    op.fail("comparison failed")
                                else:
                                    pipe.multi()
                                    pipe.set(key, new)
                                    try:
                                        pipe.execute()
                                        op.ok()
                                    except valkey.WatchError:
                                        op.fail("EXEC aborted")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            c.close()
    threads = [threading.Thread(target=client, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not errors
    h = rec.history()
    ops = h.operations()
    assert len(ops) == 480 and all(o.type in ("ok", "fail") for o in ops)
    assert sum(1 for o in ops if o.f == "cas" and o.type == "ok") > 0
    res = check(h)
    assert res.status == "ok", res.render()
    # The same history with one read's answer changed to a value overwritten before the read began (write
    # values are unique) must be rejected, and the changed read must be part of the counterexample.
    target = None
    for rd in (o for o in ops if o.f == "read" and o.type == "ok"):
        before = [w for w in ops if w.key == rd.key and w.type == "ok" and w.f in ("write", "cas")
                  and w.complete_ns < rd.invoke_ns]
        for old in before:
            if old.f == "write" and any(n.invoke_ns > old.complete_ns for n in before):
                target = (rd, old.value)
                break
        if target:
            break
    assert target is not None
    rd, stale = target
    tampered = [Operation(o.index, o.process, o.f, o.key, o.value, stale if o is rd else o.output, o.type,
                          o.invoke_ns, o.complete_ns) for o in ops]
    res = check(tampered)
    assert res.status == "fail"
    assert rd.index in res.failures[0].counterexample.required


# --- acked writes ----------------------------------------------------------------------------------------

def writes(*rows):
    """rows: (key, value, type, invoke_ms, complete_ms)."""
    return [Operation(i, 0, "write-key", k, v, v, typ, int(t0 * 1e6), None if t1 is None else int(t1 * 1e6))
            for i, (k, v, typ, t0, t1) in enumerate(rows)]


def test_acked_writes_classification():
    ops = writes(("k1", "v1", "ok", 0, 1), ("k2", "v2", "ok", 2, 3), ("k3", "v3", "ok", 4, 5),
                 ("k4", "v4", "fail", 6, 7), ("k5", "v5", "fail", 8, 9),
                 ("k6", "v6", "info", 10, 11), ("k7", "v7", "info", 12, None),
                 ("k8", "v8", "fail", 14, 15), ("k8", "v8", "ok", 16, 17))      # a retry that succeeded
    final = {"k1": b"v1", "k2": None, "k3": "other", "k5": "v5", "k6": "v6", "k8": "v8", "zz": "stray"}
    res = check_acked_writes(ops, final)
    assert (res.attempts, res.keys, res.acked, res.failed, res.indefinite) == (9, 8, 4, 2, 2)
    assert res.indefinite_present == 1
    assert [(x.key, x.expected, x.found) for x in res.lost] == [("k2", "v2", None), ("k3", "v3", "other")]
    assert res.unexpected == [("k5", "v5")]
    assert res.stray_keys == 1 and not res.ok
    d = res.to_dict()
    assert (d["lost"], d["unexpected"], d["acked"]) == (2, 1, 4)
    assert check_acked_writes(ops[:1], {"k1": "v1"}).ok


def test_write_unavailability_windows():
    rows = [(f"a{i}", "v", "ok", i * 10, i * 10 + 1) for i in range(10)]        # acked every 10 ms to 91 ms
    rows += [("f1", "v", "fail", 95, 100), ("f2", "v", "info", 100, 1100), ("f3", "v", "fail", 1200, 1300)]
    rows += [(f"b{i}", "v", "ok", 2091 + i * 10, 2092 + i * 10) for i in range(5)]   # back at 2,092 ms
    res = check_acked_writes(writes(*rows), {})
    gap = res.longest_gap
    assert gap.duration_s == pytest.approx(2.001)          # 91 ms -> 2,092 ms
    assert (gap.failed, gap.indefinite) == (2, 1)
    assert [round(w.duration_s, 3) for w in res.windows] == [2.001]
    assert check_acked_writes(writes(*rows), {}, min_window_s=5).windows == []
    none_acked = check_acked_writes(writes(("x", "v", "fail", 0, 3000)), {})
    assert none_acked.longest_gap.duration_s == pytest.approx(3.0) and len(none_acked.windows) == 1
    rate = write_rate(writes(*rows), bucket_s=0.5)
    assert [p.t_s for p in rate] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert [p.acked for p in rate] == [10, 0, 0, 0, 5]
    assert [p.failed for p in rate] == [1, 0, 1, 0, 0] and [p.indefinite for p in rate] == [0, 0, 1, 0, 0]


# --- reports ---------------------------------------------------------------------------------------------

def png_info(path):
    """Parses a PNG: checks signature and every chunk's CRC; returns (width, height, rgb rows)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        tag, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(tag + body) & 0xFFFFFFFF
        chunks.setdefault(tag, b"")
        chunks[tag] += body
        pos += 12 + length
    assert set(chunks) == {b"IHDR", b"IDAT", b"IEND"}
    w, h, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == h * (1 + 3 * w)
    rows = [raw[y * (1 + 3 * w) + 1:(y + 1) * (1 + 3 * w)] for y in range(h)]
    return w, h, rows


def columns_with(rows, color):
    c = bytes(color)
    return sorted({x // 3 for row in rows for x in range(0, len(row), 3) if row[x:x + 3] == c})


def fault_history():
    """40 s of writes, 5 per second; a fault from 10 s to 25 s; no write acknowledged from 12 s to 29 s."""
    t = [0]
    rec = Recorder(clock_ns=lambda: t[0])
    for i in range(200):
        t[0] = int(i * 0.2e9)
        if i == 50:
            rec.nemesis("start", "az-power az1")
        if i == 125:
            rec.nemesis("stop", "az-power az1")
        rec.invoke(0, "write-key", f"key:{i}", f"value:{i}")
        t[0] += int(1e6)
        if 12e9 < t[0] < 29e9:
            rec.fail(0, "CLUSTERDOWN")
        else:
            rec.ok(0)
    return rec.history()


def test_acked_writes_report_files_tables_and_plot(tmp_path):
    h = fault_history()
    final = {o.key: o.value for o in h.operations() if o.type == "ok"}
    final.pop("key:3")
    res = check_acked_writes(h, final)
    assert res.longest_gap.duration_s == pytest.approx(17.2)
    rep = acked_writes_report([res, check_acked_writes(h, {**final, "key:3": "value:3"})], [h, h])
    paths = write_report(tmp_path / "rep", rep)
    assert set(paths) == {"report.md", "report.txt", "report.json", "writes_run1.png", "writes_run2.png"}
    md = open(paths["report.md"]).read()
    assert "| 1 | 200 | 115 | 85 | 0 | 0 | 1 | 0 | 17.200 | 1 |" in md
    assert "| all | 400 | 230 | 170 | 0 | 0 | 1 | 0 | 17.200 | 2 |" in md
    assert "1/2 runs lost no acknowledged write." in md and "run 1: lost 1: key:3 (found nil)" in md
    assert "![Run 1: acknowledged writes per second" in md
    txt = open(paths["report.txt"]).read()
    assert "Longest write gap (s)" in txt and "17.200" in txt and "|" not in txt
    doc = json.load(open(paths["report.json"]))
    assert doc["tables"]["acked_writes"]["rows"][0][:7] == ["1", 200, 115, 85, 0, 0, 1]
    assert doc["data"]["runs"][0]["lost_keys"][0]["key"] == "key:3"
    w, hgt, rows = png_info(paths["writes_run1.png"])
    ch = Chart(width=w, height=hgt)      # the same frame geometry the plot used
    t_end = 40.0
    area = rows[ch.y0:ch.y1]             # inside the frame (the legend also has a fault swatch)

    def seconds(col):
        return (col - ch.x0) / (ch.x1 - ch.x0) * t_end
    shade = columns_with(area, FAULT_SHADE)
    assert shade and seconds(shade[0]) == pytest.approx(10.0, abs=0.1)
    assert seconds(shade[-1]) == pytest.approx(25.0, abs=0.1)
    gap = columns_with(area, GAP_COLOR)      # the bracket from the last ack before to the first after
    assert gap and seconds(gap[0]) == pytest.approx(11.8, abs=0.1)
    assert seconds(gap[-1]) == pytest.approx(29.0, abs=0.1)


def test_failover_and_latency_reports(tmp_path):
    runs = {"planned": [17.356, 17.419, 17.502], "unplanned": [17.204, 17.311, 17.343, 17.362, 18.96, 22.233]}
    paths = write_report(tmp_path / "fo", failover_report(runs))
    md = open(paths["report.md"]).read()
    assert "| 1 | 17.356 | 17.204 |" in md and "| 6 | - | 22.233 |" in md and "| median | 17.419 | 17.352 |" in md
    assert png_info(paths["failover.png"])[:2] == (900, 470)
    write = {"none": {"p50": 0.255, "p99": 0.775, "p99.9": 1.2, "ops_per_sec": 29983.4},
             "async": {"p50": 0.247, "p99": 0.775, "ops_per_sec": 29994},
             "sync": {"p50": 3.535, "p99": 5.567, "p99.9": 8.1, "ops_per_sec": 29873}}
    read = {m: {"p50": 0.2, "p99": 0.6, "ops_per_sec": 29900} for m in write}
    paths = write_report(tmp_path / "bench", latency_report(write, read))
    md = open(paths["report.md"]).read()
    assert "| none | 0.255 | 0.775 | 29,983 | 1.0x |" in md
    assert "| sync | 3.535 | 5.567 | 29,873 | 13.9x |" in md
    assert "Read P50 (ms)" in md and "| async | 0.200 | 0.600 | 29,900 | 1.0x |" in md
    for name in ("latency_write.png", "latency_read.png"):
        png_info(paths[name])


def test_tables_render_as_markdown_text_and_json():
    t = failover_table({"sync": [17.2, 17.3], "async": [17.1]})
    assert t.to_text().splitlines()[:3] == ["Failover: write unavailability per run (s)",
                                             "Run     sync (s)  async (s)",
                                             "------  --------  ---------"]
    assert t.to_text().splitlines()[-1] == "median    17.250     17.100"
    assert json.loads(json.dumps(t.to_dict()))["rows"][1] == ["2", 17.3, None]
    t = latency_table({"a|b": {"p50": 1.0, "p99": 2.0, "ops_per_sec": 10}})
    assert "| a\\|b | 1.000 | 2.000 | 10 | 1.0x |" in t.to_markdown()
    rpo = async_rpo_table([check_acked_writes(writes(("k", "v", "ok", 0, 1)), {})], [812.0], [10000], [3])
    assert "| 1 | 1 | 1 | 812.000 | 10,000 | 3 |" in rpo.to_markdown()
    empty = acked_writes_table([])
    assert "no runs." in empty.to_text()
