"""The log layout never loses or hides a committed job: checkpoints during commits, compaction
after a slow checkpoint, holes, a lost namespace, empty or foreign objects, and reads that
must create nothing."""

from __future__ import annotations

import asyncio
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Backend
from jqueue import (
    BrokerQueue,
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    JobStatus,
    KeyedStoragePort,
    Layout,
    LocalFileSystemStorage,
    LogSettings,
)
from jqueue.core.formats.entry import CHECKPOINT_PREFIX, ENTRY_PREFIX, GENESIS, entry_name
from jqueue.testing import Faults, instrumented


async def test_an_explicit_checkpoint_during_commits_loses_no_job() -> None:
    storage = InMemoryStorage(name="checkpoint-race")
    expected: list[str] = []
    async with BrokerQueue(storage, log=LogSettings(checkpoint_every=1)) as q:
        for wave in range(30):
            jobs = await asyncio.gather(*(q.enqueue("work", b"%d-%d" % (wave, n)) for n in range(25)))
            expected += [job.id for job in jobs]
            await asyncio.gather(q.checkpoint(), *(q.enqueue("work", b"late") for _ in range(5)))
        expected += [job.id for job in await q.jobs(limit=None) if job.payload == b"late"]
    async with DirectQueue(storage) as fresh:
        state = await fresh.read_state()
    assert sorted(job.id for job in state.jobs) == sorted(set(expected))
    assert len(state.jobs) == 30 * 30


async def test_compaction_after_a_slow_checkpoint_keeps_payloads_of_live_jobs() -> None:
    storage = InMemoryStorage(name="slow-checkpoint")
    retention = timedelta(seconds=1)
    slow_checkpoints = Faults(
        write_latency=timedelta(seconds=2.5),
        affects=lambda kind, name: kind == "create" and name.startswith(CHECKPOINT_PREFIX),
    )
    slow = instrumented(storage, slow_checkpoints)
    async with DirectQueue(slow, log=LogSettings(checkpoint_every=4, retention=retention)) as writer:
        for n in range(4):  # the fourth change starts a checkpoint whose write takes 2.5 s
            await writer.enqueue("old", b"old %d" % n)
        async with DirectQueue(storage, log=LogSettings(retention=retention)) as other:
            new = [await other.enqueue("new", b"new %d" % n) for n in range(3)]
            await other.checkpoint()  # newer than the slow one, and older than the retention when it lands
    async with DirectQueue(storage) as fresh:
        found = await fresh.jobs(entrypoint="new")
        old = await fresh.jobs(entrypoint="old")
    assert [(job.id, job.payload) for job in found] == [(job.id, job.payload) for job in new]
    assert sorted(job.payload for job in old) == [b"old %d" % n for n in range(4)]


async def test_a_hole_in_the_log_is_reported_and_never_written_into(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "queue.json")
    async with DirectQueue(storage) as q:
        for n in range(5):
            await q.enqueue("work", b"%d" % n)
    await storage.delete(entry_name(3))
    async with DirectQueue(storage) as fresh:
        for call in (fresh.read_state(), fresh.enqueue("work", b"into the gap?")):
            with pytest.raises(CorruptStateError) as raised:
                await call
            assert raised.value.location.endswith(entry_name(3))
    assert await storage.list_names(ENTRY_PREFIX) == [entry_name(n) for n in (1, 2, 4, 5)]


async def _namespace(storage: KeyedStoragePort) -> list[str]:
    names = [*await storage.list_names(ENTRY_PREFIX), *await storage.list_names(CHECKPOINT_PREFIX)]
    return names + ([GENESIS] if await storage.get(GENESIS) is not None else [])


async def test_a_marker_whose_log_was_deleted_is_reported_not_restarted(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    async with DirectQueue(storage) as q:
        await q.enqueue("work", b"precious")
        await q.checkpoint()
        await q.enqueue("work", b"also precious")
    marker = await storage.read()
    for name in await _namespace(storage):
        await storage.delete(name)
    where = f"{storage.url}.d/"  # type: ignore[attr-defined]
    if isinstance(storage, LocalFileSystemStorage):
        shutil.rmtree(storage.namespace)
        where = f"{storage.url}.segments/"  # the directory it was in, as on disk
    async with DirectQueue(storage) as reopened:
        for call in (reopened.read_state(), reopened.enqueue("work", b"new"), reopened.stats()):
            with pytest.raises(CorruptStateError) as raised:
                await call
            assert raised.value.location == where
    assert await _namespace(storage) == []
    assert await storage.read() == marker
    if isinstance(storage, LocalFileSystemStorage):
        assert not storage.namespace.exists()


FOREIGN = [b"", b"hello", b'{"a": 1}', b"[]", b"\xff\xfe", b'{"layout": "jqueue-log/9"}']


@pytest.mark.parametrize("content", FOREIGN)
@pytest.mark.parametrize("layout", ["auto", "single", "log"])
async def test_an_empty_or_foreign_main_object_is_reported_and_kept(
    tmp_path: Path, content: bytes, layout: Layout
) -> None:
    path = tmp_path / "queue.json"
    path.write_bytes(content)
    storage = LocalFileSystemStorage(path)
    async with DirectQueue(storage, layout=layout) as q:
        for call in (q.read_state(), q.enqueue("work", b"x"), q.dequeue()):
            with pytest.raises(CorruptStateError) as raised:
                await call
            assert raised.value.location == storage.url
    assert path.read_bytes() == content
    assert not storage.namespace.exists()


async def test_reads_of_a_queue_that_does_not_exist_create_nothing(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    if isinstance(storage, LocalFileSystemStorage):
        storage = LocalFileSystemStorage(storage.path.parent / "no-such-dir" / "queue.json")
    for kind in (DirectQueue, BrokerQueue):
        async with kind(storage) as q:
            assert (await q.read_state()).jobs == ()
            assert (await q.stats()).entrypoints == {}
            assert (await q.jobs(), await q.count(), await q.peek()) == ([], 0, [])
            assert (await q.find("nope"), await q.dead_letters(), await q.history()) == (None, [], [])
            assert (await q.dequeue(), await q.dequeue("work", batch_size=5)) == ([], [])
            assert await q.sweep() == 0
    assert await storage.read() == (b"", None)
    assert await _namespace(storage) == []
    if isinstance(storage, LocalFileSystemStorage):
        assert not storage.path.parent.exists()
    async with DirectQueue(storage) as q:  # the first commit creates it
        await q.enqueue("work", b"x")
        assert [job.status for job in (await q.read_state()).jobs] == [JobStatus.QUEUED]


async def test_a_reader_far_behind_opens_through_failing_reads() -> None:
    storage = InMemoryStorage(name="flaky-catch-up")
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=100_000)) as writer:
        for n in range(300):
            await writer.enqueue("work", b"%d" % n)
    flaky = instrumented(storage, Faults(fail_rate=0.05, affects=lambda kind, name: kind == "get"), seed=7)
    async with DirectQueue(flaky) as reader:
        state = await reader.read_state()
    assert sorted(int(job.payload) for job in state.jobs) == list(range(300))
    assert flaky.failures > 5
