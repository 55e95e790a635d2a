"""Limits on the jobs in progress, enforced in the claim for every process: file and S3,
both layouts, and three worker processes measured from the history."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import BrokerQueue, DirectQueue, JobSpec, JobStatus, Layout, LocalFileSystemStorage
from jqueue.domain.records import HistoryRecord

HERE = Path(__file__).parent


async def test_a_limit_holds_across_processes_until_jobs_finish(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()
    async with (
        DirectQueue(storage, layout=layout) as admin,
        DirectQueue(file_or_s3.handle(name), layout=layout) as worker,
    ):
        await admin.enqueue_many("a", [b"a1", b"a2", b"a3", b"a4"])
        await admin.enqueue_many("b", [b"b1", b"b2"])
        await admin.limit("a", 2)
        first = await worker.dequeue(batch_size=10)
        assert sorted(job.payload for job in first) == [b"a1", b"a2", b"b1", b"b2"]
        assert await worker.dequeue("a") == []
        assert await worker.peek("a") == []
        await worker.ack(next(job for job in first if job.payload == b"a1"))
        assert [job.payload for job in await worker.dequeue("a", batch_size=5)] == [b"a3"]
        assert (await worker.stats()).limits == {"a": 2}
        await admin.limit(None, 3)  # the whole queue: a2, a3 and b1, b2 are running
        await admin.limit("a", None)
        assert await worker.dequeue("a") == []
        await worker.nack(next(job for job in first if job.payload == b"b1"), max_attempts=1)  # dies
        assert [job.payload for job in await worker.dequeue("a")] == []  # 3 still run: a2, a3, b2
        await worker.ack(next(job for job in first if job.payload == b"b2"))
        assert [job.payload for job in await worker.dequeue("a")] == [b"a4"]
        await admin.limit(None, None)
        assert (await worker.stats()).limits == {}
        with pytest.raises(ValueError, match="negative"):
            await admin.limit("a", -1)


def peak(records: list[HistoryRecord]) -> int:
    """The most jobs in progress at once: [last claim, finish) of each, overlapped."""
    events = sorted([(r.claims[-1], 1) for r in records] + [(r.finished, -1) for r in records])
    running = most = 0
    for _, step in events:  # at one instant, a finish (-1) sorts before a claim (+1)
        running += step
        most = max(most, running)
    return most


async def drained_by_three_workers(path: Path) -> list[HistoryRecord]:
    """Run three ``limit_worker.py`` processes on the queue at ``path`` until it is empty;
    return its history of acked jobs."""
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "limit_worker.py"), path.as_uri(), stdout=asyncio.subprocess.PIPE
        )
        for _ in range(3)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert (await worker.stdout.readline()).strip() == b"ready"
    assert [await asyncio.wait_for(worker.wait(), 120) for worker in workers] == [0, 0, 0]
    async with DirectQueue(LocalFileSystemStorage(path)) as queue:
        assert await queue.count() == 0
        return await queue.history(outcome=JobStatus.ACKED)


@pytest.mark.slow
async def test_three_worker_processes_never_run_more_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    async with BrokerQueue(LocalFileSystemStorage(path)) as queue:
        await queue.enqueue_many("work", [b"%d" % i for i in range(60)])
        await queue.enqueue_many("other", [b"%d" % i for i in range(20)])
        await queue.limit("work", 2)
    history = await drained_by_three_workers(path)
    work = [r for r in history if r.entrypoint == "work"]
    others = [r for r in history if r.entrypoint == "other"]
    assert (len(work), len(others)) == (60, 20)
    assert peak(work) == 2  # never more than the limit, and the limit was used
    assert peak(others) > 2  # the other entrypoint is not held back


@pytest.mark.slow
async def test_three_worker_processes_run_one_job_of_each_tenant_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    tenants = ("acme", "globex", "initech")
    async with BrokerQueue(LocalFileSystemStorage(path)) as queue:
        for tenant in tenants:
            await queue.enqueue_many([JobSpec("work", b"%d" % i, tenant=tenant) for i in range(15)])
        await queue.limit("work", 1, per_tenant=True)
        await queue.throttle(1000, timedelta(seconds=1), "work", per_tenant=True)  # counted, not reached
        assert (await queue.stats()).tenant_limits == {"work": 1}
    history = await drained_by_three_workers(path)
    assert sorted(str(r.tenant) for r in history) == sorted(tenants * 15)
    for tenant in tenants:
        assert peak([r for r in history if r.tenant == tenant]) == 1  # a tenant never exceeds its limit
    assert peak(history) > 1  # the tenants run beside each other


async def test_a_throttle_window_past_the_longest_span_is_refused_and_stores_nothing() -> None:
    from jqueue import InMemoryStorage
    from jqueue.domain.spec import LONGEST_SPAN

    async with DirectQueue(InMemoryStorage()) as q:
        version = (await q.read_state()).version
        for per in (LONGEST_SPAN + timedelta(days=1), timedelta(days=365 * 3170), timedelta(0)):
            with pytest.raises(ValueError, match="per must be"):
                await q.throttle(5, per, per_tenant=True)
        assert (await q.read_state()).version == version
        await q.throttle(5, LONGEST_SPAN, per_tenant=True)  # the longest span itself is taken
        assert (await q.read_state()).version == version + 1
