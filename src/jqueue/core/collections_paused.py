"""Pausing the cyclic garbage collector while a million long-lived objects are made."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off: making a million objects that live on (a
    checkpoint's records, a bulk write's jobs) would set off full collections that find
    nothing to free, doubling the time. Reference counting still frees what can go."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
