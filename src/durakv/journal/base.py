"""The Journal interface: the ordered, durable log of one shard's effects.

An entry is an opaque batch of bytes (the durability layer puts a batch of RESP-encoded effects in it; see
durakv.journal.codec). Backends know nothing of commands: they store bytes in order, number
them 1, 2, 3, ... and say when they are durable.

Contract every backend keeps (tests/journal_contract.py checks it):

* Indices are contiguous: the first entry ever appended is 1, every append gets the previous index + 1.
  Truncation drops a prefix but never renumbers.
* Ordering: appends are issued by one writer. The position of an entry is fixed when append() is *called*
  (not when its awaitable is awaited), and an append called before another completes no later than it:
  if entry n is acknowledged, every entry < n is too.
* Atomicity: an entry is stored whole or not at all. An entry whose append was acknowledged is never lost
  (local: fsynced before the acknowledgement; jetstream: stored by a quorum). An entry whose append failed or
  was never acknowledged may or may not survive a crash, but if it survives it is whole and in its place.
* Failure: an I/O failure fails the append(s) it affects *and every later one* (the backend moves to a
  failed state and raises JournalFailed): after an fsync error nothing about the unsynced tail can be
  trusted, so the owner must reopen (recover) the journal. A backend that restores a clean state itself
  may let the owner resume() instead (local: see LocalJournal). A closed journal raises JournalClosed.
* Recovery (open()): scans what is stored, cuts an incomplete tail (an append that never completed,
  never acknowledged) and logs it, and raises durakv.errors.JournalCorrupt for damage anywhere before the
  tail. Nothing is ever skipped silently. open() sets commit_index.
* Fencing: every entry carries its writer's epoch. A backend shared by several nodes (jetstream) rejects an
  append from a deposed writer with JournalFenced; the single-machine local backend records the epoch only.
"""

import abc
from typing import AsyncIterator, Awaitable, NamedTuple

from ..errors import DurakvError, JournalCorrupt  # noqa: F401  (re-exported for backends)


class _Entry(NamedTuple):
    index: int
    epoch: int
    payload: bytes


class Entry(_Entry):
    """One journal entry. `time_ms` is its commit time (wall clock, ms since the Unix epoch) where the backend
    keeps one (the local journal's format 3 records; JetStream's stored time of the message), else 0. It is an
    attribute, not a field: entries compare (and unpack) as (index, epoch, payload)."""
    time_ms = 0

    @classmethod
    def timed(cls, index, epoch, payload, time_ms):
        entry = cls(index, epoch, payload)
        if time_ms:
            entry.time_ms = time_ms
        return entry


class JournalError(DurakvError):
    """A journal operation could not be done."""


class JournalClosed(JournalError):
    """The journal is closed (or not opened yet)."""


class JournalFailed(JournalError):
    """A write or fsync failed; the journal refuses further appends until it is reopened."""


class JournalFenced(JournalError):
    """An append from a writer whose epoch was superseded (a deposed primary)."""


class InvalidEntry(JournalError):
    """An entry no writer of this journal wrote: it does not decode, or carries no valid writer epoch, or an
    epoch no marker announced. Readers never apply it, nor anything after it."""


class JournalTruncated(JournalError):
    """A read asked for entries that were dropped by truncate_before."""


class Journal(abc.ABC):
    """Abstract journal. Methods are called from one asyncio event loop (the server's)."""

    @abc.abstractmethod
    async def open(self, base_index: int = 0) -> None:
        """Recovers the stored journal and makes it ready for appends. Returns after the scan.

        Cuts (and logs) an incomplete tail; raises JournalCorrupt for damage before the tail.
        Sets commit_index to the last stored entry. `base_index` is the journal index the caller's
        snapshot covers: when the journal holds no entry numbered after it (fresh, or everything was
        dropped), numbering continues at base_index + 1; when it holds entries but they end before
        base_index, entries are missing and JournalCorrupt is raised."""

    @abc.abstractmethod
    def append(self, payload: bytes, epoch: int = 0) -> Awaitable[int]:
        """Appends one entry; the awaitable resolves to its index once the entry is durable.

        The entry's index and position are fixed by the call itself (ordering contract above), so a caller
        may issue many appends before awaiting any; each resolves after all earlier ones. Raises (at call
        or when awaited) JournalClosed, JournalFailed or JournalFenced."""

    @abc.abstractmethod
    def read(self, after: int) -> AsyncIterator[Entry]:
        """Entries with index > after, in order, up to the commit index as it is when the reader gets
        there (it does not wait for future appends). Raises JournalTruncated if entry after+1 was dropped."""

    @abc.abstractmethod
    async def truncate_before(self, index: int) -> int:
        """Drops entries with index < `index`, as far as the storage granularity allows (a backend may
        keep more, never less). Entries >= index are never touched. Returns the new first_index."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Completes (makes durable) every append already called, then releases resources."""

    @property
    @abc.abstractmethod
    def commit_index(self) -> int:
        """The highest index known durable (0 when nothing was ever appended)."""

    @property
    @abc.abstractmethod
    def first_index(self) -> int:
        """The lowest index still held (commit_index + 1 when the journal holds no entry)."""

    @property
    @abc.abstractmethod
    def bytes_size(self) -> int:
        """Bytes of storage the held entries use (framing included)."""


class EpochFilter:
    """Which entries a reader applies, given epoch markers (DESIGN: fencing on JetStream).

    A new primary appends a marker (an entry with an empty payload carrying its epoch) before its first
    write. Every reader ignores entries whose epoch is older than the newest marker before them, so an
    append a deposed primary managed to land after the takeover is never applied by anyone.

    And it fails closed: an entry with no valid epoch (negative: the header did not parse), or a data entry
    whose epoch is newer than the newest marker (every primary writes its marker before its first entry, so no
    primary wrote it), raises InvalidEntry."""

    __slots__ = ("epoch",)

    def __init__(self, epoch: int = 0):
        self.epoch = epoch

    def accept(self, entry: Entry) -> bool:
        """True if entry's effects must be applied; markers raise the epoch and are never applied."""
        if entry.epoch < 1:
            raise InvalidEntry("entry %d carries no valid writer epoch" % entry.index)
        if not entry.payload:
            if entry.epoch > self.epoch:
                self.epoch = entry.epoch
            return False
        if entry.epoch > self.epoch:
            raise InvalidEntry("entry %d has epoch %d, newer than the newest marker (%d): no primary of the shard "
                               "wrote it" % (entry.index, entry.epoch, self.epoch))
        return entry.epoch == self.epoch
