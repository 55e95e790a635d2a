"""Shared by the tests that run the original jqueue documentation's code blocks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from jqueue import (
    BrokerQueue,
    DirectQueue,
    InMemoryStorage,
    LocalFileSystemStorage,
    ObjectStoragePort,
)

Queue = BrokerQueue | DirectQueue
Storage = InMemoryStorage | LocalFileSystemStorage


@asynccontextmanager
async def opened(kind: str, storage: ObjectStoragePort, **options: Any) -> AsyncIterator[Queue]:
    if kind == "broker":
        async with BrokerQueue(storage, **options) as q:
            yield q
    else:
        yield DirectQueue(storage, **options)  # "DirectQueue can be used directly"
