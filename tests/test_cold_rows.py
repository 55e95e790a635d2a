"""Cold rows (ADR 0015, stage 2): a process that opens a checkpoint keeps as records only the
jobs a claim does not take as they are and those it touches; the claimable jobs stay in the
slabs, and every call still sees them: claims in exactly the order of the claim heaps, across
blocks and slabs, lookups by id, cancels, purges, counts and listings."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import DirectQueue, InMemoryStorage, JobStatus, LocalFileSystemStorage, LogSettings
from jqueue.core.log.slabs import SlabSet
from jqueue.core.log.store import LogStore
from jqueue.domain.index import QueueIndex

NEVER = LogSettings(checkpoint_every=10**9)  # only the checkpoints a test asks for
SIZES = [4_000] * 6 + [500, 500]
"""Batches, with a checkpoint after the sixth and after each of the others: slabs of two size
classes, which do not merge, so claims cross slabs as well as blocks."""
JOBS = sum(SIZES)


async def index_of(queue: DirectQueue) -> QueueIndex:
    store = await queue._opener.store()
    assert isinstance(store, LogStore)
    return store.index


def mapped(index: QueueIndex) -> bool:
    """Whether every slab of ``index`` is read from a mapping of its object (not held in memory)."""
    assert isinstance(index.cold, SlabSet)
    return all(isinstance(slab.opened.data, memoryview) for slab in index.cold.slabs)


async def loaded(
    storage: InMemoryStorage | LocalFileSystemStorage, both: bool = False
) -> list[tuple[int, str]]:
    """Fill ``storage`` with jobs of two entrypoints and mixed priorities over four slabs (one
    job in ten claimed, one delayed), and return the priority and id of each claimable one of
    entrypoint ``a`` (of both, with ``both``), in insertion order."""
    rng = random.Random(7)
    claimable: list[tuple[int, str]] = []
    async with DirectQueue(storage, log=NEVER) as queue:
        for batch, size in enumerate(SIZES):
            priority, entrypoint = rng.randrange(-3, 4), "b" if batch % 2 == 0 else "a"
            jobs = await queue.enqueue_many(entrypoint, [b"%d" % n for n in range(size)], priority=priority)
            claimable += [(priority, job.id) for job in jobs if both or entrypoint == "a"]
            if batch >= 5:
                await queue.checkpoint()
        claimed = await queue.dequeue("a", batch_size=JOBS // 10)
        await queue.enqueue("a", b"later", delay=timedelta(hours=1))
        await queue.checkpoint()
        assert mapped(await index_of(queue)) == isinstance(storage, LocalFileSystemStorage)
    taken = {job.id for job in claimed}
    return [entry for entry in claimable if entry[1] not in taken]


@pytest.mark.parametrize("root", ["memory", "file"])
async def test_a_fresh_process_claims_cold_jobs_in_claim_order_across_blocks_and_slabs(
    root: str, tmp_path: Path
) -> None:
    storage = (
        InMemoryStorage(name="cold-order") if root == "memory" else LocalFileSystemStorage(tmp_path / "q")
    )
    claimable = await loaded(storage)
    async with DirectQueue(storage, log=NEVER) as fresh:
        assert await fresh.count() == JOBS + 1
        index = await index_of(fresh)
        assert mapped(index) == (root == "file")
        assert len(index.records) <= JOBS // 10 + 1  # the claimed and the delayed jobs only
        assert isinstance(index.cold, SlabSet)
        assert len(index.cold.slabs) == 4
        for priority in range(-4, 5):  # records that stand among the cold rows
            [job] = await fresh.enqueue_many("a", [b"new"], priority=priority)
            claimable.append((priority, job.id))
        expected = [
            job_id for _, job_id in sorted(claimable, key=lambda entry: entry[0])
        ]  # then by insertion
        seen: list[str] = []
        while batch := await fresh.dequeue("a", batch_size=700):
            seen += [job.id for job in batch]
            await fresh.ack_many(batch)
        assert seen == expected
        assert await fresh.count() == JOBS + 1 + 9 - len(expected)  # nine enqueued here


async def test_a_claim_of_any_entrypoint_takes_the_best_of_every_line() -> None:
    storage = InMemoryStorage(name="cold-any")
    claimable = await loaded(storage, both=True)
    async with DirectQueue(storage, log=NEVER) as fresh:
        for priority in range(-4, 5):  # records that stand among the cold rows of both lines
            for entrypoint in ("a", "b"):
                [job] = await fresh.enqueue_many(entrypoint, [b"new"], priority=priority)
                claimable.append((priority, job.id))
        expected = [job_id for _, job_id in sorted(claimable, key=lambda entry: entry[0])]
        seen: list[str] = []
        while batch := await fresh.dequeue(batch_size=900):
            seen += [job.id for job in batch]
            await fresh.ack_many(batch)
        assert seen == expected


async def test_cold_jobs_are_found_changed_and_listed_by_id() -> None:
    storage = InMemoryStorage(name="cold-ids")
    claimable = await loaded(storage)
    some = [job_id for _, job_id in claimable[:: len(claimable) // 5]]
    async with DirectQueue(storage, log=NEVER) as fresh:
        found = await fresh.find(some[0])
        assert found is not None
        assert found.status is JobStatus.QUEUED
        assert await fresh.cancel(some[1])
        assert await fresh.purge(status=None, ids=[some[2]]) == 1
        listed = await fresh.jobs(entrypoint="b", limit=None)
        assert len(listed) == sum(SIZES[::2])
        await fresh.checkpoint()
        assert len((await index_of(fresh)).records) <= JOBS // 10 + 4
    async with DirectQueue(storage) as again:
        assert await again.find(some[1]) is None
        assert await again.find(some[2]) is None
        assert (await again.find(some[3])) is not None
        assert await again.count() == JOBS + 1 - 2


async def test_a_writer_lets_go_of_the_jobs_its_checkpoint_holds() -> None:
    storage = InMemoryStorage(name="cold-writer")
    async with DirectQueue(storage, log=NEVER) as queue:
        jobs = await queue.enqueue_many("work", [b"x"] * JOBS)
        index = await index_of(queue)
        assert len(index.records) == JOBS
        await queue.checkpoint()
        assert len(index.records) == 0  # every job is a cold row now
        assert await queue.count() == JOBS
        claimed = await queue.dequeue("work", batch_size=10)
        assert [job.id for job in claimed] == [job.id for job in jobs[:10]]
        assert len(index.records) == 10
