"""``Coalescer``: the calls made while a request is in flight go together in the next request.

It is the client's side of the service's group commit: a worker of concurrency 10 whose
jobs end together sends one ``ack`` request for the ten, not ten requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item")
Answer = TypeVar("Answer")

SLOW_REQUEST = 0.02
"""Seconds: a request this long makes the next calls of its key go in requests of their own."""

Send = Callable[[Key, list[Item]], Awaitable[Sequence[Answer | BaseException]]]
"""Sends the items of one key in one request; returns an answer (or an error) per item."""


class Coalescer(Generic[Key, Item, Answer]):
    """Folds the calls of one key into shared requests: the calls of one turn of the event
    loop go together, and the calls made while a request of that key is in flight wait and
    go together in the next one. Where requests are slow (the last one of the key took
    ``SLOW_REQUEST`` or more: a commit on S3 or GCS), up to ``max_in_flight`` go at once, so
    that a call does not wait a whole commit for its turn.

    Parameters
    ----------
    send : Send
        Sends one request.
    max_in_flight : int
        The most requests of one key in flight at once when requests are slow.
    """

    def __init__(self, send: Send[Key, Item, Answer], max_in_flight: int = 8) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self._send = send
        self._max_in_flight = max_in_flight
        self._pending: dict[Key, list[tuple[Item, asyncio.Future[Answer]]]] = {}
        self._senders: dict[Key, set[asyncio.Task[None]]] = {}
        self._slow: dict[Key, bool] = {}

    async def call(self, key: Key, item: Item) -> Answer:
        """Send ``item`` with the other calls of ``key``; return its answer or raise its error."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        pending = self._pending.setdefault(key, [])
        pending.append((item, future))
        senders = self._senders.setdefault(key, set())
        limit = self._max_in_flight if self._slow.get(key) else 1
        if len(pending) == 1 and len(senders) < limit:
            senders.add(asyncio.create_task(self._send_all(key)))
        return await future

    async def _send_all(self, key: Key) -> None:
        try:
            while batch := self._pending.pop(key, []):
                started = time.monotonic()
                try:
                    answers = await self._send(key, [item for item, _ in batch])
                except Exception as exc:  # the request failed: every call in it shares the error
                    answers = [exc] * len(batch)
                self._slow[key] = time.monotonic() - started >= SLOW_REQUEST
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():  # the caller was cancelled
                        continue
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            senders = self._senders[key]
            senders.discard(asyncio.current_task())  # type: ignore[arg-type, unused-ignore]
            if not senders:
                del self._senders[key]
                for _, future in self._pending.pop(key, []):  # cancelled while others waited
                    future.cancel()
