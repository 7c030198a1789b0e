"""Every Python name the compiled core (fastpath/_core.c) touches exists where it reads it.

The core reads and writes attributes of the server's objects by name (module NAMES, every name it interns): a
rename on the Python side would otherwise only send requests through the pure-Python path, or fail at run time.
Each name is checked on a live in-process cluster-mode server's objects (the ones the core is handed or reaches),
after a client has run commands through the core."""

import pytest

from durakv import fastpath
from durakv.durability import tracker as tracker_module
from durakv.errors import CommandError
from durakv.commands import load_all, registry
from durakv.keyspace.slotindex import SlotIndex
from durakv.protocol.resp import Deferred
from durakv.replication.lease import LeaseGate

from conftest import wait_until
from test_pipeline import InProcessServer

pytestmark = pytest.mark.skipif(fastpath.core is None, reason="needs the compiled core (pip install with gcc)")

# where the core reads each name (an object it holds or reaches; fastpath/__init__.py batch_core hands it the
# pipeline's core state, the pipeline, keyspace, durability and monitors, and Connection.data_received hands it
# the connection)
OWNERS = {
    # THE STATE OBJECT: every server-wide decision to run commands (admission, the observer, WATCH, statistics,
    # the clock, refused writes, expiry and access times, the role gate, the slot codes, keys moving, the
    # server's own deletions, pushes queued behind a reply): commands/corestate.py, read at its slots' offsets
    "CoreState": "may_run gate slot_codes lru_stamp clock watchers moving deleted own_feed "
                 # the limits it checks per batch: the monitors' thresholds, client-output-buffer-limit's reach
                 "threshold_us request_limit reply_limit output_limits",
    # read, process, run_batch: the Python steps the core hands a read or a batch's rest to (their docstrings)
    "Connection": "session outbox closing server parser backlog transport read process run_batch",
    # core_block: the session's flags that leave its requests to the pipeline, folded (commands/session.py)
    "Session": "core_block resp db_id commands_processed last_cmd last_write_index ctx no_touch net_in net_out "
               "last_interaction_ms",
    "Context": "db effects touched touched_exact",
    "Pipeline": "count_error mark mark_s total_commands",
    "Durability": "tracker feeds submit assigned committed pending needs_touched read_ticket waiting promised_index",
    # a sync write joining the open batch, opening it first when none is (tracker_join: the tracker's docstring
    # states these fields as the core's contract) and the journal's entry limit it checks
    "WriteTracker": "batch_index batch_effects batch_bytes batch_db batch_keys close_at close_batch open_batch "
                    "uncommitted "
                    "mode ack_before_commit journal",
    "Journal": "max_entry_bytes",
    "Keyspace": "hits misses used_bytes changes clock_ms",
    "Db": "data expires hexpires enc slots id set_expire",
    "SlotIndex": "add discard",
    "Monitors": "record record_request record_reply",
    # emit, hold (the Outbox API, by name for a subclass; an Outbox's own are the core's C functions, which
    # keep its held_bytes ... set_over) and flush; ready, held and closed are read only
    "Outbox": "ENTRY_COST ready held closed flush emit hold held_bytes carried_bytes carried_by_ticket limit_bytes over_limit "
              "durability set_over "
              # what Outbox.release (a C function of the class) reads besides: encode for a held Deferred's reply,
              # on_drained once nothing is held
              "encode on_drained",
    # a held reply not known yet (protocol/resp.py): release() writes it once done and its entry committed
    "Deferred": "done index reply",
    "Command": "calls usec latency skip_slowlog handler failed_calls arity fullname",
    "CommandError": "text",          # a handler's error reply (errors.py)
    "tracker module": "WriteTracker",    # durability/tracker.py, the class whose instances the core joins
    "LeaseGate": "fast_serving",   # a shard member's gate (node.lease)
    # boundary_for: "at a request boundary, following this session" (the parser's docstring: the core's contract)
    "RequestParser": "boundary_for max_bulk_len feed_rest",
    "Server": "net_input_bytes reads_processed net_output_bytes writes_processed loop_stats wall_clock_ms now_ms "
              "clock_ms",
    "LoopStats": "open begin loop turn_started_s cycles duration_s longest_stall_s perf_counter",
    "EventLoop": "call_soon",
    "Transport": "is_closing write",
}


