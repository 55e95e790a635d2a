"""Pauses, throttles, browsing and queue sets, shared through storage: file and S3, both layouts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import DirectQueue, JobStatus, Layout, QueuePausedError, QueueSet
from queues import open_queue


async def test_a_pause_in_one_process_stops_claims_in_another(
    file_or_s3: Backend, layout: Layout, queue_kind: str
) -> None:
    storage, name = file_or_s3.new()
    async with (
        open_queue(queue_kind, storage, layout=layout) as admin,
        DirectQueue(file_or_s3.handle(name), layout=layout) as worker,
    ):
        await admin.enqueue_many("a", [b"a1", b"a2"])
        await admin.enqueue_many("b", [b"b1", b"b2"])
        await admin.pause("a")
        assert [j.payload for j in await worker.dequeue()] == [b"b1"]
        await admin.pause()
        assert await worker.dequeue(["a", "b"], batch_size=4) == []
        await worker.enqueue("a", b"a3")  # enqueues go on while only claims are paused
        stats = await worker.stats()
        assert (stats.paused_claims, stats.paused_enqueues) == ([None, "a"], [])
        await admin.resume()
        assert [j.payload for j in await worker.dequeue(batch_size=4)] == [b"b2"]
        await admin.resume("a")
        assert [j.payload for j in await worker.dequeue(batch_size=4)] == [b"a1", b"a2", b"a3"]


async def test_pausing_enqueues_refuses_new_jobs_until_resumed(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as admin,
        DirectQueue(file_or_s3.handle(name), layout=layout) as producer,
    ):
        await producer.enqueue("a", b"before")
        await admin.pause("a", enqueues=True)
        with pytest.raises(QueuePausedError) as raised:
            await producer.enqueue_many("a", [b"x", b"y"])
        assert raised.value.entrypoint == "a"
        await producer.enqueue("b", b"other entrypoint")
        await admin.resume("a")
        await producer.enqueue("a", b"after")
        assert [j.payload for j in await producer.jobs(entrypoint="a")] == [b"before", b"after"]


async def test_a_throttle_is_shared_by_every_process(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as one,
        DirectQueue(file_or_s3.handle(name), layout=layout) as two,
    ):
        await one.enqueue_many("a", [b"%d" % i for i in range(6)])
        await one.enqueue_many("b", [b"b"] * 3)
        await one.throttle(3, per=timedelta(hours=1))
        await one.throttle(1, per=timedelta(hours=1), entrypoint="a")
        first = await one.dequeue(batch_size=5)
        second = await two.dequeue(batch_size=5)
        claimed = [j.entrypoint for j in first + second]
        assert sorted(claimed) == ["a", "b", "b"]
        await two.throttle(None, per=timedelta(hours=1))
        assert [j.entrypoint for j in await one.dequeue(batch_size=5)] == ["b"]
        await one.throttle(None, per=timedelta(hours=1), entrypoint="a")
        assert len(await two.dequeue(batch_size=10)) == 5


async def test_browsing_and_counting_change_nothing(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        await q.enqueue_many("a", [b"1", b"2", b"3"])
        await q.enqueue("b", b"4", delay=timedelta(hours=1))
        [claimed] = await q.dequeue("a")
        version = (await q.read_state()).version
        assert [j.payload for j in await q.jobs(JobStatus.QUEUED)] == [b"2", b"3", b"4"]
        assert [j.id for j in await q.jobs(JobStatus.IN_PROGRESS)] == [claimed.id]
        assert [j.payload for j in await q.jobs(limit=2)] == [b"1", b"2"]
        assert await q.count(entrypoint="a") == 3
        assert await q.count(older_than=timedelta(hours=1)) == 0
        assert [j.payload for j in await q.peek("a", limit=5)] == [b"2", b"3"]
        stats = await q.stats()
        a, b = stats.entrypoints["a"], stats.entrypoints["b"]
        assert (a.queued, a.in_progress, b.queued, b.scheduled) == (2, 1, 0, 1)
        assert a.oldest_queued_at is not None
        assert stats.total(JobStatus.QUEUED) == 3
        assert (await q.read_state()).version == version


async def test_a_queue_set_claims_across_queues_in_priority_order(
    file_or_s3: Backend, layout: Layout
) -> None:
    (first_storage, _), (second_storage, _) = file_or_s3.new(), file_or_s3.new()
    async with (
        DirectQueue(first_storage, layout=layout) as first,
        DirectQueue(second_storage, layout=layout) as second,
    ):
        await first.enqueue_many("work", [b"first-5"], priority=5)
        await second.enqueue_many("work", [b"second-1"], priority=1)
        await first.enqueue_many("work", [b"first-2"], priority=2)
        await second.enqueue_many("work", [b"second-9"], priority=9)
        both = QueueSet([first, second])
        claimed = await both.dequeue(batch_size=3)
        assert [job.payload for _, job in claimed] == [b"second-1", b"first-2", b"first-5"]
        for queue, job in claimed:
            await queue.ack(job)
        [(queue, last)] = await both.dequeue(batch_size=3)
        assert (queue, last.payload) == (second, b"second-9")
        assert await both.dequeue() == []
