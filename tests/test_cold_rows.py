"""Cold rows (ADR 0015, stage 2): a process that opens a checkpoint keeps as records only the
jobs a claim does not take as they are and those it touches; the claimable jobs stay in the
slabs, and every call still sees them: claims in exactly the order of the claim heaps, across
blocks and slabs, lookups by id, cancels, purges, counts and listings."""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jqueue import DirectQueue, InMemoryStorage, JobSpec, JobStatus, LocalFileSystemStorage, LogSettings
from jqueue.core.formats.slab import OpenedSlab
from jqueue.core.formats.slab_whole import slab_tree, tree_slab
from jqueue.core.log.slabs import SlabSet
from jqueue.core.log.store import LogStore
from jqueue.domain.index import BULK_ADDS, QueueIndex

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
        assert mapped(await index_of(queue))  # a view of the file, or of the memory's bytes
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
        assert mapped(index)
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


async def test_an_entrypoint_whose_cold_rows_are_all_gone_is_not_listed() -> None:
    storage = InMemoryStorage(name="cold-gone")
    async with DirectQueue(storage, log=NEVER) as queue:
        [job] = await queue.enqueue_many("gone", [b"x"])
        await queue.enqueue("stays", b"y")
        await queue.checkpoint()
    async with DirectQueue(storage, log=NEVER) as fresh:
        assert await fresh.cancel(job.id)  # its row is dropped
        await fresh.checkpoint()
    async with DirectQueue(storage) as again:
        assert list((await again.stats()).entrypoints) == ["stays"]


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


async def without_block_orders(storage: InMemoryStorage) -> None:
    """Rewrite each slab as one written before slab headers gave their blocks' insertion numbers."""
    for name in await storage.list_names("slab/"):
        tree = slab_tree(await storage.get(name) or b"")
        assert tree["header"].pop("orders") is not None
        await storage.delete(name)
        await storage.create(name, tree_slab(tree))


@pytest.mark.parametrize("orders", ["given", "read from the blocks"])
async def test_listings_come_in_insertion_order_and_a_first_page_reads_a_few_blocks(
    monkeypatch: pytest.MonkeyPatch, orders: str
) -> None:
    storage = InMemoryStorage(name="cold-listing")
    rng = random.Random(11)
    inserted: list[tuple[str, str]] = []  # (entrypoint, id), in insertion order
    async with DirectQueue(storage, log=NEVER) as queue:
        for batch, size in enumerate(SIZES):
            entrypoint = "ab"[batch % 2]
            jobs = await queue.enqueue_many(entrypoint, [b"x"] * size, priority=rng.randrange(-3, 4))
            inserted += [(entrypoint, job.id) for job in jobs]
            if batch >= 5:
                await queue.checkpoint()
        claimed = [job.id for job in await queue.dequeue("a", batch_size=500)]  # scattered by priority
        await queue.checkpoint()
        await queue.requeue(claimed[::2])  # rows of a newer slab among the older slabs' numbers
        await queue.checkpoint()
    claimed = claimed[1::2]
    if orders != "given":
        await without_block_orders(storage)
    async with DirectQueue(storage, log=NEVER) as fresh:
        late = await fresh.enqueue_many("b", [b"y"] * 3, priority=9)  # records after every cold row
        inserted += [("b", job.id) for job in late]
        ids = [job_id for _, job_id in inserted]

        async def listed(**filters: object) -> list[str]:
            return [job.id for job in await fresh.jobs(limit=None, **filters)]  # type: ignore[arg-type]

        assert await listed() == ids
        assert await listed(entrypoint="a") == [job_id for name, job_id in inserted if name == "a"]
        assert await listed(status=JobStatus.QUEUED) == [job_id for job_id in ids if job_id not in claimed]
        assert await listed(status=JobStatus.IN_PROGRESS) == [job_id for job_id in ids if job_id in claimed]
        paged: list[str] = []
        cursor: int | None = 0
        while cursor is not None:
            page, cursor = await fresh.browse(entrypoint="b", cursor=cursor, limit=1000)
            paged += [job.id for job in page]
        assert paged == [job_id for name, job_id in inserted if name == "b"]
        decoded: list[int] = []
        block = OpenedSlab.block

        def counted(self: OpenedSlab, number: int) -> dict[str, list[Any]]:
            decoded.append(number)
            return block(self, number)

        await fresh.jobs(limit=1)  # a slab without its blocks' numbers reads them once
        monkeypatch.setattr(OpenedSlab, "block", counted)
        assert [job.id for job in await fresh.jobs(limit=3)] == ids[:3]
        assert 0 < len(decoded) <= 2  # of the slabs' 7 blocks and more


class SlowMaps(LocalFileSystemStorage):
    """A file root whose maps of slabs hang while ``slow`` is set (to cancel a checkpoint there)."""

    slow = False

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked = asyncio.Event()

    async def mapped(self, name: str) -> memoryview | None:
        if self.slow and name.startswith("slab/"):
            self.asked.set()
            await asyncio.sleep(3600)
        return await super().mapped(name)


async def test_a_checkpoint_cancelled_while_its_stored_slab_is_mapped_loses_nothing(tmp_path: Path) -> None:
    storage = SlowMaps(tmp_path / "q")
    async with DirectQueue(storage, log=NEVER) as queue:
        await queue.enqueue_many("a", [b"x"] * 100)
        await queue.checkpoint()
        second = await queue.enqueue_many("a", [b"y"] * 50)
        storage.slow = True
        checkpointing = asyncio.ensure_future(queue.checkpoint())
        await asyncio.wait_for(storage.asked.wait(), 60)  # stored; its slab being mapped
        checkpointing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checkpointing
        storage.slow = False
        await queue.enqueue_many("a", [b"z"] * 10)
        await queue.checkpoint()
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q"), log=NEVER) as fresh:
        assert await fresh.count() == 160
        listed = {job.id for job in await fresh.jobs(limit=None)}
        assert {job.id for job in second} <= listed


async def test_a_bulk_enqueue_answers_a_cold_job_that_holds_one_of_its_ids_and_adds_it_once() -> None:
    storage = InMemoryStorage(name="cold-repeat")
    claimable = await loaded(storage)
    cold_id = claimable[len(claimable) // 2][1]
    async with DirectQueue(storage, log=NEVER) as fresh:
        assert cold_id not in (await index_of(fresh)).records  # still in a slab
        specs = [JobSpec("a", b"new %d" % n) for n in range(2 * BULK_ADDS)]
        specs[BULK_ADDS] = JobSpec("b", b"repeated", id=cold_id)
        jobs = await fresh.enqueue_many(specs)
        assert jobs[BULK_ADDS].id == cold_id
        assert jobs[BULK_ADDS].payload != b"repeated"  # the job that held the id, as it was
        assert await fresh.count() == JOBS + 1 + len(specs) - 1
