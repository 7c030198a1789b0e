"""The write tracker: decides when a reply may leave (sync), bounds the loss window (async)."""

from .tracker import WriteTracker  # noqa: F401
