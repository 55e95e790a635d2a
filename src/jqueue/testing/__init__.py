"""Helpers for tests of code that uses jqueue (and for jqueue's own tests and tools).

- ``instrumented(storage, Faults(...))`` (``faults``): a storage wrapper that counts the calls
  a queue makes and injects faults into them.
- ``serve(root)`` and ``free_port()`` (``serve``): a real ``jqueue serve`` in a subprocess,
  on a free loopback port, for as long as a block runs.
- ``check_storage(open_storage)`` and ``check_storage_sync`` (``storage_contract``): every check
  of the storage contract, run against a backend of your own (or one of jqueue's).
"""

from __future__ import annotations

from jqueue.testing.faults import (
    READ_KINDS,
    WRITE_KINDS,
    CallKind,
    Faults,
    InstrumentedKeyedStorage,
    InstrumentedStorage,
    instrumented,
)
from jqueue.testing.serve import LOOPBACK, Served, free_port, serve
from jqueue.testing.storage_contract import (
    STORAGE_CHECKS,
    CheckFailure,
    StorageContractError,
    StorageContractReport,
    check_storage,
    check_storage_sync,
)

__all__ = [
    "LOOPBACK",
    "READ_KINDS",
    "STORAGE_CHECKS",
    "WRITE_KINDS",
    "CallKind",
    "CheckFailure",
    "Faults",
    "InstrumentedKeyedStorage",
    "InstrumentedStorage",
    "Served",
    "StorageContractError",
    "StorageContractReport",
    "check_storage",
    "check_storage_sync",
    "free_port",
    "instrumented",
    "serve",
]
