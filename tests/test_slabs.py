"""Checkpoints as manifests of slabs (ADR 0015): a checkpoint writes what changed since the last
one, slabs merge so that they stay few, every checkpoint reads back as the state it was taken
of, and compaction deletes the slabs no checkpoint needs."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import sys
import time
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jqueue import CorruptStateError, DirectQueue, InMemoryStorage, JobStatus, LogSettings
from jqueue.core.formats.checkpoint import Manifest, decode_manifest
from jqueue.core.formats.entry import CHECKPOINT_PREFIX
from jqueue.core.formats.payload_refs import payload_ref
from jqueue.core.formats.slab import SLAB_PREFIX, id_hash, open_slab, row_key, slab_name
from jqueue.core.formats.slab_block import BLOCK_ROWS
from jqueue.core.formats.slab_whole import decode_slab, slab_tree
from jqueue.core.log import checkpoints, slab_plan
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import FANOUT, merge, merge_due, plan
from jqueue.core.log.slabs import SlabSet
from jqueue.core.log.store import LogStore
from jqueue.core.loop.switching import QUICK_SWITCH_SECONDS
from jqueue.domain.effects import Added
from jqueue.domain.index import QueueIndex
from jqueue.domain.records import RECORD_COLUMNS, JobRecord
from jqueue.domain.times import to_micros, utc_now
from merging import Merging

S = 1_000_000
T0 = 1_800_000_000 * S
NEVER = LogSettings(checkpoint_every=10**9)  # only the checkpoints a test asks for


async def newest_manifest(storage: InMemoryStorage) -> Manifest:
    [*_, newest] = sorted(await storage.list_names(CHECKPOINT_PREFIX))
    return decode_manifest(await storage.get(newest) or b"", newest)


async def test_a_checkpoint_writes_only_what_changed() -> None:
    storage = InMemoryStorage(name="slabs")
    async with DirectQueue(storage, log=NEVER) as queue:
        await queue.enqueue_many("work", [b"%d" % n for n in range(2_000)])
        await queue.checkpoint()
        claimed = await queue.dequeue("work", batch_size=10)
        await queue.ack_many(claimed[:4])
        await queue.checkpoint()
    first, second = (await newest_manifest(storage)).slabs
    assert (first.rows, first.dropped().count(1)) == (2_000, 10)  # the 10 claimed jobs' old rows
    assert second.rows == 6  # the rows of the 6 jobs still in progress; the acked ones have none
    slab = decode_slab(await storage.get(second.name) or b"", second.name)
    assert set(slab.ids) == {job.id for job in claimed[4:]}
    async with DirectQueue(storage) as fresh:
        assert await fresh.count() == 1_996
        assert len(await fresh.jobs(status=JobStatus.IN_PROGRESS, limit=None)) == 6


async def test_a_slab_holds_its_rows_in_claim_order_and_finds_each_by_its_filter() -> None:
    storage = InMemoryStorage(name="order")
    async with DirectQueue(storage, log=NEVER) as queue:
        for number in range(40):
            await queue.enqueue("b" if number % 2 else "a", b"%d" % number, priority=number % 3)
        await queue.enqueue("a", b"later", delay=timedelta(hours=1))
        claimed = await queue.dequeue("b", batch_size=2)
        await queue.checkpoint()
    [entry] = (await newest_manifest(storage)).slabs
    content = await storage.get(entry.name) or b""
    header, slab = slab_tree(content)["header"], decode_slab(content, entry.name)
    assert header["held"] == 3  # the two claimed jobs and the delayed one come first
    assert set(slab.ids[:3]) == {job.id for job in claimed} | {slab.ids[2]}
    assert header["ranges"] == {"a": [3, 23], "b": [23, 41]}
    async with DirectQueue(storage) as fresh:  # the claimable rows are in the order claims take them
        assert [job.id for job in await fresh.dequeue("a", batch_size=100)] == slab.ids[3:23]
        assert [job.id for job in await fresh.dequeue("b", batch_size=100)] == slab.ids[23:]
    found = open_slab(content, entry.name).filter
    assert all(found.blocks(id_hash(job_id)) == [0] for job_id in slab.ids)  # one block of 41 rows
    assert found.blocks(id_hash("no such job")) == []


async def test_a_slab_whose_held_rows_fill_more_than_a_block_reads_back() -> None:
    storage = InMemoryStorage(name="held")
    async with DirectQueue(storage, log=NEVER) as queue:
        await queue.enqueue_many("work", [b"%d" % n for n in range(BLOCK_ROWS + 600)])
        claimed = await queue.dequeue("work", batch_size=BLOCK_ROWS + 100)  # held: ahead of the rest
        await queue.checkpoint()
    [entry] = (await newest_manifest(storage)).slabs
    opened = open_slab(await storage.get(entry.name) or b"", entry.name)
    assert opened.header.held == BLOCK_ROWS + 100
    assert [len(opened.block(n)["id"]) for n in range(2)] == [BLOCK_ROWS, 600]
    async with DirectQueue(storage) as fresh:
        running = await fresh.jobs(status=JobStatus.IN_PROGRESS, limit=None)
        assert {job.id for job in running} == {job.id for job in claimed}
        assert len(await fresh.dequeue("work", batch_size=1000)) == 500


async def test_slabs_stay_few_and_a_fresh_reader_sees_the_newest_state() -> None:
    storage = InMemoryStorage(name="merges")
    async with DirectQueue(storage, log=NEVER) as queue:
        for _ in range(30):
            await queue.enqueue_many("work", [b"x"] * 50)
            await queue.ack_many(await queue.dequeue("work", batch_size=20))
            await queue.checkpoint()
            assert len((await newest_manifest(storage)).slabs) < FANOUT + 1
        live = sorted(job.id for job in await queue.jobs(limit=None))
    assert len(live) == 30 * 30
    manifest = await newest_manifest(storage)
    assert all(entry.dropped().count(1) * 2 <= entry.rows for entry in manifest.slabs)
    async with DirectQueue(storage) as fresh:
        assert sorted(job.id for job in await fresh.jobs(limit=None)) == live


async def test_merges_run_beside_the_checkpoints_that_change_their_slabs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slow merges (a fault: a deep queue's), while commits and checkpoints go on and drop rows
    from the slabs they retire; each merged slab is named by a later checkpoint, and the slabs
    stay few; a fresh reader sees the newest state."""
    runs: list[int] = []

    def slow_merge(begun: Any) -> Any:
        time.sleep(0.1)
        runs.append(len(begun.retired))
        return merge(begun)

    monkeypatch.setattr(checkpoints, "merge", slow_merge)
    storage = InMemoryStorage(name="beside")
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=1)) as queue:
        clock = asyncio.get_running_loop().time
        start = clock()
        while clock() < start + 3 or (len(runs) < 3 and clock() < start + 60):
            await queue.enqueue_many("work", [b"x"] * 30, priority=len(runs) % 3)
            claimed = await queue.dequeue("work", batch_size=20)
            await queue.ack_many(claimed[:10])
            await queue.nack_many(claimed[10:15])
            await asyncio.sleep(0.01)  # memory's calls never wait: let the checkpoints' threads land
            if await storage.list_names(CHECKPOINT_PREFIX):
                assert len((await newest_manifest(storage)).slabs) < 64  # a merge's worth of checkpoints
        live = sorted((job.id, job.status, job.attempts) for job in await queue.jobs(limit=None))
        for _ in range(3):  # each waits for the merge begun after the last, and names its slab
            await queue.checkpoint()
        assert len((await newest_manifest(storage)).slabs) < FANOUT
    assert len(runs) >= 3
    async with DirectQueue(storage) as fresh:
        assert sorted((job.id, job.status, job.attempts) for job in await fresh.jobs(limit=None)) == live


