"""Nothing hangs: every public operation against a storage that always conflicts, always fails,
never answers or answers slowly ends within a deadline, with an answer or a jqueue error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from jqueue import (
    BrokerQueue,
    CASConflictError,
    DirectQueue,
    InMemoryStorage,
    JobSpec,
    JQueueError,
    Layout,
    StorageError,
)
from jqueue.core.queue import JobQueue
from jqueue.testing import Faults, instrumented

JOB_ID = "job-that-was-seeded"
Call = Callable[[Any], Awaitable[object]]

OPERATIONS: dict[str, Call] = {
    "enqueue": lambda q: q.enqueue("work", b"x"),
    "enqueue_many": lambda q: q.enqueue_many("work", [b"a", b"b"]),
    "stage_many": lambda q: q.bulk.stage_many([JobSpec("work", b"s")], "bulk"),
    "publish": lambda q: q.bulk.publish("bulk"),
    "discard": lambda q: q.bulk.discard("bulk"),
    "dequeue": lambda q: q.dequeue(batch_size=2),
    "ack": lambda q: q.ack(JOB_ID),
    "nack": lambda q: q.nack(JOB_ID, error="boom"),
    "heartbeat": lambda q: q.heartbeat(JOB_ID),
    "release": lambda q: q.release(JOB_ID),
    "requeue": lambda q: q.requeue([JOB_ID]),
    "requeue_dead": lambda q: q.requeue_dead(),
    "purge": lambda q: q.purge(),
    "pause": lambda q: q.pause("work"),
    "resume": lambda q: q.resume("work"),
    "throttle": lambda q: q.throttle(5, per=timedelta(seconds=1)),
    "sweep": lambda q: q.sweep(),
    "requeue_stale": lambda q: q.requeue_stale(timedelta(seconds=1)),
    "read_state": lambda q: q.read_state(),
    "jobs": lambda q: q.jobs(),
    "count": lambda q: q.count(),
    "peek": lambda q: q.peek(),
    "stats": lambda q: q.stats(),
    "find": lambda q: q.find(JOB_ID),
    "dead_letters": lambda q: q.dead_letters(),
    "history": lambda q: q.history(),
    "checkpoint": lambda q: q.checkpoint(),
}
SLOW = timedelta(seconds=0.1)
FAULTS = {
    "conflicts": Faults(conflict=True),
    "fails": Faults(fail_rate=1.0),
    "hangs": Faults(hang=True),
    "slow": Faults(read_latency=SLOW, write_latency=SLOW),
}
DEADLINE = 20.0


async def _seeded(layout: Layout) -> InMemoryStorage:
    storage = InMemoryStorage(name=f"faults-{layout}")
    async with DirectQueue(storage, layout=layout) as q:
        job = await q.enqueue("work", b"seed")
        await q._commits.run(lambda index: None)  # the queue exists
    return _renamed(storage, job.id)


def _renamed(storage: InMemoryStorage, job_id: str) -> InMemoryStorage:
    """The seeded object with its job's id replaced by ``JOB_ID``, so calls can name it."""
    old, new = job_id.encode(), JOB_ID.encode()
    storage._content = storage._content.replace(old, new)
    storage._named = {name: data.replace(old, new) for name, data in storage._named.items()}
    return storage


async def _outcome(make: Callable[[], JobQueue], call: Call) -> object:
    queue = make()
    try:
        if isinstance(queue, BrokerQueue):
            async with queue:
                return await call(queue)
        return await call(queue)
    except JQueueError as exc:
        return exc


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("kind", ["direct", "broker"])
@pytest.mark.parametrize("layout", ["single", "log"])
async def test_every_operation_ends_in_bounded_time(fault: str, kind: str, layout: Layout) -> None:
    storage = instrumented(await _seeded(layout), FAULTS[fault])
    # a slow storage is one that answers: a timeout 50 times its latency keeps a busy machine's
    # stalls (27 queues on one event loop) from passing for one that does not
    timeout = SLOW * 50 if fault == "slow" else timedelta(seconds=0.5)
    options: dict[str, Any] = {"layout": layout, "storage_timeout": timeout, "max_retries": 3}

    def make() -> JobQueue:
        return DirectQueue(storage, **options) if kind == "direct" else BrokerQueue(storage, **options)

    async with asyncio.timeout(DEADLINE):
        outcomes = await asyncio.gather(*(_outcome(make, call) for call in OPERATIONS.values()))
    results = dict(zip(OPERATIONS, outcomes, strict=True))
    errors = {name: type(r).__name__ for name, r in results.items() if isinstance(r, BaseException)}
    if fault == "slow":  # 27 queues racing on one object may still lose races: no call may time out
        assert all(not isinstance(r, StorageError) for r in results.values()), errors
        assert not isinstance(results["read_state"], BaseException), errors
    elif fault == "conflicts":
        assert isinstance(results["enqueue"], CASConflictError), errors
        assert not isinstance(results["read_state"], BaseException), errors
    else:
        assert isinstance(results["enqueue"], StorageError), errors
        assert isinstance(results["read_state"], StorageError), errors


async def test_opening_a_new_queue_on_a_storage_that_always_conflicts_ends() -> None:
    storage = instrumented(InMemoryStorage(name="never-created"), Faults(conflict=True))
    async with asyncio.timeout(DEADLINE):
        for queue in (DirectQueue(storage), DirectQueue(storage, layout="log")):
            with pytest.raises(CASConflictError):
                await queue.enqueue("work", b"x")
    seeded = instrumented(await _seeded("single"), Faults(conflict=True))
    async with asyncio.timeout(DEADLINE):  # a migration that keeps losing its race
        with pytest.raises(CASConflictError):
            await DirectQueue(seeded, layout="log").read_state()
