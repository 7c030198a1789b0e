"""Snapshots (format, checksum, fallback), the journal payload codec, recovery, and the builder process."""

import asyncio
import json
import logging
import math
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest

from helpers.replay import execute, make_pipeline
from durakv.commands.session import Session
from durakv.errors import JournalCorrupt
from durakv.journal import LocalJournal, iter_entries
from durakv.journal.walformat import DATA_START
from durakv.keyspace import Keyspace
from durakv.protocol.resp import ErrorReply, encode_command
from durakv.journal.codec import decode_payload, encode_effects
from durakv.recovery import RecoveryError, pipeline_apply_fn, recover
from durakv.snapshot.format import (CHUNK, SnapshotCorrupt, list_snapshots, load_newest_snapshot, load_snapshot,
                                    newest_valid_snapshot, read_header, score_text, snapshot_path,
                                    verify_snapshot, write_snapshot)
from helpers.replay import dump
from helpers.servers import processes_on

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/
NOW = 1_700_000_000_000
FUTURE = NOW + 86_400_000

ODD_SCORES = [math.inf, -math.inf, -0.0, 0.0, 1e-300, -1e-300, 5e-324, 1.7976931348623157e308, 0.1, 1 / 3,
              -2.5, 123456789.123456789, float(2**53 + 2), 1e17, 1e16 + 1, 2.2250738585072014e-308]


def b(x):
    return x if isinstance(x, bytes) else str(x).encode()


class Live:
    """A keyspace driven through the pipeline, as a server would; collects each command's effects."""

    def __init__(self, seed=1):
        self.ks = Keyspace(clock_ms=lambda: NOW, rng=random.Random(seed))
        self.dispatcher = make_pipeline(self.ks)
        self.session = Session()

    def run(self, *argv):
        reply, effects, _ = execute(self.dispatcher, self.session, [b(a) for a in argv])
        assert not isinstance(reply, ErrorReply), (argv[:3], reply)
        return list(effects)


def fresh():
    ks = Keyspace(clock_ms=lambda: NOW)
    return ks, pipeline_apply_fn(ks)


def bits(f):
    return struct.pack("<d", f)


def populate(live):
    """Every type, collections larger than a chunk, binary data, odd scores, TTLs, several dbs."""
    live.run("SET", "s:plain", "value")
    live.run("SET", "s:binary", b"\x00\r\n\xff*1\r\n$3")
    live.run("SET", "s:empty", b"")
    live.run("SET", "s:big", b"B" * 100_000)
    live.run("SET", b"\xff\x00key\r\n", "binary key")
    items = [b"item-%d" % i for i in range(1300)] + [b"", b"dup", b"dup"]
    for i in range(0, len(items), 100):
        live.run("RPUSH", "list", *items[i:i + 100])
    for i in range(0, 1100, 50):
        args = []
        for j in range(i, i + 50):
            args += [b"field-%d" % j, b"value-%d" % j]
        live.run("HSET", "hash", *args)
    live.run("HSET", "hash", b"", b"empty field")
    for i in range(0, 1030, 103):
        live.run("SADD", "set", *[b"member-%d" % j for j in range(i, i + 103)])
    zargs = []
    for i, s in enumerate(ODD_SCORES):
        zargs += [repr(s), b"odd-%d" % i]
    live.run("ZADD", "zset", *zargs)
    for i in range(0, 700, 70):
        args = []
        for j in range(i, i + 70):
            args += [repr(j / 7), b"z-%d" % j]
        live.run("ZADD", "zset", *args)
    for n, key in enumerate(["s:plain", "list", "hash", "set", "zset"]):
        live.run("PEXPIREAT", key, FUTURE + n)
    live.run("SELECT", 3)
    live.run("SET", "db3:key", "three")
    live.run("RPUSH", "db3:list", "a", "b", "c")
    live.run("SELECT", 15)
    live.run("SADD", "db15:set", "x")
    live.run("PEXPIREAT", "db15:set", FUTURE + 99)
    live.run("SELECT", 0)


