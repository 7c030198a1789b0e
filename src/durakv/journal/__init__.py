"""The journal: the ordered, durable log of effects. `Journal` is the interface, `LocalJournal` the
embedded single-machine backend (segmented files, group commit); a JetStream backend fits the same shape."""

from .base import (Entry, Journal, JournalClosed, JournalCorrupt, JournalError, JournalFailed,  # noqa: F401
                   JournalFenced, JournalTruncated)
from .local import LocalJournal  # noqa: F401
from .walscan import iter_entries  # noqa: F401
