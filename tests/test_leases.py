"""Leases and fencing end to end, on a file and on S3 (moto), in both layouts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from conftest import Backend, Clock
from jqueue import DirectQueue, HeartbeatManager, JobNotFoundError, JobStatus, Layout, LeaseLostError
from queues import open_queue

SHORT = timedelta(milliseconds=300)
LEASE = timedelta(seconds=1)
BOUND = 30.0  # seconds: the longest a loaded machine may take for what should be quick


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Wait (boundedly) until ``check`` holds."""
    async with asyncio.timeout(BOUND):
        while not await check():
            await asyncio.sleep(0.02)


async def test_a_late_ack_cannot_touch_the_new_holders_job(
    file_or_s3: Backend, layout: Layout, clock: Clock
) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as worker_a,
        DirectQueue(file_or_s3.handle(name), layout=layout) as worker_b,
    ):
        assert await worker_b.dequeue() == []  # opened before the clock starts
        job = await worker_a.enqueue("work", b"x")
        [held_by_a] = await worker_a.dequeue(visibility_timeout=LEASE)
        assert (held_by_a.id, held_by_a.attempts) == (job.id, 1)
        assert held_by_a.lease is not None
        assert held_by_a.lease_expires_at is not None
        assert await worker_b.dequeue() == []
        clock.advance(LEASE + SHORT)
        [held_by_b] = await worker_b.dequeue()
        assert (held_by_b.id, held_by_b.attempts) == (job.id, 2)
        assert held_by_b.lease not in (None, held_by_a.lease)

        for late_call in (worker_a.ack, worker_a.nack, worker_a.heartbeat):
            with pytest.raises(LeaseLostError) as raised:
                await late_call(held_by_a)
            assert raised.value.job_id == job.id
        [still_b] = (await worker_a.read_state()).jobs
        assert (still_b.status, still_b.lease, still_b.attempts) == (
            JobStatus.IN_PROGRESS,
            held_by_b.lease,
            2,
        )

        await worker_b.heartbeat(held_by_b)
        await worker_b.ack(held_by_b)
        assert (await worker_a.read_state()).jobs == ()
        with pytest.raises(LeaseLostError):
            await worker_b.ack(held_by_b)
        with pytest.raises(JobNotFoundError):
            await worker_b.ack(job.id)  # unfenced, as in jqueue


async def test_heartbeats_keep_the_lease_and_its_end_frees_the_job(
    file_or_s3: Backend, layout: Layout, queue_kind: str, clock: Clock
) -> None:
    storage, name = file_or_s3.new()
    async with (
        open_queue(queue_kind, storage, layout=layout) as holder,
        open_queue(queue_kind, file_or_s3.handle(name), layout=layout) as other,
    ):
        await holder.enqueue("work", b"x")
        [job] = await holder.dequeue(visibility_timeout=LEASE)

        async def beaten_now() -> bool:
            found = (await other.read_state()).find(job.id)
            return found is not None and found.heartbeat_at == clock.now

        async with HeartbeatManager(holder, job, interval=timedelta(milliseconds=20)):
            for _ in range(3):  # 1.8 leases in all, a heartbeat in each step
                clock.advance(LEASE * 0.6)
                await eventually(beaten_now)
                assert await other.dequeue() == [], "a job was taken while heartbeats kept its lease"
        beaten = (await other.read_state()).find(job.id)
        assert beaten is not None
        assert beaten.lease == job.lease
        assert beaten.lease_expires_at is not None
        assert job.lease_expires_at is not None
        assert beaten.lease_expires_at > job.lease_expires_at
        clock.advance(LEASE + SHORT)
        [again] = await other.dequeue()
        assert (again.id, again.attempts) == (job.id, 2)