def assert_same_state(ks, expected):
    assert dump(ks) == dump(expected)
    for db, db2 in zip(ks.dbs, expected.dbs):
        for key, value in db2.data.items():
            if type(value).__name__ == "ZSet":
                got = db.data[key].scores
                assert {m: bits(s) for m, s in got.items()} == {m: bits(s) for m, s in value.scores.items()}
                assert db.data[key].order == value.order


# -- the snapshot format --------------------------------------------------------------------------------

def test_snapshot_round_trip_of_every_type(tmp_path):
    live = Live()
    populate(live)
    path = snapshot_path(tmp_path, 7)
    info = write_snapshot(path, live.ks, 7, created_ms=NOW)
    assert os.path.basename(path) == "snapshot-00000000000000000007.dks"
    assert info["index"] == 7 and info["keys"] == sum(len(db.data) for db in live.ks.dbs)
    assert info["bytes"] == os.path.getsize(path)
    assert read_header(path) == (7, NOW)
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temporary file left
    ks, apply_fn = fresh()
    assert load_snapshot(path, ks, apply_fn) == 7
    assert_same_state(ks, live.ks)
    zs = ks.dbs[0].data[b"zset"].scores
    # a -0 score is kept as the set holds it (a small set, listpack-encoded as in Valkey, holds 0: fixes20)
    assert math.copysign(1, zs[b"odd-2"]) == math.copysign(1, live.ks.dbs[0].data[b"zset"].scores[b"odd-2"])
    assert zs[b"odd-4"] == 1e-300 and zs[b"odd-0"] == math.inf and zs[b"odd-6"] == 5e-324
    assert ks.dbs[0].expires[b"list"] == FUTURE + 1
    assert ks.dbs[15].expires == {b"db15:set": FUTURE + 99}
    assert ks.expire_enabled is True


def test_snapshot_body_is_chunked_commands_per_db(tmp_path):
    live = Live()
    populate(live)
    path = snapshot_path(tmp_path, 3)
    write_snapshot(path, live.ks, 3)
    seen = []
    ks = Keyspace()
    load_snapshot(path, ks, lambda db_id, argv: seen.append((db_id, argv)))
    assert {db_id for db_id, _ in seen} == {0, 3, 15}
    names = {argv[0] for _, argv in seen}
    assert names == {b"SET", b"RPUSH", b"HSET", b"SADD", b"ZADD", b"PEXPIREAT"}
    for _db, argv in seen:
        elements = len(argv) - 2
        if argv[0] in (b"HSET", b"ZADD"):
            assert elements % 2 == 0 and elements // 2 <= CHUNK
        elif argv[0] in (b"RPUSH", b"SADD"):
            assert 1 <= elements <= CHUNK
    assert sum(1 for _, a in seen if a[0] == b"RPUSH" and a[1] == b"list") == 3   # 1303 items
    expiring = [(db_id, argv[1]) for db_id, argv in seen if argv[0] == b"PEXPIREAT"]
    assert sorted(expiring) == sorted((db.id, k) for db in live.ks.dbs for k in db.expires)
    # A key's TTL comes after all of its data.
    last_data = {}
    for pos, (db_id, argv) in enumerate(seen):
        if argv[0] == b"PEXPIREAT":
            assert last_data[(db_id, argv[1])] < pos
        else:
            last_data[(db_id, argv[1])] = pos


def test_scores_round_trip_exactly():
    rng = random.Random(7)
    values = ODD_SCORES + [rng.uniform(-1e6, 1e6) for _ in range(500)] + \
        [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(500)]
    for v in values:
        if v != v:
            continue
        assert bits(float(score_text(v))) == bits(v), v


def test_empty_keyspace_snapshot(tmp_path):
    path = snapshot_path(tmp_path, 1)
    write_snapshot(path, Keyspace(), 1)
    seen = []
    assert load_snapshot(path, Keyspace(), lambda *a: seen.append(a)) == 1
    assert seen == []


def _corrupt_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        c = f.read(1)
        f.seek(offset)
        f.write(bytes([c[0] ^ 0x01]))


