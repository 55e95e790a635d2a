"""Helpers for tests of code that uses jqueue (and for jqueue's own tests and tools).

- ``instrumented(storage, Faults(...))`` (``faults``): a storage wrapper that counts the calls
  a queue makes and injects faults into them.
- ``serve(root)`` and ``free_port()`` (``serve``): a real ``jqueue serve`` in a subprocess,
  on a free loopback port, for as long as a block runs.
"""

from __future__ import annotations

from jqueue.testing.faults import (
    READ_KINDS,
    WRITE_KINDS,
    CallKind,
    Faults,
    InstrumentedKeyedStorage,
    InstrumentedStorage,
    Kind,
    instrumented,
)
from jqueue.testing.serve import LOOPBACK, Served, free_port, serve

__all__ = [
    "LOOPBACK",
    "READ_KINDS",
    "WRITE_KINDS",
    "CallKind",
    "Faults",
    "InstrumentedKeyedStorage",
    "InstrumentedStorage",
    "Kind",
    "Served",
    "free_port",
    "instrumented",
    "serve",
]
