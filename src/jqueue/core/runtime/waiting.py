"""What an idle or claiming worker waits on: the first of a stop, a job ending, a queue changing
or a timeout; and a call that a stop cuts short."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from jqueue.ports.queue import ChangeSource

T = TypeVar("T")


async def first_of(
    stopping: asyncio.Event,
    running: set[asyncio.Task[None]],
    seconds: float | None,
    feeds: list[tuple[ChangeSource, int]],
) -> bool:
    """Wait for ``stopping``, a task of ``running`` to end, a change of a queue since the
    generation seen in ``feeds`` (when ``seconds`` is given) or ``seconds``; True if a queue
    changed."""
    stop = asyncio.create_task(stopping.wait())
    changes = [asyncio.ensure_future(feed.wait(seen, seconds)) for feed, seen in feeds if seconds is not None]
    try:
        await asyncio.wait({stop, *running, *changes}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        for change in changes:
            change.cancel()
    return any(feed.generation != seen for feed, seen in feeds)


async def unless_stopped(call: Awaitable[T], stopping: asyncio.Event) -> T | None:
    """Return what ``call`` returns, or None, with ``call`` cancelled, if ``stopping`` is set
    first: a claim that rides out an outage (a broker being replaced, a storage retrying)
    must not hold up a worker that was told to stop."""
    answer = asyncio.ensure_future(call)
    stop = asyncio.create_task(stopping.wait())
    try:
        await asyncio.wait({answer, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not answer.done():  # stopped, or this wait cancelled: the call goes too
            answer.cancel()
    return answer.result() if answer.done() and not answer.cancelled() else None
