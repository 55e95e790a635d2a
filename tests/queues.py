"""Opening either queue kind the same way in tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from jqueue import BrokerQueue, DirectQueue, ObjectStoragePort
from jqueue.core.formats.entry import ENTRY_PREFIX
from jqueue.ports.storage import KeyedStoragePort
from jqueue.testing import CallKind


@contextlib.asynccontextmanager
async def open_queue(
    kind: str, storage: ObjectStoragePort, *, stale_timeout: timedelta = timedelta(minutes=5), **options: Any
) -> AsyncIterator[DirectQueue | BrokerQueue]:
    """Open a DirectQueue or a BrokerQueue on ``storage``."""
    if kind == "direct":
        async with DirectQueue(storage, **options) as direct:
            yield direct
    else:
        async with BrokerQueue(storage, stale_timeout=stale_timeout, **options) as broker:
            yield broker


async def log_entries(storage: ObjectStoragePort) -> list[str]:
    """The names of the log entries beside ``storage``'s main object (none for a plain port)."""
    if not isinstance(storage, KeyedStoragePort):
        return []
    return await storage.list_names(ENTRY_PREFIX)


def entry_creates(kind: CallKind, name: str) -> bool:
    """Whether a storage call is the create of a log entry (a commit), for ``Faults.affects``."""
    return kind == "create" and name.startswith(ENTRY_PREFIX)
