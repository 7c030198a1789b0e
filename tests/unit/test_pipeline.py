"""The one command pipeline: every path a command can take goes through Pipeline.admit and Pipeline.call.

An instrumented pipeline records each admission and each call. The server runs in this process (in a thread,
on its own event loop) so the instrumentation sees it, but it is the real server: a real socket, a real
valkey-py client, the real local journal. Paths: plain, pipelined, MULTI/EXEC, Lua server.call, FCALL,
blocked-then-served, replica apply (Server.apply_effect, what a replica calls per journal entry) and start-up
replay. Error texts are Valkey's, written literally here.
"""

import asyncio
import threading

import pytest
import valkey

from conftest import free_port, wait_until
from durakv.commands.pipeline import Pipeline
from durakv.config import Config
from durakv.server.server import Server

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


class Recorder:
    """Wraps Pipeline.admit and Pipeline.call (the class, so every pipeline of the process is seen)."""

    def __init__(self, monkeypatch):
        self.admitted = []   # (command, "script" | "client")
        self.called = []     # (command, how: "handler" | "retry")
        self.lock = threading.Lock()
        admit, call = Pipeline.admit, Pipeline.call
        rec = self

        def admit_spy(self, session, cmd, args, *a, **kw):
            with rec.lock:
                rec.admitted.append((cmd.fullname, "script" if kw.get("run") is not None else "client"))
            return admit(self, session, cmd, args, *a, **kw)

        def call_spy(self, session, cmd, args, handler=None, caller=None):
            with rec.lock:
                rec.called.append((cmd.fullname, "retry" if handler is not None else "handler"))
            return call(self, session, cmd, args, handler, caller)

        monkeypatch.setattr(Pipeline, "admit", admit_spy)
        monkeypatch.setattr(Pipeline, "call", call_spy)

    def take(self):
        with self.lock:
            admitted, called = self.admitted, self.called
            self.admitted, self.called = [], []
        return admitted, called


class InProcessServer:
    """A durakv Server on its own event loop in a thread, listening on a real port."""

    def __init__(self, data_dir, *args):
        self.port = free_port()
        cfg = Config()
        cfg.load_args(["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(data_dir)] + list(args))
        self.server = Server(cfg)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.failed = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def main():
            try:
                await self.server.start()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                self.failed = exc
                self.ready.set()
                return
            self.ready.set()
            await self.server.serve_until_shutdown()

        self.loop.run_until_complete(main())

    def start(self):
        self.thread.start()
        assert self.ready.wait(20), "server did not start"
        if self.failed:
            raise self.failed
        return self

    def on_loop(self, fn):
        """Runs fn() on the server's loop thread and returns its result."""
        done = threading.Event()
        box = []

        def job():
            try:
                box.append(fn())
            finally:
                done.set()
        self.loop.call_soon_threadsafe(job)
        assert done.wait(10)
        return box[0]

    def client(self, **kw):
        return valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=10, **kw)

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.request_shutdown)
        self.thread.join(20)
        assert not self.thread.is_alive()


@pytest.fixture
def recorder(monkeypatch):
    return Recorder(monkeypatch)


@pytest.fixture
def lease_gate():
    """A stand-in for a shard primary's lease (the node's pipeline gate): lapsed on demand."""
    class Gate:
        lapsed = False
        asked = 0
        checks_stale = False

        def is_replica(self):
            return False

        def serving_error(self, write):
            self.asked += 1
            return "CLUSTERDOWN The primary's lease expired; it is not serving until it is renewed" \
                if self.lapsed else None
    return Gate()


@pytest.fixture
def inproc(tmp_path):
    servers = []

    def start(*args, data_dir=None):
        srv = InProcessServer(data_dir or tmp_path / "data", *args).start()
        servers.append(srv)
        return srv
    yield start
    for srv in servers:
        srv.stop()


