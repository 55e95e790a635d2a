"""Bulk writes whose payloads stay in parts beside a log-structured queue (``core/log/parts.py``).

The Spark writer is built on these calls; here they run without Spark, on a local file and
on S3 (moto), through a DirectQueue and a BrokerQueue.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend, Clock
from jqueue import DirectQueue, JobSpec, JobStatus, LogSettings, QueuePausedError, QueuePolicy
from jqueue.core.formats.entry import ENTRY_PREFIX, decode_entry
from jqueue.core.formats.part_runs import ID_HEAD, PART_ROWS, AddPart
from jqueue.core.log.parts import PART_PREFIX, PartRow, StoredPart, part_name, write_part
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort
from queues import open_queue

Row = PartRow


def rows(prefix: str, count: int) -> list[Row]:
    return [Row(b"%s-%d" % (prefix.encode(), i)) for i in range(count)]


async def part(storage: KeyedStoragePort, entries: list[Row], age: timedelta = timedelta(0)) -> StoredPart:
    return await write_part(storage, "bulk", to_micros(utc_now() - age), entries)


async def test_parts_are_added_in_one_commit_and_their_payloads_are_read_from_the_parts(
    file_or_s3: Backend, queue_kind: str
) -> None:
    storage, name = file_or_s3.new_keyed()
    now = to_micros(utc_now())
    mixed = [
        Row(b"late", 0, "k-late", now + 3_600_000_000),
        Row(b"urgent", -5, "k-urgent", tenant="acme"),
        Row(b"plain"),
    ]
    parts = [await part(storage, rows("a", 300)), await part(storage, mixed)]
    async with open_queue(queue_kind, storage) as q:
        await q.enqueue("bulk", b"before", priority=-9)
        version = (await q.stats()).version
        assert await q.bulk.add_parts(parts) == 303
        assert (await q.stats()).version == version + 1
        [before] = await q.dequeue("bulk")
        assert before.payload == b"before"
        await q.ack(before)
        [urgent] = await q.dequeue("bulk")
        assert (urgent.payload, urgent.priority, urgent.dedup_key) == (b"urgent", -5, "k-urgent")
        assert urgent.tenant == "acme"  # a part's column, through the commit's add_part
        await q.ack(urgent)
        late = [j for j in await q.jobs(limit=None) if j.dedup_key == "k-late"]
        assert late[0].not_before is not None
        assert late[0].not_before > utc_now() + timedelta(minutes=59)

    payloads_in_the_log = []
    for seq, entry in enumerate(sorted(await storage.list_names(ENTRY_PREFIX)), start=1):
        payloads_in_the_log += decode_entry(await storage.get(entry) or b"", seq, entry).payloads
    assert payloads_in_the_log == [b"before"]  # the bulk write's payloads stay in the parts
    assert len(await storage.list_names(PART_PREFIX)) == 2

    # A new process replays the log (no checkpoint was written) and reads payloads from the parts.
    async with DirectQueue(file_or_s3.handle(name)) as fresh:
        claimed = await fresh.dequeue("bulk", batch_size=301)
        assert sorted(j.payload for j in claimed) == sorted([b"plain"] + [b"a-%d" % i for i in range(300)])
        assert len({j.id for j in claimed}) == 301
        await fresh.ack_many(claimed)
        await fresh.checkpoint()
    async with DirectQueue(file_or_s3.handle(name)) as from_checkpoint:
        [left] = await from_checkpoint.jobs(limit=None)
        assert (left.payload, left.status) == (b"late", JobStatus.QUEUED)


async def test_a_dedup_key_already_in_the_queue_is_not_staged_again(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new_keyed()
    async with DirectQueue(storage) as q:
        await q.enqueue("bulk", b"first", dedup_key="k1")
        written = await part(
            storage,
            [Row(b"dup", dedup_key="k1"), Row(b"new", dedup_key="k2"), Row(b"again", dedup_key="k2")],
        )
        assert await q.bulk.add_parts([written]) == 1
        assert sorted(j.payload for j in await q.jobs(limit=None)) == [b"first", b"new"]


async def test_nothing_is_added_when_the_commit_is_refused(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new_keyed()
    async with DirectQueue(storage) as q:
        await q.pause("bulk", enqueues=True)
        with pytest.raises(QueuePausedError):
            await q.bulk.add_parts([await part(storage, rows("a", 100)), await part(storage, rows("b", 100))])
        assert await q.count() == 0


async def test_a_write_abandoned_before_publishing_is_discarded_after_the_staged_timeout(
    file_or_s3: Backend, clock: Clock
) -> None:
    storage, _ = file_or_s3.new_keyed()
    policy = QueuePolicy(staged_timeout=timedelta(minutes=30))
    async with DirectQueue(storage, policy=policy) as q:
        await q.bulk.stage_many([JobSpec("bulk", b"%d" % i) for i in range(10)], "dead-driver")
        clock.advance(timedelta(minutes=29))
        await q.enqueue("other", b"1")
        assert (await q.stats()).entrypoints["bulk"].staged == 10
        clock.advance(timedelta(minutes=2))
        await q.enqueue("other", b"2")  # any commit discards what was staged too long ago
        assert "bulk" not in (await q.stats()).entrypoints
        assert await q.bulk.publish("dead-driver") == 0


async def test_compaction_deletes_old_unreferenced_parts_and_keeps_the_rest(file_or_s3: Backend) -> None:
    storage, _ = file_or_s3.new_keyed()
    log = LogSettings(checkpoint_every=1, retention=timedelta(seconds=1), part_lifetime=timedelta(minutes=1))
    old_orphan = await part(storage, rows("o", 2), age=timedelta(hours=2))
    young_orphan = await part(storage, rows("y", 2))
    old_linked = await part(storage, rows("l", 2), age=timedelta(hours=2))
    async with DirectQueue(storage) as q:  # links it within the default lifetime of a day
        await q.bulk.add_parts([old_linked])
    async with DirectQueue(storage, log=log) as q:
        for _ in range(3):  # checkpoints; the last compacts with one taken over a second before
            await q.enqueue("tick", b"")
            await asyncio.sleep(1.3)
            await q.checkpoint()
            await q.enqueue("tick", b"")
    names = set(await storage.list_names(PART_PREFIX))
    assert names == {part_name(young_orphan.segment), part_name(old_linked.segment)}
    assert part_name(old_orphan.segment) not in names
    async with DirectQueue(storage, log=log) as q:
        assert sorted(j.payload for j in await q.dequeue("bulk", batch_size=5)) == [b"l-0", b"l-1"]


async def test_parts_older_than_their_lifetime_or_on_a_single_object_queue_are_refused(
    file_or_s3: Backend,
) -> None:
    storage, _ = file_or_s3.new_keyed()
    stale = await part(storage, rows("s", 1), age=timedelta(days=2))
    async with DirectQueue(storage) as q:
        with pytest.raises(ValueError, match="older than the part lifetime"):
            await q.bulk.add_parts([stale])
    single, _ = file_or_s3.new_keyed()
    async with DirectQueue(single, layout="single") as q:
        with pytest.raises(ValueError, match="need the log layout"):
            await q.bulk.add_parts([await part(storage, rows("s", 1))])


@pytest.mark.parametrize("rows", [[(0, PART_ROWS + 1)], [(0, PART_ROWS), (PART_ROWS, PART_ROWS + 2)]])
def test_an_entry_that_links_more_rows_than_a_part_holds_is_refused(rows: list[tuple[int, int]]) -> None:
    """A damaged count would otherwise make a reader build millions of jobs from a few bytes."""
    run = AddPart(1 << 62 | 5, "0" * ID_HEAD, "bulk", 1, JobStatus.QUEUED, rows)
    with pytest.raises(ValueError, match="more than a part's"):
        run.effects()
    assert len(AddPart(1 << 62 | 5, "0" * ID_HEAD, "bulk", 1, JobStatus.QUEUED, [(0, 3)]).effects()) == 3
