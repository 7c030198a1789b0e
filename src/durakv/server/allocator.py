"""Free memory given back to the system: glibc's malloc_trim, what MEMORY PURGE does (Valkey purges jemalloc's dirty
pages there) and what the server does once a load ends.

Why a load needs it: loading frees large buffers (a journal segment read whole, a batch's payload, the bucket
arrays a growing table leaves behind) after glibc's dynamic mmap threshold has risen past their size, so they were
carved from the heap, not mapped; what is free in the middle of the heap stays resident until trimmed. Measured
(docs/memory.md): a journal replay of 3 million SETs (950,204 keys of 100 B) took 191.8 B per key against 155.7 for
the same keys written by clients, and 151.4 once trimmed. malloc_trim(0) returns those pages (madvise of every free
page, not only the top).
Elsewhere (musl, another allocator) there is nothing to call and purge() says so.
"""

import ctypes


def _malloc_trim():
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def purge() -> bool:
    """Returns the allocator's free pages to the system; False where it cannot (no glibc) or had none to give."""
    return bool(_TRIM(0)) if _TRIM is not None else False


class _Mallinfo2(ctypes.Structure):
    # glibc's struct mallinfo2 (2.33+): every field a size_t
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.argtypes = []
    fn.restype = _Mallinfo2
    return fn


_MALLINFO2 = _mallinfo2()


def free_heap_bytes():
    """Bytes free inside the heap (mallinfo2's fordblks: freed, still resident until trimmed), or None where
    glibc cannot say."""
    return _MALLINFO2().fordblks if _MALLINFO2 is not None else None


class Decay:
    """What jemalloc's dirty-page decay does for Valkey, for glibc: once a second the server asks how much of the
    heap is free, and gives it back when that is more than `min_free_bytes`. A large batch's payload freed after
    its commit (DEBUG POPULATE of a million keys in sync: 31 B per key, docs/memory.md) otherwise stays resident
    until MEMORY PURGE. A trim holds the allocator's lock while it walks the free pages: the threshold keeps it
    to the rare second that has that much to give back."""

    def __init__(self, min_free_bytes=16 << 20, interval_s=1.0, clock=None):
        import time
        self.min_free_bytes = min_free_bytes
        self.interval_s = interval_s
        self.clock = clock or time.monotonic
        self._next = 0.0
        self.trims = 0

    def tick(self):
        now = self.clock()
        if now < self._next or _TRIM is None or _MALLINFO2 is None:
            return False
        self._next = now + self.interval_s
        if free_heap_bytes() < self.min_free_bytes:
            return False
        purge()
        self.trims += 1
        return True
