"""Storages that misbehave on purpose: they conflict, fail, hang or answer slowly (fault injection)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jqueue import CASConflictError, KeyedStoragePort, StorageError

T = TypeVar("T")


class FaultyStorage:
    """Wraps a keyed storage and injects faults into the calls ``affects`` selects.

    Parameters
    ----------
    inner : KeyedStoragePort
        The real storage.
    conflict : bool
        Every write and create raises ``CASConflictError`` (nothing is stored).
    fail_rate : float
        The share of selected calls that raise ``StorageError`` (random, seeded).
    hang : bool
        Selected calls never answer.
    delay : float
        Seconds each selected call waits before it runs.
    affects : callable
        Given the call's kind (``read``, ``write``, ``get``, ``create``, ``list``, ``delete``)
        and its object name, whether faults apply to it.
    """

    def __init__(
        self,
        inner: KeyedStoragePort,
        *,
        conflict: bool = False,
        fail_rate: float = 0.0,
        hang: bool = False,
        delay: float = 0.0,
        affects: Callable[[str, str], bool] = lambda kind, name: True,
        seed: int = 0,
    ) -> None:
        self.inner = inner
        self.url = getattr(inner, "url", "faulty")
        self.conflict = conflict
        self.fail_rate = fail_rate
        self.hang = hang
        self.delay = delay
        self.affects = affects
        self.failures = 0
        self._random = random.Random(seed)

    async def _call(self, kind: str, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if self.affects(kind, name):
            if self.hang:
                await asyncio.Event().wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            if self._random.random() < self.fail_rate:
                self.failures += 1
                raise StorageError(f"injected failure of {kind} {name}", OSError("injected"))
            if self.conflict and kind in ("write", "create"):
                raise CASConflictError(f"injected conflict on {name}")
        return await call()

    async def read(self) -> tuple[bytes, str | None]:
        return await self._call("read", "", self.inner.read)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        return await self._call("write", "", lambda: self.inner.write(content, if_match))

    async def get(self, name: str) -> bytes | None:
        return await self._call("get", name, lambda: self.inner.get(name))

    async def create(self, name: str, content: bytes) -> None:
        await self._call("create", name, lambda: self.inner.create(name, content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        return await self._call("list", prefix, lambda: self.inner.list_names(prefix, start_after))

    async def delete(self, name: str) -> None:
        await self._call("delete", name, lambda: self.inner.delete(name))
