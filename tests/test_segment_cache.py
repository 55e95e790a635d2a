"""``SegmentCache``: recent segments' payloads, bounded by the memory they take, kept where the
cyclic collector does not visit them (a shallow queue caches tens of thousands)."""

from __future__ import annotations

import gc
import sys

from jqueue.core.log.store import SegmentCache


def test_the_least_recently_used_segment_goes_once_the_memory_is_used_up() -> None:
    one = sys.getsizeof((b"",)) + sys.getsizeof(b"x" * 100)
    cache = SegmentCache(max_bytes=3 * one)
    for segment in (1, 2, 3):
        cache.put(segment, [b"x" * 100])
    assert cache.get(1) == (b"x" * 100,)  # now the most recent
    cache.put(4, [b"x" * 100])
    assert cache.get(2) is None
    assert [cache.get(segment) is not None for segment in (1, 3, 4)] == [True, True, True]
    cache.put(5, [b"x" * 100] * 4)  # larger than the whole cache: not kept
    assert cache.get(5) is None


def test_a_full_collection_does_not_visit_the_cached_payloads() -> None:
    cache = SegmentCache(max_bytes=10**8)
    for segment in range(10_000):
        cache.put(segment, [b"%d" % segment])
    gc.collect()
    held = [cache.get(segment) for segment in range(10_000)]
    assert not any(gc.is_tracked(payloads) for payloads in held)
