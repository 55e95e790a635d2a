"""Back-off for retried compare-and-swap commits."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from jqueue.domain.errors import StorageError
from jqueue.domain.values import Bounds
from jqueue.ports.storage import KeyedStoragePort, MappedStoragePort

T = TypeVar("T")

GROUPED_MAX_RETRIES = 20
"""Conflicting commits a group-commit queue retries (the documented default)."""
DIRECT_MAX_RETRIES = 10
"""Conflicting commits a ``DirectQueue`` retries (the documented default)."""


MAX_RETRIES = Bounds(ge=0)
"""The bounds of ``RetryPolicy.max_retries`` (0 tries once)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with full jitter.

    Attributes
    ----------
    max_retries : int
        Retries after the first attempt before giving up.
    base_delay : float
        Upper bound of the first wait, in seconds; it doubles on each retry.
    max_delay : float
        Cap on the upper bound, in seconds.
    """

    max_retries: int = GROUPED_MAX_RETRIES
    base_delay: float = 0.005
    max_delay: float = 0.32

    def __post_init__(self) -> None:
        MAX_RETRIES.check("max_retries", self.max_retries)

    async def get(self, keyed: KeyedStoragePort, name: str) -> bytes | None:
        """Read a named object, retrying failed reads as this policy allows (not one that timed
        out: a storage that stops answering would cost a time limit per retry)."""
        return await self._read(lambda: keyed.get(name))

    async def mapped(self, keyed: KeyedStoragePort, name: str) -> bytes | memoryview | None:
        """``get``, mapped where the backend can map it (``MappedStoragePort``)."""
        if isinstance(keyed, MappedStoragePort):
            return await self._read(lambda: keyed.mapped(name))
        return await self.get(keyed, name)

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.max_retries + 1):
            try:
                return await read()
            except StorageError as exc:
                if attempt == self.max_retries or isinstance(exc.cause, TimeoutError):
                    raise
                await self.wait(attempt + 1)
        raise AssertionError("unreachable")

    async def wait(self, retry: int, max_delay: float | None = None) -> None:
        """Sleep before retry number ``retry`` (1-based), capped at ``max_delay`` if given (else
        the policy's)."""
        cap = self.max_delay if max_delay is None else min(max_delay, self.max_delay)
        ceiling = min(cap, self.base_delay * 2 ** min(retry - 1, 30))
        await asyncio.sleep(random.uniform(0, ceiling))
