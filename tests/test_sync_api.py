"""``jqueue.sync``: producing from synchronous code, on a file and through ``jqueue serve``."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    CorruptStateError,
    JobSpec,
    JobStatus,
    Layout,
    LocalFileSystemStorage,
    QueueClosedError,
    sync,
)
from jqueue.testing import instrumented
from servers import jqueue_serve


def test_calls_block_until_durable_and_threads_share_commits(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    counted = instrumented(LocalFileSystemStorage(path))
    with sync.open_queue(counted) as jobs:
        job = jobs.enqueue("mail", b"a", delay=timedelta(hours=1), dedup_key="k")
        assert job.not_before is not None
        assert jobs.enqueue("mail", b"again", dedup_key="k").id == job.id
        added = jobs.enqueue_many("mail", [b"b", b"c"])
        assert [j.payload for j in added] == [b"b", b"c"]
        assert len(jobs.enqueue_many([JobSpec("sms", b"d")])) == 1
        before = counted.writes
        barrier = threading.Barrier(20)

        def produce(i: int) -> str:
            barrier.wait()
            return jobs.enqueue("bulk", b"%d" % i).id

        with ThreadPoolExecutor(20) as pool:
            ids = list(pool.map(produce, range(20)))
        commits = counted.writes - before
        assert len(set(ids)) == 20
        assert commits < 20  # concurrent calls from threads were folded together
        stats = jobs.stats()
        assert stats.total(JobStatus.QUEUED) == 24
    with pytest.raises(QueueClosedError):
        jobs.enqueue("mail", b"late")


async def test_a_sync_producer_on_file_and_s3(file_or_s3: Backend, layout: Layout) -> None:
    storage, name = file_or_s3.new()

    def produce() -> list[str]:
        with sync.open_queue(storage, layout=layout) as jobs:
            first = jobs.enqueue("mail", b"a", dedup_key="k")
            again = jobs.enqueue("mail", b"b", dedup_key="k")
            more = jobs.enqueue_many("mail", [b"c", b"d"])
            assert again.id == first.id
            assert jobs.stats().total(JobStatus.QUEUED) == 3
            return [first.id, *(job.id for job in more)]

    ids = await asyncio.to_thread(produce)
    async with BrokerQueue(file_or_s3.handle(name), layout=layout) as q:
        claimed = await q.dequeue("mail", batch_size=10)
        assert [job.id for job in claimed] == ids
        assert [job.payload for job in claimed] == [b"a", b"c", b"d"]


async def test_what_a_sync_producer_added_is_there_for_async_readers(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    jobs = sync.open_queue(str(path))
    jobs.enqueue("mail", b"x")
    jobs.close()
    jobs.close()  # twice is fine
    async with BrokerQueue(LocalFileSystemStorage(path)) as q:
        [job] = await q.dequeue("mail")
        assert job.payload == b"x"


def test_through_a_broker(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with (
        jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log") as url,
        sync.connect(url, "jobs") as jobs,
    ):
        assert [j.payload for j in jobs.enqueue_many("mail", [b"a", b"b"])] == [b"a", b"b"]
        with pytest.raises(TypeError, match="open_queue"):
            jobs.stats()
    with sync.open_queue(str(tmp_path / "root" / "jobs.json")) as direct:
        assert direct.stats().total(JobStatus.QUEUED) == 2


def test_a_file_that_is_not_a_queue_is_reported_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text("not a queue")
    with (
        sync.open_queue(str(tmp_path / "q.json")) as jobs,
        pytest.raises(CorruptStateError, match=r"q\.json"),
    ):
        jobs.enqueue("mail", b"x")
    assert (tmp_path / "q.json").read_text() == "not a queue"


def test_a_timeout_says_which_wait_ran_out(tmp_path: Path) -> None:
    with sync.open_queue(str(tmp_path / "q.json"), timeout=timedelta(seconds=2)) as jobs:
        job = jobs.enqueue("mail", b"never run")
        with pytest.raises(TimeoutError) as waited:  # the result's own wait ran out, not the queue's
            jobs.result(job, timeout=timedelta(milliseconds=300))
        assert str(waited.value) == f"job {job.id!r} did not finish within 0.3 s"
        stuck = threading.Event()

        async def never_answers(queue: BrokerQueue) -> None:
            stuck.set()
            await asyncio.Event().wait()

        with pytest.raises(TimeoutError) as stopped:
            jobs.call(never_answers)
        assert stuck.is_set()
        assert str(stopped.value) == "no answer within the queue's timeout, 2 s"
