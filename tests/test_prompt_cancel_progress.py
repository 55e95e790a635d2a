"""Under default settings (a 5-minute visibility timeout, heartbeats every 100 s) a running job's
progress and its cancel reach the queue within seconds, not at the next heartbeat, and many
progress reports cost a few heartbeats, not a commit each. Locally on file and S3, and
through ``jqueue serve``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import BrokerQueue, JobStatus, Outcome, Worker, connect, current_job, storage_from_url
from jqueue.core.runtime.heartbeat import PROMPT_EVERY
from jqueue.ports.queue import Queue
from servers import jqueue_serve

BOUND = 10.0
"""Seconds within which progress and a cancel must show: PROMPT_EVERY (2 s), a commit and a
margin for a loaded machine; the heartbeat of the default settings comes after 100 s."""


async def _wait_for(what: str, condition: object) -> float:
    """Wait until ``condition()`` holds; return the seconds it took (at most ``BOUND``)."""
    started = time.monotonic()
    while not await condition():  # type: ignore[operator]
        took = time.monotonic() - started
        assert took < BOUND, f"{what} did not show within {BOUND:g} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def _progress_and_cancel(worker_queue: Queue, reader: BrokerQueue) -> None:
    """Run a worker with default settings; its job reports progress many times, then waits to
    be cancelled."""
    reports = 0

    worker = Worker(worker_queue)

    @worker.handler("long")
    async def long(job: object) -> None:
        nonlocal reports
        for step in range(200):
            current_job().progress(step / 400, note=f"step {step}")
            reports += 1
            await asyncio.sleep(0.005)
        await asyncio.sleep(600)

    job = await reader.enqueue("long", b"")
    running = asyncio.create_task(worker.run(install_signals=False))
    try:
        await _wait_for("the claim", lambda: _status_is(reader, job.id, JobStatus.IN_PROGRESS))
        before = (await reader.insight.commit_stats()).commits if _local(worker_queue, reader) else None

        async def progressed() -> bool:
            found = await reader.find(job.id)
            return found is not None and found.progress_note == "step 199"

        took = await _wait_for("the progress", progressed)
        print(f"progress showed in {took:.2f} s")
        if before is not None:  # the worker commits through the reader: count its commits
            commits = (await reader.insight.commit_stats()).commits - before
            assert commits <= 4, f"{reports} progress reports took {commits} commits"

        assert await reader.cancel(job.id) is False  # running: its worker is asked to stop it
        asked = time.monotonic()
        await _wait_for("the cancel", lambda: _finished_as(reader, job.id, JobStatus.CANCELLED))
        print(f"the cancel ended the job in {time.monotonic() - asked:.2f} s")

        async def counted() -> bool:  # the worker counts it once its settling call returns
            return worker.stats.outcomes[Outcome.CANCELLED] == 1

        await _wait_for("the worker's count of the cancel", counted)
    finally:
        worker.stop(immediate=True)
        await running


def _local(worker_queue: Queue, reader: BrokerQueue) -> bool:
    return worker_queue is reader


async def _status_is(queue: BrokerQueue, job_id: str, status: JobStatus) -> bool:
    found = await queue.find(job_id)
    return found is not None and found.status is status


async def _finished_as(queue: BrokerQueue, job_id: str, outcome: JobStatus) -> bool:
    record = await queue.finished(job_id)
    return record is not None and record.outcome is outcome


def test_the_prompt_interval_is_well_within_the_bound() -> None:
    assert PROMPT_EVERY.total_seconds() * 2 < BOUND


async def test_progress_and_cancel_reach_a_local_queue_within_seconds(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new()
    async with BrokerQueue(storage) as queue:
        await _progress_and_cancel(queue, queue)


@pytest.mark.slow
async def test_progress_and_cancel_reach_a_queue_through_the_broker_within_seconds(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        reader = BrokerQueue(storage_from_url((root / "q.json").as_uri()))  # reads beside the broker
        async with connect(url, "q") as remote, reader:
            await _progress_and_cancel(remote, reader)
