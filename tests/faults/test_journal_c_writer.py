"""The local journal's compiled writer (journal/_walwriter.c) against the Python one, its reference: the records it
writes are walformat's byte for byte and every reader takes them, journals pass from one writer to the other, and a
real failure (the file size limit: a short write, then EFBIG) reaches the appends exactly as the Python writer
reports it, with the segment cut back the same way."""

import asyncio
import errno
import json
import os
import random
import subprocess
import sys
import textwrap
import time

from durakv.journal import LocalJournal, iter_entries
import durakv.journal._walwriter as walwriter   # the module must be built: this file is about it
from durakv.journal import local
from durakv.journal.local import SysIO
from durakv.journal.walcheck import check_journal
from durakv.journal.walformat import DATA_START, SLOT_OFFSETS, decode_slot, encode_frame, list_segments

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/


class SeamIO(SysIO):
    """The fault-injection seam, failing nothing: a journal on it keeps the Python writer."""


def _payloads(rng, n):
    sizes = [0, 1, 33, 4096, 64 * 1024] + [rng.randrange(0, 64 * 1024 + 1) for _ in range(n - 5)]
    return [rng.randbytes(s) for s in sizes]


async def _append_all(tmp_path, payloads, io, segment_bytes, epoch):
    """Appends in groups that share a batch (gathered) and one at a time; returns the indices."""
    j = LocalJournal(tmp_path, segment_bytes=segment_bytes, io=io)
    await j.open()
    assert (j._cwriter is not None) == (io is None)
    got = []
    k = 0
    while k < len(payloads):
        group = payloads[k:k + 1 + k % 5]
        got += await asyncio.gather(*[j.append(p, epoch=epoch) for p in group])
        k += len(group)
    await j.close()
    return got


def _check_files(tmp_path, entries):
    """Every record in the segment files is walformat's encode_frame of what the reader returned, back to back
    from DATA_START, and each segment's newest state slot ends where its records end."""
    by_index = {e.index: e for e in entries}
    for first, path in list_segments(os.path.join(str(tmp_path), "journal")):
        with open(path, "rb") as f:
            data = f.read()
        pos, index = DATA_START, first
        while pos < len(data):
            e = by_index[index]
            frame = encode_frame(e.index, e.epoch, e.payload, e.time_ms)
            assert data[pos:pos + len(frame)] == frame, (path, index)
            pos += len(frame)
            index += 1
        slots = [s for s in (decode_slot(data, off) for off in SLOT_OFFSETS) if s is not None]
        newest = max(slots, key=lambda s: s.seq)
        assert newest.end == len(data) and newest.last_index == index - 1, (path, newest)


def test_a_journal_written_by_the_compiled_writer_is_read_back_by_every_reader(tmp_path, monkeypatch):
    # the compiled writer even where DURAKV_PURE_PYTHON=1 runs the rest on the Python one: it is what is tested
    monkeypatch.setattr(local, "CWriter", walwriter.Writer)
    rng = random.Random(28)
    payloads = _payloads(rng, 60)
    before_ms = int(time.time() * 1000)
    # 256 KiB segments: the batches that cross one rotate by the Python writer, the rest are the C thread's
    got = asyncio.run(_append_all(tmp_path, payloads, None, 256 * 1024, epoch=7))
    after_ms = int(time.time() * 1000)
    assert got == list(range(1, len(payloads) + 1))
    assert len(list_segments(os.path.join(str(tmp_path), "journal"))) > 3
    entries = list(iter_entries(tmp_path))
    assert [(e.index, e.epoch, e.payload) for e in entries] == [(i + 1, 7, p) for i, p in enumerate(payloads)]
    assert all(before_ms <= e.time_ms <= after_ms for e in entries)
    _check_files(tmp_path, entries)
    report = check_journal(str(tmp_path))
    assert report.next_index == len(payloads) + 1 and report.torn_tail_cuts == 0

    # the Python writer continues the C writer's journal, and the C writer the Python writer's
    more = _payloads(rng, 12)
    got = asyncio.run(_append_all(tmp_path, more, SeamIO(), 256 * 1024, epoch=8))
    assert got[0] == len(payloads) + 1
    again = _payloads(rng, 12)
    got = asyncio.run(_append_all(tmp_path, again, None, 256 * 1024, epoch=9))
    assert got[-1] == len(payloads) + len(more) + len(again)
    entries = list(iter_entries(tmp_path))
    assert [e.payload for e in entries] == payloads + more + again
    assert [e.epoch for e in entries] == [7] * len(payloads) + [8] * len(more) + [9] * len(again)
    _check_files(tmp_path, entries)


_FILE_SIZE_LIMIT = """
    import asyncio, json, os, resource, signal, sys
    from durakv.journal import LocalJournal, iter_entries
    from durakv.journal.base import JournalFailed
    from durakv.journal.local import SysIO
    from durakv.journal.walformat import DATA_START, HEADER_SIZE

    class SeamIO(SysIO):
        pass

    d, which = sys.argv[1], sys.argv[2]
    REC = HEADER_SIZE + 3000
    # past the limit a write is refused with EFBIG (not the signal); the 11th record's write is short, then refused
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    async def main():
        j = LocalJournal(d, io=None if which == "c" else SeamIO())
        await j.open()
        assert (j._cwriter is not None) == (which == "c")
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (DATA_START + 10 * REC + 1500, hard))
        acked, failure, later = [], None, []
        for i in range(20):
            try:
                acked.append(await j.append(b"%04d" % i + b"x" * 2996))
            except JournalFailed as exc:
                failure = exc
                break
        try:
            j.append(b"refused")
        except JournalFailed as exc:
            later.append(str(exc))
        seg = os.path.join(d, "journal", "%020d.seg" % 1)
        out = {"acked": acked, "errno": failure.errno, "text": str(failure).replace(d, "<dir>"),
               "cause": type(failure.__cause__).__name__, "refused": [t.replace(d, "<dir>") for t in later],
               "commit": j.commit_index, "next": j.next_index, "broken": j.broken, "size": os.path.getsize(seg),
               "on_disk": [e.index for e in iter_entries(d)], "failures": j.append_failures}
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        j.resume()
        out["retry"] = await j.append(b"retry")
        await j.close()
        j = LocalJournal(d)
        await j.open()
        out["reopened"] = j.commit_index
        await j.close()
        print(json.dumps(out))
    asyncio.run(main())
"""


def _file_size_limit(path, which):
    os.makedirs(path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src")
    env.pop("DURAKV_PURE_PYTHON", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_FILE_SIZE_LIMIT), path, which], env=env,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_a_failed_write_reaches_the_appends_as_the_python_writer_reports_it(tmp_path):
    c = _file_size_limit(str(tmp_path / "c"), "c")
    py = _file_size_limit(str(tmp_path / "py"), "py")
    assert c == py
    assert c["errno"] == errno.EFBIG and c["cause"] == "OSError" and not c["broken"]
    assert "journal write of entry 11 failed: EFBIG" in c["text"] and "00000000000000000001.seg" in c["text"]
    assert c["acked"] == c["on_disk"] == list(range(1, 11)) and c["commit"] == 10 and c["next"] == 11
    assert c["size"] == DATA_START + 10 * (33 + 3000)       # the short write's bytes were cut
    assert c["failures"] == 1 and len(c["refused"]) == 1 and c["retry"] == 11 and c["reopened"] == 11
