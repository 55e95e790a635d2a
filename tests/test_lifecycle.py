"""Retries, dead letters, delays, time to live, dedup keys and history, on a file and on S3, both layouts."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import (
    Backoff,
    DirectQueue,
    JobNotFoundError,
    JobSpec,
    JobStatus,
    Layout,
    QueuePolicy,
)
from jqueue.domain.times import utc_now
from queues import open_queue

WAIT = timedelta(milliseconds=400)


async def test_failures_retry_until_max_attempts_then_the_job_is_dead(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    policy = QueuePolicy(max_attempts=2)
    async with DirectQueue(storage, layout=layout, policy=policy) as q:
        job = await q.enqueue("work", b"x")
        [first] = await q.dequeue()
        await q.nack(first, error="boom 1")
        [again] = await q.jobs(JobStatus.QUEUED)
        assert (again.attempts, again.last_error, again.not_before) == (1, "boom 1", None)
        [second] = await q.dequeue()
        assert second.attempts == 2
        await q.nack(second, error="boom 2")
        assert await q.dequeue() == []

    async with DirectQueue(file_or_s3.handle(name), layout=layout) as other:
        [dead] = await other.dead_letters()
        assert (dead.id, dead.status, dead.dead_reason, dead.last_error) == (
            job.id,
            JobStatus.DEAD,
            "max_attempts",
            "boom 2",
        )
        assert dead.dead_at is not None
        assert len(dead.claimed_at) == 2
        [record] = await other.history()
        assert (record.job_id, record.outcome, record.attempts, record.error) == (
            job.id,
            JobStatus.DEAD,
            2,
            "boom 2",
        )
        assert record.claimed_at == dead.claimed_at

        assert await other.requeue_dead() == 1
        [revived] = await other.dequeue()
        assert (revived.id, revived.attempts, revived.dead_reason) == (job.id, 1, None)
        await other.ack(revived)
        outcomes = [(h.job_id, h.outcome) for h in await other.history()]
        assert outcomes == [(job.id, JobStatus.DEAD), (job.id, JobStatus.ACKED)]
        assert await other.dead_letters() == []


async def test_a_jobs_own_max_attempts_wins_and_an_expired_lease_counts_as_a_failure(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(max_attempts=5)) as q:
        once = await q.enqueue("work", b"once", max_attempts=1)
        [claimed] = await q.dequeue(visibility_timeout=timedelta(milliseconds=200))
        assert claimed.id == once.id
        await asyncio.sleep(0.3)
        assert await q.dequeue() == []  # the sweep of this commit found the lease run out: dead
        [dead] = await q.dead_letters()
        assert (dead.id, dead.dead_reason, dead.last_error) == (once.id, "max_attempts", "lease expired")


async def test_nack_waits_for_the_delay_or_the_back_off(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    hour = timedelta(hours=1)
    backoff = Backoff(initial=hour, multiplier=2, maximum=10 * hour, jitter=0)
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(backoff=backoff)) as q:
        await q.enqueue("work", b"x")
        [claimed] = await q.dequeue()
        before = utc_now()
        await q.nack(claimed)
        after = utc_now()
        [waiting] = await q.jobs()
        assert waiting.not_before is not None
        assert before + hour <= waiting.not_before <= after + hour
        assert await q.dequeue() == []
        assert (await q.stats()).entrypoints["work"].scheduled == 1
        assert await q.requeue([waiting.id]) == 1
        [second] = await q.dequeue()
        await q.nack(second, delay=timedelta(0))  # an explicit delay beats the back-off
        [third] = await q.dequeue()
        assert third.attempts == 3
        await q.nack(third)  # the third failure waits twice as long
        [again] = await q.jobs()
        assert again.not_before is not None
        assert again.not_before - utc_now() > 3 * hour


async def test_delayed_jobs_wait_and_then_take_their_place_by_priority(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        soon = await q.enqueue("work", b"soon", priority=0, delay=WAIT)
        later = await q.enqueue("work", b"later", priority=0, delay=timedelta(hours=1))
        now = await q.enqueue("work", b"now", priority=5)
        past = await q.enqueue("work", b"past", priority=9, not_before=utc_now() - WAIT)
        with pytest.raises(ValueError, match="not both"):
            await q.enqueue("work", b"x", delay=WAIT, not_before=utc_now())
        waiting = {j.id for j in await q.peek(limit=5)}
        assert later.id not in waiting
        assert {now.id, past.id} <= waiting
        assert soon.not_before is not None
        if soon.not_before > utc_now():  # not due after the peek, so not during it either (a slow
            assert soon.id not in waiting  # storage may take the whole delay to get here)
        await asyncio.sleep(WAIT.total_seconds() + 0.05)
        assert await q.requeue([later.id]) == 1  # due now
        claimed = await q.dequeue(batch_size=4)
        assert [j.id for j in claimed] == [soon.id, later.id, now.id, past.id]


async def test_jobs_past_their_ttl_die_instead_of_being_claimed(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(ttl=WAIT)) as q:
        short = await q.enqueue("work", b"short")
        long = await q.enqueue("work", b"long", ttl=timedelta(hours=1))
        await asyncio.sleep(WAIT.total_seconds() + 0.05)
        [claimed] = await q.dequeue(batch_size=2)
        assert claimed.id == long.id
        [dead] = await q.dead_letters()
        assert (dead.id, dead.dead_reason) == (short.id, "ttl")


async def test_a_dedup_key_enqueues_once_while_the_job_lives_or_was_acked_recently(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    policy = QueuePolicy(history_retention=timedelta(seconds=2))
    async with (
        DirectQueue(storage, layout=layout, policy=policy) as q,
        DirectQueue(file_or_s3.handle(name), layout=layout, policy=policy) as other,
    ):
        first = await q.enqueue("hook", b"1", dedup_key="event-7")
        again = await other.enqueue("hook", b"2", dedup_key="event-7")
        assert (again.id, again.payload) == (first.id, b"1")
        batch = await q.enqueue_many(
            [JobSpec("hook", b"3", dedup_key="event-8"), JobSpec("hook", b"4", dedup_key="event-8")]
        )
        assert batch[0].id == batch[1].id
        assert await q.count() == 2

        [claimed] = await q.dequeue("hook")
        await q.ack(claimed)
        acked = await other.enqueue("hook", b"5", dedup_key="event-7")
        assert (acked.id, acked.status, acked.payload) == (first.id, JobStatus.ACKED, b"")
        assert await other.count() == 1

        await asyncio.sleep(2.1)
        fresh = await other.enqueue("hook", b"6", dedup_key="event-7")
        assert fresh.id != first.id
        assert await q.count() == 2


async def test_an_enqueue_repeated_with_its_job_ids_adds_nothing_twice(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as q,
        DirectQueue(file_or_s3.handle(name), layout=layout) as other,
    ):
        first = await q.enqueue_many([JobSpec("e", b"1", id="job-1"), JobSpec("e", b"2", id="job-2")])
        assert [job.id for job in first] == ["job-1", "job-2"]
        again = await other.enqueue_many([JobSpec("e", b"1", id="job-1"), JobSpec("e", b"3", id="job-3")])
        assert [(job.id, job.payload) for job in again] == [("job-1", b"1"), ("job-3", b"3")]
        twice = await q.enqueue_many([JobSpec("e", b"4", id="job-4"), JobSpec("e", b"5", id="job-4")])
        assert twice[0] == twice[1]
        assert await q.count() == 4
        [claimed] = await q.dequeue("e")
        await q.ack(claimed)
        late = (await other.enqueue_many([JobSpec("e", b"1", id=claimed.id)]))[0]
        assert (late.id, late.status) == (claimed.id, JobStatus.ACKED)  # the history remembers it
        assert await q.count() == 3
    with pytest.raises(ValueError, match="id"):
        JobSpec("e", b"", id="")


async def test_enqueue_many_with_options_per_job_is_one_commit(file_or_s3: Backend, layout: Layout) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        await q.enqueue("warm", b"up")
        before = (await q.read_state()).version
        specs = [
            JobSpec("a", b"1", priority=3),
            JobSpec("b", b"2", delay=timedelta(hours=1)),
            JobSpec("a", b"3", max_attempts=4, ttl=timedelta(hours=2)),
        ]
        jobs = await q.enqueue_many(specs)
        assert (await q.read_state()).version == before + 1
        assert [j.entrypoint for j in jobs] == ["a", "b", "a"]
        assert jobs[1].not_before is not None
        assert (jobs[2].max_attempts, jobs[2].deadline is not None) == (4, True)
        assert [j.payload for j in await q.dequeue(["a", "b"], batch_size=5)] == [b"3", b"1"]


async def test_history_keeps_the_newest_records_and_reads_back(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(history_limit=3)) as q:
        jobs = await q.enqueue_many("work", [str(i).encode() for i in range(5)])
        for _ in jobs:
            [claimed] = await q.dequeue()
            await q.ack(claimed)
        await q.checkpoint()
    async with DirectQueue(file_or_s3.handle(name), layout=layout) as reader:
        records = await reader.history()
        assert [r.job_id for r in records] == [j.id for j in jobs[2:]]
        for record, job in zip(records, jobs[2:], strict=True):
            assert record.outcome is JobStatus.ACKED
            assert record.created_at == job.created_at
            assert len(record.claims) == record.attempts == 1
            assert record.created <= record.claims[0] <= record.finished
        assert [r.job_id for r in await reader.history(limit=1)] == [jobs[-1].id]
        assert await reader.history(outcome=JobStatus.DEAD) == []


async def test_dead_letters_can_be_purged_by_status_entrypoint_and_age(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage, layout=layout, policy=QueuePolicy(max_attempts=1)) as q:
        await q.enqueue_many("a", [b"1", b"2"])
        await q.enqueue_many("b", [b"3"])
        for job in await q.dequeue(batch_size=3):
            await q.nack(job)
        await q.enqueue("a", b"queued")
        assert await q.count(JobStatus.DEAD) == 3
        assert await q.purge(entrypoint="b") == 1
        assert await q.purge(older_than=timedelta(hours=1)) == 0
        assert await q.purge() == 2
        assert [j.payload for j in await q.jobs()] == [b"queued"]
        with pytest.raises(JobNotFoundError):
            await q.requeue_dead(["no-such-job"])
        assert await q.purge(status=None) == 1
        assert await q.count() == 0


async def test_state_survives_reopening_and_checkpoints(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with open_queue("broker", storage, layout=layout, policy=QueuePolicy(max_attempts=1)) as q:
        await q.enqueue_many(
            [JobSpec("a", b"1", dedup_key="k"), JobSpec("b", b"2", delay=timedelta(hours=1))]
        )
        await q.enqueue("c", b"3", ttl=timedelta(hours=1), max_attempts=3)
        [claimed] = await q.dequeue("a")
        await q.nack(claimed, error="bad")
        await q.pause("c", enqueues=True)
        await q.throttle(5, per=timedelta(minutes=1), entrypoint="b")
        expected = (await q.read_state(), await q.history(), await q.stats())
        await q.checkpoint()
    for _ in range(2):
        async with DirectQueue(file_or_s3.handle(name), layout=layout) as reader:
            state, history, stats = await reader.read_state(), await reader.history(), await reader.stats()
            assert (state.jobs, history) == (expected[0].jobs, expected[1])
            assert (stats.paused_claims, stats.paused_enqueues, stats.throttles) == (
                ["c"],
                ["c"],
                {"b": (5, 60.0)},
            )
            assert (await reader.enqueue("a", b"again", dedup_key="k")).id == claimed.id


async def test_a_bulk_write_is_staged_in_parts_and_published_in_one_commit(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()
    async with DirectQueue(storage, layout=layout) as q:
        first = await q.bulk.stage_many([JobSpec("bulk", b"%d" % i) for i in range(3)], "write-1")
        await q.bulk.stage_many([JobSpec("bulk", b"%d" % i) for i in range(3, 5)], "write-1")
        await q.bulk.stage_many([JobSpec("bulk", b"x")], "write-2")
        assert {(j.status, j.batch) for j in first} == {(JobStatus.STAGED, "write-1")}
        assert await q.dequeue("bulk") == []
        assert (await q.stats()).entrypoints["bulk"].staged == 6
        await q.checkpoint()
    async with DirectQueue(file_or_s3.handle(name), layout=layout) as other:
        assert await other.peek("bulk") == []
        version = (await other.read_state()).version
        assert await other.bulk.publish("write-1") == 5
        assert (await other.read_state()).version == version + 1
        assert await other.bulk.publish("write-1") == 0
        assert await other.bulk.discard("write-2") == 1
        claimed = await other.dequeue("bulk", batch_size=10)
        assert [j.payload for j in claimed] == [b"%d" % i for i in range(5)]
        assert await other.count(JobStatus.STAGED) == 0
