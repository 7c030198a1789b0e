"""The local journal's compiled writer (journal/_walwriter.c): its encoders give walformat's bytes exactly (the CRC32C
of both of its implementations, the record header, the state slot), the build check requires it, and a journal takes
it only where the Python writer's seam is not asked for."""

import os
import random
import shutil
import subprocess
import sys
import textwrap

from durakv.checksum import crc32c   # the one CRC32C of every durakv format

import durakv.journal._walwriter as walwriter   # not local's: checked whatever DURAKV_PURE_PYTHON says
from durakv.journal import walformat
from durakv.journal.walformat import SegmentState

from conftest import ROOT   # the repository, wherever this file sits under tests/

SRC = os.path.join(ROOT, "src")

U64 = (1 << 64) - 1


def _sizes(rng):
    """0..64 KiB: the edges (empty, one byte, around the 8-byte steps) and random ones."""
    return [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 4095, 4096, 4097, 65535, 65536] + [
        rng.randrange(0, 64 * 1024 + 1) for _ in range(40)]


def test_crc32c_matches_the_package_by_both_implementations():
    rng = random.Random(28)
    data = rng.randbytes(64 * 1024 + 16)
    for size in _sizes(rng):
        for shift in (0, 1, 3):       # the start not on an 8-byte boundary: the unaligned head loop
            chunk = memoryview(data)[shift:shift + size]
            for value in (0, rng.randrange(1 << 32)):
                want = crc32c(chunk, value)
                assert walwriter.crc32c(chunk, value) == want, (size, shift, value)
                assert walwriter.crc32c_table(chunk, value) == want, (size, shift, value)
    assert walwriter.CRC32C in ("sse4.2", "table")


def test_record_headers_are_walformats_for_random_payloads():
    rng = random.Random(2)
    for size in _sizes(rng):
        payload = rng.randbytes(size)
        index, epoch, time_ms = rng.randrange(1, U64), rng.randrange(0, U64), rng.randrange(0, U64)
        assert walwriter.encode_header(index, epoch, payload, time_ms) == \
            walformat.encode_header(index, epoch, payload, time_ms), size
    assert walwriter.encode_header(1, 0, b"", 0) == walformat.encode_header(1, 0, b"", 0)


def test_state_slots_are_walformats():
    rng = random.Random(3)
    for _ in range(200):
        state = SegmentState(rng.randrange(U64), rng.randrange(U64), rng.randrange(U64), rng.randrange(U64),
                             rng.randrange(2), rng.randrange(2))
        assert walwriter.encode_slot(tuple(state)) == walformat.encode_slot(state)


def _run(code, pythonpath=SRC, pure=None):
    env = {k: v for k, v in os.environ.items() if k != "DURAKV_PURE_PYTHON"}
    env["PYTHONPATH"] = pythonpath
    if pure is not None:
        env["DURAKV_PURE_PYTHON"] = pure
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


_WHICH_WRITER = """
    import asyncio, sys, tempfile
    from durakv.journal import LocalJournal
    from durakv.journal.local import SysIO

    class SeamIO(SysIO):
        pass

    async def main():
        out = []
        for io in (None, SeamIO()):
            with tempfile.TemporaryDirectory() as d:
                j = LocalJournal(d, io=io)
                await j.open()
                for i in range(20):
                    await j.append(b"v%d" % i)
                c = j._cwriter
                out.append("c:%d/%d" % (c.batches, j.batch_count) if c is not None else "py:%d" % j.batch_count)
                await j.close()
        print(" ".join(out))
    asyncio.run(main())
"""


def test_a_default_journal_writes_every_batch_by_the_compiled_writer():
    res = _run(_WHICH_WRITER)
    assert res.returncode == 0, res.stderr
    # the plain SysIO: the C thread wrote all 20 batches; a SysIO subclass (the fault-injection seam): Python's
    assert res.stdout.split() == ["c:20/20", "py:20"]


def test_durakv_pure_python_keeps_the_python_writer():
    res = _run(_WHICH_WRITER, pure="1")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["py:20", "py:20"]


def test_check_core_fails_when_the_compiled_writer_did_not_build(tmp_path):
    shutil.copytree(os.path.join(SRC, "durakv"), tmp_path / "durakv",
                    ignore=shutil.ignore_patterns("_walwriter*.so", "__pycache__"))
    script = os.path.join(ROOT, "scripts", "check_core.py")
    env = {k: v for k, v in os.environ.items() if k != "DURAKV_PURE_PYTHON"}
    env["PYTHONPATH"] = str(tmp_path)
    res = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "the journal's compiled writer (durakv/journal/_walwriter.c) is missing" in res.stderr
    res = subprocess.run([sys.executable, script], env=dict(env, DURAKV_PURE_PYTHON="1"), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, script], env=dict(env, PYTHONPATH=SRC), capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "the journal's compiled writer" in res.stdout, res.stderr
