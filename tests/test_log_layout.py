"""The log-structured layout: choosing it, migrating to it, its request costs, checkpoints,
compaction and damaged entries."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

import reference_model as codec
from conftest import Backend
from jqueue import (
    BrokerQueue,
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    JobStatus,
    LocalFileSystemStorage,
    LogSettings,
)
from jqueue.core.formats.entry import (
    CHECKPOINT_PREFIX,
    ENTRY_PREFIX,
    checkpoint_name,
    decode_marker,
    entry_name,
)
from jqueue.core.log.store import CHECKPOINT_INTERVAL_CAP, ENTRIES_PER_CHECKPOINT
from jqueue.testing import instrumented
from queues import log_entries


async def test_a_new_queue_on_a_builtin_backend_is_a_log(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    async with DirectQueue(storage) as q:
        job = await q.enqueue("work", b"payload")
    content, _ = await storage.read()
    assert decode_marker(content) == (True, None)
    assert await storage.list_names(ENTRY_PREFIX) == [entry_name(1)]
    async with BrokerQueue(storage) as q:
        [claimed] = await q.dequeue()
    assert (claimed.id, claimed.payload) == (job.id, b"payload")


async def test_a_plain_two_method_port_keeps_the_single_object() -> None:
    storage = instrumented(InMemoryStorage(), keyed=False)
    async with DirectQueue(storage) as q:
        await q.enqueue("work", b"x")
    assert len(codec.decode((await storage.read())[0]).jobs) == 1
    with pytest.raises(TypeError, match="log layout needs"):
        await DirectQueue(storage, layout="log").dequeue()


async def test_an_existing_single_object_stays_and_can_be_migrated(backend: Backend) -> None:
    storage, name = backend.new_keyed()
    async with DirectQueue(storage, layout="single") as q:
        claimed_job = await q.enqueue("work", b"claimed", priority=-1)
        queued_job = await q.enqueue("work", b"queued")
        await q.dequeue()
        before = await q.read_state()
    async with DirectQueue(backend.handle(name)) as auto:
        assert await auto.read_state() == before
    assert await log_entries(storage) == []

    async with DirectQueue(backend.handle(name), layout="log") as migrated:
        after = await migrated.read_state()
        assert [j.model_dump() for j in after.jobs] == [j.model_dump() for j in before.jobs]
        [job] = await migrated.dequeue()
        assert (job.id, job.payload) == (queued_job.id, b"queued")
        await migrated.ack(claimed_job.id)
    is_log, base = decode_marker((await storage.read())[0])
    assert is_log
    assert base is not None

    with pytest.raises(CorruptStateError, match="log layout"):
        await DirectQueue(backend.handle(name), layout="single").dequeue()
    async with DirectQueue(backend.handle(name)) as reopened:
        state = await reopened.read_state()
    assert [(j.id, j.status) for j in state.jobs] == [(queued_job.id, JobStatus.IN_PROGRESS)]


async def test_racing_migrations_keep_every_job(backend: Backend) -> None:
    storage, name = backend.new_keyed()
    async with DirectQueue(storage, layout="single") as q:
        jobs = [await q.enqueue("work", str(i).encode()) for i in range(5)]

    async def migrate_and_enqueue(i: int) -> str:
        async with DirectQueue(backend.handle(name), layout="log") as migrated:
            return (await migrated.enqueue("work", f"new-{i}".encode())).id

    added = await asyncio.gather(*(migrate_and_enqueue(i) for i in range(3)))
    async with DirectQueue(backend.handle(name)) as reader:
        state = await reader.read_state()
    assert sorted(j.id for j in state.jobs) == sorted([j.id for j in jobs] + list(added))


async def test_a_commit_is_one_create_and_an_up_to_date_reader_one_get() -> None:
    shared = InMemoryStorage(name="costs")
    writer_storage, reader_storage = instrumented(shared), instrumented(shared)
    async with DirectQueue(writer_storage) as writer, DirectQueue(reader_storage) as reader:
        await writer.enqueue("work", b"first")
        assert await reader.dequeue("none") == []
        writer_storage.calls.clear()
        reader_storage.calls.clear()
        for n in range(5):
            await writer.enqueue("work", str(n).encode())
        assert writer_storage.calls == Counter(create=5)
        assert await reader.dequeue("none") == []  # catches up: five entries, then one miss
        assert reader_storage.calls == Counter(get=6)
        reader_storage.calls.clear()
        assert await reader.dequeue("none") == []
        assert reader_storage.calls == Counter(get=1)


async def test_checkpoints_and_compaction_keep_live_payloads() -> None:
    storage = InMemoryStorage(name="compaction")
    settings = LogSettings(checkpoint_every=5, retention=timedelta(seconds=1))
    async with DirectQueue(storage, log=settings) as q:
        keeper = await q.enqueue("keep", b"kept payload")
        for n in range(12):
            job = await q.enqueue("work", str(n).encode())
            await q.dequeue("work")
            await q.ack(job.id)
        await asyncio.sleep(1.1)
        for n in range(12):
            job = await q.enqueue("work", str(n).encode())
            await q.ack(job.id)
    checkpoints = await storage.list_names(CHECKPOINT_PREFIX)
    entries = await storage.list_names(ENTRY_PREFIX)
    assert len(checkpoints) >= 2
    assert entry_name(1) in entries, "the entry holding a live job's payload was compacted"
    assert entry_name(2) not in entries, "an entry of an acked job was kept"
    async with DirectQueue(storage) as fresh:
        state = await fresh.read_state()
        [claimed] = await fresh.dequeue("keep")
    assert [j.id for j in state.jobs] == [keeper.id]
    assert claimed.payload == b"kept payload"


@pytest.mark.parametrize("damage", [b"{not json", b'{"seq": 99, "commit": "x", "at": 0, "effects": []}', b""])
async def test_a_damaged_entry_is_reported_with_its_key(damage: bytes) -> None:
    storage = InMemoryStorage(name="damaged")
    async with DirectQueue(storage) as q:
        await q.enqueue("work", b"x")
        await storage.create(entry_name(2), damage)
        with pytest.raises(CorruptStateError) as raised:
            await DirectQueue(storage).read_state()
    assert raised.value.location == f"memory://damaged.d/{entry_name(2)}"
    assert await storage.get(entry_name(2)) == damage


async def test_an_entry_that_does_not_replay_is_reported(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage) as q:
        await q.enqueue("work", b"x")
    bogus = b'{"seq": 2, "commit": "c", "at": 0, "effects": [["remove", "no-such-job"]]}'
    await storage.create(entry_name(2), bogus)
    with pytest.raises(CorruptStateError, match="does not replay") as raised:
        await DirectQueue(storage).dequeue()
    assert raised.value.location.endswith(entry_name(2))


async def test_a_damaged_checkpoint_is_reported_with_its_key(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage) as q:
        await q.enqueue("work", b"x")
    name = checkpoint_name(1, 0)
    await storage.create(name, b'{"layout": "jqueue-log/1", "seq": 1, "truncated')
    with pytest.raises(CorruptStateError) as raised:
        await DirectQueue(storage).read_state()
    assert raised.value.location.endswith(name)


async def test_a_queue_reopens_from_its_checkpoint_and_later_entries(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    settings = LogSettings(checkpoint_every=10)
    async with BrokerQueue(storage, log=settings) as q:
        jobs = await asyncio.gather(
            *(q.enqueue(f"ep{i % 3}", str(i).encode(), priority=i % 2) for i in range(40))
        )
        for n in range(25):
            await q.enqueue("late", str(n).encode())
        claimed = await q.dequeue(batch_size=5)
        expected = await q.read_state()
    assert await storage.list_names(CHECKPOINT_PREFIX), "no checkpoint was written"
    counted = instrumented(storage)
    async with DirectQueue(counted) as reopened:
        assert await reopened.dequeue("nothing") == []
        assert counted.calls["get"] < 20, "the reader replayed from the start instead of a checkpoint"
        assert await reopened.read_state() == expected
    assert {j.id for j in claimed} <= {j.id for j in jobs}


async def test_folded_commits_checkpoint_only_after_enough_entries(tmp_path: Path) -> None:
    """A checkpoint costs several requests on object storage: changes folded into few entries
    wait for ``ENTRIES_PER_CHECKPOINT`` of them, unless they reach ``CHECKPOINT_INTERVAL_CAP``."""
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=100)) as q:
        for _ in range(ENTRIES_PER_CHECKPOINT - 1):
            await q.enqueue_many("work", [b"x"] * 50)
    assert await storage.list_names(CHECKPOINT_PREFIX) == [], "checkpointed before 64 entries"
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=100)) as q:  # replays them
        await q.enqueue_many("work", [b"x"] * 50)
    assert len(await storage.list_names(CHECKPOINT_PREFIX)) == 1
    settings = LogSettings(checkpoint_every=100)
    assert settings.checkpoint_due(CHECKPOINT_INTERVAL_CAP, 1, live_jobs=0)
    assert not settings.checkpoint_due(CHECKPOINT_INTERVAL_CAP - 1, ENTRIES_PER_CHECKPOINT - 1, live_jobs=0)
    assert LogSettings(checkpoint_every=5).checkpoint_due(5, 5, live_jobs=0)


async def test_a_reader_far_behind_catches_up_from_the_newest_checkpoint(tmp_path: Path) -> None:
    """A broker that stood by while another served (or any reader of a busy queue) does not read
    every entry it missed one by one: after a few, it jumps to the newest checkpoint."""
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    settings = LogSettings(checkpoint_every=100)
    counted = instrumented(LocalFileSystemStorage(tmp_path / "queue.json"))
    async with DirectQueue(storage, log=settings) as writer, DirectQueue(counted, log=settings) as reader:
        await writer.enqueue("work", b"first")
        assert len((await reader.read_state()).jobs) == 1
        for n in range(200):
            await writer.enqueue("work", str(n).encode())
        assert await storage.list_names(CHECKPOINT_PREFIX), "the writer took no checkpoint"
        gets = counted.calls["get"]
        assert await reader.count() == 201  # no payloads fetched: only the catching up reads
        assert counted.calls["get"] - gets < 150, "the reader read the 200 entries it missed one by one"


async def test_checkpoint_on_demand(tmp_path: Path) -> None:
    log_storage = LocalFileSystemStorage(tmp_path / "log.json")
    async with DirectQueue(log_storage) as q:
        await q.enqueue("work", b"x")
        assert await log_storage.list_names(CHECKPOINT_PREFIX) == []
        assert await q.checkpoint() is True
        assert len(await log_storage.list_names(CHECKPOINT_PREFIX)) == 1
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "single.json"), layout="single") as single:
        assert await single.checkpoint() is False


async def test_callers_claiming_from_one_segment_fetch_it_once(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with BrokerQueue(storage) as q:
        await asyncio.gather(*(q.enqueue("work", str(i).encode()) for i in range(100)))
        assert len(await storage.list_names(ENTRY_PREFIX)) == 1
        assert await q.checkpoint()
    counted = instrumented(storage)
    async with BrokerQueue(counted) as fresh:
        assert await fresh.dequeue("nothing") == []  # opens from the checkpoint: no payloads read
        counted.calls.clear()
        claimed = await asyncio.gather(*(fresh.dequeue("work") for _ in range(50)))
    assert sorted(int(job.payload) for [job] in claimed) == list(range(50))
    assert counted.calls["get"] == 1  # the entry holding the payloads, once
