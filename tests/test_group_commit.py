"""What the group-commit loop adds: batching, isolation, retries on conflict, draining, closing;
on both layouts."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    DirectQueue,
    GroupCommitLoop,
    InMemoryStorage,
    JobNotFoundError,
    JobStatus,
    Layout,
    QueueClosedError,
)
from jqueue.domain.effects import PauseSet
from jqueue.domain.index import QueueIndex
from jqueue.testing import Faults, InstrumentedStorage, instrumented


def make_storage(layout: Layout, delay: float = 0.0) -> InstrumentedStorage:
    """A real in-memory object (with keyed calls for the log layout, without for the single one)
    that counts commits and reads, and whose commits take ``delay`` seconds."""
    commits_wait = Faults(
        write_latency=timedelta(seconds=delay), affects=lambda kind, name: kind in ("write", "create")
    )
    return instrumented(InMemoryStorage(name=f"group-commit-{layout}"), commits_wait, keyed=layout == "log")


async def test_concurrent_calls_share_commits(layout: Layout) -> None:
    storage = make_storage(layout, delay=0.02)
    async with BrokerQueue(storage) as q:
        jobs = await asyncio.gather(*(q.enqueue("work", str(i).encode()) for i in range(100)))
        state = await q.read_state()
    assert {j.id for j in state.jobs} == {j.id for j in jobs}
    assert storage.commits <= 5


async def test_one_bad_operation_fails_only_its_caller_and_leaves_nothing(layout: Layout) -> None:
    storage = make_storage(layout)
    async with BrokerQueue(storage) as q:
        kept = await q.enqueue("work", b"kept")
        results = await asyncio.gather(
            q.enqueue("work", b"a"),
            q.ack_many([kept.id, "no-such-job"]),  # removes `kept`, then fails: undone
            q.enqueue("work", b"b"),
            return_exceptions=True,
        )
        assert isinstance(results[1], JobNotFoundError)
        assert results[1].job_id == "no-such-job"
        state = await q.read_state()
    assert sorted(j.payload for j in state.jobs) == [b"a", b"b", b"kept"]


async def test_a_call_whose_effects_cannot_be_stored_fails_alone(layout: Layout) -> None:
    storage = make_storage(layout, delay=0.01)

    def poison(index: QueueIndex) -> None:  # an effect the encoder refuses (a lone surrogate)
        index.apply(PauseSet("\udc80", True, False))

    async with BrokerQueue(storage) as q:
        calls = [q.enqueue("work", b"%d" % n) for n in range(39)]
        results = await asyncio.gather(
            *calls[:20], q._commits.run(poison), *calls[20:], return_exceptions=True
        )
        assert [type(r) for r in results if isinstance(r, BaseException)] == [UnicodeEncodeError]
        assert len((await q.read_state()).jobs) == 39
        with pytest.raises(ValueError, match="not valid Unicode"):
            await q.enqueue("\udc80", b"x")
        [job] = await q.dequeue("work")
        await q.nack(job, error="cannot open '\udcff.txt'")
        nacked = await q.find(job.id)
        assert nacked is not None
        assert (nacked.status, nacked.last_error) == (JobStatus.QUEUED, "cannot open '\\udcff.txt'")


async def test_sequential_operations_do_not_read_again(layout: Layout) -> None:
    storage = make_storage(layout)
    for queue in (DirectQueue(storage), BrokerQueue(storage)):
        async with queue as q:
            await q.enqueue("setup", b"")  # the queue exists and this process is up to date
            storage.reset()
            for i in range(20):
                job = await q.enqueue("work", str(i).encode())
                await q.dequeue("work")
                await q.ack(job.id)
        assert storage.commits == 60
        assert storage.reads == 0


async def test_racing_brokers_reapply_their_batches(backend: Backend) -> None:
    _, name = backend.new()
    per_queue = 10 if backend.name == "s3-seaweedfs" else 40

    async def produce(tag: str) -> None:
        async with BrokerQueue(backend.handle(name)) as q:
            await asyncio.gather(*(q.enqueue("work", f"{tag}-{i}".encode()) for i in range(per_queue)))

    await asyncio.gather(*(produce(tag) for tag in "abc"))
    async with BrokerQueue(backend.handle(name)) as q:
        state = await q.read_state()
    expected = sorted(f"{tag}-{i}".encode() for tag in "abc" for i in range(per_queue))
    assert sorted(j.payload for j in state.jobs) == expected


async def test_exit_drains_pending_operations(layout: Layout) -> None:
    storage = make_storage(layout, delay=0.02)
    async with BrokerQueue(storage) as q:
        tasks = [asyncio.create_task(q.enqueue("work", str(i).encode())) for i in range(30)]
        await asyncio.sleep(0)
    assert all(t.done() and t.exception() is None for t in tasks)
    async with BrokerQueue(storage) as q:
        assert len((await q.read_state()).jobs) == 30


async def test_closing_under_a_deadline_ends_every_pending_call(layout: Layout) -> None:
    storage = make_storage(layout, delay=0.05)
    q = BrokerQueue(storage)
    await q.start()
    tasks = [asyncio.create_task(q.enqueue("work", b"%d" % n)) for n in range(2000)]
    await asyncio.sleep(0.01)
    more = [asyncio.create_task(q.enqueue("late", b"%d" % n)) for n in range(100)]
    for _ in range(10):  # the late calls reach the queue before it stops (a loaded machine may have
        await asyncio.sleep(0)  # committed the first round by now): a round is then in flight
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await q.stop()
    done, waiting = await asyncio.wait([*tasks, *more], timeout=10)
    assert not waiting, f"{len(waiting)} callers still wait"
    failures = [t.exception() for t in done if t.exception() is not None]
    assert failures
    assert all(isinstance(exc, QueueClosedError) for exc in failures)
    with pytest.raises(QueueClosedError):
        await q.enqueue("work", b"after")
    committed = {t.result().id for t in done if t.exception() is None}
    async with BrokerQueue(storage) as fresh:
        assert committed <= {job.id for job in (await fresh.read_state()).jobs}


async def test_calls_outside_the_running_loop_are_refused() -> None:
    loop = GroupCommitLoop(InMemoryStorage())
    with pytest.raises(QueueClosedError):
        await loop.enqueue("work", b"x")
    await loop.start()
    await loop.enqueue("work", b"x")
    await loop.stop()
    with pytest.raises(QueueClosedError):
        await loop.dequeue()


def test_visibility_timeout_is_the_name_and_stale_timeout_its_documented_alias() -> None:
    storage = InMemoryStorage()
    assert BrokerQueue(storage, visibility_timeout=timedelta(seconds=45)).stale_timeout == timedelta(
        seconds=45
    )
    assert GroupCommitLoop(storage, timedelta(seconds=40)).visibility_timeout == timedelta(seconds=40)
    with pytest.raises(ValueError, match="not both"):
        BrokerQueue(storage, stale_timeout=timedelta(seconds=40), visibility_timeout=timedelta(seconds=45))


async def test_after_a_slow_round_the_callers_coming_back_share_the_next_one() -> None:
    """Callers answered by a slow round (over HTTP, through ``jqueue serve``) come back a few
    milliseconds apart; the next round gathers them instead of leaving with the first."""
    storage = instrumented(InMemoryStorage(name="gather"), Faults(write_latency=timedelta(milliseconds=100)))
    async with BrokerQueue(storage) as queue:
        await queue.enqueue("warm", b"")  # a slow round: the next one gathers
        before = storage.commits

        async def comes_back(n: int) -> None:
            await asyncio.sleep(n * 0.0002)
            await queue.enqueue("e", b"")

        await asyncio.gather(*(comes_back(n) for n in range(8)))
        assert storage.commits - before == 1
