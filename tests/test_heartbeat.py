"""HeartbeatManager: beats while the block runs, stops quietly, survives transient failures."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jqueue import BrokerQueue, HeartbeatManager, InMemoryStorage, Job, StorageError

TICK = timedelta(milliseconds=20)


async def test_beats_refresh_the_claim_and_stop_on_exit() -> None:
    async with BrokerQueue(InMemoryStorage()) as q:
        await q.enqueue("work", b"x")
        [job] = await q.dequeue()
        async with HeartbeatManager(q, job.id, interval=TICK) as manager:
            await asyncio.sleep(0.15)
        beaten = (await q.read_state()).find(job.id)
        assert beaten is not None
        assert beaten.heartbeat_at is not None
        assert job.heartbeat_at is not None
        assert beaten.heartbeat_at > job.heartbeat_at
        assert manager._task is None
        version = (await q.read_state()).version
        await asyncio.sleep(0.1)
        assert (await q.read_state()).version == version


class FlakyQueue:
    """Forwards heartbeats to a real queue, failing the first ones with a storage error."""

    def __init__(self, queue: BrokerQueue, failures: int) -> None:
        self.queue = queue
        self.failures = failures
        self.calls = 0

    async def heartbeat(self, job: Job | str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageError("injected", OSError("network down"))
        await self.queue.heartbeat(job)


async def test_a_transient_failure_skips_one_beat() -> None:
    async with BrokerQueue(InMemoryStorage()) as q:
        await q.enqueue("work", b"x")
        [job] = await q.dequeue()
        flaky = FlakyQueue(q, failures=2)
        async with HeartbeatManager(flaky, job.id, interval=TICK):
            await asyncio.sleep(0.2)
        assert flaky.calls >= 4
        beaten = (await q.read_state()).find(job.id)
        assert beaten is not None
        assert beaten.heartbeat_at != job.heartbeat_at


async def test_a_job_that_is_gone_stops_the_beats_quietly() -> None:
    async with BrokerQueue(InMemoryStorage()) as q:
        await q.enqueue("work", b"x")
        [job] = await q.dequeue()
        counting = FlakyQueue(q, failures=0)
        async with HeartbeatManager(counting, job.id, interval=TICK) as manager:
            await q.ack(job.id)
            await asyncio.sleep(0.15)
            assert manager._task is not None
            assert manager._task.done()
        assert counting.calls == 1
