"""A call fails through ``jqueue serve`` exactly as it fails on the queue itself: the same
exception class, message and attributes, for every call that can fail on a healthy queue. Both
queues are driven through the same code; ``connect(broker="auto")`` may return either."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jqueue import BrokerQueue, JobSpec, LocalFileSystemStorage, RemoteQueue, connect
from jqueue.adapters.service.server.endpoints import error_of, typed_failure
from jqueue.domain.errors import QueueClosedError, QueuePausedError, StorageError
from servers import jqueue_serve

pytestmark = pytest.mark.slow

AnyQueue = BrokerQueue | RemoteQueue


async def _claimed(queue: AnyQueue, job_id: str) -> Any:
    await queue.enqueue_many([JobSpec("e", b"x", id=job_id)])
    [job] = await queue.dequeue("e")
    return job


async def _stale_lease(queue: AnyQueue) -> None:
    first = await _claimed(queue, "job-stale")
    await queue.release(first)
    await queue.dequeue("e")  # claimed again, under a new lease
    await queue.ack(first)


async def _cancel_asked(queue: AnyQueue) -> None:
    job = await _claimed(queue, "job-cancel")
    assert await queue.cancel(job.id) is False  # running: its worker is asked
    await queue.heartbeat(job)


async def _paused(queue: AnyQueue) -> None:
    await queue.pause("held", enqueues=True)
    await queue.enqueue("held", b"x")


CALLS: dict[str, Callable[[AnyQueue], Awaitable[object]]] = {
    "ack": lambda q: q.ack("missing"),
    "nack": lambda q: q.nack("missing", error="boom"),
    "heartbeat": lambda q: q.heartbeat("missing"),
    "release": lambda q: q.release("missing"),
    "cancel": lambda q: q.cancel("missing"),
    "result": lambda q: q.result("missing", timeout=timedelta(seconds=1)),
    "requeue": lambda q: q.requeue(["missing"]),
    "requeue_dead": lambda q: q.requeue_dead(["missing"]),
    "stale lease": _stale_lease,
    "cancel asked": _cancel_asked,
    "paused": _paused,
    "too large": lambda q: q.enqueue("e", b"x" * (2 << 20)),
    "negative batch": lambda q: q.dequeue("e", batch_size=-1),
    "negative throttle": lambda q: q.throttle(-1, timedelta(seconds=1)),
    "negative limit": lambda q: q.limit("e", -1),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    where = tmp_path_factory.mktemp("remote-errors")
    (where / "root").mkdir()
    with jqueue_serve(str(where / "root"), where / "serve.log") as url:
        yield url, where


@pytest.fixture
async def queues(served: tuple[str, Path], request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any]]:
    url, where = served
    name = f"q{abs(hash(request.node.name)) % 10**9}"
    local_queue = BrokerQueue(LocalFileSystemStorage(where / f"{name}.json"))
    async with local_queue as local, connect(url, name) as remote:
        for queue in (local, remote):  # a queue that exists (the service answers others 404)
            await queue.enqueue("seed", b"")
        yield local, remote


def _failure(exc: BaseException) -> tuple[type[BaseException], str, dict[str, object]]:
    attributes = {
        name: getattr(exc, name) for name in ("job_id", "size", "limit", "entrypoint") if hasattr(exc, name)
    }
    return type(exc), str(exc), attributes


@pytest.mark.parametrize("call", list(CALLS))
async def test_a_call_fails_through_the_service_as_on_the_queue(queues: tuple[Any, Any], call: str) -> None:
    failures = []
    for queue in queues:
        with pytest.raises(Exception) as caught:  # noqa: PT011 (any: the point is that they match)
            await CALLS[call](queue)
        failures.append(_failure(caught.value))
    local, remote = failures
    assert remote == local
    assert local[0] is not Exception


async def test_a_call_whose_storage_call_was_cut_off_answers_a_typed_error_not_a_500() -> None:
    """A read cut off under a call (a cancellation that is not the call's own) answers 503
    ``storage_unavailable``; a storage failure of a call whose queue its broker handed over while
    it ran answers ``closing``, which clients send again to the new owner; the call's own
    cancellation is not answered at all."""
    cut = typed_failure("q", asyncio.CancelledError(), handed_over=False)
    assert isinstance(cut, StorageError)
    assert error_of(cut)[0] == 503
    assert error_of(cut)[1].code == "storage_unavailable"
    moved = typed_failure("q", StorageError("reading q", OSError("closed")), handed_over=True)
    assert isinstance(moved, QueueClosedError)
    assert error_of(moved)[1].code == "closing"
    refused = typed_failure("q", QueuePausedError("e"), handed_over=True)
    assert isinstance(refused, QueuePausedError), "only storage failures are the queue moving"

    async def call_cancelled_itself() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError as own:
            typed_failure("q", own, handed_over=False)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(call_cancelled_itself())
