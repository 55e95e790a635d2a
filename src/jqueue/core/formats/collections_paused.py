"""Pausing the cyclic garbage collector while a million long-lived objects are made."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

COLLECT_AFTER = 100_000
"""The objects a block must leave behind for the full collection at its end to pay off."""


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, then collect once if it made many objects.

    Making a million objects that live on (a checkpoint's records, a bulk write's jobs)
    sets off full collections that find nothing to free, doubling the time. The one full
    collection at the end makes the collector count them as old: without it, the next
    burst of allocations anywhere in the process pays that collection instead (about 0.3 s
    a million objects), and a call after a load of ten million jobs would stall for
    seconds. A block that leaves fewer than ``COLLECT_AFTER`` objects (a small checkpoint, a
    small write) skips it: a full collection of a large process costs more than they do.
    Reference counting frees what it can meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            made = gc.get_count()[0]  # the collector off, it counts every object left behind
            gc.enable()
            if made >= COLLECT_AFTER:
                gc.collect()
