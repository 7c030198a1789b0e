"""Durability on the local journal: kill -9 crash tests, async loss bound, live mode switch, backpressure,
snapshots, torn and corrupt journal files. Real server processes, real kill -9."""

import glob
import os
import random
import threading
import time

import pytest
import valkey

from conftest import wait_until
from helpers.crash import missing_acked, run_writers

CRASH_CYCLES = int(os.environ.get("DURAKV_CRASH_CYCLES", "3"))


def _ack_count(writers):
    return sum(len(w.acked) for w in writers)


@pytest.mark.parametrize("cycle", range(CRASH_CYCLES))
def test_sync_kill9_loses_no_acknowledged_write(server_factory, tmp_path, cycle):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    stop = threading.Event()
    writers = run_writers(srv.port, 8, stop, max_seconds=20)
    rng = random.Random(cycle)
    target = 2000 + rng.randint(0, 3000)
    wait_until(lambda: _ack_count(writers) > target, 30, what="writes acknowledged")
    srv.kill()  # SIGKILL mid-stream
    stop.set()
    for w in writers:
        w.join(15)
    acked = _ack_count(writers)
    assert acked > 0
    assert not any(w.errors for w in writers), [w.errors[:3] for w in writers]
    srv.start()
    with srv.client() as c:
        missing = missing_acked(c, writers)
        assert missing == [], f"{len(missing)} of {acked} acknowledged writes lost"
    print(f"kill -9 cycle {cycle}: {acked} acknowledged writes from 8 writers, 0 lost")


def test_async_loss_is_bounded_by_lag(server_factory, tmp_path):
    """async acknowledges before the journal: a kill loses exactly the writes of the lag window. A stalled
    fsync makes that window real (seconds, not the microseconds of an idle disk), so writes are lost and
    each lost one must have been acknowledged within the lag measured right before the kill."""
    srv = server_factory("--durability", "async", data_dir=tmp_path / "data")
    stop = threading.Event()
    writers = run_writers(srv.port, 8, stop, max_seconds=30)
    with srv.client() as c:
        wait_until(lambda: _ack_count(writers) > 500, 20, what="writes acknowledged before the stall")
        c.execute_command("DEBUG", "JOURNAL-STALL", "1500")
        acked_at_stall = _ack_count(writers)
        wait_until(lambda: c.info("durability")["durability_lag_ms"] >= 1000, 20, what="lag of a second")
        wait_until(lambda: _ack_count(writers) > acked_at_stall + 200, 20, what="writes during the stall")
        lag_ms = c.info("durability")["durability_lag_ms"]
        lag_read_at = time.monotonic()
    srv.kill()
    killed_at = time.monotonic()
    stop.set()
    for w in writers:
        w.join(15)
    srv.start()
    with srv.client() as c:
        missing = missing_acked(c, writers)
    assert missing, "a kill during a 1.5 s fsync stall must lose acknowledged async writes"
    window_s = lag_ms / 1000.0 + (killed_at - lag_read_at) + 0.25  # the lag kept growing until the kill
    oldest_lost = max(killed_at - acked_at for _key, acked_at in missing)
    assert oldest_lost <= window_s, (oldest_lost, lag_ms)
    assert lag_ms <= 10000  # never beyond the durability buffer: writes are refused first
    print(f"async kill during a stall: {len(missing)} of {_ack_count(writers)} acknowledged writes lost, "
          f"oldest {oldest_lost * 1000:.0f} ms before the kill, lag {lag_ms} ms")


def test_live_switch_under_load_without_errors(server_factory, tmp_path):
    srv = server_factory("--durability", "async", data_dir=tmp_path / "data")
    stop = threading.Event()
    writers = run_writers(srv.port, 8, stop, max_seconds=30)
    with srv.client() as c:
        for i in range(10):
            target = _ack_count(writers) + 200
            wait_until(lambda: _ack_count(writers) > target, 20, what="progress")
            mode = "sync" if i % 2 == 0 else "async"
            assert c.config_set("durability", mode)
            assert c.info("durability")["durability_mode"] == mode
        c.config_set("durability", "sync")
    stop.set()
    for w in writers:
        w.join(15)
    assert all(not w.errors for w in writers), [w.errors[:3] for w in writers]
    assert all(w.infos == 0 for w in writers)
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert missing_acked(c, writers) == []


def test_none_to_sync_and_async_live_then_a_crash_loses_nothing_acknowledged_after(server_factory):
    """Issue 11 item 2: none -> sync live writes a snapshot of memory first and journals from there, so a
    kill -9 afterwards loses nothing: neither what was written in none before the switch (in the snapshot)
    nor what was acknowledged after it (in the journal). CONFIG GET and INFO tell the truth throughout."""
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        assert c.config_get("durability") == {"durability": "none"}
        for i in range(300):
            c.set(f"before:{i}", i)
        assert c.config_set("durability", "sync")
        assert c.config_get("durability") == {"durability": "sync"}
        info = c.info("durability")
        assert info["durability_mode"] == "sync" and info["effective_durability"] == "sync"
        for i in range(300):
            c.set(f"after:{i}", i)
        assert c.config_set("durability", "async")
        assert c.config_get("durability") == {"durability": "async"}
        c.set("async-write", "1")
        assert c.config_set("durability", "sync")
        c.set("last", "1")
    srv.kill()
    srv.start()   # with its start-up flag, none: recovery still replays the snapshot and the journal
    with srv.client() as c:
        assert [k for k in (f"before:{i}" for i in range(300)) if c.get(k) is None] == []
        assert [k for k in (f"after:{i}" for i in range(300)) if c.get(k) is None] == []
        assert c.get("last") == b"1"


