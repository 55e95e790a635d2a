"""The worker runtime when things go wrong: a flaky storage, a storage that stays down, jobs that
always fail (safe defaults), a queue of a set that fails, and waits counted from the due time."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jqueue import (
    Backoff,
    BrokerQueue,
    DirectQueue,
    InMemoryStorage,
    Job,
    JobResult,
    JobStatus,
    Outcome,
    QueueSet,
    StorageError,
    Worker,
)
from jqueue.testing import Faults, instrumented

QUICK: dict[str, Any] = {
    "poll_interval": timedelta(milliseconds=5),
    "max_poll_interval": timedelta(milliseconds=50),
}


async def test_a_worker_outlives_a_flaky_storage_and_runs_every_job() -> None:
    inner = InMemoryStorage(name="flaky-worker")
    async with DirectQueue(inner) as q:
        jobs = await q.enqueue_many("work", [b"%d" % n for n in range(2000)])
    flaky = instrumented(inner, Faults(fail_rate=0.05), seed=11)
    done: list[str] = []

    async def handle(job: Job) -> None:
        done.append(job.id)

    async with BrokerQueue(flaky) as broker:
        worker = Worker(broker, {"work": handle}, concurrency=10, max_outage=timedelta(seconds=60), **QUICK)
        stats = await asyncio.wait_for(worker.burst(), 120)
    assert flaky.failures > 5
    assert set(done) == {job.id for job in jobs}
    async with DirectQueue(inner) as q:
        assert await q.count() == 0
    assert stats.acked == len(set(done))


async def test_a_storage_that_stays_down_stops_the_worker_with_its_error() -> None:
    inner = InMemoryStorage(name="down")
    async with DirectQueue(inner) as q:
        await q.enqueue("work", b"x")
    down = instrumented(inner, Faults(fail_rate=1.0))

    async def handle(job: Job) -> None:
        raise AssertionError("never claimed")

    async with DirectQueue(down) as q:
        worker = Worker(q, {"work": handle}, max_outage=timedelta(seconds=1), **QUICK)
        with pytest.raises(StorageError, match="max_outage") as raised:
            await asyncio.wait_for(worker.run(install_signals=False), 30)
    assert "injected failure" in str(raised.value.cause)


async def test_by_default_a_job_that_always_fails_ends_dead_and_burst_ends() -> None:
    async def fail(job: Job) -> None:
        raise RuntimeError("always")

    async with DirectQueue(InMemoryStorage(name="poison")) as q:
        job = await q.enqueue("work", b"poison")
        assert (Worker(q, {"work": fail}).max_attempts, Worker(q, {"work": fail}).backoff) == (5, Backoff())
        worker = Worker(q, {"work": fail}, backoff=Backoff(initial=timedelta(milliseconds=5)), **QUICK)
        stats = await asyncio.wait_for(worker.burst(), 60)
        [dead] = await q.dead_letters()
    assert (dead.id, dead.attempts, dead.dead_reason) == (job.id, 5, "max_attempts")
    assert dead.last_error is not None
    assert dead.last_error.splitlines()[0] == "RuntimeError: always"
    assert (stats.outcomes[Outcome.RETRIED], stats.outcomes[Outcome.DEAD]) == (4, 1)


class LateAnswers(DirectQueue):
    """A queue whose claims answer late, as on a busy machine: the claim has committed (or
    looked and found nothing) well before its answer arrives."""

    lateness = 0.05
    answering = asyncio.Event()

    async def dequeue(self, *args: Any, **kwargs: Any) -> list[Job]:
        jobs = await super().dequeue(*args, **kwargs)
        if jobs:
            self.answering.set()
        await asyncio.sleep(self.lateness)
        return jobs


async def test_a_burst_does_not_end_while_a_retry_that_fell_due_during_its_claim_waits() -> None:
    async def fail(job: Job) -> None:
        raise RuntimeError("always")

    async with LateAnswers(InMemoryStorage(name="late")) as q:
        job = await q.enqueue("work", b"poison")
        backoff = Backoff(initial=timedelta(milliseconds=10), jitter=0)
        stats = await asyncio.wait_for(Worker(q, {"work": fail}, backoff=backoff, **QUICK).burst(), 60)
        assert [dead.id for dead in await q.dead_letters()] == [job.id]
        assert (stats.outcomes[Outcome.RETRIED], stats.outcomes[Outcome.DEAD]) == (4, 1)


async def test_a_stop_while_a_claim_answers_releases_what_it_claimed() -> None:
    async def never(job: Job) -> None:
        raise AssertionError("a job claimed while stopping ran")

    async with LateAnswers(InMemoryStorage(name="stopped-mid-claim")) as q:
        q.lateness, q.answering = 1.0, asyncio.Event()
        job = await q.enqueue("work", b"x")
        worker = Worker(q, {"work": never}, **QUICK)
        running = asyncio.create_task(worker.run(install_signals=False))
        await asyncio.wait_for(q.answering.wait(), 30)  # committed: the job is the worker's
        worker.stop()
        await asyncio.wait_for(running, 30)
        [back] = await q.jobs(limit=None)
        assert (back.id, back.status, back.attempts) == (job.id, JobStatus.QUEUED, 1)  # not held to its lease


async def test_a_failing_queue_of_a_set_does_not_keep_the_others_jobs() -> None:
    healthy, broken = InMemoryStorage(name="healthy"), InMemoryStorage(name="broken")
    async with DirectQueue(healthy) as good, DirectQueue(instrumented(broken, Faults(fail_rate=1.0))) as bad:
        jobs = await good.enqueue_many("work", [b"a", b"b"])
        pairs = await QueueSet([good, bad]).dequeue("work", batch_size=3)
        assert [(queue, job.id) for queue, job in pairs] == [(good, job.id) for job in jobs]
        assert await good.count(JobStatus.IN_PROGRESS) == 2
        with pytest.raises(StorageError):
            await QueueSet([bad, bad]).dequeue("work")


async def test_a_delayed_jobs_wait_counts_from_when_it_became_due() -> None:
    results: list[JobResult] = []

    async def handle(job: Job) -> None:
        pass

    async with DirectQueue(InMemoryStorage(name="delayed")) as q:
        await q.enqueue("work", b"later", delay=timedelta(seconds=1))
        await asyncio.sleep(1.2)  # due now; a burst claims only what is due
        worker = Worker(q, {"work": handle}, **QUICK)
        worker.on("after_job")(results.append)
        await asyncio.wait_for(worker.burst(), 30)
    [result] = results
    assert result.job.not_before is not None
    assert 0 <= result.waited < 0.8, "the delay was counted as waiting"


def test_an_in_process_handler_that_cannot_reach_its_process_is_refused_at_registration() -> None:
    def local(job: Job) -> None:
        pass

    worker = Worker(DirectQueue(InMemoryStorage(name="pickling")))
    with pytest.raises(ValueError, match="module-level function") as raised:
        worker.register("work", local, in_process=True)
    assert "local" in str(raised.value)
    worker.register("work", local)  # a thread is fine
