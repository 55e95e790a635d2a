"""The benchmark's scenarios: the queue calls of one run, timed one by one and tallied."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from jqueue.core.broker import BrokerQueue
from jqueue.core.commits import Layout
from jqueue.core.direct import DirectQueue
from jqueue.core.queue import JobQueue
from jqueue.domain.models import Job
from jqueue.ports.storage import ObjectStoragePort

ENTRYPOINT = "bench"
MAX_ERROR_SAMPLES = 5

R = TypeVar("R")


@dataclass
class RunCalls:
    """What the calls of one run did, for the latency figures and the final check.

    Attributes
    ----------
    latencies : list of float
        Seconds per call, successful or not.
    enqueued : list of str
        Ids returned by successful enqueues.
    claimed : list of str
        Ids of the jobs returned by dequeues.
    acked : list of str
        Ids acked successfully.
    empty_dequeues : int
        Dequeues that returned no job.
    errors : int
        Calls that raised.
    error_samples : list of str
        The first few distinct errors.
    """

    latencies: list[float] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    empty_dequeues: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    async def _timed(self, call: Awaitable[R]) -> tuple[bool, R | None]:
        start = time.perf_counter()
        try:
            result = await call
        except Exception as exc:
            self.latencies.append(time.perf_counter() - start)
            self.errors += 1
            text = f"{type(exc).__name__}: {exc}"
            if len(self.error_samples) < MAX_ERROR_SAMPLES and text not in self.error_samples:
                self.error_samples.append(text)
            return False, None
        self.latencies.append(time.perf_counter() - start)
        return True, result

    async def enqueue(self, queue: JobQueue, payload: bytes) -> None:
        """Enqueue one job."""
        ok, job = await self._timed(queue.enqueue(ENTRYPOINT, payload))
        if ok and job is not None:
            self.enqueued.append(job.id)

    async def dequeue(self, queue: JobQueue) -> list[Job]:
        """Claim at most one job; returns what was claimed."""
        ok, jobs = await self._timed(queue.dequeue(ENTRYPOINT))
        if not ok or jobs is None:
            return []
        if not jobs:
            self.empty_dequeues += 1
        self.claimed.extend(job.id for job in jobs)
        return jobs

    async def ack(self, queue: JobQueue, job_id: str) -> None:
        """Ack one job."""
        ok, _ = await self._timed(queue.ack(job_id))
        if ok:
            self.acked.append(job_id)


def _split(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` near-equal shares."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def _enqueue_concurrently(
    queue: JobQueue, tally: RunCalls, ops: int, callers: int, payload: bytes
) -> None:
    """Run ``ops`` enqueues split over ``callers`` concurrent tasks (1: sequential)."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await tally.enqueue(queue, payload)

    await asyncio.gather(*(caller(n) for n in _split(ops, callers)))


async def _dequeue_sequentially(queue: JobQueue, tally: RunCalls, ops: int) -> None:
    """Run ``ops`` dequeues of one job each, one after another."""
    for _ in range(ops):
        await tally.dequeue(queue)


async def _mixed(queue: JobQueue, tally: RunCalls, ops: int, callers: int, payload: bytes) -> None:
    """Run ``callers`` tasks looping enqueue -> dequeue -> ack until ``ops`` calls were made."""
    budget = ops

    def take() -> bool:
        # No await between the test and the decrement: safe within one event loop.
        nonlocal budget
        if budget <= 0:
            return False
        budget -= 1
        return True

    async def caller() -> None:
        while take():
            await tally.enqueue(queue, payload)
            if not take():
                return
            for job in await tally.dequeue(queue):
                if not take():
                    return
                await tally.ack(queue, job.id)

    await asyncio.gather(*(caller() for _ in range(callers)))


async def prefill(storage: ObjectStoragePort, ops: int, payload: bytes, layout: Layout) -> list[str]:
    """Put ``ops`` jobs into the queue quickly: a broker folds concurrent enqueues into few commits.

    Returns
    -------
    list of str
        The ids of the jobs put in.
    """
    async with BrokerQueue(storage, max_payload_bytes=None, layout=layout) as broker:
        jobs = await asyncio.gather(*(broker.enqueue(ENTRYPOINT, payload) for _ in range(ops)))
    return [job.id for job in jobs]


@contextlib.asynccontextmanager
async def open_queue(kind: str, storage: ObjectStoragePort, layout: Layout) -> AsyncIterator[JobQueue]:
    """Open a ``DirectQueue`` (``kind`` "direct") or ``BrokerQueue`` ("broker") for the block."""
    if kind == "direct":
        async with DirectQueue(storage, max_payload_bytes=None, layout=layout) as direct:
            yield direct
    elif kind == "broker":
        async with BrokerQueue(storage, max_payload_bytes=None, layout=layout) as broker:
            yield broker
    else:
        raise ValueError(f"unknown queue {kind!r}")


async def run_scenario(scenario: str, queue: JobQueue, tally: RunCalls, ops: int, payload: bytes) -> None:
    """Make the ``ops`` calls of ``scenario`` on ``queue``, recording them in ``tally``.

    Raises
    ------
    ValueError
        If ``scenario`` is not one of ``SCENARIOS``.
    """
    if scenario == "enqueue-seq":
        await _enqueue_concurrently(queue, tally, ops, 1, payload)
    elif scenario == "enqueue-c10":
        await _enqueue_concurrently(queue, tally, ops, 10, payload)
    elif scenario == "enqueue-c50":
        await _enqueue_concurrently(queue, tally, ops, 50, payload)
    elif scenario == "dequeue-seq":
        await _dequeue_sequentially(queue, tally, ops)
    elif scenario == "mixed-c50":
        await _mixed(queue, tally, ops, 50, payload)
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
