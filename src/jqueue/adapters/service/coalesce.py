"""``Coalescer``: the calls made while a request is in flight go together in the next request.

It is the client's side of the service's group commit: a worker of concurrency 10 whose
jobs end together sends one ``ack`` request for the ten, not ten requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item")
Answer = TypeVar("Answer")

Send = Callable[[Key, list[Item]], Awaitable[Sequence[Answer | BaseException]]]
"""Sends the items of one key in one request; returns an answer (or an error) per item."""


class Coalescer(Generic[Key, Item, Answer]):
    """Folds the calls of one key into one request while another request of that key is in
    flight (one request at a time per key; the first call of a key is sent at the next turn
    of the event loop, with every call of that key made in the same turn)."""

    def __init__(self, send: Send[Key, Item, Answer]) -> None:
        self._send = send
        self._pending: dict[Key, list[tuple[Item, asyncio.Future[Answer]]]] = {}
        self._senders: dict[Key, asyncio.Task[None]] = {}

    async def call(self, key: Key, item: Item) -> Answer:
        """Send ``item`` with the other calls of ``key``; return its answer or raise its error."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((item, future))
        if key not in self._senders:
            self._senders[key] = asyncio.create_task(self._send_all(key))
        return await future

    async def _send_all(self, key: Key) -> None:
        try:
            while batch := self._pending.pop(key, []):
                try:
                    answers = await self._send(key, [item for item, _ in batch])
                except Exception as exc:  # the request failed: every call in it shares the error
                    answers = [exc] * len(batch)
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():  # the caller was cancelled
                        continue
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            del self._senders[key]
            for _, future in self._pending.pop(key, []):  # cancelled while others waited
                future.cancel()
