"""The heap's free memory given back once a second when there is much of it (server/allocator.py Decay): what
jemalloc's dirty-page decay does for Valkey, for glibc, whose freed heap stays resident until malloc_trim."""

import pytest

from durakv.server import allocator

pytestmark = pytest.mark.skipif(allocator.free_heap_bytes() is None, reason="glibc's mallinfo2 (2.33+) only")


def _rss_bytes():
    import os
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _free_inside_the_heap(total_bytes):
    """Blocks below glibc's mmap threshold, freed with one still held after them, so the heap's top cannot
    shrink by itself: their memory is free and resident until a trim."""
    blocks = [bytearray(64 << 10) for _ in range(total_bytes // (64 << 10))]
    sentinel = bytearray(64 << 10)
    del blocks
    return sentinel


def test_a_second_with_much_free_heap_gives_it_back_and_the_next_waits():
    clock = Clock()
    decay = allocator.Decay(min_free_bytes=8 << 20, interval_s=1.0, clock=clock)
    decay.tick()                       # whatever the test process held before
    clock.now += 1.0
    keep = _free_inside_the_heap(32 << 20)
    assert allocator.free_heap_bytes() >= 8 << 20
    before = _rss_bytes()
    assert decay.tick() is True and decay.trims >= 1
    assert before - _rss_bytes() >= 16 << 20          # the freed blocks left the process's resident memory
    trims = decay.trims
    keep2 = _free_inside_the_heap(32 << 20)
    assert decay.tick() is False and decay.trims == trims     # within the second: not again
    clock.now += 1.0
    assert decay.tick() is True and decay.trims == trims + 1
    del keep, keep2


def test_little_free_heap_is_left_alone():
    clock = Clock()
    decay = allocator.Decay(min_free_bytes=1 << 40, clock=clock)
    assert decay.tick() is False and decay.trims == 0
