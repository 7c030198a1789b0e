"""The write tracker's window of appends in flight (durability/tracker.py), against a journal whose appends
the test completes by hand: how many batches are appended at once, what joins the open batch meanwhile,
in which order commits are published, and what a failure in the middle of a window answers."""

import asyncio

from durakv.durability import release
from durakv.journal.base import JournalFailed
from durakv.journal.codec import decode_payload


class HandJournal:
    """Appends wait until the test completes them; the journal contract's order is the test's job."""

    def __init__(self, window):
        self.max_appends_in_flight = window
        self.commit_index = 0
        self.appends = []            # (index, payload, future), in call order

    def append(self, payload, epoch=0):
        fut = asyncio.get_running_loop().create_future()
        self.appends.append((len(self.appends) + 1, payload, fut))
        return fut

    def outstanding(self):
        return [a for a in self.appends if not a[2].done()]

    def complete(self, index):
        _i, _p, fut = self.appends[index - 1]
        fut.set_result(index)
        self.commit_index = index


def batch_keys(payload):
    return [argv[1] for _db, argv in decode_payload(payload)]


async def turn(n=3):
    for _ in range(n):
        await asyncio.sleep(0)


def attach(window):
    d = release.Durability(loop=asyncio.get_running_loop())
    j = HandJournal(window)
    d.attach(j, "sync")
    commits = []
    d.commit_listeners.append(commits.append)
    return d, j, commits


def write(d, key):
    return d.submit([(0, (b"SET", key, b"v"))], [(0, key)])


def test_up_to_the_window_batches_are_appended_at_once_and_the_rest_waits():
    async def main():
        d, j, commits = attach(3)
        tickets = []
        for i in range(5):                   # one write per loop iteration: five batches offered
            tickets.append(write(d, b"k%d" % i))
            await turn()
        assert tickets == [1, 2, 3, 4, 4]    # the 4th and 5th writes share the batch waiting for room
        assert len(j.outstanding()) == 3
        assert d.read_ticket(0, [b"k0"]) == 1 and d.read_ticket(0, [b"other"]) == 0
        j.complete(1)
        await turn()
        assert commits == [1]
        assert len(j.appends) == 4, "the waiting batch leaves as soon as the oldest append completes"
        assert batch_keys(j.appends[3][1]) == [b"k3", b"k4"]
        for i in (2, 3, 4):
            j.complete(i)
        await turn()
        assert commits == [1, 2, 3, 4] and d.committed == 4 and not d.pending
        assert await d.drain(1.0)
    asyncio.run(main())


def test_window_of_one_keeps_one_append_in_flight():
    async def main():
        d, j, commits = attach(1)
        now = [100.0]
        d.tracker.clock_s = lambda: now[0]     # the group commit's deadline only moves when the test says
        for i in range(4):
            write(d, b"k%d" % i)
            await turn()
        now[0] += 0.010
        assert len(j.appends) == 1 and batch_keys(j.appends[0][1]) == [b"k0"]
        j.complete(1)
        await turn()
        assert len(j.appends) == 1, "the gathered batch waits for the writer the commit just answered"
        write(d, b"k4")                      # ... which is back: one append for all of them
        assert len(j.appends) == 2 and batch_keys(j.appends[1][1]) == [b"k1", b"k2", b"k3", b"k4"]
        j.complete(2)
        await turn()
        assert commits == [1, 2]
        assert d.tracker.coalesced_batches == 1
    asyncio.run(main())


async def until(predicate, timeout_s=5.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0)


def test_group_commit_waits_a_bounded_time_for_answered_writers():
    """Window 1 (the local journal): a batch gathered during an append waits, after it completes, for as
    many more effects as it answered, but never past COALESCE_MAX_S or half the commit's time; and the first
    writer back from a commit that answered several waits for the others the same way."""
    async def main():
        from durakv.durability import tracker
        d, j, commits = attach(1)
        now = [100.0]
        d.tracker.clock_s = lambda: now[0]
        for i in range(3):
            write(d, b"a%d" % i)             # one batch of three
        await turn()
        assert len(j.appends) == 1
        write(d, b"b0")                      # gathers during the append
        now[0] += 0.010                      # a 10 ms commit
        j.complete(1)
        await turn()
        assert len(j.appends) == 1           # b0 waits for up to three more
        now[0] += tracker.COALESCE_MAX_S - 0.0001
        await turn()
        assert len(j.appends) == 1
        now[0] += 0.0002                     # past the deadline: it leaves though nobody came back
        await until(lambda: len(j.appends) == 2)
        assert batch_keys(j.appends[1][1]) == [b"b0"]
        now[0] += 0.010
        j.complete(2)
        await until(lambda: commits == [1, 2])
        # that commit answered one writer: what comes next leaves at the next loop iteration, as before
        for i in range(3):
            write(d, b"c%d" % i)
        await turn()
        assert batch_keys(j.appends[2][1]) == [b"c0", b"c1", b"c2"]
        now[0] += 0.0004                     # a 0.4 ms commit: its writers get 0.2 ms to come back
        j.complete(3)
        await until(lambda: commits == [1, 2, 3])
        write(d, b"d0")                      # the first writer back from a commit that answered three
        await turn()
        assert len(j.appends) == 3
        write(d, b"d1")
        write(d, b"d2")                      # all three back: one append, at once
        assert len(j.appends) == 4 and batch_keys(j.appends[3][1]) == [b"d0", b"d1", b"d2"]
        now[0] += 0.0004
        j.complete(4)
        await until(lambda: commits == [1, 2, 3, 4])
        write(d, b"e0")
        now[0] += 0.0002                     # half the 0.4 ms commit: e0 stops waiting for the other two
        await until(lambda: len(j.appends) == 5)
        assert batch_keys(j.appends[4][1]) == [b"e0"]
        assert d.tracker.coalesced_batches == 3
    asyncio.run(main())


def test_a_failure_in_the_middle_of_the_window_answers_every_later_batch_once():
    async def main():
        d, j, commits = attach(4)
        failures = []
        d.failure_listeners.append(lambda first, exc: failures.append((first, str(exc))))
        for i in range(6):
            write(d, b"k%d" % i)
            await turn()
        assert len(j.outstanding()) == 4
        j.complete(1)
        await turn()
        assert commits == [1]
        # The journal fails entry 2 and, by its contract, every append after it.
        exc = JournalFailed("disk gone")
        for _i, _p, fut in j.outstanding():
            fut.set_exception(exc)
        await turn()
        assert failures == [(2, "disk gone")], "one failure, from the first unacknowledged entry"
        assert d.committed == 1 and d.assigned == 1 and d.tracker._in_flight == 0
        assert d.refuse_writes() is not None
        assert commits == [1]
    asyncio.run(main())