@pytest.fixture
def served(tmp_path):
    srv = InProcessServer(tmp_path / "data", "--durability", "sync", "--cluster-enabled", "yes").start()
    try:
        yield srv
    finally:
        srv.stop()


def _objects(server):
    """The objects the core works on, from the server's one client connection (on the loop's thread)."""
    (conn,) = server.clients.values()
    session = conn.session
    return {
        "CoreState": server.pipeline.core_state,
        "Connection": conn, "Session": session, "Context": session.ctx, "Pipeline": server.pipeline,
        "Durability": server.durability, "WriteTracker": server.durability.tracker,
        "Journal": server.durability.tracker.journal, "Keyspace": server.pipeline.keyspace, "Db": session.ctx.db,
        # (a db keeps its keys' slot index once slot migration asked for one: the class until then)
        "SlotIndex": session.ctx.db.slots or SlotIndex, "Monitors": server.pipeline.monitors,
        "Outbox": conn.outbox, "Command": registry.lookup((b"set",)), "LeaseGate": LeaseGate,
        "RequestParser": conn.parser, "Server": server,
        "LoopStats": server.loop_stats, "EventLoop": server.loop_stats.loop, "Transport": conn.transport,
        "CommandError": CommandError("ERR x"), "tracker module": tracker_module, "Deferred": Deferred(),
    }


def test_every_name_the_core_touches_is_listed():
    listed = [n for names in OWNERS.values() for n in names.split()]
    assert sorted(set(listed)) == sorted(set(fastpath.core.NAMES))


def test_the_core_touches_no_private_name():
    """Each name the core reads is part of a stated interface of its class: none is private."""
    assert [n for n in fastpath.core.NAMES if n.startswith("_")] == []
    assert [(owner, n) for owner, names in OWNERS.items() for n in names.split() if n.startswith("_")] == []


def test_every_name_the_core_touches_exists(served):
    c = served.client()
    assert c.set("k", "v")
    # the core runs GET once the keyspace's LRU clock ticks (the server's cron): its objects are then these
    wait_until(lambda: c.get("k") == b"v" and int(c.info("server")["durakv_core_commands"]) > 0, 20,
               what="the compiled core ran a command")
    objects = served.on_loop(lambda: _objects(served.server))
    missing = [(owner, name) for owner, names in OWNERS.items() for name in names.split()
               if not hasattr(objects[owner], name)]
    assert missing == []
    c.close()


def test_the_command_table_says_which_commands_the_core_runs(tmp_path, monkeypatch):
    """The core runs the commands the table declares with core=True, by the table's names and arities, and
    none other: one taken out of the table's set runs through the pipeline."""
    load_all()      # the table as a server has it (run alone, no other test module has loaded it yet)
    table = fastpath.core_commands()
    assert set(table) <= set(fastpath.core.IMPLEMENTED)
    assert {"get", "set", "incr", "hset"} <= set(table)
    monkeypatch.setattr(registry.TABLE[b"get"], "core", False)
    srv = InProcessServer(tmp_path / "data", "--durability", "sync").start()
    try:
        c = srv.client()
        core_count = lambda: int(c.info("server")["durakv_core_commands"])  # noqa: E731
        assert c.set("k", "v")
        wait_until(lambda: c.set("k", "v") and core_count() > 0, 20, what="the compiled core ran SET")
        before = core_count()
        for _ in range(5):
            assert c.get("k") == b"v"
        assert core_count() == before     # GET: the pipeline's
        assert c.set("k", "w")
        assert core_count() == before + 1
        c.close()
    finally:
        srv.stop()


def test_the_core_refuses_a_command_it_does_not_implement():
    from durakv.commands import load_all
    from durakv.commands.pipeline import Pipeline
    from durakv.keyspace import Keyspace
    load_all()
    pipeline = Pipeline(Keyspace())
    append = registry.lookup((b"append",))
    with pytest.raises(ValueError, match="append"):
        fastpath.core.Core(pipeline.core_state, pipeline, pipeline.keyspace, pipeline.durability,
                           pipeline.monitors, {"append": append}, 0, None, None)


