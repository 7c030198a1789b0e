"""Durability: the write tracker (group commit, commit index, uncommitted keys, async lag) and reply release (the
only place that decides when a reply may leave)."""

from .release import Durability, Outbox  # noqa: F401
from .tracker import WriteTracker  # noqa: F401
