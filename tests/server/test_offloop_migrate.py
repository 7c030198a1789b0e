"""MIGRATE, and DUMP / RESTORE of large values, off the event loop (issue 16: "the loop never stops serving").

Before this, MIGRATE's exchange blocked the loop up to its timeout per step (a PING waited for a silent
target's timeout) and a large value's RDB encoding (DUMP) or decoding (RESTORE) ran on the loop: other clients
had no answer meanwhile. Now the slow part runs on a worker thread while the command's keys are locked: writes
to them (plain, in EXEC, scripts that may write, keyless writes such as FLUSHALL) wait and run afterwards,
reads go on. The checks here are of liveness and order (another client is answered while the command is in
flight), not of time.
"""

import contextlib
import shutil
import signal
import socket
import threading
import time

import pytest
import valkey

from conftest import wait_until
from helpers.diskfull import server_on_full_disk


class _Call:
    """A command sent on its own client from a thread; done once its reply (or error) is back."""

    def __init__(self, client, *args):
        self.result = self.error = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(client, args), daemon=True)
        self.thread.start()

    def _run(self, client, args):
        try:
            self.result = client.execute_command(*args)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            self.error = exc
        self.done.set()

    def wait(self, timeout_s=60):
        assert self.done.wait(timeout_s), "no reply within %s s" % timeout_s
        return self


def _flags_of(admin, name):
    """The CLIENT LIST flags of the client named `name`, or None."""
    for line in admin.execute_command("CLIENT", "LIST").decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        if fields.get("name") == name:
            return fields["flags"]
    return None


def _wait_parked(admin, name):
    """Until the client named `name` is parked (flag b: blocked, postponed, or working off the loop)."""
    wait_until(lambda: "b" in (_flags_of(admin, name) or ""), 20, what="%s to be parked" % name)


def _named(srv, name, **kw):
    c = srv.client(**kw)
    c.client_setname(name)
    return c