def test_every_command_path_goes_through_admit_and_call(inproc, recorder, lease_gate, tmp_path):
    srv = inproc("--durability", "sync")
    srv.server.pipeline.gate = lease_gate   # so admission runs on every path, as on a shard primary
    c = srv.client()
    c.ping()   # the client's own connection set-up (CLIENT SETINFO) is done
    recorder.take()

    # plain
    assert c.set("k", "v") is True
    admitted, called = recorder.take()
    assert admitted == [("set", "client")] and called == [("set", "handler")]

    # pipelined: one read, three requests, each admitted and called in order
    p = c.pipeline(transaction=False)
    p.set("a", "1").append("n", "x").get("a")
    assert p.execute() == [True, 1, b"1"]
    admitted, called = recorder.take()
    assert [a for a, _ in admitted] == ["set", "append", "get"]
    assert [n for n, _ in called] == ["set", "append", "get"]

    # MULTI/EXEC: queued commands are admitted when queued, EXEC with the queue's flags, then each runs
    tx = c.pipeline(transaction=True)
    tx.set("t", "1").get("t")
    assert tx.execute() == [True, b"1"]
    admitted, called = recorder.take()
    assert [a for a, _ in admitted] == ["multi", "set", "get", "exec"]
    assert [n for n, _ in called] == ["multi", "exec", "set", "get"]   # recorded as each call starts

    # Lua: the script's own command is admitted in its script form and called through the pipeline
    assert c.eval("return server.call('SET', KEYS[1], ARGV[1])", 1, "s", "x") == b"OK"
    admitted, called = recorder.take()
    assert admitted == [("eval", "client"), ("set", "script")]
    assert [n for n, _ in called] == ["eval", "set"]

    # FCALL
    c.function_load("#!lua name=lib\nserver.register_function('f', function(keys) "
                    "return server.call('GET', keys[1]) end)")
    recorder.take()
    assert c.fcall("f", 1, "s") == b"x"
    admitted, called = recorder.take()
    assert admitted == [("fcall", "client"), ("get", "script")]
    assert [n for n, _ in called] == ["fcall", "get"]

    # blocked, then served when another client pushes: the retry is admitted and called again
    blocked = srv.client()
    blocked.ping()
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", blocked.blpop(["q"], timeout=10)))
    t.start()
    wait_until(lambda: c.info("clients")["blocked_clients"] == 1, 10, what="client blocked")
    recorder.take()
    assert c.rpush("q", "item") == 1
    t.join(10)
    assert result["r"] == (b"q", b"item")
    admitted, called = recorder.take()
    assert ("blpop", "client") in admitted and ("blpop", "retry") in called
    assert admitted.index(("rpush", "client")) < admitted.index(("blpop", "client"))

    # a replica applies each journal entry with Server.apply_effect: through call(), without admission
    srv.on_loop(lambda: srv.server.apply_effect(0, [b"SET", b"applied", b"1"]))
    admitted, called = recorder.take()
    assert admitted == [] and called == [("set", "handler")]
    assert c.get("applied") == b"1"
    blocked.close()
    c.close()


def test_startup_replay_goes_through_call(inproc, recorder, tmp_path):
    srv = inproc("--durability", "sync", data_dir=tmp_path / "d")
    with srv.client() as c:
        c.set("x", "1")
        c.eval("return server.call('RPUSH', KEYS[1], 'a')", 1, "y")
    srv.stop()
    recorder.take()
    srv2 = InProcessServer(tmp_path / "d", "--durability", "sync").start()
    try:
        admitted, called = recorder.take()
        # the journal holds effects (the script's RPUSH, not the EVAL): each replayed through call()
        assert ("set", "handler") in called and ("rpush", "handler") in called
        assert ("eval", "handler") not in called and admitted == []
        with srv2.client() as c:
            assert c.get("x") == b"1" and c.lrange("y", 0, -1) == [b"a"]
    finally:
        srv2.stop()


LEASE = "CLUSTERDOWN The primary's lease expired; it is not serving until it is renewed"


def test_lapsed_lease_refuses_every_path(inproc, lease_gate):
    """The lease rule holds on every path: plain reads and writes, scripts (EVAL and FCALL, which Valkey flags
    `stale`), EXEC and blocked retries; commands that touch no data still answer."""
    srv = inproc("--durability", "sync")
    srv.server.pipeline.gate = lease_gate
    c = srv.client()
    c.set("k", "v")
    c.function_load("#!lua name=lib\nserver.register_function('get', function(keys) "
                    "return server.call('GET', keys[1]) end)\n"
                    "server.register_function('put', function(keys) "
                    "return server.call('SET', keys[1], 'w') end)")
    blocked = srv.client()
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", _blpop(blocked)))
    t.start()
    wait_until(lambda: c.info("clients")["blocked_clients"] == 1, 10, what="client blocked")

    lease_gate.lapsed = True
    for call in (lambda: c.get("k"), lambda: c.set("k", "w"),
                 lambda: c.eval("return server.call('GET',KEYS[1])", 1, "k"),
                 lambda: c.eval("return server.call('SET',KEYS[1],'w')", 1, "k"),
                 lambda: c.eval("#!lua flags=no-writes\nreturn server.call('GET',KEYS[1])", 1, "k"),
                 lambda: c.fcall("get", 1, "k"), lambda: c.fcall("put", 1, "k")):
        with pytest.raises(valkey.exceptions.ResponseError) as e:
            call()
        assert str(e.value) == LEASE
    # MULTI: commands queued while the lease is lapsed are refused (and EXEC aborts); a transaction queued
    # while it was valid is refused as a whole at EXEC
    raw = c.connection_pool.get_connection("x")
    raw.send_command("MULTI")
    assert raw.read_response() == b"OK"
    raw.send_command("GET", "k")
    with pytest.raises(valkey.exceptions.ResponseError) as e:
        raw.read_response()
    assert str(e.value) == LEASE
    raw.send_command("EXEC")   # refused itself, as Valkey's EXEC is on a stale replica (execCommandAbort)
    with pytest.raises(valkey.exceptions.ExecAbortError) as e:
        raw.read_response()
    assert str(e.value) == "Transaction discarded because of: " + LEASE
    lease_gate.lapsed = False
    raw.send_command("MULTI")
    raw.read_response()
    raw.send_command("SET", "k", "w")
    assert raw.read_response() == b"QUEUED"
    lease_gate.lapsed = True
    raw.send_command("EXEC")
    with pytest.raises(valkey.exceptions.ExecAbortError) as e:
        raw.read_response()
    assert str(e.value) == "Transaction discarded because of: " + LEASE
    c.connection_pool.release(raw)
    with pytest.raises(valkey.exceptions.ResponseError) as e:
        c.rpush("q", "x")
    assert str(e.value) == LEASE
    assert c.ping() is True and c.execute_command("ECHO", "up") == b"up"   # no data touched: answered
    # The blocked client's retry goes through admission too: when its key changes while the lease is lapsed
    # (here an effect applied directly, as a journal entry would be), it is answered the lease error, not
    # served a value the primary may no longer own.
    srv.on_loop(lambda: srv.server.apply_effect(0, [b"RPUSH", b"q", b"late"]))
    t.join(10)
    assert result["r"] == LEASE
    lease_gate.lapsed = False
    assert c.get("k") == b"v", "a write refused under a lapsed lease changed the data"
    assert c.lrange("q", 0, -1) == [b"late"]   # nothing popped it
    blocked.close()
    c.close()


