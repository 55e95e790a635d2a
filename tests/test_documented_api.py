"""Code from the original jqueue documentation, run as written (only storage locations changed):
the queue API, workers, heartbeats and errors (the storage blocks: test_documented_storage.py).

Each test follows one code block of the reference document; blocks that use a storage run on
both ``InMemoryStorage`` and ``LocalFileSystemStorage``, blocks that use "a queue" on both
``BrokerQueue`` and ``DirectQueue`` (the document says both expose the same interface).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from documented import Queue, Storage, opened
from jqueue import (
    BrokerQueue,
    CASConflictError,
    DirectQueue,
    GroupCommitLoop,
    HeartbeatManager,
    InMemoryStorage,
    Job,
    JobNotFoundError,
    JobStatus,
    JQueueError,
    LocalFileSystemStorage,
    QueueState,
    StorageError,
)


def test_quick_start(new_storage: Callable[[], Storage], capsys: pytest.CaptureFixture[str]) -> None:
    finals: list[QueueState] = []

    async def main() -> None:
        async with BrokerQueue(new_storage()) as q:
            # Producer: add jobs to the queue
            await q.enqueue("send_email", b'{"to": "alice@example.com"}')
            await q.enqueue("send_email", b'{"to": "bob@example.com"}')
            # Consumer: claim and process
            jobs = await q.dequeue("send_email", batch_size=2)
            for job in jobs:
                async with HeartbeatManager(q, job.id):
                    print(f"Sending email: {job.payload}")  # type: ignore[str-bytes-safe]  # as documented
                await q.ack(job.id)
            finals.append(await q.read_state())

    asyncio.run(main())
    assert capsys.readouterr().out.splitlines() == [
        'Sending email: b\'{"to": "alice@example.com"}\'',
        'Sending email: b\'{"to": "bob@example.com"}\'',
    ]
    assert finals[0].jobs == ()


async def test_web_handler_and_worker_loop(new_storage: Callable[[], Storage], kind: str) -> None:
    resized: list[bytes] = []
    batches: list[int] = []
    done = asyncio.Event()

    async def resize(payload: bytes) -> None:
        resized.append(payload)
        if len(resized) == 7:
            done.set()

    async def worker(q: Queue) -> None:
        while not done.is_set():  # the documented `while True`, bounded
            jobs = await q.dequeue("resize_image", batch_size=5)
            if not jobs:
                await asyncio.sleep(0.01)
                continue
            batches.append(len(jobs))
            for job in jobs:
                async with HeartbeatManager(q, job.id, interval=timedelta(seconds=30)):
                    await resize(job.payload)
                await q.ack(job.id)

    async with opened(kind, new_storage()) as q:
        for n in range(7):
            image_bytes = f"image {n}".encode()
            # web handler
            await q.enqueue("resize_image", payload=image_bytes, priority=0)
        await asyncio.wait_for(worker(q), timeout=60)  # bounded; generous for a loaded machine
        assert sorted(resized) == sorted(f"image {n}".encode() for n in range(7))
        assert batches == [5, 2]
        assert (await q.read_state()).jobs == ()


async def test_priorities(new_storage: Callable[[], Storage], kind: str) -> None:
    async with opened(kind, new_storage()) as q:
        middle = await q.enqueue("report", b"payload", priority=5)  # enqueued first
        urgent = await q.enqueue("report", b"payload", priority=0)  # urgent
        best_effort = await q.enqueue("report", b"payload", priority=10)  # best-effort
        order = [(await q.dequeue("report"))[0].id for _ in range(3)]
        assert order == [urgent.id, middle.id, best_effort.id]


@pytest.mark.parametrize("fails", [False, True])
async def test_transcode_block(new_storage: Callable[[], Storage], kind: str, fails: bool) -> None:
    async def transcode(payload: bytes) -> bytes:
        if fails:
            raise RuntimeError("codec crashed")
        return payload[::-1]

    async with opened(kind, new_storage()) as q:
        await q.enqueue("transcode_video", b"video")
        [job] = await q.dequeue("transcode_video")
        try:
            async with HeartbeatManager(q, job.id, interval=timedelta(seconds=30)):
                result = await transcode(job.payload)  # might take minutes
            await q.ack(job.id)
        except Exception:
            await q.nack(job.id)  # return to queue for retry
        state = await q.read_state()
        if fails:
            back = state.find(job.id)
            assert back is not None
            assert back.status == JobStatus.QUEUED
            assert back.heartbeat_at is None
            assert [j.id for j in await q.dequeue("transcode_video")] == [job.id]
        else:
            assert result == b"oediv"
            assert state.jobs == ()


async def test_email_worker(new_storage: Callable[[], Storage]) -> None:
    processed: list[Job] = []

    async def process_email(job: Job) -> None:
        processed.append(job)

    async with BrokerQueue(new_storage()) as q:
        await q.enqueue("send_email", b'{"to": "test@example.com"}')
        [job] = await q.dequeue("send_email")
        await process_email(job)
        await q.ack(job.id)
        state = await q.read_state()
        assert len(state.jobs) == 0
    assert [j.payload for j in processed] == [b'{"to": "test@example.com"}']


@pytest.mark.parametrize("backend", ["file", "memory"])
async def test_direct_queue_block(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = LocalFileSystemStorage("queue.json") if backend == "file" else InMemoryStorage()
    q = DirectQueue(storage)
    job = await q.enqueue("task", b"data")
    [claimed] = await q.dequeue("task")
    assert (claimed.id, claimed.payload, claimed.status) == (job.id, b"data", JobStatus.IN_PROGRESS)
    await q.ack(claimed.id)
    assert (await q.read_state()).jobs == ()
    if backend == "file":
        assert (tmp_path / "queue.json").is_file()


async def test_broker_gather_block(new_storage: Callable[[], Storage]) -> None:
    storage = new_storage()
    async with BrokerQueue(storage) as q:
        # These three enqueues are batched into a single storage write
        jobs = await asyncio.gather(
            q.enqueue("task", b"1"),
            q.enqueue("task", b"2"),
            q.enqueue("task", b"3"),
        )
    assert [j.payload for j in jobs] == [b"1", b"2", b"3"]
    assert len({j.id for j in jobs}) == 3
    state = await DirectQueue(storage).read_state()
    assert sorted(j.payload for j in state.queued_jobs("task")) == [b"1", b"2", b"3"]


async def test_heartbeat_manager_block(new_storage: Callable[[], Storage], kind: str) -> None:
    worked: list[bytes] = []

    async def long_running_work(payload: bytes) -> None:
        worked.append(payload)

    async with opened(kind, new_storage()) as q:
        for n in range(3):
            await q.enqueue("work", b"%d" % n)
        jobs = await q.dequeue("work", batch_size=3)
        job = jobs[0]
        async with HeartbeatManager(q, job.id, interval=timedelta(seconds=30)):
            await long_running_work(job.payload)
        # heartbeat task is cancelled on exit
        async with HeartbeatManager(q, jobs[1].id, timedelta(seconds=30)):  # interval by position
            await long_running_work(jobs[1].payload)
        claimed_at = jobs[2].heartbeat_at
        assert claimed_at is not None
        async with HeartbeatManager(q, jobs[2].id, interval=timedelta(milliseconds=20)):
            await asyncio.sleep(0.15)
        refreshed = (await q.read_state()).find(jobs[2].id)
        assert refreshed is not None
        assert refreshed.heartbeat_at is not None
        assert refreshed.heartbeat_at > claimed_at
        assert worked == [b"0", b"1"]


async def test_requeue_stale_direct_queue(new_storage: Callable[[], Storage]) -> None:
    q = DirectQueue(new_storage())
    job = await q.enqueue("task", b"x")
    await q.dequeue("task")
    requeued = await q.requeue_stale(timeout=timedelta(minutes=5))
    print(f"Recovered {requeued} stale jobs")
    assert requeued == 0
    await asyncio.sleep(0.05)
    requeued = await q.requeue_stale(timeout=timedelta(milliseconds=10))
    assert isinstance(requeued, int)
    assert requeued == 1
    back = (await q.read_state()).find(job.id)
    assert back is not None
    assert back.status == JobStatus.QUEUED


async def test_api_reference_block(new_storage: Callable[[], Storage], kind: str) -> None:
    async with opened(kind, new_storage()) as q:
        assert await q.dequeue() == []
        a = await q.enqueue(entrypoint="a", payload=b"1", priority=5)
        b = await q.enqueue("a", b"2", priority=0)
        c = await q.enqueue("a", b"3", 5)
        d = await q.enqueue("other", b"4")  # priority defaults to 0
        assert all(isinstance(j, Job) for j in (a, b, c, d))
        assert d.priority == 0
        state = await q.read_state()
        assert isinstance(state, QueueState)
        assert isinstance(state.jobs, tuple)
        assert isinstance(state.version, int)
        queued = list(state.queued_jobs())
        assert [j.id for j in queued] == [b.id, d.id, a.id, c.id]
        assert queued == sorted(queued, key=lambda j: (j.priority, j.created_at))
        assert [j.id for j in state.queued_jobs(entrypoint="a")] == [b.id, a.id, c.id]
        assert state.find(a.id) == a
        assert state.find("no-such-job") is None

        versions = [state.version]
        jobs = await q.dequeue(entrypoint=None, batch_size=2)
        assert isinstance(jobs, list)
        assert [j.id for j in jobs] == [b.id, d.id]
        versions.append((await q.read_state()).version)
        assert await q.dequeue("nothing-here") == []
        await q.heartbeat(b.id)
        versions.append((await q.read_state()).version)
        await q.nack(d.id)
        await q.ack(b.id)
        state = await q.read_state()
        versions.append(state.version)
        assert versions == sorted(set(versions))  # strictly increasing
        assert list(state.in_progress_jobs()) == []
        assert {j.id for j in state.queued_jobs()} == {a.id, c.id, d.id}


@pytest.mark.parametrize("call", ["ack", "nack", "heartbeat", "HeartbeatManager"])
async def test_documented_job_id_keyword(new_storage: Callable[[], Storage], kind: str, call: str) -> None:
    async with opened(kind, new_storage()) as q:
        job = await q.enqueue("work", b"x")
        await q.dequeue("work")
        if call == "ack":
            await q.ack(job_id=job.id)
            assert (await q.read_state()).jobs == ()
        elif call == "nack":
            await q.nack(job_id=job.id)
            assert [j.id for j in (await q.read_state()).queued_jobs()] == [job.id]
        elif call == "heartbeat":
            await q.heartbeat(job_id=job.id)
        else:
            async with HeartbeatManager(queue=q, job_id=job.id, interval=timedelta(seconds=30)):
                pass
        assert len((await q.read_state()).jobs) == (0 if call == "ack" else 1)


async def test_job_attributes_block(new_storage: Callable[[], Storage]) -> None:
    q = DirectQueue(new_storage())
    job = await q.enqueue("send_email", b"\x00bytes", priority=3)
    assert isinstance(job.id, str)
    assert job.entrypoint == "send_email"
    assert job.payload == b"\x00bytes"
    assert job.priority == 3
    assert job.status == JobStatus.QUEUED
    assert job.heartbeat_at is None
    assert job.created_at.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - job.created_at) < timedelta(seconds=5)
    assert len({JobStatus.QUEUED, JobStatus.IN_PROGRESS, JobStatus.DEAD}) == 3
    [claimed] = await q.dequeue()
    assert claimed.status == JobStatus.IN_PROGRESS
    assert claimed.heartbeat_at is not None
    assert abs(datetime.now(UTC) - claimed.heartbeat_at) < timedelta(seconds=5)
    with pytest.raises((TypeError, ValueError, AttributeError)):
        claimed.priority = 0  # "Job is a frozen Pydantic model"
    assert claimed.priority == 3


async def test_errors_block(new_storage: Callable[[], Storage], kind: str) -> None:
    assert all(issubclass(e, JQueueError) for e in (CASConflictError, JobNotFoundError, StorageError))
    async with opened(kind, new_storage()) as q:
        job = await q.enqueue("task", b"x")
        for call in (q.ack, q.nack, q.heartbeat):
            with pytest.raises(JobNotFoundError) as raised:
                await call("no-such-job")
            assert raised.value.job_id == "no-such-job"
        await q.dequeue("task")
        await q.ack(job.id)
        try:  # noqa: SIM105 (the documented pattern)
            await q.ack(job.id)
        except JobNotFoundError:
            pass  # already removed, safe to ignore


async def collect_metrics(q: BrokerQueue) -> dict[str, Any]:
    state = await q.read_state()
    now = datetime.now(UTC)
    queued = state.queued_jobs()
    return {
        "queue_depth": len(queued),
        "in_progress": len(state.in_progress_jobs()),
        "version": state.version,
        "oldest_queued_age_s": ((now - min(j.created_at for j in queued)).total_seconds() if queued else 0),
    }


async def test_collect_metrics_block(new_storage: Callable[[], Storage]) -> None:
    async with BrokerQueue(new_storage()) as q:
        assert (await collect_metrics(q))["oldest_queued_age_s"] == 0
        for n in range(3):
            await q.enqueue("task", b"%d" % n)
        await q.dequeue("task")
        await asyncio.sleep(0.02)
        metrics = await collect_metrics(q)
        assert (metrics["queue_depth"], metrics["in_progress"]) == (2, 1)
        assert metrics["version"] == (await q.read_state()).version
        assert 0.02 <= metrics["oldest_queued_age_s"] < 5


class Recorder:
    """A test double with only the documented ``_HasHeartbeat`` method."""

    def __init__(self, forward: Queue | None = None) -> None:
        self.calls: list[str] = []
        self.forward = forward

    async def heartbeat(self, job_id: str) -> None:
        self.calls.append(job_id)
        if self.forward is not None:
            await self.forward.heartbeat(job_id)


async def test_heartbeat_manager_with_test_double() -> None:
    double = Recorder()
    # The documented protocol is `async heartbeat(job_id: str)`; the package's annotation differs.
    async with HeartbeatManager(double, "job-1", interval=timedelta(milliseconds=10)):
        await asyncio.sleep(0.1)
    calls = len(double.calls)
    assert calls >= 3
    assert set(double.calls) == {"job-1"}
    await asyncio.sleep(0.05)
    assert len(double.calls) == calls  # cancelled on exit


async def test_heartbeat_manager_stops_silently(new_storage: Callable[[], Storage], kind: str) -> None:
    async with opened(kind, new_storage()) as q:
        job = await q.enqueue("task", b"x")
        await q.dequeue("task")
        double = Recorder(forward=q)
        async with HeartbeatManager(double, job.id, interval=timedelta(milliseconds=10)):
            await q.ack(job.id)  # acked "by another process": heartbeat raises JobNotFoundError
            await asyncio.sleep(0.1)
        assert double.calls == [job.id]


async def test_broker_error_isolation(new_storage: Callable[[], Storage]) -> None:
    async with BrokerQueue(new_storage()) as q:
        waiting = await q.enqueue("task", b"first")
        results = await asyncio.gather(
            q.enqueue("task", b"second"), q.nack("no-such-job"), q.dequeue("task"), return_exceptions=True
        )
        added, bad_nack, claimed = results
        assert isinstance(added, Job)
        assert isinstance(bad_nack, JobNotFoundError)
        assert isinstance(claimed, list)
        assert [j.id for j in claimed] == [waiting.id]
        state = await q.read_state()
        assert {j.id for j in state.jobs} == {waiting.id, added.id}


async def test_broker_stale_timeout(new_storage: Callable[[], Storage]) -> None:
    async with BrokerQueue(new_storage(), stale_timeout=timedelta(seconds=0.5)) as q:
        job = await q.enqueue("task", b"x")
        await q.dequeue("task")
        await q.enqueue("other", b"write before the timeout")
        still = (await q.read_state()).find(job.id)
        assert still is not None
        assert still.status == JobStatus.IN_PROGRESS
        await asyncio.sleep(0.6)
        await q.enqueue("other", b"write after the timeout")
        back = (await q.read_state()).find(job.id)
        assert back is not None
        assert back.status == JobStatus.QUEUED


async def test_group_commit_loop(new_storage: Callable[[], Storage]) -> None:
    storage = new_storage()
    loop = GroupCommitLoop(storage)
    await loop.start()
    job = await loop.enqueue("task", b"x")
    [claimed] = await loop.dequeue("task")
    async with HeartbeatManager(loop, claimed.id, interval=timedelta(milliseconds=10)):
        await asyncio.sleep(0.05)
    await loop.ack(job.id)
    late = asyncio.create_task(loop.enqueue("task", b"submitted before stop"))
    await asyncio.sleep(0)
    await loop.stop()  # drains what was submitted
    assert (await late).payload == b"submitted before stop"
    async with GroupCommitLoop(storage) as again:
        [left] = await again.dequeue()
        assert left.id == (await late).id
    assert [j.id for j in (await DirectQueue(storage).read_state()).in_progress_jobs()] == [left.id]


async def test_values_jqueue_accepted_keep_their_meaning(
    new_storage: Callable[[], Storage], kind: str
) -> None:
    async with opened(kind, new_storage()) as q:
        job = await q.enqueue("task", "aGVsbG8=")  # type: ignore[arg-type]  # a str payload is base64
        assert job.payload == b"hello"
        assert await q.dequeue("task", batch_size=0) == []  # claims nothing
        [claimed] = await q.dequeue("task")
        assert claimed.id == job.id
