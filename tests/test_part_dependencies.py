"""Jobs of parts (bulk writes, Spark's) that wait for parents: chosen ids, parents in any part of
the write or in the queue, in any order; a cycle or an unknown parent adds nothing; the
dependencies survive the log entry, reopening and checkpoints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import Backend
from jqueue import DirectQueue, Job, JobNotFoundError, JobStatus
from jqueue.core.log.parts import PART_PREFIX, PartRow, StoredPart, write_part
from jqueue.domain.dependencies import parents_first
from jqueue.domain.effects import Added
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort


async def part(storage: KeyedStoragePort, rows: list[PartRow]) -> StoredPart:
    return await write_part(storage, "bulk", to_micros(utc_now()), rows)


def by_payload(jobs: list[Job]) -> dict[bytes, Job]:
    return {job.payload: job for job in jobs}


async def test_jobs_of_parts_wait_for_parents_in_a_later_part_and_in_the_queue(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new_keyed()
    async with DirectQueue(storage) as q:
        await q.enqueue("old", b"old", id="old")
        [old] = await q.dequeue("old")
        await q.ack(old, result=b"r-old")
        children = await part(
            storage,
            [
                PartRow(b"c1", id="c1", after=("p1",)),
                PartRow(b"c2", id="c2", after=("p1", "old")),
                PartRow(b"c3", id="c3", after=("p1", "p2"), on_parent_failure="run"),
                PartRow(b"c4", after=("p2",)),  # an id made from the part's seed
            ],
        )
        parents = await part(storage, [PartRow(b"p1", id="p1"), PartRow(b"p2", id="p2"), PartRow(b"plain")])
        assert await q.bulk.add_parts([children, parents]) == 7  # the children's part first

    async with DirectQueue(storage) as q:  # the commit's entry, read again
        jobs = by_payload(await q.jobs(limit=None))
        assert {p: j.status for p, j in jobs.items()} == {
            b"c1": JobStatus.WAITING,
            b"c2": JobStatus.WAITING,
            b"c3": JobStatus.WAITING,
            b"c4": JobStatus.WAITING,
            b"p1": JobStatus.QUEUED,
            b"p2": JobStatus.QUEUED,
            b"plain": JobStatus.QUEUED,
        }
        assert jobs[b"c2"].after == ("p1", "old")
        assert jobs[b"c4"].id == children.job_ids()[3]
        assert await q.cancel("p2")  # c4 is cancelled with it; c3 runs anyway
        assert sorted(j.payload for j in await q.dequeue("bulk", batch_size=10)) == [b"p1", b"plain"]
        await q.ack("p1", result=b"r1")
        await q.checkpoint()

    async with DirectQueue(storage) as q:  # the checkpoint, read again
        claimed = by_payload(await q.dequeue("bulk", batch_size=10))
        assert sorted(claimed) == [b"c1", b"c2", b"c3"]
        assert claimed[b"c2"].parent_results == (b"r1", b"r-old")
        assert claimed[b"c3"].parent_results == (b"r1", None)
        cancelled = {h.job_id: h.error for h in await q.history(outcome=JobStatus.CANCELLED)}
        assert set(cancelled) == {"p2", children.job_ids()[3]}
        assert cancelled[children.job_ids()[3]] == "parent p2 was cancelled"


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([PartRow(b"a", id="a", after=("b",)), PartRow(b"b", id="b", after=("a",))], "cycle"),
        ([PartRow(b"a", id="a", after=("a",))], "cycle"),
        ([PartRow(b"a", id="a", after=("nowhere",))], "nowhere"),
    ],
)
async def test_a_write_whose_jobs_cannot_all_be_added_adds_none(
    file_or_s3: Backend, rows: list[PartRow], error: str
) -> None:
    storage, _ = file_or_s3.new_keyed()
    async with DirectQueue(storage) as q:
        written = [await part(storage, rows), await part(storage, [PartRow(b"fine")])]
        with pytest.raises((ValueError, JobNotFoundError), match=error):
            await q.bulk.add_parts(written)
        assert await q.count() == 0
        assert await q.bulk.delete_unused_parts(written) == 2
        assert await storage.list_names(PART_PREFIX) == []


async def test_a_part_whose_chosen_id_another_job_holds_is_not_kept_for_it(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new_keyed()
    async with DirectQueue(storage) as q:
        await q.enqueue("bulk", b"first", id="taken")
        written = await part(storage, [PartRow(b"second", id="taken")])
        assert await q.bulk.add_parts([written]) == 0
        assert [j.payload for j in await q.jobs(limit=None)] == [b"first"]
        assert await q.bulk.delete_unused_parts([written]) == 1


def added(job_id: str, after: tuple[str, ...]) -> Added:
    return Added(job_id, "e", 0, 0, JobStatus.WAITING if after else JobStatus.QUEUED, None, b"", after=after)


@st.composite
def graphs(draw: st.DrawFn) -> list[Added]:
    """Jobs in a random order, each waiting for some of those made before it (no cycle)."""
    count = draw(st.integers(0, 12))
    jobs = [
        added(
            f"j{i}",
            tuple(draw(st.lists(st.sampled_from([f"j{p}" for p in range(i)]), max_size=3))) if i else (),
        )
        for i in range(count)
    ]
    return draw(st.permutations(jobs))


@given(graphs())
def test_parents_first_puts_each_job_after_its_parents_and_keeps_the_order_otherwise(
    jobs: list[Added],
) -> None:
    ordered = parents_first(jobs)
    assert sorted(j.id for j in ordered) == sorted(j.id for j in jobs)
    position = {job.id: i for i, job in enumerate(ordered)}
    assert all(position[parent] < position[job.id] for job in jobs for parent in job.after)
    roots = [job.id for job in jobs if not job.after]
    assert [job.id for job in ordered if not job.after] == roots
    assert parents_first(ordered) == ordered  # an order that serves already is kept
    with pytest.raises(ValueError, match="cycle"):
        parents_first([*jobs, added("x", ("y",)), added("y", ("x",))])
