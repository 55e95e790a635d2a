"""What an idle or claiming worker waits on: the first of a stop, a slot freed, a queue changing
or a timeout; and a call that a stop cuts short."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from jqueue.ports.queue import ChangeSource

T = TypeVar("T")


async def first_of(
    events: Sequence[asyncio.Event], seconds: float | None, feeds: list[tuple[ChangeSource, int]]
) -> bool:
    """Wait for one of ``events``, a change of a queue since the generation seen in ``feeds``
    (when ``seconds`` is given) or ``seconds``; True if a queue changed."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    changes = [asyncio.ensure_future(feed.wait(seen, seconds)) for feed, seen in feeds if seconds is not None]
    try:
        await asyncio.wait({*waits, *changes}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (*waits, *changes):
            waiting.cancel()
    return any(feed.generation != seen for feed, seen in feeds)


async def unless_stopped(
    call: Awaitable[T], stopping: asyncio.Event, grace: float = 0.0, abort: asyncio.Event | None = None
) -> T | None:
    """Return what ``call`` returns, or None, with ``call`` cancelled, if ``stopping`` is set
    first and ``call`` does not answer within ``grace`` seconds more (or before ``abort`` is
    set): a claim that rides out an outage (a broker being replaced, a storage retrying) must
    not hold up a worker that was told to stop, but one whose commit is landing should
    answer, so that its jobs can be released instead of held until their leases run out."""
    answer = asyncio.ensure_future(call)
    stop = asyncio.create_task(stopping.wait())
    aborted = asyncio.create_task(abort.wait()) if abort is not None else None
    try:
        await asyncio.wait({answer, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done() and grace > 0:
            waits = {answer} if aborted is None else {answer, aborted}
            await asyncio.wait(waits, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if aborted is not None:
            aborted.cancel()
        if not answer.done():  # stopped, or this wait cancelled: the call goes too
            answer.cancel()
    return answer.result() if answer.done() and not answer.cancelled() else None
