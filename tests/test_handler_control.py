"""A handler steers its job: ``Retry`` after its own delay, ``Fail`` to the dead letters at once;
on the event loop, in a thread, in a process, and through ``jqueue serve``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    DirectQueue,
    Fail,
    Job,
    LocalFileSystemStorage,
    Outcome,
    QueuePolicy,
    Retry,
    Worker,
    connect,
)
from servers import jqueue_serve
from worker_handlers import give_up_in_process


async def test_retry_waits_its_own_delay_and_counts_as_an_attempt(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    policy = QueuePolicy(max_attempts=3)  # and no back-off: the next attempt would be at once
    async with DirectQueue(storage, policy=policy) as q:
        job = await q.enqueue("call", b"x")
        worker = Worker(q)

        @worker.handler("call")
        async def handle(job: Job) -> None:
            raise Retry(timedelta(seconds=0.5), reason="rate limited")

        stats = await worker.burst()
        assert (stats.outcomes[Outcome.RETRIED], stats.outcomes[Outcome.DEAD]) == (2, 1)
        [record] = await q.history()
        gaps = [
            (b - a).total_seconds() for a, b in zip(record.claimed_at, record.claimed_at[1:], strict=False)
        ]
        assert len(gaps) == 2
        assert min(gaps) >= 0.5
        assert (record.outcome, record.error, record.reason) == (
            "dead",
            "Retry: rate limited",
            "max_attempts",
        )
        assert record.job_id == job.id
    with pytest.raises(ValueError, match="delay"):
        Retry(timedelta(seconds=-1))


async def test_fail_sends_the_job_to_the_dead_letters_with_attempts_left(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    async with DirectQueue(storage) as q:
        await q.enqueue("parse", b"{", max_attempts=5)
        await q.enqueue("parse", b"ok")
        worker = Worker(q)

        @worker.handler("parse")
        def handle(job: Job) -> None:  # sync: in a thread
            if job.payload == b"{":
                raise Fail("not JSON")

        stats = await worker.burst()
        assert (stats.acked, stats.outcomes[Outcome.DEAD], stats.outcomes[Outcome.RETRIED]) == (1, 1, 0)
        [dead] = await q.dead_letters()
        assert (dead.attempts, dead.dead_reason, dead.last_error) == (1, "failed", "Fail: not JSON")


async def test_fail_in_a_handler_process(tmp_path: Path) -> None:
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        await q.enqueue("use", b"thing", max_attempts=4)
        worker = Worker(q)
        worker.register("use", give_up_in_process, in_process=True)
        await worker.burst()
        [dead] = await q.dead_letters()
        assert (dead.attempts, dead.dead_reason, dead.last_error) == (1, "failed", "Fail: cannot use thing")


async def test_fail_through_the_broker(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url:
        async with connect(url, "jobs") as q:
            await q.enqueue("parse", b"{", max_attempts=5)
            worker = Worker(q)

            @worker.handler("parse")
            async def handle(job: Job) -> None:
                raise Fail("not JSON")

            stats = await worker.burst()
            assert stats.outcomes[Outcome.DEAD] == 1
        async with DirectQueue(LocalFileSystemStorage(tmp_path / "root" / "jobs.json")) as direct:
            [dead] = await direct.dead_letters()
            assert (dead.attempts, dead.dead_reason) == (1, "failed")
