"""Batches: many jobs enqueued, acked or nacked in one commit, on a file and on S3, both layouts."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import BrokerQueue, Job, JobNotFoundError, JobStatus, Layout, LeaseLostError, PayloadTooLargeError
from queues import open_queue


async def test_enqueue_many_is_one_commit(file_or_s3: Backend, layout: Layout, queue_kind: str) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout, max_payload_bytes=10) as q:
        await q.enqueue("first", b"x")
        before = (await q.read_state()).version
        jobs = await q.enqueue_many("work", [str(i).encode() for i in range(50)], priority=2)
        state = await q.read_state()
        assert state.version == before + 1
        assert [j.payload for j in state.queued_jobs("work")] == [str(i).encode() for i in range(50)]
        assert [j.id for j in jobs] == [j.id for j in state.queued_jobs("work")]
        assert {j.priority for j in jobs} == {2}
        assert await q.enqueue_many("work", []) == []
        with pytest.raises(PayloadTooLargeError):
            await q.enqueue_many("work", [b"ok", b"x" * 11])
        assert len((await q.read_state()).jobs) == 51


async def test_ack_many_and_nack_many_are_all_or_nothing(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue("direct", storage, layout=layout) as q:
        await q.enqueue_many("work", [b"a", b"b", b"c", b"d"])
        a, b, c, d = await q.dequeue(batch_size=4)
        await q.nack(d.id)  # d's claim is lost
        before = await q.read_state()
        with pytest.raises(LeaseLostError):
            await q.ack_many([a, b, d])
        with pytest.raises(JobNotFoundError):
            await q.nack_many([a, "no-such-job"])
        assert await q.read_state() == before
        await q.nack_many([c])
        await q.ack_many([a, b.id])
        state = await q.read_state()
        assert state.version == before.version + 2
        assert {(j.id, j.status) for j in state.jobs} == {(c.id, JobStatus.QUEUED), (d.id, JobStatus.QUEUED)}


async def test_ack_each_acks_every_job_it_can_in_one_commit_and_answers_each(
    file_or_s3: Backend, layout: Layout, queue_kind: str
) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout, max_payload_bytes=10) as q:
        await q.enqueue_many("work", [b"a", b"b", b"c", b"d", b"e"])
        a, b, c, d, e = await q.dequeue(batch_size=5)
        await q.nack(d.id)  # d's claim is lost
        before = (await q.read_state()).version
        outcomes = await q.ack_each(
            [(a, b"done a"), (d, None), (b, None), ("no-such-job", None), (c, b"x" * 11), (e, b"done e")]
        )
        assert [type(outcome) for outcome in outcomes] == [
            type(None),
            LeaseLostError,
            type(None),
            JobNotFoundError,
            PayloadTooLargeError,
            type(None),
        ]
        state = await q.read_state()
        assert state.version == before + 1
        assert {(j.id, j.status) for j in state.jobs} == {
            (c.id, JobStatus.IN_PROGRESS),
            (d.id, JobStatus.QUEUED),
        }
        assert await q.result(a.id) == b"done a"
        assert await q.result(e.id) == b"done e"
        assert await q.ack_each([]) == []


async def test_ack_and_dequeue_acks_and_claims_in_one_commit(
    file_or_s3: Backend, layout: Layout, queue_kind: str
) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout=layout, max_payload_bytes=10) as q:
        await q.enqueue_many("work", [b"a", b"b", b"c"])
        await q.enqueue_many("other", [b"o"])
        a, b = await q.dequeue("work", batch_size=2)
        await q.nack(b.id)  # b's claim is lost
        before = (await q.read_state()).version
        outcomes, claimed = await q.ack_and_dequeue(
            [(a, b"done a"), (b, None), ("no-such-job", None), (a.id, b"x" * 11)],
            "work",
            batch_size=5,
            visibility_timeout=timedelta(minutes=1),
        )
        assert [type(outcome) for outcome in outcomes] == [
            type(None),
            LeaseLostError,
            JobNotFoundError,
            PayloadTooLargeError,
        ]
        assert sorted(job.payload for job in claimed) == [b"b", b"c"]  # b, returned, is claimable again
        assert all(job.lease is not None and job.entrypoint == "work" for job in claimed)
        state = await q.read_state()
        assert state.version == before + 1
        assert await q.result(a.id) == b"done a"
        assert {(j.payload, j.status) for j in state.jobs} == {
            (b"b", JobStatus.IN_PROGRESS),
            (b"c", JobStatus.IN_PROGRESS),
            (b"o", JobStatus.QUEUED),
        }
        assert claimed[0].lease_expires_at == claimed[0].claimed_at[-1] + timedelta(minutes=1)
        outcomes, nothing = await q.ack_and_dequeue([(job, None) for job in claimed], batch_size=0)
        assert (outcomes, nothing) == ([None, None], [])
        assert [j.payload for j in (await q.read_state()).jobs] == [b"o"]
        with pytest.raises(ValueError, match="batch_size"):
            await q.ack_and_dequeue([], batch_size=-1)


async def test_a_failing_batch_in_a_group_commit_leaves_nothing_behind(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, _ = file_or_s3.new()
    async with BrokerQueue(storage, layout=layout) as q:
        await q.enqueue_many("work", [b"a", b"b"])
        a, b = await q.dequeue(batch_size=2)
        failing, added = await asyncio.gather(
            q.ack_many([a, "no-such-job"]), q.enqueue("other", b"c"), return_exceptions=True
        )
        assert isinstance(failing, JobNotFoundError)
        assert isinstance(added, Job)
        state = await q.read_state()
        assert {j.id for j in state.in_progress_jobs()} == {a.id, b.id}
        assert [j.id for j in state.queued_jobs("other")] == [added.id]
        await q.ack_many([a, b])
        assert [j.entrypoint for j in (await q.read_state()).jobs] == ["other"]
