"""A queue's owner lives in its own log (``Owned``): a broker that took a queue over commits as
its owner, and once another broker takes it over, every call of the first fails with
``NotOwnerError`` and changes nothing, whatever was in flight (issue 52, ADR 0022)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import Backend
from jqueue import BrokerQueue, DirectQueue, JobSpec
from jqueue.core.formats.entry import ENTRY_PREFIX, decode_entry, entry_seq
from jqueue.domain.effects import Added, Effect, Owned
from jqueue.domain.errors import NotOwnerError
from jqueue.ports.storage import KeyedStoragePort


async def _log(storage: KeyedStoragePort) -> list[tuple[int, str, list[Effect]]]:
    """Every entry of the log: its number, its commit id and its effects."""
    found = []
    for name in await storage.list_names(ENTRY_PREFIX):
        seq = entry_seq(name)
        data = await storage.get(name)
        assert seq is not None
        assert data is not None
        entry = decode_entry(data, seq, name)
        found.append((seq, entry.commit, list(entry.effects)))
    return sorted(found, key=lambda item: item[0])


def writers(log: list[tuple[int, str, list[Effect]]]) -> list[tuple[str, str]]:
    """Each entry's owner as the log says (the last ``Owned`` at or before it) and its writer (the
    broker its commit id names; "" for a process that commits as no broker)."""
    owner, found = "", []
    for _, commit, effects in log:
        owner = next((e.owner for e in effects if isinstance(e, Owned)), owner)
        found.append((owner, commit.partition("/")[0] if "/" in commit else ""))
    return found


async def test_a_broker_that_lost_its_queue_commits_nothing(file_or_s3: Backend) -> None:
    storage, name = file_or_s3.new_keyed()
    async with BrokerQueue(storage) as first, BrokerQueue(file_or_s3.handle(name)) as second:
        assert await first.owner() is None
        taken = await first.take_over("first")
        assert taken == Owned("first", 1)
        kept = await first.enqueue("task", b"before")
        assert await second.take_over("second", replacing="first") == Owned("second", 2)
        with pytest.raises(NotOwnerError) as refused:
            await first.enqueue("task", b"after")
        assert refused.value.owner == "second"
        for call in (first.dequeue(), first.sweep(), first.ack(kept.id)):
            with pytest.raises(NotOwnerError):
                await call
        assert [job.payload for job in await second.jobs()] == [b"before"]
        assert (await first.owner()) == Owned("second", 2)  # a read still reads
    log = await _log(storage)
    owners = [e for _, _, effects in log for e in effects if isinstance(e, Owned)]
    assert owners == [Owned("first", 1), Owned("second", 2)]
    assert all(writer in ("", owner) for owner, writer in writers(log))


async def test_calls_in_flight_at_a_take_over_land_before_it_or_fail(file_or_s3: Backend) -> None:
    """Enqueues stream through the first broker while the second takes the queue over: each one
    either was answered and its job was added before the ``Owned`` entry, or failed with
    ``NotOwnerError`` and added nothing."""
    storage, name = file_or_s3.new_keyed()
    async with BrokerQueue(storage) as first, BrokerQueue(file_or_s3.handle(name)) as second:
        await first.take_over("first")
        outcomes: dict[str, bool] = {}

        async def producer(number: int) -> None:
            for step in range(10_000):
                job_id = f"p{number}-{step}"
                try:
                    await first.enqueue("task", b"x", id=job_id)
                except NotOwnerError:
                    outcomes[job_id] = False
                    return
                outcomes[job_id] = True

        producers = [asyncio.create_task(producer(n)) for n in range(8)]

        async def answered(count: int) -> None:
            while sum(outcomes.values()) < count:
                assert not any(task.done() for task in producers), "a producer stopped early"
                await asyncio.sleep(0.01)

        await asyncio.wait_for(answered(40), timeout=60)
        await second.take_over("second", replacing="first")
        await asyncio.wait_for(asyncio.gather(*producers), timeout=60)
        stored = {job.id for job in await second.jobs(limit=None)}
    assert stored == {job_id for job_id, answered in outcomes.items() if answered}
    assert not all(outcomes.values())
    log = await _log(storage)
    taken_at = None
    for seq, _, effects in log:
        if Owned("second", 2) in effects:
            taken_at = seq
        elif taken_at is not None:
            assert not any(isinstance(e, Added) for e in effects), f"entry {seq} added a job after it"
    assert taken_at is not None
    assert [writer for _, writer in writers(log)].count("first") > 2
    assert all(writer == owner for owner, writer in writers(log) if owner), "an entry by a deposed owner"


async def test_two_brokers_racing_to_take_a_queue_one_wins(file_or_s3: Backend) -> None:
    storage, name = file_or_s3.new_keyed()
    await DirectQueue(storage).enqueue("task", b"x")
    brokers = [BrokerQueue(file_or_s3.handle(name)) for _ in range(4)]
    for broker in brokers:
        await broker.start()
    try:
        tried = await asyncio.gather(
            *(broker.take_over(f"b{n}") for n, broker in enumerate(brokers)), return_exceptions=True
        )
        won = [outcome for outcome in tried if isinstance(outcome, Owned)]
        assert len(won) == 1
        assert won[0].epoch == 1
        assert all(isinstance(o, NotOwnerError) and o.owner == won[0].owner for o in tried if o not in won)
        winner = brokers[[f"b{n}" for n in range(4)].index(won[0].owner)]
        assert (await winner.dequeue()) is not None
        loser = next(broker for broker in brokers if broker is not winner)
        assert await loser.dequeue() is not None  # it never took the queue: it commits as no broker
    finally:
        for broker in brokers:
            await broker.stop()


@pytest.mark.parametrize("layout", ["log", "single"])
async def test_the_owner_outlives_a_checkpoint_and_a_reopen(file_or_s3: Backend, layout: str) -> None:
    storage, name = file_or_s3.new_keyed()
    async with BrokerQueue(storage, layout=layout) as queue:  # type: ignore[arg-type]
        await queue.take_over("first")
        await queue.enqueue_many([JobSpec("task", b"x") for _ in range(5)])
        await queue.take_over("second", replacing="first")
        await queue.checkpoint()
        assert await queue.take_over("second", replacing="nobody") == Owned("second", 2)  # already its own
    async with BrokerQueue(file_or_s3.handle(name), layout=layout) as reopened:  # type: ignore[arg-type]
        assert await reopened.owner() == Owned("second", 2)
        with pytest.raises(NotOwnerError):
            await reopened.take_over("third", replacing="first")  # it decided on an old view
        assert await reopened.take_over("third", replacing="second") == Owned("third", 3)


async def test_a_queue_whose_owner_stops_serving_it_is_not_fenced_for_other_processes(
    file_or_s3: Backend,
) -> None:
    """Processes that commit directly never take a queue over: a broker's ownership fences other
    brokers, not them."""
    storage, name = file_or_s3.new_keyed()
    async with BrokerQueue(storage, stale_timeout=timedelta(minutes=5)) as broker:
        await broker.take_over("broker")
        direct = DirectQueue(file_or_s3.handle(name))
        await direct.enqueue("task", b"direct")
        assert [job.payload for job in await broker.jobs()] == [b"direct"]
        assert await broker.dequeue() is not None