@contextlib.contextmanager
def _silent_target():
    """A listening socket that never answers: a MIGRATE to it waits for its timeout. Yields its port."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    silent.settimeout(20)
    try:
        yield silent
    finally:
        silent.close()


def test_migrate_to_a_silent_target_keeps_the_loop_serving(server_factory):
    src = server_factory()
    admin = src.client()
    admin.set("k", "v1")
    admin.set("other", "o")
    with _silent_target() as silent:
        migrating = _Call(_named(src, "migrator"), "MIGRATE", "127.0.0.1", silent.getsockname()[1], "k", 0, 3000)
        conn, _addr = silent.accept()        # the source connected: the exchange is in flight, nothing answers
        with conn:
            # other clients are answered meanwhile: a PING, a read of another key, a read of the migrating key
            b = src.client()
            assert b.ping() is True
            assert b.get("other") == b"o"
            assert b.get("k") == b"v1"
            assert not migrating.done.is_set()
            # writes of the migrating key wait, however they come: plain, in EXEC; so do a script that may
            # write (its keys are not all known) and FLUSHALL (keys unknown)
            setting = _Call(_named(src, "setter"), "SET", "k", "v2")
            _wait_parked(b, "setter")
            tx_client = _named(src, "tx")     # kept: the pipeline runs on its (named) connection
            tx = tx_client.pipeline(transaction=True)
            tx.set("k", "v3")
            exec_call = threading.Thread(target=tx.execute, daemon=True)
            exec_call.start()
            _wait_parked(b, "tx")
            scripted = _Call(_named(src, "script"), "EVAL", "return redis.call('set', KEYS[1], 'x')", 1, "s")
            _wait_parked(b, "script")
            flushing = _Call(_named(src, "flusher"), "FLUSHALL")
            _wait_parked(b, "flusher")
            # a write of another key goes on
            assert b.set("free", "1") is True
            assert b.get("k") == b"v1" and not migrating.done.is_set()
            assert not setting.done.is_set() and not scripted.done.is_set() and not flushing.done.is_set()
            migrating.wait()
            assert str(migrating.error) == "IOERR error or timeout reading to target instance"
            # the waiting writes run afterwards, from scratch, in the order they came
            setting.wait()
            assert setting.result is True
            exec_call.join(30)
            assert not exec_call.is_alive()
            scripted.wait()
            assert scripted.result == b"OK"
            flushing.wait()
            assert b.dbsize() == 0


def test_migrate_of_ten_thousand_keys_moves_them_with_ttls(server_factory):
    src, dst = server_factory(), server_factory()
    a, b = src.client(), dst.client()
    keys = ["key:%d" % i for i in range(10000)]
    p = a.pipeline(transaction=False)
    for i, k in enumerate(keys):
        p.set(k, "value-%d" % i, px=600000 if i % 2 else None)
    p.execute()
    assert a.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 30000, "KEYS", *keys) == b"OK"
    assert a.dbsize() == 0
    assert b.dbsize() == 10000
    assert b.get("key:1") == b"value-1" and 0 < b.pttl("key:1") <= 600000
    assert b.get("key:9998") == b"value-9998" and b.pttl("key:9998") == -1
    assert 0 < b.pttl("key:9999") <= 600000


def _big_hash(c, name, fields):
    p = c.pipeline(transaction=False)
    for start in range(0, fields, 2000):
        p.hset(name, mapping={"f%d" % i: "v%d" % i for i in range(start, min(start + 2000, fields))})
    p.execute()


@pytest.mark.long_pole(47)     # seconds on the 2-core machine: xdist starts it first
def test_dump_and_restore_of_a_million_field_hash_keep_the_loop_serving(server_factory, redis_server):
    src, dst = server_factory(), server_factory()
    admin = src.client(socket_timeout=60)
    _big_hash(admin, "h", 1000000)
    digest = admin.execute_command("DEBUG", "DIGEST-VALUE", "h")
    dumping = _Call(_named(src, "dumper", socket_timeout=60), "DUMP", "h")
    _wait_parked(admin, "dumper")
    assert admin.ping() is True               # answered while the encoding runs
    assert admin.hget("h", "f7") == b"v7"     # reads of the key too
    writing = _Call(_named(src, "writer"), "HSET", "h", "added", "1")
    _wait_parked(admin, "writer")             # a write of the key waits for the encoding
    assert not dumping.done.is_set()
    dumping.wait()
    writing.wait()
    assert writing.result == 1 and admin.hlen("h") == 1000001
    payload = dumping.result
    assert isinstance(payload, bytes) and len(payload) > 10 << 20

    b = dst.client(socket_timeout=60)
    restoring = _Call(_named(dst, "restorer", socket_timeout=60), "RESTORE", "h", 0, payload)
    _wait_parked(b, "restorer")               # the payload arrived; a worker decodes it
    assert b.ping() is True
    assert not restoring.done.is_set()
    restoring.wait()
    assert restoring.result == b"OK"
    assert b.hlen("h") == 1000000
    assert b.execute_command("DEBUG", "DIGEST-VALUE", "h") == digest     # the value as it was, without "added"
    # the error texts stay Valkey's: an existing key, then a damaged payload (both large enough to be decoded
    # off the loop)
    with pytest.raises(valkey.ResponseError, match="BUSYKEY Target key name already exists."):
        b.execute_command("RESTORE", "h", 0, payload)
    damaged = payload[:100] + bytes([payload[100] ^ 1]) + payload[101:]
    with pytest.raises(valkey.ResponseError, match="DUMP payload version or checksum are wrong"):
        b.execute_command("RESTORE", "h2", 0, damaged)
    assert b.exists("h2") == 0

    if shutil.which("redis-server"):
        _port, redis = redis_server()
        redis.execute_command("RESTORE", "h", 0, payload)
        assert redis.hlen("h") == 1000000
        assert redis.hget("h", "f0") == b"v0" and redis.hget("h", "f999999") == b"v999999"


def test_a_blocked_client_whose_retry_waited_for_the_lock_is_served_after_it(server_factory):
    src = server_factory()
    b = src.client()
    b.rpush("k", "old")
    blocker = _Call(_named(src, "blocker"), "BLMOVE", "src", "k", "RIGHT", "LEFT", 0)
    _wait_parked(b, "blocker")
    with _silent_target() as silent:
        migrating = _Call(src.client(), "MIGRATE", "127.0.0.1", silent.getsockname()[1], "k", 0, 2000)
        conn, _addr = silent.accept()
        with conn:
            assert b.lpush("src", "x") == 1      # a write of another key goes on; BLMOVE's retry waits (k)
            assert b.lrange("src", 0, -1) == [b"x"] and b.lrange("k", 0, -1) == [b"old"]
            assert not blocker.done.is_set() and not migrating.done.is_set()
            migrating.wait()
            assert str(migrating.error) == "IOERR error or timeout reading to target instance"
            blocker.wait()
    assert blocker.result == b"x"
    assert b.lrange("k", 0, -1) == [b"x", b"old"] and b.exists("src") == 0


def test_migrate_in_multi_and_in_a_script_still_works(server_factory):
    # neither can wait for a worker: the exchange runs on the loop there, as in Valkey (the timeouts are
    # generous: the target's journal commits each RESTORE before answering, and this machine is shared)
    src, dst = server_factory(), server_factory()
    a, b = src.client(), dst.client()
    a.mset({"m": "1", "s": "2"})
    tx = a.pipeline(transaction=True)
    tx.execute_command("MIGRATE", "127.0.0.1", dst.port, "m", 0, 30000)
    tx.get("m")
    assert tx.execute() == [b"OK", None]
    script = "return redis.call('MIGRATE', ARGV[1], ARGV[2], KEYS[1], 0, 30000)"
    assert a.eval(script, 1, "s", "127.0.0.1", dst.port) == b"OK"
    assert a.exists("m", "s") == 0 and b.mget("m", "s") == [b"1", b"2"]


def test_migrate_sends_nothing_the_source_has_not_committed(server_factory):
    """A value whose write is not committed on the source must not reach the target: a crash of the source then
    would leave the target with a write the source never acknowledged (and MIGRATE deleting the key here makes
    the target's copy the only one). With the source's journal stalled, SET k is sent (no reply yet) and then
    MIGRATE k: the target has no k while the SET has no reply; both complete once the stall ends. On main the
    target held k at once."""
    src, dst = server_factory("--durability", "sync"), server_factory()
    admin, b = src.client(socket_timeout=30), dst.client()
    admin.execute_command("DEBUG", "JOURNAL-STALL", "30000")
    writer = socket.create_connection(("127.0.0.1", src.port), timeout=30)
    try:
        writer.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nfresh\r\n")
        wait_until(lambda: admin.info("durability")["held_replies_clients"] >= 1, 20,
                   what="the SET's reply to be held")
        migrating = _Call(_named(src, "migrator", socket_timeout=60), "MIGRATE", "127.0.0.1", dst.port, "k", 0,
                          30000)
        wait_until(lambda: "b" in (_flags_of(admin, "migrator") or "") or b.exists("k"), 20,
                   what="the MIGRATE to start")
        # an observation window (the stall lasts 30 s): on main the target had k within a few ms
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert b.exists("k") == 0, "the target received a value its source had not committed"
            time.sleep(0.02)
        writer.settimeout(0.2)
        with pytest.raises(socket.timeout):
            writer.recv(64)                       # the SET is still unacknowledged
        assert not migrating.done.is_set()
        admin.execute_command("DEBUG", "JOURNAL-STALL", "0")
        writer.settimeout(30)
        assert writer.recv(64) == b"+OK\r\n"
        migrating.wait()
        assert migrating.error is None and migrating.result == b"OK"
        assert b.get("k") == b"fresh" and admin.exists("k") == 0
    finally:
        writer.close()


def test_migrate_waiting_for_a_write_that_fails_to_persist_sends_nothing(tmp_path, server_factory):
    """The write MIGRATE waits for is not persisted (the disk is full): MIGRATE answers the journal's error and
    the target never receives the value, which after the failure never existed."""
    dst = server_factory()
    b = dst.client()
    with server_on_full_disk(tmp_path) as disk:
        admin = disk.client
        admin.execute_command("DEBUG", "JOURNAL-STALL", "30000")
        first = socket.create_connection(("127.0.0.1", admin.connection_pool.connection_kwargs["port"]), 30)
        big = socket.create_connection(("127.0.0.1", admin.connection_pool.connection_kwargs["port"]), 30)
        try:
            first.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n")      # its batch sleeps in the writer
            wait_until(lambda: admin.info("durability")["held_replies_clients"] >= 1, 20, what="the first SET")
            value = b"x" * (2 * 1024 * 1024)                                  # more than the disk has left
            big.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n" % (len(value), value))
            wait_until(lambda: admin.info("durability")["held_replies_clients"] >= 2, 20, what="the big SET")
            port = admin.connection_pool.connection_kwargs["port"]
            mc = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=60)
            mc.client_setname("migrator")
            migrating = _Call(mc, "MIGRATE", "127.0.0.1", dst.port, "k", 0, 30000)
            wait_until(lambda: "b" in (_flags_of(admin, "migrator") or ""), 20, what="the MIGRATE to wait")
            admin.execute_command("DEBUG", "JOURNAL-STALL", "0")
            migrating.wait()
            assert migrating.error is not None and str(migrating.error).startswith(
                "MISCONF Errors writing to the journal"), migrating.error
            assert b.exists("k") == 0
            big.settimeout(30)
            assert big.recv(256).startswith(b"-MISCONF Errors writing to the journal")
        finally:
            first.close()
            big.close()


def test_sigterm_ends_the_server_while_a_migrate_waits_on_a_silent_target(server_factory):
    """A graceful shutdown does not wait for a MIGRATE exchange: the worker thread in it waited for the command's
    timeout (a minute here) and the interpreter joined it at exit, so the server outlived "durakv stopped"."""
    srv = server_factory()
    srv.client().set("k", "v")
    with _silent_target() as silent:
        migrating = _Call(srv.client(), "MIGRATE", "127.0.0.1", silent.getsockname()[1], "k", 0, 60000)
        conn, _addr = silent.accept()        # the exchange is in flight; nothing will ever answer
        with conn:
            srv.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: srv.proc.poll() is not None, 10, what="the server to exit after SIGTERM")
            assert srv.proc.returncode == 0
            assert "durakv stopped" in srv.read_log()
            migrating.wait()
