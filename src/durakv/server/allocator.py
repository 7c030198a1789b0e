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
