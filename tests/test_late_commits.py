"""A writer that pauses inside a commit (between its freshness check and the answer to the
create of its entry), or inside a catch-up, while another process compacts past that entry's
number: a commit is acknowledged only if readers see it, a retry with the same ids adds the
job once, and a create answered under the bound (half the retention) commits as usual."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import CommitUnknownError, DirectQueue, JobSpec, KeyedStoragePort, LogSettings
from jqueue.core.formats.entry import CHECKPOINT_PREFIX, ENTRY_PREFIX, entry_name
from jqueue.testing import CallKind, Faults, InstrumentedKeyedStorage, InstrumentedStorage, instrumented
from queues import entry_creates

RETENTION = timedelta(seconds=2)  # a checkpoint must land within half of it: on a busy machine, S3 takes time
BOUND = RETENTION.total_seconds() / 2
WRITER = LogSettings(checkpoint_every=1000, retention=RETENTION)  # never checkpoints itself
COMPACTING = LogSettings(checkpoint_every=1, retention=RETENTION)


class AnswerHeld(InstrumentedKeyedStorage):
    """Creates of log entries land at once, and their answers wait for ``answer`` to be set."""

    def __init__(self, inner: KeyedStoragePort) -> None:
        super().__init__(inner)
        self.answer = asyncio.Event()
        self.answer.set()

    async def create(self, name: str, content: bytes) -> None:
        await super().create(name, content)
        if name.startswith(ENTRY_PREFIX):
            await self.answer.wait()


async def asked(storage: InstrumentedStorage, kind: CallKind, calls: int) -> None:
    """Wait until ``calls`` calls of ``kind`` were asked of an instrumented storage."""
    while storage.calls[kind] < calls:
        await asyncio.sleep(0.01)


async def compact_past(other: DirectQueue, keep: bool = False) -> None:
    """Commit a job that is added and acked (so that no live job keeps its entries; with ``keep``
    a live job first), checkpoint, let that checkpoint age past the retention, then commit once
    more: the background checkpoint of that commit compacts the acked job's entries away."""
    if keep:
        await other.enqueue("other", b"kept")
    await other.enqueue("short", b"short-lived")
    [job] = await other.dequeue("short")
    await other.ack(job)
    await other.checkpoint()
    await asyncio.sleep(RETENTION.total_seconds() * 1.3)
    await other.enqueue("other", b"after")
    await other.checkpoint()  # waits for the background checkpoint and its compaction


async def work(backend: Backend, name: str) -> list[bytes]:
    """The payloads of entrypoint ``work`` as a fresh reader sees them."""
    async with DirectQueue(backend.handle(name)) as fresh:
        return sorted(job.payload for job in await fresh.jobs(entrypoint="work"))


async def test_a_commit_landing_where_compaction_passed_is_not_acknowledged(file_or_s3: Backend) -> None:
    storage, name = file_or_s3.new_keyed()
    gate = asyncio.Event()
    gate.set()
    paused = instrumented(storage, Faults(gate=gate, affects=entry_creates))
    spec = JobSpec("work", b"late", id="late-job")
    async with (
        DirectQueue(paused, log=WRITER) as writer,
        DirectQueue(file_or_s3.handle(name), log=COMPACTING) as other,
    ):
        await writer.enqueue("work", b"first")  # entry 1; the writer now knows the log ends there
        gate.clear()
        late = asyncio.create_task(writer.enqueue_many([spec]))
        await asked(paused, "create", 2)  # checked fresh, now stopped before creating entry 2
        await compact_past(other)
        assert entry_name(2) not in await storage.list_names(ENTRY_PREFIX)
        gate.set()
        [outcome] = await asyncio.gather(late, return_exceptions=True)
        if not isinstance(outcome, BaseException):
            assert b"late" in await work(file_or_s3, name), "an acknowledged enqueue is lost"
        assert isinstance(outcome, CommitUnknownError), outcome
        assert outcome.location.endswith(entry_name(2))
        assert await work(file_or_s3, name) == [b"first"]
        [job] = await writer.enqueue_many([spec])  # repeated with its id: it counts once
        assert (job.id, job.payload) == ("late-job", b"late")
    assert await work(file_or_s3, name) == [b"first", b"late"]


async def test_a_commit_that_counted_but_answered_late_is_not_doubled_by_its_retry(
    file_or_s3: Backend,
) -> None:
    storage, name = file_or_s3.new_keyed()
    held = AnswerHeld(storage)
    spec = JobSpec("work", b"once", id="once-job")
    async with (
        DirectQueue(held, log=WRITER) as writer,
        DirectQueue(file_or_s3.handle(name), log=COMPACTING) as other,
    ):
        await writer.enqueue("work", b"first")
        held.answer.clear()
        late = asyncio.create_task(writer.enqueue_many([spec]))
        await asked(held, "create", 2)
        await other.checkpoint()  # reads the writer's entry 2 and checkpoints exactly there
        await asyncio.sleep(BOUND * 1.3)
        held.answer.set()
        with pytest.raises(CommitUnknownError):
            await late
        assert await work(file_or_s3, name) == [b"first", b"once"]  # it did count
        [job] = await writer.enqueue_many([spec])
        assert job.id == "once-job"
    assert await work(file_or_s3, name) == [b"first", b"once"]