def test_sync_to_none_live_commits_what_was_in_flight_then_journals_nothing(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        for i in range(200):
            c.set(f"durable:{i}", i)
        assert c.config_set("durability", "none")
        assert c.config_get("durability") == {"durability": "none"}
        assert c.info("durability")["durability_mode"] == "none"
        c.set("volatile", "1")
        assert c.get("volatile") == b"1"
        # and back: the snapshot taken at the switch holds the none-mode write
        c.set("volatile-2", "1")
        assert c.config_set("durability", "sync")
        c.set("durable-again", "1")
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert [i for i in range(200) if c.get(f"durable:{i}") is None] == []
        assert c.get("volatile") == b"1" and c.get("volatile-2") == b"1" and c.get("durable-again") == b"1"


def test_sync_to_none_then_a_crash_loses_only_the_none_writes(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        c.set("durable", "1")
        assert c.config_set("durability", "none")
        c.set("volatile", "1")
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.get("durable") == b"1"
        assert c.get("volatile") is None     # none promised nothing for it, and the restart says so
        assert c.config_get("durability") == {"durability": "sync"}   # the start-up flag again, as Valkey


def test_writes_during_a_live_switch_to_sync_are_kept(server_factory):
    """Clients keep writing while the switch opens the journal: their none-mode writes land in the switch's
    snapshot or, after it, in the journal; none falls in between."""
    srv = server_factory("--durability", "none")
    stop = threading.Event()
    acked = []

    def writer():
        with srv.client() as w:
            i = 0
            deadline = time.monotonic() + 20
            while not stop.is_set() and time.monotonic() < deadline:
                w.set(f"w:{i}", i)
                acked.append(f"w:{i}")
                i += 1
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    wait_until(lambda: len(acked) > 200, 10, what="writes before the switch")
    with srv.client() as c:
        assert c.config_set("durability", "sync")
    n = len(acked)
    wait_until(lambda: len(acked) > n + 200, 10, what="writes after the switch")
    stop.set()
    t.join(10)
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert [k for k in acked if c.get(k) is None] == []


def test_async_backpressure_refuses_writes_keeps_reads(server_factory):
    srv = server_factory("--durability", "async", "--durability-buffer-ms", "300")
    with srv.client() as c:
        c.set("before", "1")
        c.execute_command("DEBUG", "JOURNAL-STALL", "2500")
        c.set("trigger", "1")  # this write's batch now waits in a stalled fsync
        refused = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c.set("probe", "x")
            except valkey.exceptions.ResponseError as exc:
                refused = str(exc)
                break
        assert refused is not None and "durability buffer is full" in refused
        assert c.get("before") == b"1"  # reads keep working
        info = c.info("durability")
        assert info["traffic_management_active"] == 1
        assert info["durability_buffer_exceeded_errors"] >= 1
        c.execute_command("DEBUG", "JOURNAL-STALL", "0")

        def writes_again():
            try:
                return c.set("after", "1")
            except valkey.exceptions.ResponseError:
                return False
        wait_until(writes_again, 15, what="writes accepted again")
        assert c.info("durability")["traffic_management_active"] == 0


def test_sync_read_waits_for_commit(server_factory):
    """A read of a key whose write is not yet durable answers only after the commit."""
    srv = server_factory("--durability", "sync")
    with srv.client() as writer, srv.client() as reader:
        writer.execute_command("DEBUG", "JOURNAL-STALL", "700")
        done = {}

        def write():
            writer.set("slow", "v")
            done["write"] = time.monotonic()

        t = threading.Thread(target=write)
        t.start()
        wait_until(lambda: reader.info("durability")["journal_applied_index"]
                   > reader.info("durability")["journal_commit_index"], 5, interval_s=0.001,
                   what="write in flight")
        value = reader.get("slow")
        read_done = time.monotonic()
        t.join(10)
        writer.execute_command("DEBUG", "JOURNAL-STALL", "0")
        assert value == b"v"
        # The read's reply could only leave once the write was committed, i.e. not before the
        # write's own acknowledgement was sent (allow scheduling jitter of the two threads).
        assert read_done >= done["write"] - 0.05


def test_snapshot_then_restart(server_factory, tmp_path):
    srv = server_factory("--durability", "sync", data_dir=tmp_path / "data")
    with srv.client() as c:
        for i in range(300):
            c.set(f"k{i}", i)
        c.hset("h", mapping={"a": 1, "b": 2})
        c.rpush("l", "x", "y")
        c.set("ttl", "v", px=100000)
        assert c.save()
        info = c.info("durability")
        assert info["last_snapshot_index"] >= 300
        assert c.lastsave()
        for i in range(300, 350):
            c.set(f"k{i}", i)
        assert c.bgsave()
        wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, 20, what="bgsave done")
        c.set("after", "snapshot")
    assert glob.glob(str(tmp_path / "data" / "snapshots" / "*.dks"))
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.get("k0") == b"0" and c.get("k349") == b"349"
        assert c.hgetall("h") == {b"a": b"1", b"b": b"2"}
        assert c.lrange("l", 0, -1) == [b"x", b"y"]
        assert 0 < c.pttl("ttl") <= 100000
        assert c.get("after") == b"snapshot"


def test_the_journal_growing_past_auto_snapshot_journal_bytes_takes_a_snapshot(server_factory, tmp_path):
    """auto-snapshot-journal-bytes: once the journal grew that much since the last snapshot, the server builds
    one by itself (the cron looks, as Valkey's serverCron looks at the AOF's growth); a restart loads the snapshot
    and what followed it."""
    srv = server_factory("--durability", "sync", "--auto-snapshot-journal-bytes", "65536",
                         data_dir=tmp_path / "data")
    with srv.client() as c:
        assert c.info("durability")["last_snapshot_index"] == 0
        for i in range(40):        # 40 entries of 1 KB: under the threshold, no snapshot
            c.set(f"small{i}", b"x" * 1000)
        assert c.info("durability")["last_snapshot_index"] == 0
        for i in range(100):       # 100 KB more: past it
            c.set(f"k{i}", b"%d" % i + b"x" * 1000)
        # the cron may look while these writes go on (on a busy machine they take longer than a tick): the
        # snapshot is of whatever index it saw past the threshold, not necessarily of the last write
        wait_until(lambda: c.info("durability")["last_snapshot_index"] > 40, 20, what="an automatic snapshot")
        wait_until(lambda: c.info("persistence")["rdb_bgsave_in_progress"] == 0, 20, what="the snapshot's end")
        c.set("after", "snapshot")
    assert glob.glob(str(tmp_path / "data" / "snapshots" / "*.dks"))
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.get("k99") == b"99" + b"x" * 1000 and c.get("small0") == b"x" * 1000
        assert c.get("after") == b"snapshot"


def test_a_failed_automatic_snapshot_is_tried_again_after_the_retry_delay(server_factory, tmp_path):
    """The cron looks at the journal's growth 10 times a second; a snapshot that fails (here: a file where the
    snapshots directory goes) is not tried again, nor logged again, for 5 s (Valkey's CONFIG_BGSAVE_RETRY_DELAY),
    and is taken once the directory can be made."""
    data = tmp_path / "data"
    srv = server_factory("--durability", "sync", "--auto-snapshot-journal-bytes", "65536", data_dir=data)
    blocker = data / "snapshots"
    if blocker.is_dir():
        os.rmdir(blocker)
    blocker.write_text("not a directory")
    with srv.client() as c:
        for i in range(100):
            c.set(f"k{i}", b"x" * 1000)
        wait_until(lambda: c.info("persistence")["rdb_last_bgsave_status"] == "err", 20, what="a failed snapshot")
        failed_at = time.monotonic()
        # within the retry delay the cron (10 looks a second) tries nothing more
        while time.monotonic() - failed_at < 1.0:
            assert srv.read_log().count("snapshot failed") == 1
            time.sleep(0.1)
        os.unlink(blocker)
        wait_until(lambda: c.info("durability")["last_snapshot_index"] >= 100, 30, what="the snapshot, tried again")
        assert srv.read_log().count("snapshot failed") == 1


def _segments(data_dir):
    return sorted(glob.glob(os.path.join(str(data_dir), "journal", "*.seg")))


def test_torn_tail_is_cut_and_logged(server_factory, tmp_path):
    data = tmp_path / "data"
    srv = server_factory("--durability", "sync", data_dir=data)
    with srv.client() as c:
        for i in range(50):
            c.set(f"k{i}", i)
    srv.kill()
    seg = _segments(data)[-1]
    with open(seg, "ab") as f:
        f.write(b"\xd7\x00\x00\x01\x00")  # the first bytes of a record that never finished
    srv.start()
    with srv.client() as c:
        assert c.get("k49") == b"49"
        c.set("new", "1")
    assert "torn" in srv.read_log().lower()
    srv.kill()
    srv.start()
    with srv.client() as c:
        assert c.get("new") == b"1"


def test_corrupt_record_stops_startup_with_file_and_offset(server_factory, tmp_path):
    data = tmp_path / "data"
    srv = server_factory("--durability", "sync", data_dir=data)
    with srv.client() as c:
        for i in range(50):
            c.set(f"k{i}", "x" * 100)
    srv.kill()
    seg = _segments(data)[-1]
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.seek(size // 3)
        b = f.read(1)
        f.seek(size // 3)
        f.write(bytes([b[0] ^ 0xFF]))
    srv.start(wait=False)
    srv.proc.wait(timeout=30)
    assert srv.proc.returncode != 0
    log = srv.read_log()
    assert os.path.basename(seg) in log and "offset" in log
