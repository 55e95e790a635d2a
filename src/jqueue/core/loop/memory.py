"""A process's memory at depth: ``give_back_memory`` and ``spilled``.

A merge of slabs or a checkpoint that lets go of many records frees hundreds of megabytes of
blocks and objects. glibc's allocator keeps most of it, free but resident, in the middle of
its heaps (only the top of a heap goes back by itself), so a process that loaded ten million
jobs would hold the peak of its merges for good. ``malloc_trim`` gives those pages back; on
other C libraries this does nothing.

A slab on a local file is read from a mapping of it; one that a process wrote (or merged) on
a remote storage (S3, GCS) was held as bytes, 35 a job. ``spilled`` keeps it in an unnamed
temporary file instead, mapped: the pages read are the kernel's page cache, which it
reclaims, and the file goes when the process lets go of the slab (or ends). A process that
opens a queue keeps the slabs it read as bytes: spilling them would delay its first claim.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import tempfile
import time
from collections.abc import Callable

RECORDS_WORTH_IT = 10_000
"""The records a checkpoint lets go of (about 1 KB each), or the rows a merge writes, for a
trim to pay off: a trim walks the heaps, a few milliseconds."""
TRIM_EVERY = 2.0
"""The fewest seconds between two trims, however often queues ask (a trim holds each heap's
lock while it walks it)."""
_last_trim = -TRIM_EVERY


@functools.cache
def _trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def give_back_memory() -> bool:
    """Return the allocator's free pages to the system, unless that was done less than
    ``TRIM_EVERY`` ago (meant for a worker thread: it walks the heaps); return whether the C
    library can."""
    global _last_trim
    trim = _trim()
    if trim is None:
        return False
    if time.monotonic() - _last_trim >= TRIM_EVERY:
        _last_trim = time.monotonic()
        trim(0)
    return True


SPILL_BYTES = 1 << 20
"""The size from which a slab written on a storage that cannot map it is spilled."""


def spilled(content: bytes | memoryview) -> bytes | memoryview:
    """Return ``content`` (a slab's bytes) as a mapping of an unnamed temporary file that holds
    it, or ``content`` itself if it is under ``SPILL_BYTES`` or the file cannot be made (meant
    for a worker thread: it writes the file)."""
    if len(content) < SPILL_BYTES:
        return content
    try:
        with tempfile.TemporaryFile() as file:
            file.write(content)
            file.flush()
            mapping = mmap.mmap(file.fileno(), len(content), access=mmap.ACCESS_READ)
    except OSError:  # no room, say: the slab stays in memory, as it was
        return content
    return memoryview(mapping)
