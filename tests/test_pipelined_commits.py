"""Calls applied ahead while a commit is in flight (ADR 0017): applied on top of the commit before them,
answered only once their own entry has landed, undone with that commit if it does not land; a
checkpoint never holds them, and a reader waiting for the store's lock is let in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from jqueue import (
    BrokerQueue,
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    Job,
    LogSettings,
    StorageError,
)
from jqueue.core.formats.entry import (
    CHECKPOINT_PREFIX,
    ENTRY_PREFIX,
    checkpoint_key,
    checkpoint_name,
    decode_entry,
    entry_name,
)
from jqueue.core.log.store import LogStore
from jqueue.domain.effects import PauseSet
from jqueue.domain.index import QueueIndex
from jqueue.testing import Faults, InstrumentedKeyedStorage, instrumented
from queues import entry_creates

BOUND = 30.0
"""Seconds a condition may take on a busy machine."""


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what}")
        await asyncio.sleep(0.005)


async def log_store(queue: BrokerQueue) -> LogStore:
    store = await queue._opener.store()
    assert isinstance(store, LogStore)
    return store


def held_storage() -> tuple[InstrumentedKeyedStorage, asyncio.Event]:
    """A log in memory whose entry creates wait for the returned gate to be set."""
    gate = asyncio.Event()
    storage = instrumented(InMemoryStorage(name="pipelined"), Faults(gate=gate, affects=entry_creates))
    return storage, gate


async def replayed(storage: InstrumentedKeyedStorage, version: int) -> QueueIndex:
    """The state that entries 1 to ``version`` make, read from storage."""
    index = QueueIndex()
    for seq in range(1, version + 1):
        data = await storage.inner.get(entry_name(seq))  # type: ignore[attr-defined]
        assert data is not None, f"entry {seq} is missing"
        index.apply_all(decode_entry(data, seq, entry_name(seq)).effects)
        index.version = seq
    return index


def test_a_transaction_keeps_the_first_commit_and_leaves_the_next_one_open() -> None:
    index = QueueIndex()
    index.journal.begin()
    first = index.journal.transaction
    index.apply(PauseSet("a", True, False))
    mark = index.journal.savepoint()
    index.apply(PauseSet("b", True, False))
    index.journal.commit_through(mark)
    assert index.journal.open
    assert index.journal.transaction == first
    assert index.journal.effects == [PauseSet("b", True, False)]
    index.journal.rollback()
    assert not index.journal.open
    assert index.controls.claims_paused("a")
    assert not index.controls.claims_paused("b")
    index.journal.begin()
    assert index.journal.transaction == first + 1
    index.journal.commit_through(index.journal.savepoint())  # nothing follows the mark: the transaction ends
    assert not index.journal.open


class OneAtATime(InstrumentedKeyedStorage):
    """A log in memory whose entry creates, while ``holding``, each wait for a pass
    (``let_through``); ``fail_next`` makes the next create fail as a storage error, unstored."""

    def __init__(self) -> None:
        super().__init__(InMemoryStorage(name="one-at-a-time"))
        self.holding = False
        self.waiting = 0
        self.fail_next = False
        self.cancel_after_create: asyncio.Task[None] | None = None
        self._passes = asyncio.Semaphore(0)

    def let_through(self, creates: int = 1) -> None:
        for _ in range(creates):
            self._passes.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the creates within; past it (a failed test too), let every one through."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            self.let_through(self.waiting)

    async def create(self, name: str, content: bytes) -> None:
        if name.startswith(ENTRY_PREFIX) and self.holding:
            self.waiting += 1
            try:
                await self._passes.acquire()
            finally:
                self.waiting -= 1
        if name.startswith(ENTRY_PREFIX) and self.fail_next:
            self.fail_next = False
            raise StorageError(f"injected failure of create {name}", OSError("injected"))
        await super().create(name, content)
        if name.startswith(ENTRY_PREFIX) and self.cancel_after_create is not None:
            self.cancel_after_create.cancel()
            self.cancel_after_create = None


async def claimed_in_storage(storage: InstrumentedKeyedStorage) -> dict[str, str | None]:
    """The leases of the claimed jobs, as a fresh reader sees them."""
    async with DirectQueue(storage.inner) as fresh:
        jobs = (await fresh.read_state()).jobs
    return {job.id: job.lease for job in jobs if job.lease is not None}


async def test_calls_submitted_during_a_commit_are_applied_ahead_on_it_and_answered_after_their_own() -> None:
    storage = OneAtATime()
    async with BrokerQueue(storage) as queue:
        await queue.enqueue("warm", b"")  # the queue exists
        store = await log_store(queue)
        with storage.held():
            lead = asyncio.create_task(queue.enqueue("work", b"lead"))
            await until(lambda: storage.waiting == 1, "the lead's create")
            followers = [asyncio.create_task(queue.enqueue("work", b"%d" % n)) for n in range(20)]
            claim = asyncio.create_task(queue.dequeue("work"))
            await until(lambda: len(store.index.records) == 22, "the calls applied ahead")
            await until(lambda: any(r.lease for r in store.index.records.values()), "the claim applied ahead")
            assert storage.waiting == 1, "a second write started before the first landed"
            assert not any(task.done() for task in [lead, claim, *followers])

            storage.let_through()
            first = await lead
            await until(lambda: storage.waiting == 1, "the create of the calls applied ahead")
            await asyncio.sleep(0)
            assert not any(task.done() for task in [claim, *followers]), "answered before durable"
        [job] = await claim
        added = await asyncio.gather(*followers)
    assert job.id == first.id  # the claim ran on the lead's commit, before it had landed
    assert await claimed_in_storage(storage) == {job.id: job.lease}
    async with DirectQueue(storage.inner) as fresh:
        ids = {j.id for j in (await fresh.read_state()).jobs}
    assert {first.id, *(a.id for a in added)} <= ids


async def test_calls_applied_ahead_on_a_commit_that_lost_its_race_run_again_on_the_winner() -> None:
    storage = OneAtATime()
    async with BrokerQueue(storage) as queue:
        await queue.enqueue("warm", b"")
        store = await log_store(queue)
        with storage.held():
            lead = asyncio.create_task(queue.enqueue("work", b"lead", priority=5))
            await until(lambda: storage.waiting == 1, "the lead's create")
            claim = asyncio.create_task(queue.dequeue("work"))
            await until(lambda: any(r.lease for r in store.index.records.values()), "the claim applied ahead")
            async with DirectQueue(storage.inner) as rival:  # takes the entry the lead asks for, and
                urgent = await rival.enqueue("work", b"rival", priority=0)  # comes first in the claims
        lead_job = await lead
        [job] = await claim
    assert storage.conflicts >= 1
    assert job.id == urgent.id, "the claim kept what it took on the commit that lost"
    assert await claimed_in_storage(storage) == {job.id: job.lease}
    async with DirectQueue(storage.inner) as fresh:
        assert {lead_job.id, urgent.id} <= {j.id for j in (await fresh.read_state()).jobs}


async def test_a_failed_commit_fails_its_own_callers_and_the_calls_applied_ahead_commit_after_it() -> None:
    storage = OneAtATime()
    async with BrokerQueue(storage) as queue:
        await queue.enqueue("warm", b"")
        store = await log_store(queue)
        storage.fail_next = True
        with storage.held():
            lead = asyncio.create_task(queue.enqueue("work", b"lead"))
            await until(lambda: storage.waiting == 1, "the lead's create")
            followers = [asyncio.create_task(queue.enqueue("work", b"%d" % n)) for n in range(5)]
            await until(lambda: len(store.index.records) == 7, "the calls applied ahead")
        with pytest.raises(StorageError):
            await lead
        added = await asyncio.gather(*followers)
    async with DirectQueue(storage.inner) as fresh:
        payloads = sorted(j.payload for j in (await fresh.read_state()).jobs if j.entrypoint == "work")
    assert payloads == sorted(b"%d" % n for n in range(5))
    assert len(added) == 5


async def test_a_checkpoint_under_commits_applied_ahead_holds_exactly_its_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = InMemoryStorage(name="checkpointed")
    storage = instrumented(memory, Faults(write_latency=timedelta(milliseconds=3), affects=entry_creates))
    stop = asyncio.Event()
    calls: list[asyncio.Task[object]] = []

    async def claim_and_ack(queue: BrokerQueue) -> None:
        for job in await queue.dequeue("work"):
            await queue.ack(job)

    async def submit(queue: BrokerQueue) -> None:  # open loop: calls arrive during every commit
        while not stop.is_set():
            calls.append(asyncio.create_task(queue.enqueue("work", b"x")))
            calls.append(asyncio.create_task(claim_and_ack(queue)))
            await asyncio.sleep(0.001)

    with caplog.at_level(logging.WARNING, logger="jqueue"):
        async with BrokerQueue(storage, log=LogSettings(checkpoint_every=50)) as queue:
            producer = asyncio.create_task(submit(queue))
            await until(
                lambda: any(name.startswith(CHECKPOINT_PREFIX) for name in memory._named),
                "a checkpoint written while calls keep coming",
            )
            stop.set()
            await producer
            await asyncio.gather(*calls)
            store = await log_store(queue)
            names = await storage.list_names(CHECKPOINT_PREFIX)
            keys = sorted(filter(None, map(checkpoint_key, names)))
            checkpointed = await store._checkpoints.read(checkpoint_name(*keys[0]))
    assert isinstance(checkpointed, QueueIndex)
    expected = await replayed(storage, keys[0][0])
    assert {r.id: r.claim_state() for r in checkpointed.records.values()} == {
        r.id: r.claim_state() for r in expected.records.values()
    }
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_a_reader_waiting_for_the_store_is_let_in_between_commits_applied_ahead() -> None:
    storage = instrumented(
        InMemoryStorage(name="busy"), Faults(write_latency=timedelta(milliseconds=10), affects=entry_creates)
    )
    stop = asyncio.Event()
    calls: list[asyncio.Task[Job]] = []

    async def submit(queue: BrokerQueue) -> None:
        while not stop.is_set():
            calls.append(asyncio.create_task(queue.enqueue("work", b"x")))
            await asyncio.sleep(0.001)

    never = LogSettings(checkpoint_every=10**6)  # a checkpoint would let the reader in by itself
    async with BrokerQueue(storage, log=never) as queue:
        producer = asyncio.create_task(submit(queue))
        await until(lambda: storage.commits >= 5, "commits under load")
        state = await asyncio.wait_for(queue.read_state(), BOUND)
        assert not producer.done()
        stop.set()
        await producer
        await asyncio.gather(*calls)
    assert len(state.jobs) >= 5


async def test_a_store_that_fails_before_a_round_takes_its_calls_answers_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = OneAtATime()
    async with asyncio.timeout(BOUND * 2), BrokerQueue(storage) as queue:  # a close that hangs fails
        await queue.enqueue("warm", b"")
        store = await log_store(queue)
        damage = CorruptStateError(store.location, "injected before the round")

        async def refresh() -> None:
            raise damage

        monkeypatch.setattr(store, "needs_refresh", lambda: True)
        monkeypatch.setattr(store, "refresh", refresh)
        calls = [asyncio.create_task(queue.enqueue("work", b"%d" % n)) for n in range(3)]
        done, waiting = await asyncio.wait(calls, timeout=BOUND)
        assert not waiting, "callers left waiting"
        assert {type(task.exception()) for task in done} == {CorruptStateError}
        monkeypatch.undo()
        assert (await queue.enqueue("work", b"after")).payload == b"after"  # the writer goes on


async def test_a_housekeeping_that_fails_fails_its_round_and_loses_no_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = OneAtATime()
    async with BrokerQueue(storage) as queue:
        await queue.enqueue("warm", b"")
        housekeeping = queue._commits.housekeeping  # type: ignore[attr-defined]
        sweep = housekeeping.before
        failures = iter([CorruptStateError("here", "injected")])

        def before(index: QueueIndex) -> int:
            for failure in failures:
                raise failure
            return sweep(index)  # type: ignore[no-any-return]

        monkeypatch.setattr(housekeeping, "before", before)
        with storage.held():
            lead = asyncio.create_task(queue.enqueue("work", b"lead"))
            await until(lambda: storage.waiting == 1, "the lead's create")
            ahead = asyncio.create_task(queue.enqueue("work", b"ahead"))  # its housekeeping fails
            await asyncio.sleep(0.05)
        await lead
        _, waiting = await asyncio.wait([ahead], timeout=BOUND)
        assert not waiting, "a call applied ahead was lost"
        assert (await ahead).payload == b"ahead"  # run again with its round, once it landed


async def test_a_cancel_that_comes_as_a_create_lands_keeps_what_landed() -> None:
    storage = OneAtATime()
    queue = BrokerQueue(storage)
    await queue.start()
    try:
        await queue.enqueue("warm", b"")
        writer = queue._commits._task  # type: ignore[attr-defined]
        with storage.held():
            lead = asyncio.create_task(queue.enqueue("work", b"lead"))
            await until(lambda: storage.waiting == 1, "the lead's create")
            ahead = asyncio.create_task(queue.enqueue("work", b"ahead"))
            await asyncio.sleep(0.05)
            storage.cancel_after_create = writer  # the close's deadline, as the create answers
            storage.let_through()
            await asyncio.wait([lead, ahead], timeout=BOUND)
        assert writer.done()
        state = await queue.read_state()  # this process's view, caught up with the log
    finally:
        with contextlib.suppress(asyncio.CancelledError):  # the writer's end, as it was cancelled
            await queue.stop()
    async with DirectQueue(storage.inner) as fresh:
        stored = sorted(job.payload for job in (await fresh.read_state()).jobs)
    assert sorted(job.payload for job in state.jobs) == stored
    assert b"lead" in stored  # it landed; the call applied ahead on it was never written
    assert b"ahead" not in stored


async def test_a_close_during_a_split_round_answers_every_call() -> None:
    storage = instrumented(
        InMemoryStorage(name="split"), Faults(write_latency=timedelta(milliseconds=50), affects=entry_creates)
    )
    queue = BrokerQueue(storage)
    await queue.start()
    await queue.enqueue("warm", b"")

    def poison(index: QueueIndex) -> None:  # an effect the encoder refuses: the round splits
        index.apply(PauseSet("\udc80", True, False))

    calls = [asyncio.create_task(queue.enqueue("work", b"%d" % n)) for n in range(20)]
    calls.append(asyncio.create_task(queue._commits.run(poison)))  # type: ignore[arg-type]
    await until(lambda: storage.commits >= 3, "the calls committed one by one")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await queue.stop()
    _, waiting = await asyncio.wait(calls, timeout=BOUND)
    assert not waiting, f"{len(waiting)} callers still wait"