def test_a_merge_writes_at_most_merged_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slabs that would merge into more than ``MERGED_ROWS`` stay as they are; smaller ones merge."""
    index, slabs = QueueIndex(), SlabSet()
    for number, size in enumerate([10, 10, 10, 10, 3, 3]):
        index.apply_all(
            [
                Added(f"j{number}-{n}", "e", 0, T0, JobStatus.QUEUED, None, payload_ref(1 + number, n))
                for n in range(size)
            ]
        )
        every_job = slabs.checkpoint is None
        frozen = index.freeze(every_job=every_job)
        try:
            made = plan(slabs, frozen, T0, f"{number}", every_job=every_job, taken=slabs.taken_now())
        finally:
            index.thaw()
        slabs.adopt(made, index)
    assert [slab.live for slab in slabs.slabs] == [10, 10, 10, 10, 3, 3]
    begun = merge_due(slabs, unit=1, fanout=2)
    assert begun is not None
    assert sum(slab.live for slab in begun.retired) == 46
    for slab in begun.retired:
        slab.drops_since = None
    monkeypatch.setattr(slab_plan, "MERGED_ROWS", 26)
    begun = merge_due(slabs, unit=1, fanout=2)
    assert begun is not None
    assert [slab.live for slab in begun.retired] == [3, 3]


def rows_of(index: QueueIndex) -> list[tuple[Any, ...]]:
    """Every field of every live job (place and heap stamp aside)."""
    return [tuple(getattr(record, name) for name in RECORD_COLUMNS) for record in index.in_order()]


def reread(manifest: Manifest, stored: dict[str, bytes]) -> tuple[QueueIndex, SlabSet]:
    """The index and slab set of a process that opens ``manifest`` (its slabs in ``stored``)."""
    names = [entry.name for entry in manifest.slabs]
    index, slab_set, _ = loaded(manifest, [stored[name] for name in names], names, "manifest")
    return index, slab_set


ACTIONS = st.sampled_from(
    ["add", "again", "claim", "ack", "nack", "checkpoint", "checkpoint", "checkpoint", "every_job"]
)


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(
        st.tuples(ACTIONS, st.integers(1, 12), st.lists(ACTIONS, max_size=6), st.booleans()), max_size=40
    ),
    unit=st.integers(1, 6),
)
def test_every_checkpoint_reads_back_as_the_state_it_was_taken_of(
    steps: list[tuple[str, int, list[str], bool]], unit: int
) -> None:
    """Random changes to an index, with checkpoints that build on the last one and changes made
    between a freeze and its checkpoint, and merges (of small size classes, so that slabs merge
    and retire often) begun after a checkpoint and named by the next, as a store runs them; a
    removed job's id is added again, as a caller that names its jobs may. After a checkpoint
    the changes may go on in a process that opened it, whose claimable jobs are cold rows."""
    index, slabs, stored, merging = QueueIndex(), SlabSet(), dict[str, bytes](), Merging(unit)
    numbers, now, gone = itertools.count(), T0, list[str]()

    def act(action: str, count: int) -> None:
        nonlocal now
        now += S
        if action == "again" and gone:
            job_id = gone.pop()
            index.apply(Added(job_id, "e", 0, now, JobStatus.QUEUED, None, payload_ref(1, count % 7)))
        elif action == "add":
            adds = []
            for _ in range(count):
                number = next(numbers)
                adds.append(
                    Added(
                        f"job-{number:05d}",
                        "e",
                        number % 3,
                        now,
                        JobStatus.QUEUED,
                        None,
                        payload_ref(1 + number // 7, number % 7),
                    )
                )
            index.apply_all(adds)
        elif action == "claim":
            index.claim(None, count, now, now + S, lambda: "lease")
        elif action in ("ack", "nack"):
            running = [r.id for r in index.records.values() if r.status is JobStatus.IN_PROGRESS][:count]
            for job_id in running:
                if action == "ack":
                    index.remove(job_id)
                    gone.append(job_id)
                else:
                    index.nack(job_id, None, now)

    for action, count, meanwhile, reopen in steps:
        if action not in ("checkpoint", "every_job"):
            act(action, count)
            counted(index)
            continue
        if count % 2:  # else the merge is still running: this checkpoint drops rows of the slabs it retires
            merging.take(slabs, stored, now)
        every_job = action == "every_job" or slabs.checkpoint is None
        taken = slabs.taken_now() if every_job else {}
        frozen = index.freeze(every_job=every_job)
        expected = rows_of(index)
        for other in meanwhile:  # commits go on while the checkpoint is made
            if other not in ("checkpoint", "every_job"):
                act(other, count)
        try:
            made = plan(slabs, frozen, now, f"{next(numbers):x}", every_job=every_job, taken=taken)
        finally:
            index.thaw()
        manifest = decode_manifest(made.manifest(now), "manifest")
        current = rows_of(index)
        slabs.adopt(made, index)  # as once the checkpoint is stored
        assert rows_of(index) == current
        counted(index)
        if made.slab is not None:
            stored[made.slab.name] = made.content
        back, back_slabs = reread(manifest, stored)
        assert rows_of(back) == expected
        assert sum(entry.rows - entry.dropped().count(1) for entry in manifest.slabs) == len(expected)
        counted(back)
        merging.begin(slabs)
        if reopen and not meanwhile:
            index, slabs = back, back_slabs


def counted(index: QueueIndex) -> None:
    """The index counts each live job once, as its records and cold rows hold them."""
    assert len(index) == len(rows_of(index)) == sum(map(sum, index.tally.counts.values()))


async def test_compaction_deletes_the_slabs_no_checkpoint_names() -> None:
    storage = InMemoryStorage(name="compact-slabs")
    retention = timedelta(seconds=1)
    old = to_micros(utc_now()) - 10 * S
    orphan, young = slab_name(1, old, "dead"), slab_name(1, to_micros(utc_now()) + 60 * S, "a1")
    await storage.create(orphan, b"a slab whose writer died before its checkpoint")
    await storage.create(young, b"a slab whose checkpoint is still being written")
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=5, retention=retention)) as queue:
        kept = await queue.enqueue_many("keep", [b"kept"] * 20_000)  # bigger than the small slabs' class
        await queue.checkpoint()  # a slab that stays named, older than the retention at the end
        until = asyncio.get_running_loop().time() + 2 * retention.total_seconds()
        while (
            asyncio.get_running_loop().time() < until
        ):  # checkpoints that build on the last, and compactions
            await queue.ack_many(await queue.enqueue_many("work", [b"w"] * 600))
            await asyncio.sleep(0.02)
        await queue.checkpoint()  # waits for the background one
    named = set()
    for name in await storage.list_names(CHECKPOINT_PREFIX):
        named |= {entry.name for entry in decode_manifest(await storage.get(name) or b"", name).slabs}
    slabs = set(await storage.list_names(SLAB_PREFIX))
    assert orphan not in slabs
    assert slabs - named == {young}
    async with DirectQueue(storage) as fresh:
        jobs = await fresh.jobs(limit=None)
        assert sorted(job.id for job in jobs) == sorted(job.id for job in kept)
        assert {job.payload for job in jobs} == {b"kept"}


@pytest.mark.parametrize("damage", [b"", b'{"layout":"jqueue-slab/1","rows":1,"blocks":[]}', None])
async def test_a_damaged_or_missing_slab_is_reported_with_its_key(damage: bytes | None) -> None:
    storage = InMemoryStorage(name="damaged-slab")
    async with DirectQueue(storage, log=NEVER) as queue:
        await queue.enqueue("work", b"x")
        await queue.checkpoint()
    [entry] = (await newest_manifest(storage)).slabs
    await storage.delete(entry.name)
    if damage is not None:
        await storage.create(entry.name, damage)
    with pytest.raises(CorruptStateError) as raised:
        await DirectQueue(storage, max_retries=2).read_state()
    assert raised.value.location == f"memory://damaged-slab.d/{entry.name}"


async def test_a_checkpoint_that_builds_on_one_compacted_meanwhile_is_replaced_at_once() -> None:
    storage = InMemoryStorage(name="lost-base")
    async with DirectQueue(storage, log=NEVER) as first, DirectQueue(storage, log=NEVER) as second:
        await first.enqueue_many("work", [b"1", b"2"])
        await second.checkpoint()  # the second's base: its own checkpoint and slab
        await first.dequeue("work")
        await first.checkpoint()  # a newer one, which compaction keeps
        await second.read_state()
        store = await first._opener.store()
        assert isinstance(store, LogStore)
        await store.compact(2**62)  # as if the retention had passed: the second's base and slab go
        await second.enqueue("work", b"3")
        await second.checkpoint()  # builds on its base, finds it gone, and writes every job anew
    async with DirectQueue(storage) as fresh:
        assert await fresh.count() == 3


async def test_a_checkpoint_cancelled_while_it_is_made_leaves_the_next_one_whole(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def slow_plan(*arguments: Any, **options: Any) -> Any:
        time.sleep(0.3)  # a fault: the thread outlives the call that waits for it
        return plan(*arguments, **options)

    storage = InMemoryStorage(name="cancelled")
    async with DirectQueue(storage, log=NEVER) as queue:
        await queue.enqueue_many("work", [b"x"] * 10)
        await queue.checkpoint()
        await queue.dequeue("work", batch_size=3)
        with monkeypatch.context() as patched:
            patched.setattr(checkpoints, "plan", slow_plan)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(queue.checkpoint(), timeout=0.05)
            await asyncio.sleep(0.5)  # whatever the thread does, it has done it
        await queue.dequeue("work")
        await queue.checkpoint()  # writes every job, building on nothing the cancelled one made
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    async with DirectQueue(storage) as fresh:
        assert await fresh.count() == 10
        assert len(await fresh.jobs(status=JobStatus.IN_PROGRESS, limit=None)) == 4


async def test_a_plan_runs_with_quick_switches_and_no_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[float, bool]] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append((sys.getswitchinterval(), gc.isenabled()))
        return plan(*args, **kwargs)

    monkeypatch.setattr(checkpoints, "plan", watched)
    async with DirectQueue(InMemoryStorage(name="quiet-plan"), log=NEVER) as queue:
        await queue.enqueue_many("e", [b"x"] * 10)
        await queue.checkpoint()
    assert seen == [(min(QUICK_SWITCH_SECONDS, sys.getswitchinterval()), False)]
    assert gc.isenabled()


class ChangedWhileLooked(dict[str, Any]):
    """A freeze's saved values, into which the event loop's change of a job arrives (saving its
    old values first, as the index does) just as a checkpoint's thread looks the job up."""

    def __init__(self, record: JobRecord, running: tuple[Any, ...]) -> None:
        super().__init__()
        self.record, self.running = record, running

    def get(self, key: str, default: Any = None) -> Any:
        found = super().get(key, default)
        if self.running:
            self[key] = self.record.claim_state()
            self.record.set_claim_state(self.running)
            self.running = ()
        return found


def test_a_row_key_read_while_its_job_changes_is_the_key_it_had_at_the_freeze() -> None:
    now = to_micros(utc_now())
    record = JobRecord.from_added(Added("j", "e", 0, now, JobStatus.QUEUED, None, payload_ref(1, 0)), 0)
    queued_key = row_key(record, {})
    running = record.changed(status=JobStatus.IN_PROGRESS, lease="l", heartbeat=now, expires=now + 1)
    assert row_key(record, ChangedWhileLooked(record, running)) == queued_key
    assert record.status is JobStatus.IN_PROGRESS  # the change did arrive meanwhile