@pytest.mark.parametrize("damage", ["body", "header", "trailer", "truncated", "appended"])
def test_damaged_snapshot_is_rejected_before_anything_is_applied(tmp_path, damage):
    live = Live()
    populate(live)
    path = snapshot_path(tmp_path, 4)
    write_snapshot(path, live.ks, 4)
    size = os.path.getsize(path)
    if damage == "body":
        _corrupt_byte(path, size // 2)
    elif damage == "header":
        _corrupt_byte(path, 12)
    elif damage == "trailer":
        _corrupt_byte(path, size - 2)
    elif damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(size - 100)
    else:
        with open(path, "ab") as f:
            f.write(b"*1\r\n$4\r\nPING\r\n")
    with pytest.raises(SnapshotCorrupt):
        verify_snapshot(path)
    seen = []
    with pytest.raises(SnapshotCorrupt, match=os.path.basename(path)):
        load_snapshot(path, Keyspace(), lambda *a: seen.append(a))
    assert seen == []


def test_newest_valid_snapshot_falls_back_to_an_older_one(tmp_path, caplog):
    live = Live()
    live.run("SET", "a", "1")
    write_snapshot(snapshot_path(tmp_path, 5), live.ks, 5)
    state_at_5 = dump(live.ks)
    live.run("SET", "a", "2")
    live.run("RPUSH", "l", "x")
    write_snapshot(snapshot_path(tmp_path, 9), live.ks, 9)
    assert newest_valid_snapshot(tmp_path) == (9, snapshot_path(tmp_path, 9))
    _corrupt_byte(snapshot_path(tmp_path, 9), 40)
    with caplog.at_level(logging.ERROR, logger="durakv.snapshot"):
        assert newest_valid_snapshot(tmp_path) == (5, snapshot_path(tmp_path, 5))
    assert any(snapshot_path(tmp_path, 9) in r.getMessage() and "checksum" in r.getMessage()
               for r in caplog.records)
    ks, apply_fn = fresh()
    assert load_newest_snapshot(tmp_path, ks, apply_fn) == (5, snapshot_path(tmp_path, 5))
    assert dump(ks) == state_at_5
    _corrupt_byte(snapshot_path(tmp_path, 5), 40)
    assert newest_valid_snapshot(tmp_path) is None
    assert load_newest_snapshot(tmp_path, Keyspace(), lambda *a: None) == (0, None)


def test_list_snapshots_newest_first(tmp_path):
    for index in (3, 12, 9):
        write_snapshot(snapshot_path(tmp_path, index), Keyspace(), index)
    sdir = os.path.join(str(tmp_path), "snapshots")
    for junk in ("snapshot-00000000000000000020.dks.tmp.123", "notes.txt", "snapshot-1.dks"):
        with open(os.path.join(sdir, junk), "w") as f:
            f.write("x")
    assert [i for i, _ in list_snapshots(tmp_path)] == [12, 9, 3]
    assert list_snapshots(os.path.join(str(tmp_path), "missing")) == []


# -- journal payloads -------------------------------------------------------------------------------------

def test_encode_effects_selects_only_when_the_db_changes():
    effects = [(2, (b"SET", b"k", b"v")), (2, (b"DEL", b"x")), (0, (b"SADD", b"s", b"m")), (2, (b"INCR", b"n"))]
    payload = encode_effects(effects)
    expected = b"".join(encode_command(c) for c in [
        (b"SELECT", b"2"), (b"SET", b"k", b"v"), (b"DEL", b"x"), (b"SELECT", b"0"), (b"SADD", b"s", b"m"),
        (b"SELECT", b"2"), (b"INCR", b"n")])
    assert payload == expected
    assert decode_payload(payload) == [(db, list(argv)) for db, argv in effects]
    # Every entry starts with its own SELECT, even in db 0.
    assert encode_effects([(0, (b"DEL", b"k"))]).startswith(encode_command((b"SELECT", b"0")))
    assert encode_effects([(99, (b"DEL", b"k"))]).startswith(encode_command((b"SELECT", b"99")))
    assert encode_effects([]) == b""


def test_payload_round_trips_binary_arguments():
    effects = [(1, (b"SET", b"\r\n\x00", b"*2\r\n$1\r\n")), (1, (b"HSET", b"h", b"", b"\xff" * 1000))]
    assert decode_payload(encode_effects(effects)) == [(db, list(a)) for db, a in effects]


@pytest.mark.parametrize("payload", [b"garbage", b"*2\r\n$3\r\nSET\r\n", b"*1\r\n:5\r\n",
                                     encode_command((b"SELECT", b"x")) + encode_command((b"DEL", b"k"))])
def test_bad_payloads_raise(payload):
    with pytest.raises(ValueError):
        decode_payload(payload)


# -- recovery ---------------------------------------------------------------------------------------------

def workload(live, rng, steps):
    """Random mutating commands (incl. random ones turned into explicit effects); yields effects per step."""
    for step in range(steps):
        k = rng.randrange(40)
        op = rng.randrange(14)
        if op == 0:
            eff = live.run("SET", "s%d" % k, "v%d" % step)
        elif op == 1:
            eff = live.run("RPUSH", "l%d" % k, *["e%d" % i for i in range(rng.randrange(1, 5))])
        elif op == 2:
            eff = live.run("LPOP", "l%d" % k)
        elif op == 3:
            eff = live.run("HSET", "h%d" % k, "f%d" % rng.randrange(5), step)
        elif op == 4:
            eff = live.run("SADD", "t%d" % k, *["m%d" % rng.randrange(20) for _ in range(3)])
        elif op == 5:
            eff = live.run("SPOP", "t%d" % k)
        elif op == 6:
            eff = live.run("ZADD", "z%d" % k, repr(rng.choice(ODD_SCORES + [rng.random()])), "m%d" % rng.randrange(8))
        elif op == 7:
            eff = live.run("ZINCRBY", "z%d" % k, "0.1", "m%d" % rng.randrange(8))
        elif op == 8:
            eff = live.run("DEL", "s%d" % k, "l%d" % k)
        elif op == 9:
            eff = live.run("INCR", "n%d" % k)
        elif op == 10:
            eff = live.run("PEXPIREAT", "h%d" % k, FUTURE + step)
        elif op == 11:
            eff = live.run("SELECT", rng.choice([0, 0, 1, 7]))
        elif op == 12:
            eff = live.run("SET", "x%d" % k, "ttl", "PXAT", FUTURE + step)
        else:
            eff = live.run("HDEL", "h%d" % k, "f%d" % rng.randrange(5))
        yield eff


async def journal_workload(tmp_path, live, rng, steps, journal=None, batch=5):
    """Runs the workload, appending its effects in batches of commands (one entry per batch)."""
    own = journal is None
    if own:
        journal = LocalJournal(tmp_path, segment_bytes=4096)
        await journal.open()
    pending = []
    n = 0
    for eff in workload(live, rng, steps):
        pending.extend(eff)
        n += 1
        if n % batch == 0 and pending:
            await journal.append(encode_effects(pending))
            pending = []
    if pending:
        await journal.append(encode_effects(pending))
    index = journal.commit_index
    if own:
        await journal.close()
    return index


def test_recover_from_the_journal_alone(tmp_path):
    live = Live()
    last = asyncio.run(journal_workload(tmp_path, live, random.Random(3), 600))
    assert last > 50
    ks, apply_fn = fresh()
    assert recover(tmp_path, ks, apply_fn) == (0, last)
    assert dump(ks) == dump(live.ks)
    assert ks.expire_enabled is True


def test_recover_from_snapshot_plus_journal(tmp_path):
    live = Live()
    rng = random.Random(4)

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=4096)
        await j.open()
        upto = await journal_workload(tmp_path, live, rng, 300, journal=j)
        write_snapshot(snapshot_path(tmp_path, upto), live.ks, upto)
        last = await journal_workload(tmp_path, live, rng, 300, journal=j)
        await j.close()
        return upto, last
    upto, last = asyncio.run(main())
    seen = []
    ks, apply_fn = fresh()
    assert recover(tmp_path, ks, lambda db, argv: (seen.append(argv[0]), apply_fn(db, argv))) == (upto, last)
    assert dump(ks) == dump(live.ks)
    # Exactly the snapshot's commands, then the effects of the entries after it, were applied.
    snapshot_cmds = []
    load_snapshot(snapshot_path(tmp_path, upto), Keyspace(), lambda db, argv: snapshot_cmds.append(argv[0]))
    journal_cmds = [argv[0] for e in iter_entries(tmp_path, after=upto) for _db, argv in decode_payload(e.payload)]
    assert len(journal_cmds) > 100
    assert seen == snapshot_cmds + journal_cmds


