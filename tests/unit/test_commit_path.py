"""The commit path (issue 18): a local-journal batch is committed, and its replies released, in the loop
iteration that completes it (no future callback a turn later); a journal's state is settled before the
callbacks run; an `async` write asks refuse_writes() only once the durability buffer may be exceeded."""

import asyncio
import errno
import time

import pytest

from durakv.durability import release
from durakv.journal import LocalJournal
from durakv.journal.base import JournalFailed
from test_journal_local import FaultyIO
from test_tracker_window import HandJournal, write

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


async def _poll(predicate, timeout_s=10.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        await asyncio.sleep(0.001)


def test_local_journal_commit_is_published_in_the_iteration_that_completes_the_batch(tmp_path):
    async def main():
        j = LocalJournal(tmp_path, group_per_iteration=False)   # as the server opens it
        await j.open()
        d = release.Durability(loop=asyncio.get_running_loop())
        d.attach(j, "sync")
        seen = []                              # the tracker's commit index right after each batch completes
        batch_done = j._batch_done

        def observed(*args):
            batch_done(*args)
            seen.append(d.committed)
        j._batch_done = observed
        ticket = write(d, b"k")
        assert ticket == 1 and d.pending
        await _poll(lambda: seen, what="the batch's completion")
        assert seen[0] == 1, "the commit waited for a later loop iteration"
        assert not d.pending
        await j.close()
    asyncio.run(main())


def test_append_notify_runs_after_the_failure_is_settled(tmp_path):
    """What a failed batch's callback appends is refused: the journal is marked failed before any callback
    runs (an append slipping into the writer behind a failed batch would break the failure contract)."""
    async def main():
        io = FaultyIO()
        j = LocalJournal(tmp_path, io=io, group_per_iteration=False)
        await j.open()
        io.fail("fsync", errno.EIO)
        outcomes = []

        def on_first(index, exc):
            outcomes.append((index, type(exc)))
            try:
                j.append_notify(b"late", lambda i, e: outcomes.append(("late", i)))
            except JournalFailed:
                outcomes.append(("late refused", None))
        assert j.append_notify(b"first", on_first) == 1
        await _poll(lambda: outcomes, what="the failed batch's callback")
        assert outcomes == [(None, JournalFailed), ("late refused", None)]
        j.resume()
        done = []
        assert j.append_notify(b"again", lambda i, e: done.append((i, e))) == 1
        await _poll(lambda: done, what="the retried append")
        assert done == [(1, None)] and j.commit_index == 1
        await j.close()
    asyncio.run(main())


def test_async_writes_ask_for_refusal_only_past_the_buffer():
    async def main():
        d = release.Durability(loop=asyncio.get_running_loop())
        j = HandJournal(1)
        d.attach(j, "async", buffer_ms=300)
        assert not d.refusing, "async alone must not send writes through full admission"
        assert write(d, b"k0") == 0                      # async: the reply leaves at once
        await _poll(lambda: j.appends, what="the append")
        assert not d.refusing and d.refuse_writes() is None
        await _poll(lambda: d.refusing, what="the buffer to be exceeded")   # nothing commits: the lag grows
        assert "durability buffer is full" in d.refuse_writes()
        j.complete(1)
        await _poll(lambda: not d.refusing, what="the commit to lift the refusal")
        assert d.refuse_writes() is None
        assert d.tracker.traffic_management_active is False
    asyncio.run(main())


def test_a_failing_completion_callback_does_not_lose_the_rest_of_its_batch(tmp_path, caplog):
    async def main():
        j = LocalJournal(tmp_path)            # group per iteration: both appends share one batch
        await j.open()
        done = []

        def broken(index, exc):
            raise RuntimeError("callback bug")
        j.append_notify(b"a", broken)
        j.append_notify(b"b", lambda i, e: done.append((i, e)))
        await _poll(lambda: done, what="the second append's report")
        assert done == [(2, None)] and j.commit_index == 2
        await j.close()
    asyncio.run(main())
    assert "completion callback failed" in caplog.text
