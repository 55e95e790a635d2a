"""Idle callers learn of new work at once: commits in the same process, and (on a local file)
commits of other processes through file-system notifications, without polling faster."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from jqueue import BrokerQueue, DirectQueue, Job, LocalFileSystemStorage, Worker
from jqueue.core.queue import ChangeFeed
from jqueue.testing import instrumented

SLOW_POLL = timedelta(seconds=20)

_ENQUEUE_ELSEWHERE = """
import asyncio, sys, time
from jqueue import DirectQueue, LocalFileSystemStorage

async def main() -> None:
    async with DirectQueue(LocalFileSystemStorage(sys.argv[1])) as q:
        await q.enqueue("work", str(time.time()).encode())

asyncio.run(main())
"""


def enqueue_in_another_process(path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    subprocess.run([sys.executable, "-c", _ENQUEUE_ELSEWHERE, str(path)], env=env, check=True, timeout=60)


async def test_a_feed_misses_no_change_between_two_waits(tmp_path: Path) -> None:
    feed = ChangeFeed(LocalFileSystemStorage(tmp_path / "q.json"))
    seen = feed.generation
    feed.notify()  # before anyone waits
    started = time.monotonic()
    assert await feed.wait(seen, 10.0) > seen
    assert time.monotonic() - started < 5.0  # at once, not after the 10 s wait
    assert await feed.wait(feed.generation, 0.05) == feed.generation  # nothing new: the time runs out


async def test_a_commit_of_another_process_wakes_a_waiting_feed(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    async with DirectQueue(LocalFileSystemStorage(path)) as q:
        await q.enqueue("warm-up", b"creates the queue")
        seen = q.changes.generation
        waiting = asyncio.ensure_future(q.changes.wait(seen, 30.0))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        started = time.monotonic()
        await asyncio.to_thread(enqueue_in_another_process, path)
        assert await asyncio.wait_for(waiting, 10.0) > seen
        assert time.monotonic() - started < 10.0
        assert q.changes.signalled


async def _claims_within(queue: BrokerQueue | DirectQueue, enqueue: object, seconds: float) -> float:
    """Run an idle worker that polls every 20 s, cause an enqueue, and return how long the job
    waited before its handler ran."""
    ran: list[float] = []
    worker = Worker(queue, concurrency=2, poll_interval=SLOW_POLL, max_poll_interval=SLOW_POLL)

    @worker.handler("work")
    async def handle(job: Job) -> None:
        ran.append(time.time() - float(job.payload.decode()))
        worker.stop()

    running = asyncio.create_task(worker.run(install_signals=False))
    await asyncio.sleep(0.3)  # the worker found nothing and sleeps
    assert callable(enqueue)
    await enqueue()
    await asyncio.wait_for(running, seconds)
    return ran[0]


async def test_an_idle_worker_runs_a_job_enqueued_by_another_process_at_once(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    async with BrokerQueue(LocalFileSystemStorage(path)) as q:
        await q.enqueue("warm-up", b"creates the queue")

        async def elsewhere() -> None:
            await asyncio.to_thread(enqueue_in_another_process, path)

        waited = await _claims_within(q, elsewhere, 15.0)
    assert waited < 5.0


async def test_an_idle_worker_runs_a_job_enqueued_through_its_own_queue_at_once(tmp_path: Path) -> None:
    storage = instrumented(LocalFileSystemStorage(tmp_path / "q.json"))  # no change signal of its own
    async with BrokerQueue(storage) as q:

        async def here() -> None:
            await q.enqueue("work", str(time.time()).encode())

        waited = await _claims_within(q, here, 5.0)
    assert waited < 1.0


async def test_a_worker_started_before_its_queue_exists_is_woken_when_it_is_created(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    async with BrokerQueue(LocalFileSystemStorage(path)) as q:

        async def elsewhere() -> None:
            await asyncio.to_thread(enqueue_in_another_process, path)

        waited = await _claims_within(q, elsewhere, 15.0)
    assert waited < 5.0