def test_recover_falls_back_to_an_older_snapshot_and_more_journal(tmp_path):
    live = Live()
    rng = random.Random(5)

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        first = await journal_workload(tmp_path, live, rng, 200, journal=j)
        write_snapshot(snapshot_path(tmp_path, first), live.ks, first)
        second = await journal_workload(tmp_path, live, rng, 200, journal=j)
        write_snapshot(snapshot_path(tmp_path, second), live.ks, second)
        last = await journal_workload(tmp_path, live, rng, 200, journal=j)
        await j.close()
        return first, second, last
    first, second, last = asyncio.run(main())
    _corrupt_byte(snapshot_path(tmp_path, second), os.path.getsize(snapshot_path(tmp_path, second)) // 2)
    ks, apply_fn = fresh()
    assert recover(tmp_path, ks, apply_fn) == (first, last)
    assert dump(ks) == dump(live.ks)


def test_recovery_replays_with_expiry_disabled(tmp_path):
    past = NOW - 60_000

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        await j.append(encode_effects([(0, (b"SET", b"old", b"v", b"PXAT", b"%d" % past)),
                                       (0, (b"RPUSH", b"l", b"a")), (0, (b"PEXPIREAT", b"l", b"%d" % past))]))
        await j.close()
    asyncio.run(main())
    ks, apply_fn = fresh()
    flags = []

    def apply(db_id, argv):
        flags.append(ks.expire_enabled)
        apply_fn(db_id, argv)
    assert recover(tmp_path, ks, apply) == (0, 1)
    assert flags == [False, False, False]
    assert ks.expire_enabled is True
    # The keys are there: time did not delete them during replay (only a journal DEL would).
    assert ks.dbs[0].data[b"old"] == b"v" and ks.dbs[0].expires[b"old"] == past
    assert list(ks.dbs[0].data[b"l"]) == [b"a"] and ks.dbs[0].expires[b"l"] == past


def test_recover_refuses_a_journal_truncated_past_the_snapshot(tmp_path):
    async def main():
        j = LocalJournal(tmp_path, segment_bytes=300)
        await j.open()
        for i in range(30):
            await j.append(encode_effects([(0, (b"SET", b"k%d" % i, b"v" * 40))]))
        await j.truncate_before(20)
        first = j.first_index
        await j.close()
        return first
    first = asyncio.run(main())
    assert first > 6
    live = Live()
    live.run("SET", "base", "1")
    write_snapshot(snapshot_path(tmp_path, 5), live.ks, 5)
    ks, apply_fn = fresh()
    with pytest.raises(JournalCorrupt, match="no longer holds the entries after index 5"):
        recover(tmp_path, ks, apply_fn)


def test_recover_refuses_a_journal_that_ends_before_the_snapshot(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        for i in range(10):
            await j.append(encode_effects([(0, (b"SET", b"k", b"%d" % i))]))
        await j.close()
    asyncio.run(main())
    write_snapshot(snapshot_path(tmp_path, 50), Keyspace(), 50)
    ks, apply_fn = fresh()
    with pytest.raises(JournalCorrupt, match="ends at index 10, before the requested index 50"):
        recover(tmp_path, ks, apply_fn)
    # Without a journal (durability none) only the snapshot counts.
    assert recover(tmp_path, Keyspace(), apply_fn, journal=False) == (50, 50)


def test_recover_with_a_snapshot_and_an_empty_rotated_journal(tmp_path):
    live = Live()

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        upto = await journal_workload(tmp_path, live, random.Random(8), 100, journal=j)
        await j.rotate()
        write_snapshot(snapshot_path(tmp_path, upto), live.ks, upto)
        await j.truncate_before(upto + 1)
        assert j.first_index == upto + 1
        await j.close()
        return upto
    upto = asyncio.run(main())
    ks, apply_fn = fresh()
    assert recover(tmp_path, ks, apply_fn) == (upto, upto)
    assert dump(ks) == dump(live.ks)


def test_a_failing_effect_stops_recovery(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        await j.append(encode_effects([(0, (b"SET", b"k", b"v")), (0, (b"NOSUCHCOMMAND", b"x"))]))
        await j.close()
    asyncio.run(main())
    ks, apply_fn = fresh()
    with pytest.raises(RecoveryError, match="NOSUCHCOMMAND"):
        recover(tmp_path, ks, apply_fn)
    assert ks.expire_enabled is True


def test_a_corrupt_journal_stops_recovery(tmp_path):
    asyncio.run(journal_workload(tmp_path, Live(), random.Random(9), 200))
    seg = sorted(os.listdir(os.path.join(str(tmp_path), "journal")))[0]
    _corrupt_byte(os.path.join(str(tmp_path), "journal", seg), DATA_START + 40)  # in the first record
    with pytest.raises(JournalCorrupt, match=seg):
        recover(tmp_path, *fresh())


# -- the builder process ----------------------------------------------------------------------------------

def run_builder(data_dir, upto, *extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run([sys.executable, "-m", "durakv.recovery.builder", "--dir", str(data_dir),
                           "--upto", str(upto), *extra], capture_output=True, env=env, timeout=120)
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    return proc.returncode, json.loads(lines[0]), proc.stderr.decode()


def test_builder_process_writes_snapshots_equal_to_the_live_state(tmp_path):
    live = Live()
    rng = random.Random(11)

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=8192)
        await j.open()
        # round 1: a first snapshot from the journal alone
        await journal_workload(tmp_path, live, rng, 400, journal=j)
        await j.rotate()
        upto1 = j.commit_index
        state1 = dump(live.ks)
        # The server keeps appending while the builder runs.
        loop = asyncio.get_running_loop()
        builder = loop.run_in_executor(None, run_builder, tmp_path, upto1)
        await journal_workload(tmp_path, live, rng, 200, journal=j)
        code, result, _err = await builder
        assert code == 0 and result["ok"] is True
        assert result["index"] == upto1 and result["base_index"] == 0 and result["entries"] == upto1
        assert result["path"] == snapshot_path(tmp_path, upto1)
        ks, apply_fn = fresh()
        assert load_snapshot(result["path"], ks, apply_fn) == upto1
        assert dump(ks) == state1
        await j.truncate_before(upto1 + 1)
        assert j.first_index <= upto1 + 1

        # round 2: the next snapshot starts from the first one
        await j.rotate()
        upto2 = j.commit_index
        state2 = dump(live.ks)
        code, result, _err = await loop.run_in_executor(None, run_builder, tmp_path, upto2)
        assert code == 0 and result["base_index"] == upto1 and result["entries"] == upto2 - upto1
        ks, apply_fn = fresh()
        load_snapshot(snapshot_path(tmp_path, upto2), ks, apply_fn)
        assert dump(ks) == state2
        await j.truncate_before(upto2 + 1)
        assert j.first_index == upto2 + 1

        # round 3: older snapshots are pruned, the newest two stay
        await journal_workload(tmp_path, live, rng, 100, journal=j)
        await j.rotate()
        upto3 = j.commit_index
        code, result, _err = await loop.run_in_executor(None, run_builder, tmp_path, upto3)
        assert code == 0 and result["deleted"] == [snapshot_path(tmp_path, upto1)]
        assert [i for i, _ in list_snapshots(tmp_path)] == [upto3, upto2]
        await j.truncate_before(upto3 + 1)
        await journal_workload(tmp_path, live, rng, 100, journal=j)
        last = j.commit_index
        await j.close()
        return upto3, last
    upto3, last = asyncio.run(main())
    # Start-up: newest snapshot + the journal after it rebuild the live state.
    ks, apply_fn = fresh()
    assert recover(tmp_path, ks, apply_fn) == (upto3, last)
    assert dump(ks) == dump(live.ks)


def test_builder_reports_failure_and_exits_non_zero(tmp_path):
    asyncio.run(journal_workload(tmp_path, Live(), random.Random(12), 50))
    code, result, err = run_builder(tmp_path, 10_000)
    assert code == 1
    assert result["ok"] is False and "before the requested index 10000" in result["error"]
    assert "snapshot builder failed" in err
    assert list_snapshots(tmp_path) == []


def test_builder_with_nothing_new_keeps_the_existing_snapshot(tmp_path):
    live = Live()
    last = asyncio.run(journal_workload(tmp_path, live, random.Random(13), 50))
    code, first, _ = run_builder(tmp_path, last)
    assert code == 0 and first["already"] is False
    code, again, _ = run_builder(tmp_path, last)
    assert code == 0 and again["already"] is True and again["index"] == last
    assert [i for i, _ in list_snapshots(tmp_path)] == [last]


# -- format versions, adoption, the builder's life -------------------------------------------------------

def test_version_1_snapshots_are_still_read(tmp_path):
    from durakv.snapshot.format import HEADER_V1, MAGIC, TRAILER_MAGIC, read_info
    from crc32c import crc32c
    body = encode_command((b"SELECT", b"0")) + encode_command((b"SET", b"k", b"v1 file"))
    data = HEADER_V1.pack(MAGIC, 1, 7, NOW) + body + TRAILER_MAGIC + struct.pack("<Q", 2)
    data += struct.pack("<I", crc32c(data))
    path = snapshot_path(tmp_path, 7)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(data)
    assert verify_snapshot(path) == (7, NOW, 2)
    info = read_info(path)
    assert (info.index, info.journal_follows, info.header_size) == (7, False, HEADER_V1.size)
    ks, apply_fn = fresh()
    assert load_snapshot(path, ks, apply_fn) == 7 and ks.dbs[0].data[b"k"] == b"v1 file"


def test_journal_follows_flag_is_in_the_header(tmp_path):
    from durakv.snapshot.format import read_info
    write_snapshot(snapshot_path(tmp_path, 3), Keyspace(), 3)
    write_snapshot(snapshot_path(tmp_path, 4), Keyspace(), 4, journal_follows=True)
    assert read_info(snapshot_path(tmp_path, 3)).journal_follows is False
    assert read_info(snapshot_path(tmp_path, 4)).journal_follows is True


def _temp_for(tmp_path, index, live_ks, owner=None):
    from durakv.snapshot.adopt import temp_path
    from durakv.snapshot.format import write_snapshot_file
    path = temp_path(tmp_path, index, owner or os.getpid(), "t0ken")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_snapshot_file(path, live_ks, index, journal_follows=True)
    return path


def test_adopt_renames_a_verified_file_and_keeps_the_one_it_was_built_from(tmp_path):
    from durakv.snapshot.adopt import adopt_snapshot
    live = Live()
    for index in (3, 8, 12):
        live.run("SET", "k", index)
        write_snapshot(snapshot_path(tmp_path, index), live.ks, index, journal_follows=True)
    live.run("SET", "k", 20)
    tmp = _temp_for(tmp_path, 20, live.ks)
    adopted = adopt_snapshot(tmp_path, tmp, 20, base_index=8)
    assert adopted.path == snapshot_path(tmp_path, 20) and not os.path.exists(tmp)
    assert [i for i, _ in list_snapshots(tmp_path)] == [20, 8]      # 12 (skipped by the builder) and 3 go
    assert adopted.journal_from == 9                                 # what start-up needs if 20 is bad
    assert sorted(adopted.deleted) == sorted([snapshot_path(tmp_path, 12), snapshot_path(tmp_path, 3)])
    ks, apply_fn = fresh()
    assert load_snapshot(adopted.path, ks, apply_fn) == 20 and ks.dbs[0].data[b"k"] == b"20"


def test_adopt_refuses_a_damaged_or_foreign_file_and_keeps_what_was_there(tmp_path):
    from durakv.snapshot.adopt import adopt_snapshot
    live = Live()
    live.run("SET", "k", "v")
    write_snapshot(snapshot_path(tmp_path, 5), live.ks, 5, journal_follows=True)
    tmp = _temp_for(tmp_path, 9, live.ks)
    _corrupt_byte(tmp, os.path.getsize(tmp) // 2)
    with pytest.raises(SnapshotCorrupt, match="checksum"):
        adopt_snapshot(tmp_path, tmp, 9, base_index=5)
    assert not os.path.exists(tmp) and [i for i, _ in list_snapshots(tmp_path)] == [5]
    foreign = _temp_for(tmp_path, 9, live.ks, owner=os.getpid() + 1)
    with pytest.raises(RuntimeError, match="not written for this process"):
        adopt_snapshot(tmp_path, foreign, 9, base_index=5)
    assert [i for i, _ in list_snapshots(tmp_path)] == [5] and os.path.exists(foreign)


def test_stale_temporary_files_of_dead_builders_are_removed(tmp_path):
    from durakv.snapshot.adopt import remove_stale_temps, temp_path
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live_owner = os.getppid()   # alive: pytest's parent
    paths = {}
    for name, owner in (("dead", dead.pid), ("alive", live_owner)):
        paths[name] = temp_path(tmp_path, 4, owner, name)
        os.makedirs(os.path.dirname(paths[name]), exist_ok=True)
        with open(paths[name], "wb") as f:
            f.write(b"partial")
    assert remove_stale_temps(tmp_path) == [paths["dead"]]
    assert os.path.exists(paths["alive"])


def test_builder_with_out_only_writes_its_temporary_file(tmp_path):
    from durakv.snapshot.adopt import temp_path
    live = Live()
    last = asyncio.run(journal_workload(tmp_path, live, random.Random(21), 60))
    out = temp_path(tmp_path, last, os.getpid(), "abc")
    code, result, _err = run_builder(tmp_path, last, "--out", out)
    assert code == 0 and result["path"] == out and result["index"] == last
    assert os.path.exists(out) and list_snapshots(tmp_path) == []     # written, not adopted
    assert verify_snapshot(out)[0] == last


def test_builder_exits_at_once_when_its_parent_is_not_the_pid_it_was_given(tmp_path):
    asyncio.run(journal_workload(tmp_path, Live(), random.Random(22), 20))
    proc = subprocess.run([sys.executable, "-m", "durakv.recovery.builder", "--dir", str(tmp_path), "--upto", "3",
                           "--out", str(tmp_path / "x.tmp"), "--parent-pid", str(os.getpid() + 100000)],
                          capture_output=True, timeout=60, env=_builder_env())
    assert proc.returncode == 1 and b"is gone" in proc.stderr
    assert not os.path.exists(tmp_path / "x.tmp")


def _builder_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


BUILDER = "durakv.recovery.builder"     # in the snapshot builder's command line


@pytest.mark.parametrize("how", ["pdeathsig", "pipe"])
def test_builder_dies_with_the_process_that_started_it(tmp_path, how):
    """The parent (a stand-in for the server) is killed -9 while the builder sleeps before writing."""
    from conftest import wait_until
    asyncio.run(journal_workload(tmp_path, Live(), random.Random(23), 30))
    out = str(tmp_path / "snapshots" / "snapshot-00000000000000000003.dks.tmp.1.x")
    os.makedirs(os.path.dirname(out))
    # "pipe" turns PR_SET_PDEATHSIG off (a documented test hook) to check the portable fallback alone:
    # the stdin pipe the parent holds, and the parent pid.
    starter = textwrap.dedent("""
        import os, subprocess, sys, time
        d, out = sys.argv[1], sys.argv[2]
        cmd = [sys.executable, "-m", "durakv.recovery.builder", "--dir", d, "--upto", "3", "--out", out,
               "--parent-pid", str(os.getpid())]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        print(proc.pid, flush=True)
        time.sleep(120)
    """)
    env = _builder_env(DURAKV_SNAPSHOT_BUILDER_DELAY_MS="60000")
    if how == "pipe":
        env["DURAKV_SNAPSHOT_BUILDER_NO_PDEATHSIG"] = "1"
    parent = subprocess.Popen([sys.executable, "-c", starter, str(tmp_path), out], stdout=subprocess.PIPE, env=env)
    try:
        builder_pid = int(parent.stdout.readline())
        wait_until(lambda: builder_pid in processes_on(out, BUILDER), 20, what="the builder to run")
    finally:
        parent.kill()
        parent.wait(timeout=20)
    wait_until(lambda: builder_pid not in processes_on(out, BUILDER), 20, what="the builder to exit with its parent")
    assert not os.path.exists(out)