async def test_a_heartbeat_manager_stops_when_its_lease_is_lost(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        await q.enqueue("work", b"x")
        [job] = await q.dequeue()
        await q.nack(job.id)  # someone else returns it: this claim's lease is gone
        async with HeartbeatManager(q, job, interval=timedelta(milliseconds=20)) as manager:
            deadline = time.monotonic() + BOUND
            while (task := manager._task) is None:  # the first look starts it, an interval on
                assert time.monotonic() < deadline, "the heartbeats never started"
                await asyncio.sleep(0.01)
            await asyncio.wait_for(asyncio.shield(task), BOUND)  # heartbeats stop after the lease was lost
        [requeued] = (await q.read_state()).jobs
        assert (requeued.status, requeued.lease) == (JobStatus.QUEUED, None)


async def test_expired_leases_return_with_normal_traffic(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue("broker", storage, layout=layout, stale_timeout=SHORT) as q:
        job = await q.enqueue("work", b"x")
        [claimed] = await q.dequeue()
        assert claimed.lease_expires_at is not None
        assert claimed.heartbeat_at is not None
        assert claimed.lease_expires_at - claimed.heartbeat_at == SHORT  # the stale timeout is the default
        await asyncio.sleep(SHORT.total_seconds() + 0.1)
        await q.enqueue("other", b"any commit sweeps")
        [returned] = [j for j in (await q.read_state()).jobs if j.id == job.id]
        assert (returned.status, returned.lease, returned.attempts) == (JobStatus.QUEUED, None, 1)


async def test_an_explicit_sweep_returns_expired_leases_and_counts_them(
    file_or_s3: Backend, layout: Layout, queue_kind: str, clock: Clock
) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout) as q:
        await q.enqueue_many("work", [b"a", b"b", b"c"])
        await q.dequeue(batch_size=2, visibility_timeout=SHORT)
        await q.dequeue(visibility_timeout=timedelta(hours=1))
        assert await q.sweep() == 0
        clock.advance(SHORT * 2)
        assert await q.sweep() == 2
        assert await q.sweep() == 0
        assert await q.count(JobStatus.QUEUED) == 2


async def test_a_heartbeat_can_set_the_lease_to_a_new_length(
    file_or_s3: Backend, layout: Layout, clock: Clock
) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as holder,
        DirectQueue(file_or_s3.handle(name), layout=layout) as other,
    ):
        await holder.enqueue("work", b"x")
        [job] = await holder.dequeue(visibility_timeout=LEASE)
        await holder.heartbeat(job, visibility_timeout=LEASE * 10)
        seen = (await other.read_state()).find(job.id)
        assert seen is not None
        assert seen.lease_expires_at == clock.now + LEASE * 10
        clock.advance(LEASE * 5)
        assert await other.dequeue() == [], "the longer lease still holds"
        await holder.heartbeat(job, visibility_timeout=timedelta(0))
        clock.advance(SHORT)
        [again] = await other.dequeue()
        assert (again.id, again.attempts) == (job.id, 2)
        with pytest.raises(LeaseLostError):
            await holder.heartbeat(job, visibility_timeout=LEASE)


async def test_a_renewed_lease_fences_and_the_old_one_no_longer_does(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        await q.enqueue("work", b"x")
        [claimed] = await q.dequeue("work")
        renewed = await q.renew_lease(claimed, visibility_timeout=timedelta(minutes=10))
        assert (renewed.id, renewed.status) == (claimed.id, JobStatus.IN_PROGRESS)
        assert renewed.lease is not None
        assert renewed.lease != claimed.lease
        with pytest.raises(LeaseLostError):
            await q.heartbeat(claimed)  # the old lease
        with pytest.raises(LeaseLostError):
            await q.renew_lease(claimed)
    async with DirectQueue(file_or_s3.handle(name), layout=layout) as reopened:  # replayed from storage
        [found] = await reopened.jobs()
        assert found.lease == renewed.lease
        with pytest.raises(LeaseLostError):
            await reopened.ack(claimed)
        await reopened.ack(renewed)
        assert await reopened.jobs() == []
        await reopened.enqueue("other", b"y")
        with pytest.raises(LeaseLostError):  # a job that is not claimed has no lease to renew
            await reopened.renew_lease((await reopened.jobs())[0])
