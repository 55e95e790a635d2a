"""A slow call through ``jqueue serve`` (``ServiceCaller._post``): it awaits its answer in the
caller's task and gives the call up, as ``no_answer`` naming the new broker, when the root names
another broker, and only then. The exchange and the look at the root are injected, and the
watch's period shortened (the real ones, against a frozen broker, are in
``test_broker_outages.py``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jqueue import ServiceError
from jqueue.adapters.service.client import caller as caller_module
from jqueue.adapters.service.client.caller import ServiceCaller
from jqueue.adapters.service.wire.bodies import ErrorBody, ErrorResponse, encode
from jqueue.adapters.service.wire.error_codes import CLOSING

HERE, OTHER = "http://127.0.0.1:1", "http://127.0.0.1:2"
PERIOD = 0.02
"""Seconds between two looks at the root in these tests (``RECHECK_EVERY``)."""
BOUND = 30.0
"""Seconds within which what is awaited must have happened."""


class Stubs:
    """The injected exchange (answered when ``answered`` is set) and looks at the root (each
    answer of ``moves`` in turn, then None: not moved), counted."""

    def __init__(self, *moves: str | None) -> None:
        self.moves = list(moves)
        self.looks = 0
        self.answered = asyncio.Event()
        self.on_look: asyncio.Task[Any] | None = None
        """A task to cancel during a look: its caller giving up at the same moment."""

    async def exchange(self, *_: Any) -> tuple[int, bytes]:
        await self.answered.wait()
        return 200, msgspec.msgpack.encode({"ok": True})

    async def moved_from(self, address: str) -> str | None:
        self.looks += 1
        if self.on_look is not None:
            self.on_look.cancel()
        return self.moves.pop(0) if self.moves else None


@pytest.fixture
def caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServiceCaller:
    monkeypatch.setattr(caller_module, "RECHECK_EVERY", PERIOD)
    call_timeout = timedelta(seconds=BOUND)
    return ServiceCaller(str(tmp_path), "q", None, call_timeout, call_timeout)


def stubbed(caller: ServiceCaller, stubs: Stubs) -> ServiceCaller:
    caller._exchange = stubs.exchange  # type: ignore[method-assign, assignment]
    caller._moved_from = stubs.moved_from  # type: ignore[method-assign]
    return caller


async def post(caller: ServiceCaller) -> Any:
    return await caller._post(HERE, "dequeue", None, dict, 0.0)


async def test_a_slow_call_is_given_up_once_the_root_names_another_broker(caller: ServiceCaller) -> None:
    stubs = Stubs(None, OTHER)
    with pytest.raises(ServiceError) as given_up:
        await asyncio.wait_for(post(stubbed(caller, stubs)), BOUND)
    assert (given_up.value.code, given_up.value.broker) == ("no_answer", OTHER)
    assert stubs.looks == 2
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the watch's cancel is taken back: the task carries on


async def test_a_call_answered_after_a_look_returns_and_its_watch_stops(caller: ServiceCaller) -> None:
    stubs = Stubs(None)
    call = asyncio.create_task(post(stubbed(caller, stubs)))
    async with asyncio.timeout(BOUND):
        while stubs.looks == 0:
            await asyncio.sleep(PERIOD / 4)
    stubs.answered.set()
    assert await call == {"ok": True}
    looks = stubs.looks
    await asyncio.sleep(PERIOD * 5)  # past several checks, had the watch not stopped
    assert stubs.looks == looks


async def test_a_callers_own_cancel_is_not_taken_for_a_moved_broker(caller: ServiceCaller) -> None:
    stubs = Stubs(OTHER)
    call = asyncio.create_task(post(stubbed(caller, stubs)))
    stubs.on_look = call  # the caller cancels during the look that finds the broker moved
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, BOUND)
    assert stubs.looks == 1


async def test_a_call_made_while_its_task_is_cancelled_still_moves_to_the_new_broker(
    caller: ServiceCaller,
) -> None:
    stubs = Stubs(OTHER)

    async def cleanup_after_a_cancel() -> tuple[str, int]:
        try:
            await asyncio.sleep(BOUND)
        except asyncio.CancelledError:  # code that calls the queue on its way out
            try:
                await post(stubbed(caller, stubs))
            except ServiceError as exc:
                task = asyncio.current_task()
                assert task is not None
                return exc.code, task.cancelling()
        raise AssertionError("the call was expected to be given up")

    task = asyncio.create_task(cleanup_after_a_cancel())
    await asyncio.sleep(0)
    task.cancel()
    assert await asyncio.wait_for(task, BOUND) == ("no_answer", 1)


async def test_a_call_to_a_service_url_has_no_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caller_module, "RECHECK_EVERY", PERIOD)
    call_timeout = timedelta(seconds=BOUND)
    stubs = Stubs(OTHER)
    service = stubbed(ServiceCaller(HERE, "q", None, call_timeout, call_timeout), stubs)
    call = asyncio.create_task(post(service))
    await asyncio.sleep(PERIOD * 5)  # past several checks, had there been a watch
    stubs.answered.set()
    assert await asyncio.wait_for(call, BOUND) == {"ok": True}
    assert stubs.looks == 0


async def test_a_call_that_meets_a_closing_queue_is_repeated_not_failed(caller: ServiceCaller) -> None:
    """A queue its broker gives up (it moved to another member) or that stops with the service
    answers a call in flight ``closing``, and the call may have landed: the caller asks again, as
    after a lost answer, and says the call was repeated."""
    closing = encode(ErrorResponse(ErrorBody(CLOSING.code, "the queue stopped")), True)
    answers = [(503, closing), (200, msgspec.msgpack.encode({"ok": True}))]

    async def exchange(*_: Any) -> tuple[int, bytes]:
        return answers.pop(0)

    async def found() -> str:
        return HERE

    caller._exchange = exchange  # type: ignore[method-assign, assignment]
    caller.finder.find = found  # type: ignore[method-assign]
    answer, repeated = await caller.call("enqueue", {"jobs": []}, dict)
    assert answer == {"ok": True}
    assert repeated
    assert answers == []