# under it by 0.8 of the bound: on a loaded machine a create takes its injected pause and more
@pytest.mark.parametrize("pause", [BOUND * 0.2, BOUND * 1.4], ids=["under-the-bound", "over-it"])
async def test_a_create_answered_late_counts_when_no_checkpoint_covers_it(
    file_or_s3: Backend, pause: float
) -> None:
    storage, name = file_or_s3.new_keyed()
    slow = Faults(write_latency=timedelta(seconds=pause), affects=entry_creates)
    paused = instrumented(storage)
    async with DirectQueue(paused, log=WRITER) as writer:
        await writer.enqueue("work", b"first")
        await writer.checkpoint()  # a checkpoint, of entry 1 only
        paused.faults, lists = slow, paused.calls["list"]
        job = await writer.enqueue("work", b"slow")
        # Under the bound the create alone decides; over it, one listing of the checkpoints
        # shows that none covers entry 2, so no compaction can have passed it.
        assert paused.calls["list"] - lists == (0 if pause < BOUND else 1)
        assert await storage.list_names(CHECKPOINT_PREFIX) != []
    assert job.payload == b"slow"
    assert await work(file_or_s3, name) == [b"first", b"slow"]


async def test_a_catch_up_paused_past_a_compaction_reloads_before_committing(file_or_s3: Backend) -> None:
    storage, name = file_or_s3.new_keyed()
    gate = asyncio.Event()
    gate.set()
    second = Faults(gate=gate, affects=lambda kind, entry: kind == "get" and entry == entry_name(2))
    paused = instrumented(storage, second)
    async with (
        DirectQueue(paused, log=WRITER) as writer,
        DirectQueue(file_or_s3.handle(name), log=COMPACTING) as other,
    ):
        await writer.enqueue("work", b"first")
        gate.clear()
        reading = asyncio.create_task(writer.stats())
        await asked(paused, "get", paused.calls["get"] + 1)  # stopped before reading entry 2
        await compact_past(other, keep=True)  # entry 2 holds a live job's payload and stays
        assert entry_name(3) not in await storage.list_names(ENTRY_PREFIX)
        gate.set()
        await reading  # read entry 2, then found no entry 3: too late to prove the log ends there
        await writer.enqueue("work", b"next")
    assert await work(file_or_s3, name) == [b"first", b"next"]


async def test_a_catch_up_stopped_past_a_compaction_never_applies_an_entry_made_again(
    file_or_s3: Backend,
) -> None:
    storage, name = file_or_s3.new_keyed()
    creates, gets = asyncio.Event(), asyncio.Event()
    writer_storage = instrumented(storage, Faults(gate=creates, affects=entry_creates))
    second = Faults(gate=gets, affects=lambda kind, entry: kind == "get" and entry == entry_name(2))
    reader_storage = instrumented(file_or_s3.handle(name), second)
    creates.set()
    gets.set()
    async with (
        DirectQueue(writer_storage, log=WRITER) as writer,
        DirectQueue(reader_storage, log=WRITER) as reader,
        DirectQueue(file_or_s3.handle(name), log=COMPACTING) as other,
    ):
        await writer.enqueue("work", b"first")
        assert (await reader.stats()).entrypoints["work"].queued == 1  # the reader is at entry 1
        creates.clear()
        gets.clear()
        late = asyncio.create_task(writer.enqueue_many([JobSpec("work", b"made again", id="again")]))
        reading = asyncio.create_task(reader.stats())
        await asked(writer_storage, "create", 2)
        await asked(reader_storage, "get", reader_storage.calls["get"] + 1)
        await other.dequeue("work")  # entry 2, without payloads: compaction takes it
        await other.enqueue("other", b"kept")  # entry 3, kept for its live payload
        await other.checkpoint()
        await asyncio.sleep(RETENTION.total_seconds() * 1.3)
        await other.enqueue("other", b"after")  # entry 4, whose checkpoint compacts entry 2
        await other.checkpoint()
        assert entry_name(2) not in await storage.list_names(ENTRY_PREFIX)
        creates.set()
        with pytest.raises(CommitUnknownError):
            await late
        assert entry_name(2) in await storage.list_names(ENTRY_PREFIX)  # made again, read by no one
        gets.set()
        await reading
        assert [job.payload for job in await reader.jobs(entrypoint="work")] == [b"first"]
        await reader.enqueue("work", b"from the reader")
    assert await work(file_or_s3, name) == [b"first", b"from the reader"]
