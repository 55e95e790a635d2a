"""The worker runtime on real storage: success, failure, time limits, lost leases, hooks, pauses."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    Backoff,
    DirectQueue,
    Job,
    JobResult,
    JobStatus,
    LocalFileSystemStorage,
    Outcome,
    QueuePolicy,
    Worker,
)
from jqueue.testing import Faults, instrumented
from worker_handlers import square_in_process

FAST = QueuePolicy(max_attempts=3, backoff=Backoff(initial=timedelta(milliseconds=50), jitter=0))


async def test_burst_runs_every_job_once_and_drains_exactly(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    seen: Counter[bytes] = Counter()
    async with DirectQueue(storage) as q:
        await q.enqueue_many("work", [b"%d" % i for i in range(120)])
        await q.enqueue("other", b"not mine")

        async def handle(job: Job) -> None:
            await asyncio.sleep(0.001)
            seen[job.payload] += 1

        stats = await Worker(q, {"work": handle}, concurrency=8).burst()
        assert seen == Counter(b"%d" % i for i in range(120))
        assert (stats.claimed, stats.acked, stats.failed) == (120, 120, 0)
        assert [j.entrypoint for j in await q.jobs()] == ["other"]
        assert len(await q.history(outcome=JobStatus.ACKED)) == 120


async def test_a_worker_acks_with_its_next_claim_and_holds_at_most_its_concurrency(
    tmp_path: Path,
) -> None:
    jobs, concurrency = 60, 4
    running, most_running, most_held = 0, 0, 0
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        await q.enqueue_many("work", [b"%d" % i for i in range(jobs)])
        before = (await q.read_state()).version

        async def handle(job: Job) -> None:
            nonlocal running, most_running, most_held
            running += 1
            most_running = max(most_running, running)
            held = len((await q.read_state()).in_progress_jobs())  # claimed, not yet acked
            most_held = max(most_held, held)
            running -= 1

        stats = await Worker(q, {"work": handle}, concurrency=concurrency).burst()
        commits = (await q.read_state()).version - before
    assert (stats.claimed, stats.acked) == (jobs, jobs)
    assert most_running <= concurrency
    assert most_held == concurrency  # the claim that carries an ack takes that job's place
    # an ack and a claim apiece would take at least jobs + jobs / concurrency commits
    assert commits <= jobs


async def test_failures_are_retried_with_back_off_then_dead_with_the_error(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    attempts: Counter[bytes] = Counter()
    async with DirectQueue(storage, policy=FAST) as q:
        await q.enqueue_many("work", [b"ok", b"flaky", b"bad"])
        worker = Worker(q, concurrency=2)

        @worker.handler("work")
        def handle(job: Job) -> None:  # sync: runs in a thread
            attempts[job.payload] += 1
            assert threading.current_thread() is not threading.main_thread()
            if job.payload == b"bad" or (job.payload == b"flaky" and job.attempts == 1):
                raise ValueError(f"cannot do {job.payload.decode()}")

        stats = await worker.burst()
        assert attempts == Counter({b"ok": 1, b"flaky": 2, b"bad": 3})
        assert stats.outcomes[Outcome.ACKED] == 2
        assert (stats.outcomes[Outcome.RETRIED], stats.outcomes[Outcome.DEAD]) == (3, 1)
        [dead] = await q.dead_letters()
        assert dead.last_error is not None
        error, trace = dead.last_error.split("\n", 1)
        assert (dead.payload, dead.attempts, error) == (b"bad", 3, "ValueError: cannot do bad")
        assert trace.startswith("Traceback (most recent call last):")
        assert 'raise ValueError(f"cannot do {job.payload.decode()}")' in trace  # the handler's own line


async def test_a_handler_past_its_time_limit_is_cancelled_and_counts_as_a_failure(
    file_or_s3: Backend,
) -> None:
    storage, _ = file_or_s3.new()
    cancelled = asyncio.Event()
    async with DirectQueue(storage, policy=QueuePolicy(max_attempts=1)) as q:
        await q.enqueue("slow", b"x")
        worker = Worker(q)

        @worker.handler("slow", timeout=timedelta(milliseconds=200))
        async def handle(job: Job) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        stats = await worker.burst()
        assert cancelled.is_set()
        assert (stats.timed_out, stats.outcomes[Outcome.DEAD]) == (1, 1)
        [dead] = await q.dead_letters()
        assert dead.last_error == "timed out after 0.2 s"


async def test_sync_handlers_can_run_in_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JQUEUE_TEST_PARENT_PID", str(os.getpid()))
    async with DirectQueue(
        LocalFileSystemStorage(tmp_path / "q.json"), policy=QueuePolicy(max_attempts=1)
    ) as q:
        await q.enqueue_many("square", [b"1", b"2", b"-3"])
        worker = Worker(q, concurrency=2)
        worker.register("square", square_in_process, in_process=True)
        stats = await worker.burst()
        assert (stats.acked, stats.outcomes[Outcome.DEAD]) == (2, 1)
        [dead] = await q.dead_letters()
        assert dead.last_error is not None
        assert dead.last_error.splitlines()[0] == "ValueError: negative"
        assert 'raise ValueError("negative")' in dead.last_error  # the traceback from the handler's process


async def test_a_job_that_hangs_past_its_lease_cannot_touch_the_new_holder(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    gate = asyncio.Event()  # open; cleared, it holds the worker's writes (cut off from its storage)
    gate.set()
    held_writes = Faults(gate=gate, affects=lambda kind, name: kind in ("write", "create"))
    gated = instrumented(LocalFileSystemStorage(path), held_writes)
    started, finish = asyncio.Event(), asyncio.Event()
    lease = timedelta(milliseconds=600)
    async with DirectQueue(gated) as cut_off, DirectQueue(LocalFileSystemStorage(path)) as other:
        job = await other.enqueue("work", b"x")
        worker = Worker(cut_off, visibility_timeout=lease)

        @worker.handler("work")
        async def handle(claimed: Job) -> None:
            gate.clear()  # from now on the worker's heartbeats cannot land
            started.set()
            await finish.wait()

        results: list[JobResult] = []
        worker.on("after_job")(results.append)
        running = asyncio.create_task(worker.run(install_signals=False))
        await started.wait()
        await asyncio.sleep(lease.total_seconds() + 0.2)
        [taken_over] = await other.dequeue()
        assert (taken_over.id, taken_over.attempts) == (job.id, 2)
        finish.set()
        gate.set()
        while not results:
            await asyncio.sleep(0.02)
        assert results[0].outcome is Outcome.LOST
        [still] = await other.jobs()
        assert (still.status, still.lease) == (JobStatus.IN_PROGRESS, taken_over.lease)
        await other.ack(taken_over)
        worker.stop()
        stats = await running
        assert stats.outcomes[Outcome.LOST] == 1


async def test_hooks_and_structured_logs_report_each_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        await q.enqueue_many("work", [b"1", b"2"])
        worker = Worker(q, concurrency=1)
        worker.register("work", lambda job: None)
        worker.on("start")(lambda w: events.append("start"))
        worker.on("before_job")(lambda job: events.append(f"before {job.payload.decode()}"))

        @worker.on("after_job")
        async def after(result: JobResult) -> None:
            events.append(f"after {result.job.payload.decode()} {result.outcome}")

        worker.on("stop")(lambda w, stats: events.append(f"stop {stats.acked}"))
        with caplog.at_level(logging.INFO, logger="jqueue.worker"):
            await worker.burst()
        assert events == ["start", "before 1", "after 1 acked", "before 2", "after 2 acked", "stop 2"]
        records = [r for r in caplog.records if hasattr(r, "outcome")]
        assert [(r.__dict__["entrypoint"], r.__dict__["outcome"]) for r in records] == [("work", "acked")] * 2
        assert all(r.__dict__["run_s"] >= 0 and r.__dict__["wait_s"] >= 0 for r in records)


async def test_a_paused_entrypoint_is_left_alone_until_resumed(tmp_path: Path) -> None:
    done: list[bytes] = []
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as q:
        await q.enqueue_many("work", [b"1", b"2"])
        await q.pause("work")

        async def handle(job: Job) -> None:
            done.append(job.payload)

        worker = Worker(q, {"work": handle}, max_poll_interval=timedelta(milliseconds=100))
        running = asyncio.create_task(worker.run(install_signals=False))
        await asyncio.sleep(0.4)
        assert done == []
        await q.resume("work")
        while len(done) < 2:
            await asyncio.sleep(0.02)
        worker.stop()
        assert (await running).acked == 2


async def test_an_idle_worker_polls_with_back_off_and_never_writes(tmp_path: Path) -> None:
    storage = instrumented(LocalFileSystemStorage(tmp_path / "q.json"))
    async with DirectQueue(storage) as q:
        await q.enqueue("other", b"not for this worker")
        writes = storage.writes
        polls = 0

        async def handle(job: Job) -> None:
            raise AssertionError("nothing to run")

        worker = Worker(q, {"work": handle}, poll_interval=timedelta(milliseconds=10))
        real_dequeue = q.dequeue

        async def counted(*args: object, **kwargs: object) -> list[Job]:
            nonlocal polls
            polls += 1
            return await real_dequeue(*args, **kwargs)  # type: ignore[arg-type]

        q.dequeue = counted  # type: ignore[method-assign]
        running = asyncio.create_task(worker.run(install_signals=False))
        await asyncio.sleep(1.0)
        worker.stop()
        await running
        assert storage.writes == writes
        assert 3 <= polls <= 12  # 10, 20, 40 ... ms apart, not every 10 ms (100 polls)
