"""The documented queue behaviour, for both queues on every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import reference_model as codec
from conftest import Backend
from jqueue import (
    BrokerQueue,
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    JobNotFoundError,
    JobStatus,
    PayloadTooLargeError,
)
from queues import log_entries, open_queue


async def test_enqueue_commits_a_queued_job(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    before = datetime.now(UTC)
    async with open_queue(queue_kind, storage, layout=layout) as q:
        job = await q.enqueue("send_email", b"\x00\xffbinary", priority=3)
        state = await q.read_state()
    assert job.status is JobStatus.QUEUED
    assert job.entrypoint == "send_email"
    assert job.payload == b"\x00\xffbinary"
    assert job.priority == 3
    assert job.heartbeat_at is None
    assert before <= job.created_at <= datetime.now(UTC)
    assert state.jobs == (job,)
    assert state.version == 1


async def test_dequeue_claims_in_priority_then_age_order(
    backend: Backend, queue_kind: str, layout: str
) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, layout=layout) as q:
        low = await q.enqueue("work", b"low", priority=5)
        first = await q.enqueue("work", b"first", priority=0)
        second = await q.enqueue("work", b"second", priority=0)
        claimed = await q.dequeue("work", batch_size=2)
        assert [j.id for j in claimed] == [first.id, second.id]
        assert all(j.status is JobStatus.IN_PROGRESS and j.heartbeat_at is not None for j in claimed)
        [last] = await q.dequeue("work", batch_size=5)
        assert last.id == low.id
        assert await q.dequeue("work") == []
        state = await q.read_state()
    assert {j.id for j in state.in_progress_jobs()} == {low.id, first.id, second.id}
    assert state.queued_jobs() == ()


async def test_dequeue_filters_by_entrypoint(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, layout=layout) as q:
        email = await q.enqueue("email", b"e")
        sms = await q.enqueue("sms", b"s")
        assert [j.id for j in await q.dequeue("sms")] == [sms.id]
        assert [j.id for j in await q.dequeue()] == [email.id]


async def test_ack_nack_and_heartbeat(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, layout=layout) as q:
        job = await q.enqueue("work", b"x")
        [claimed] = await q.dequeue()
        assert claimed.heartbeat_at is not None
        await asyncio.sleep(0.01)
        await q.heartbeat(job.id)
        beaten = (await q.read_state()).find(job.id)
        assert beaten is not None
        assert beaten.heartbeat_at is not None
        assert beaten.heartbeat_at > claimed.heartbeat_at
        await q.nack(job.id)
        requeued = (await q.read_state()).find(job.id)
        assert requeued is not None
        assert (requeued.status, requeued.heartbeat_at) == (JobStatus.QUEUED, None)
        [again] = await q.dequeue()
        assert again.id == job.id
        await q.ack(job.id)
        assert (await q.read_state()).jobs == ()
        for call in (q.ack, q.nack, q.heartbeat):
            with pytest.raises(JobNotFoundError) as raised:
                await call(job.id)
            assert raised.value.job_id == job.id


async def test_empty_dequeue_does_not_write(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, layout=layout) as q:
        await q.enqueue("work", b"x")
        before = await storage.read(), await log_entries(storage)
        assert await q.dequeue("other") == []
        assert (await storage.read(), await log_entries(storage)) == before


async def test_payload_limit_has_its_own_error(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, max_payload_bytes=100, layout=layout) as q:
        await q.enqueue("work", b"x" * 100)
        with pytest.raises(PayloadTooLargeError) as raised:
            await q.enqueue("work", b"x" * 101)
        assert (raised.value.size, raised.value.limit) == (101, 100)
        assert len((await q.read_state()).jobs) == 1


async def test_corrupt_state_is_reported_and_left_alone(
    backend: Backend, queue_kind: str, layout: str
) -> None:
    storage, _ = backend.new()
    garbage = b'{"not": "a queue"}'
    await storage.write(garbage)
    async with open_queue(queue_kind, storage, layout=layout) as q:
        with pytest.raises(CorruptStateError) as raised:
            await q.enqueue("work", b"x")
        assert raised.value.location == getattr(storage, "url", None)
        with pytest.raises(CorruptStateError):
            await q.dequeue()
    assert (await storage.read())[0] == garbage


async def test_state_written_by_the_original_jqueue_is_read(
    backend: Backend, queue_kind: str, layout: str
) -> None:
    storage, _ = backend.new()
    legacy = b"""{
  "version": 7,
  "jobs": [
    {
      "id": "550e8400-e29b-41d4-a716-446655440000",
      "entrypoint": "send_email",
      "payload": "eyJ0byI6ICJ1c2VyQGV4YW1wbGUuY29tIn0=",
      "status": "queued",
      "priority": 0,
      "created_at": "2024-01-01T12:00:00+00:00",
      "heartbeat_at": null
    }
  ]
}"""
    await storage.write(legacy)
    async with open_queue(queue_kind, storage, layout=layout) as q:
        [job] = await q.dequeue()
        assert job.id == "550e8400-e29b-41d4-a716-446655440000"
        assert job.payload == b'{"to": "user@example.com"}'
        assert job.created_at == datetime(2024, 1, 1, 12, tzinfo=UTC)
        state = await q.read_state()
    assert state.find(job.id) == job
    if layout == "single":
        assert state.version == 8
        assert codec.decode((await storage.read())[0]) == state
    else:  # migrated: the main object is now the log's marker
        with pytest.raises(CorruptStateError, match="log"):
            codec.decode((await storage.read())[0])
        assert await log_entries(storage) != []


async def test_a_second_handle_sees_the_first_ones_writes(
    backend: Backend, queue_kind: str, layout: str
) -> None:
    storage, name = backend.new()
    async with (
        open_queue(queue_kind, storage, layout=layout) as producer,
        open_queue(queue_kind, backend.handle(name), layout=layout) as worker,
    ):
        assert await worker.dequeue() == []
        job = await producer.enqueue("work", b"x")
        [claimed] = await worker.dequeue()
        assert claimed.id == job.id
        await producer.heartbeat(job.id)
        await worker.ack(job.id)
        with pytest.raises(JobNotFoundError):
            await producer.ack(job.id)
        assert (await producer.read_state()).jobs == ()


async def test_concurrent_queues_on_a_new_object_lose_nothing(
    backend: Backend, queue_kind: str, layout: str
) -> None:
    _, name = backend.new()
    handles = [backend.handle(name) for _ in range(5)]

    async def produce(index: int) -> None:
        async with open_queue(queue_kind, handles[index], layout=layout) as q:
            for n in range(4):
                await q.enqueue("work", f"{index}-{n}".encode())

    await asyncio.gather(*(produce(i) for i in range(5)))
    async with open_queue(queue_kind, handles[0], layout=layout) as q:
        state = await q.read_state()
    assert sorted(j.payload for j in state.jobs) == sorted(
        f"{i}-{n}".encode() for i in range(5) for n in range(4)
    )


async def test_stale_jobs_are_requeued(backend: Backend, queue_kind: str, layout: str) -> None:
    storage, _ = backend.new()
    async with open_queue(queue_kind, storage, stale_timeout=timedelta(milliseconds=50), layout=layout) as q:
        job = await q.enqueue("work", b"x")
        [claimed] = await q.dequeue()
        assert claimed.id == job.id
        await asyncio.sleep(0.1)
        if queue_kind == "direct":
            assert await q.requeue_stale(timedelta(milliseconds=50)) == 1
        else:
            await q.enqueue("trigger", b"any write sweeps")
        [again] = await q.dequeue("work")
        assert again.id == job.id


async def test_memory_storage_can_start_from_given_content() -> None:
    seeded = InMemoryStorage(initial_content=b'{"version":0,"jobs":[]}')
    async with BrokerQueue(seeded) as q:
        await q.enqueue("work", b"x")
        assert len((await q.read_state()).jobs) == 1
    direct = DirectQueue(seeded)
    [job] = await direct.dequeue()
    assert await direct.requeue_stale(timedelta(0)) == 1
    assert (await direct.read_state()).find(job.id) == codec.requeued(job)
