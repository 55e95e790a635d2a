"""A broker's idle claims on a backend without a change signal (object storage) read it at most
once per ``RECENT_VIEW``, however many callers poll; a claim that finds work, and every call of
a ``DirectQueue``, read as before."""

from __future__ import annotations

import asyncio
import time

import pytest

from jqueue import BrokerQueue, DirectQueue, InMemoryStorage
from jqueue.core.loop import store as store_module
from jqueue.testing import instrumented


async def test_idle_claims_of_many_callers_share_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "RECENT_VIEW", 0.5)
    storage = instrumented(InMemoryStorage())
    async with BrokerQueue(storage) as broker:
        await broker.enqueue("work", b"x")
        for job in await broker.dequeue():
            await broker.ack(job)
        started, reads = time.monotonic(), storage.reads
        for _ in range(20):
            assert await asyncio.gather(*(broker.dequeue() for _ in range(10))) == [[]] * 10
        assert time.monotonic() - started < 0.5, "too slow a machine for this check"
        assert storage.reads - reads <= 1, "idle claims read the storage each time"
        await asyncio.sleep(0.6)
        reads = storage.reads
        assert await broker.dequeue() == []
        assert storage.reads - reads >= 1, "a view older than RECENT_VIEW answered an idle claim"


async def test_a_job_committed_elsewhere_is_claimed_within_the_recent_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "RECENT_VIEW", 0.3)
    storage = InMemoryStorage()
    async with BrokerQueue(storage) as broker, DirectQueue(storage) as producer:
        assert await broker.dequeue() == []
        enqueued = await producer.enqueue("work", b"from elsewhere")
        started = time.monotonic()
        while not (claimed := await broker.dequeue()):
            assert time.monotonic() - started < 10
            await asyncio.sleep(0.01)
        assert [job.id for job in claimed] == [enqueued.id]


async def test_a_direct_queue_reads_for_every_idle_claim() -> None:
    storage = instrumented(InMemoryStorage())
    async with DirectQueue(storage) as queue:
        await queue.enqueue("work", b"x")
        for job in await queue.dequeue():
            await queue.ack(job)
        reads = storage.reads
        for _ in range(10):
            assert await queue.dequeue() == []
        assert storage.reads - reads >= 10
