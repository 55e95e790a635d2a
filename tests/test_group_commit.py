"""What the group-commit loop adds: batching, isolation, retries on conflict, draining."""

from __future__ import annotations

import asyncio

import pytest

from conftest import Backend, CountingStorage
from jqueue import (
    BrokerQueue,
    DirectQueue,
    GroupCommitLoop,
    InMemoryStorage,
    JobNotFoundError,
    QueueClosedError,
)


class SlowStorage(CountingStorage):
    """A real in-memory object whose writes take a while, so that callers pile up."""

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        await asyncio.sleep(0.02)
        return await super().write(content, if_match)


async def test_concurrent_calls_share_commits() -> None:
    storage = SlowStorage(InMemoryStorage())
    async with BrokerQueue(storage) as q:
        jobs = await asyncio.gather(*(q.enqueue("work", str(i).encode()) for i in range(100)))
        state = await q.read_state()
    assert {j.id for j in state.jobs} == {j.id for j in jobs}
    assert storage.writes <= 5


async def test_one_bad_operation_fails_only_its_caller() -> None:
    async with BrokerQueue(InMemoryStorage()) as q:
        results = await asyncio.gather(
            q.enqueue("work", b"a"), q.ack("no-such-job"), q.enqueue("work", b"b"), return_exceptions=True
        )
        assert isinstance(results[1], JobNotFoundError)
        assert results[1].job_id == "no-such-job"
        state = await q.read_state()
    assert sorted(j.payload for j in state.jobs) == [b"a", b"b"]


async def test_sequential_operations_read_storage_once() -> None:
    storage = CountingStorage(InMemoryStorage())
    for queue in (DirectQueue(storage), BrokerQueue(storage)):
        storage.reads = storage.writes = 0
        async with queue as q:
            for i in range(20):
                job = await q.enqueue("work", str(i).encode())
                await q.dequeue()
                await q.ack(job.id)
        assert storage.writes == 60
        assert storage.reads <= 1


async def test_racing_brokers_reapply_their_batches(backend: Backend) -> None:
    _, name = backend.new()
    per_queue = 10 if backend.name == "s3-seaweedfs" else 40

    async def produce(tag: str) -> None:
        async with BrokerQueue(backend.handle(name)) as q:
            await asyncio.gather(*(q.enqueue("work", f"{tag}-{i}".encode()) for i in range(per_queue)))

    await asyncio.gather(*(produce(tag) for tag in "abc"))
    async with BrokerQueue(backend.handle(name)) as q:
        state = await q.read_state()
    expected = sorted(f"{tag}-{i}".encode() for tag in "abc" for i in range(per_queue))
    assert sorted(j.payload for j in state.jobs) == expected


async def test_exit_drains_pending_operations() -> None:
    storage = SlowStorage(InMemoryStorage())
    async with BrokerQueue(storage) as q:
        tasks = [asyncio.create_task(q.enqueue("work", str(i).encode())) for i in range(30)]
        await asyncio.sleep(0)
    assert all(t.done() and t.exception() is None for t in tasks)
    async with BrokerQueue(storage) as q:
        assert len((await q.read_state()).jobs) == 30


async def test_calls_outside_the_running_loop_are_refused() -> None:
    loop = GroupCommitLoop(InMemoryStorage())
    with pytest.raises(QueueClosedError):
        await loop.enqueue("work", b"x")
    await loop.start()
    await loop.enqueue("work", b"x")
    await loop.stop()
    with pytest.raises(QueueClosedError):
        await loop.dequeue()
