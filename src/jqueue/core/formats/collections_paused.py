"""Pausing the cyclic garbage collector while a million long-lived objects are made."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

COLLECT_AFTER = 100_000
"""The objects a block must leave behind for the full collection at its end to pay off."""


class _Pauses:
    """How many blocks run with the collector paused, and whether it ran before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False


_pauses = _Pauses()


def _after_fork_in_child() -> None:
    """A child forked inside a paused block has none running: its collector runs as before."""
    if _pauses.holders and _pauses.was_enabled:
        gc.enable()
    _pauses.lock, _pauses.holders = threading.Lock(), 0


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, then collect once if it made many objects.

    Making a million objects that live on (a checkpoint's records, a bulk write's jobs)
    sets off full collections that find nothing to free, doubling the time. The one full
    collection at the end makes the collector count them as old: without it, the next
    burst of allocations anywhere in the process pays that collection instead (about 0.3 s
    a million objects), and a call after a load of ten million jobs would stall for
    seconds. A block that leaves fewer than ``COLLECT_AFTER`` objects (a small checkpoint, a
    small write, a plan whose objects went as it went) skips it: a full collection of a
    large process costs more than they do. Reference counting frees what it can meanwhile.
    Blocks may overlap (a plan in a thread while the loop reads a checkpoint): the
    collector runs again once the last of them ends.
    """
    with _pauses.lock:
        if _pauses.holders == 0:
            _pauses.was_enabled = gc.isenabled()
            gc.disable()
        _pauses.holders += 1
    try:
        yield
    finally:
        with _pauses.lock:
            _pauses.holders -= 1
            resume = _pauses.holders == 0 and _pauses.was_enabled
            made = gc.get_count()[0]  # the collector off, it counts every object left behind
            if resume:
                gc.enable()
        if resume and made >= COLLECT_AFTER:
            gc.collect()
