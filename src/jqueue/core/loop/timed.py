"""A time limit on every storage call, so that a backend that stops answering cannot hang a queue."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from jqueue.core.loop.store import describe, describe_named
from jqueue.domain.errors import StorageError
from jqueue.domain.values import span
from jqueue.ports.storage import KeyedStoragePort, MappedStoragePort, ObjectStoragePort

T = TypeVar("T")

DEFAULT_STORAGE_TIMEOUT = timedelta(seconds=60)


class TimedStorage:
    """A storage whose calls fail with ``StorageError`` (cause ``TimeoutError``) past ``timeout``.

    A write that timed out may still land; the queue treats it like any failed write
    (a later read shows whether it did).
    """

    def __init__(self, inner: ObjectStoragePort, timeout: timedelta) -> None:
        if timeout <= timedelta(0):
            raise ValueError(f"storage_timeout must be positive, got {span(timeout)}")
        self.inner = inner
        self.url = describe(inner)
        self.seconds = timeout.total_seconds()

    async def _within(self, what: str, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.seconds):
                return await call
        except TimeoutError:
            late = TimeoutError(f"no answer within {self.seconds:g} s")
            raise StorageError(f"{what} {self.url} failed", late) from None

    async def read(self) -> tuple[bytes, str | None]:
        """Read the main object within the time limit."""
        return await self._within("reading", self.inner.read())

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Write the main object within the time limit."""
        return await self._within("writing", self.inner.write(content, if_match))


class TimedKeyedStorage(TimedStorage):
    """``TimedStorage`` for a backend with named objects too."""

    def __init__(self, inner: KeyedStoragePort, timeout: timedelta) -> None:
        super().__init__(inner, timeout)
        self.keyed = inner

    def named_url(self, name: str) -> str:
        """Where the wrapped storage keeps ``name``, for messages."""
        return describe_named(self.keyed, name)

    async def get(self, name: str) -> bytes | None:
        """Read a named object within the time limit."""
        return await self._within(f"reading {name} of", self.keyed.get(name))

    async def create(self, name: str, content: bytes) -> None:
        """Create a named object within the time limit."""
        await self._within(f"creating {name} of", self.keyed.create(name, content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """List named objects within the time limit."""
        return await self._within(f"listing {prefix} of", self.keyed.list_names(prefix, start_after))

    async def delete(self, name: str) -> None:
        """Delete a named object within the time limit."""
        await self._within(f"deleting {name} of", self.keyed.delete(name))


class TimedMappedStorage(TimedKeyedStorage):
    """``TimedKeyedStorage`` for a backend that maps its named objects too."""

    async def mapped(self, name: str) -> memoryview | None:
        """Map a named object within the time limit."""
        assert isinstance(self.keyed, MappedStoragePort)
        return await self._within(f"mapping {name} of", self.keyed.mapped(name))


def timed(storage: ObjectStoragePort, timeout: timedelta | None) -> ObjectStoragePort:
    """Return ``storage`` with a time limit on each call (itself when ``timeout`` is None)."""
    if timeout is None:
        return storage
    if isinstance(storage, KeyedStoragePort) and isinstance(storage, MappedStoragePort):
        return TimedMappedStorage(storage, timeout)
    if isinstance(storage, KeyedStoragePort):
        return TimedKeyedStorage(storage, timeout)
    return TimedStorage(storage, timeout)