def test_the_core_hands_every_reply_to_the_outbox_api(tmp_path):
    """Replies go through the Outbox's emit / hold (and a flush through take_ready), never into its lists: an
    Outbox subclass on a live connection (the core then calls the methods by name) sees every byte the client
    reads, for replies that leave at once (GET, PING) and for sync writes held for their commit (SET)."""
    from durakv.durability.release import Outbox

    seen = []

    class Recording(Outbox):
        __slots__ = ()

        def emit(self, ticket, data):
            seen.append(("emit", ticket, bytes(data)))
            return super().emit(ticket, data)

        def hold(self, ticket, data, carried=0):
            seen.append(("hold", ticket, bytes(data)))
            return super().hold(ticket, data, carried)

    srv = InProcessServer(tmp_path / "data", "--durability", "sync").start()
    try:
        c = srv.client()
        assert c.set("k", "v")
        core_count = lambda: int(c.info("server")["durakv_core_commands"])  # noqa: E731
        wait_until(lambda: c.get("k") == b"v" and core_count() > 0, 20, what="the compiled core ran a command")

        for i in range(20):
            assert c.set("k%d" % i, "v%d" % i)      # (acknowledged: committed)

        def record():
            (conn,) = srv.server.clients.values()
            conn.outbox.__class__ = Recording
        srv.on_loop(record)
        before = core_count()
        p = c.pipeline(transaction=False)      # nothing uncommitted: every reply leaves at once
        for i in range(20):
            p.get("k%d" % i)
            p.ping()
        assert p.execute() == [r for i in range(20) for r in (b"v%d" % i, True)]
        assert core_count() >= before + 40            # (the INFO call itself is the pipeline's)
        assert {(kind, ticket) for kind, ticket, _ in seen} == {("emit", 0)}   # a read's replies, as one
        assert b"".join(d for _, _, d in seen) == b"".join(b"$2\r\nv%d\r\n+PONG\r\n" % i for i in range(10)) + b"".join(
            b"$3\r\nv%d\r\n+PONG\r\n" % i for i in range(10, 20))
        del seen[:]
        p = c.pipeline(transaction=False)      # sync writes: held for their commit, and what follows them
        for i in range(20):
            p.set("k%d" % i, "w%d" % i)
            p.ping()
        assert p.execute() == [True] * 40
        replies = b"".join(d for _, _, d in seen)
        assert replies == b"+OK\r\n+PONG\r\n" * 20
        assert any(kind == "hold" and ticket > 0 for kind, ticket, _ in seen)
        c.close()
    finally:
        srv.stop()


def test_the_core_opens_a_sync_batch_without_the_python_submit(tmp_path):
    """An unpipelined sync write opens a batch each time: the core calls the tracker's open_batch() and joins the
    batch in C (WriteTracker's docstring), where it called the whole Python submit before (~14k instructions of
    such a write, docs/commit-path.md). What it writes is what the Python path writes: acknowledged, read back."""
    srv = InProcessServer(tmp_path / "data", "--durability", "sync").start()
    try:
        c = srv.client()
        core_count = lambda: int(c.info("server")["durakv_core_commands"])  # noqa: E731
        wait_until(lambda: c.set("k", "v") and core_count() > 0, 20, what="the compiled core ran SET")
        calls = []

        def count_submits():
            durability = srv.server.durability
            python_submit = durability.submit

            def counted(effects, touched):
                calls.append(len(effects))
                return python_submit(effects, touched)
            durability.submit = counted
        srv.on_loop(count_submits)
        before = core_count()
        for i in range(20):
            assert c.set("k%d" % i, "v%d" % i)
        assert core_count() == before + 20
        assert calls == []
        assert [c.get("k%d" % i) for i in range(20)] == [b"v%d" % i for i in range(20)]
        c.close()
    finally:
        srv.stop()