def _blpop(client):
    try:
        return client.blpop(["q"], timeout=10)
    except valkey.exceptions.ResponseError as exc:
        return str(exc)


def _raw(client):
    return client.connection_pool.get_connection("x")


def _reply(raw):
    try:
        return raw.read_response()
    except valkey.exceptions.ResponseError as exc:
        return "error: %s" % exc


def test_exec_rejected_at_exec_time_aborts_the_transaction(inproc):
    """Valkey's rules for OOM around MULTI: queueing a command that may grow memory is refused while out of
    memory (Valkey 9.1 queues reads; 8.0 refused anything), a transaction holding a write is refused at EXEC with
    EXECABORT (and the client leaves MULTI), one holding only reads runs, and MULTI and DISCARD are never
    refused."""
    srv = inproc("--durability", "sync")
    c = srv.client()
    other = srv.client()
    c.set("big", "x" * 1000)
    raw = _raw(c)

    def send(*args):
        raw.send_command(*args)
        return _reply(raw)

    assert send("MULTI") == b"OK"
    assert send("GET", "big") == b"QUEUED"
    assert send("PING") == b"QUEUED"
    other.config_set("maxmemory", "1")
    assert send("EXEC") == [b"x" * 1000, b"PONG"]          # only reads: not refused for memory
    assert send("MULTI") == b"OK"                           # MULTI itself is not refused
    assert send("GET", "big") == b"QUEUED"                  # a read is queued
    assert send("SET", "k", "v") == "error: command not allowed when used memory > 'maxmemory'."
    assert send("DISCARD") == b"OK"
    other.config_set("maxmemory", "0")
    assert send("MULTI") == b"OK"
    assert send("SET", "more", "y") == b"QUEUED"
    other.config_set("maxmemory", "1")
    assert send("EXEC") == ("error: Transaction discarded because of: OOM command not allowed when used memory "
                            "> 'maxmemory'.")
    assert send("EXEC") == "error: EXEC without MULTI"      # the abort left MULTI
    other.config_set("maxmemory", "0")
    assert c.get("more") is None
    c.connection_pool.release(raw)
    c.close()
    other.close()


def test_nested_multi_and_watch_inside_multi_abort_exec(inproc):
    srv = inproc("--durability", "none")
    c = srv.client()
    raw = c.connection_pool.get_connection("x")
    raw.send_command("MULTI")
    assert raw.read_response() == b"OK"
    raw.send_command("MULTI")
    with pytest.raises(valkey.exceptions.ResponseError) as e:
        raw.read_response()
    assert str(e.value) == "Command 'multi' not allowed inside a transaction"
    raw.send_command("SET", "k", "v")
    assert raw.read_response() == b"QUEUED"
    raw.send_command("EXEC")
    with pytest.raises(valkey.exceptions.ExecAbortError) as e:
        raw.read_response()
    assert str(e.value) == "Transaction discarded because of previous errors."
    raw.send_command("EXEC")   # out of MULTI now
    with pytest.raises(valkey.exceptions.ResponseError) as e:
        raw.read_response()
    assert str(e.value) == "EXEC without MULTI"
    c.connection_pool.release(raw)
    assert c.get("k") is None
    c.close()
