"""The watch on a slow call through ``jqueue serve`` (``caller._SlowCallWatch``): it gives the call
up when the root names another broker, and only then. The look at the root is injected (the
real one, against a frozen broker, is in ``test_broker_outages.py``)."""

from __future__ import annotations

import asyncio

import pytest

from jqueue.adapters.service.caller import _SlowCallWatch
from jqueue.adapters.service.finder import RECHECK_EVERY

OTHER = "http://127.0.0.1:2"
BOUND = 30.0
"""Seconds within which each check, made every ``RECHECK_EVERY``, must have happened."""


class Root:
    """What ``ServiceCaller._moved_from`` answers, one look after another (None: not moved)."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.looks = 0
        self.on_look: asyncio.Task[object] | None = None
        """A task to cancel during a look: its caller giving up at the same moment."""

    async def _moved_from(self, address: str) -> str | None:
        self.looks += 1
        if self.on_look is not None:
            self.on_look.cancel()
        return self.answers.pop(0) if self.answers else None


async def watched(root: Root, answered: asyncio.Event) -> str:
    """A call that waits for ``answered`` under a watch; what ended it."""
    watch = _SlowCallWatch(root, "http://127.0.0.1:1")  # type: ignore[arg-type]
    try:
        await answered.wait()
        return "answered"
    except asyncio.CancelledError:
        if watch.gave_up():
            return f"given up: moved to {watch.moved}"
        raise
    finally:
        watch.stop()


async def test_a_slow_call_is_given_up_once_the_root_names_another_broker() -> None:
    root = Root(None, OTHER)
    ended = await asyncio.wait_for(watched(root, asyncio.Event()), BOUND)
    assert ended == f"given up: moved to {OTHER}"
    assert root.looks == 2


async def test_a_call_answered_after_a_look_is_not_given_up_and_the_watch_stops() -> None:
    root, answered = Root(None), asyncio.Event()
    call = asyncio.create_task(watched(root, answered))
    async with asyncio.timeout(BOUND):
        while root.looks == 0:
            await asyncio.sleep(0.01)
    answered.set()
    assert await call == "answered"
    looks = root.looks
    await asyncio.sleep(RECHECK_EVERY * 1.5)  # past the next check, had the watch not stopped
    assert root.looks == looks


async def test_a_callers_own_cancel_is_not_taken_for_a_moved_broker() -> None:
    root = Root(OTHER)
    call = asyncio.create_task(watched(root, asyncio.Event()))
    root.on_look = call  # the caller cancels during the look that finds the broker moved
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, BOUND)
    assert root.looks == 1
