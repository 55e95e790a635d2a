"""Every module path that the documented jqueue architecture names imports and exposes what it
names there, and the documented examples run through those paths."""

from __future__ import annotations

import asyncio
import importlib
from datetime import timedelta

import pytest

from jqueue import BrokerQueue, CorruptStateError, DirectQueue, InMemoryStorage, QueueState

DOCUMENTED = {
    "jqueue.domain.models": ("Job", "QueueState", "JobStatus"),
    "jqueue.domain.errors": ("JQueueError", "CASConflictError", "JobNotFoundError", "StorageError"),
    "jqueue.ports.storage": ("ObjectStoragePort",),
    "jqueue.core.codec": ("encode", "decode"),
    "jqueue.core.direct": ("DirectQueue",),
    "jqueue.core.group_commit": ("GroupCommitLoop",),
    "jqueue.core.broker": ("BrokerQueue",),
    "jqueue.core.heartbeat": ("HeartbeatManager",),
    "jqueue.adapters.storage.memory": ("InMemoryStorage",),
    "jqueue.adapters.storage.filesystem": ("LocalFileSystemStorage",),
    "jqueue.adapters.storage.s3": ("S3Storage",),
    "jqueue.adapters.storage.gcs": ("GCSStorage",),
}
"""The architecture section of the jqueue documentation: each module and what it holds."""


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_each_documented_module_path_imports_what_it_names(module: str) -> None:
    imported = importlib.import_module(module)
    top = importlib.import_module("jqueue")
    for name in DOCUMENTED[module]:
        assert hasattr(imported, name), f"{module} has no {name}"
        if hasattr(top, name):
            assert getattr(imported, name) is getattr(top, name)


def test_the_quick_start_runs_through_the_documented_paths() -> None:
    from jqueue.adapters.storage.memory import InMemoryStorage as Memory
    from jqueue.core.broker import BrokerQueue as Broker
    from jqueue.core.heartbeat import HeartbeatManager

    seen: list[bytes] = []

    async def main() -> QueueState:
        async with Broker(Memory()) as q:
            await q.enqueue("send_email", b'{"to": "alice@example.com"}')
            await q.enqueue("send_email", b'{"to": "bob@example.com"}')
            for job in await q.dequeue("send_email", batch_size=2):
                async with HeartbeatManager(q, job.id, interval=timedelta(seconds=30)):
                    seen.append(job.payload)
                await q.ack(job.id)
            return await q.read_state()

    final = asyncio.run(main())
    assert seen == [b'{"to": "alice@example.com"}', b'{"to": "bob@example.com"}']
    assert final.jobs == ()


async def test_the_codec_round_trips_a_queue_state_and_reads_what_a_queue_stored() -> None:
    from jqueue.core import codec

    storage = InMemoryStorage()
    async with DirectQueue(storage, layout="single") as q:
        first = await q.enqueue("report", b"\x00binary", priority=3)
        await q.enqueue("report", b"second")
        await q.dequeue("report")
        state = await q.read_state()
    stored, _ = await storage.read()
    assert codec.decode(stored) == state  # what the queue wrote is the codec's format
    assert codec.decode(codec.encode(state)) == state
    assert codec.decode(codec.encode(state)).find(first.id) == first
    async with BrokerQueue(InMemoryStorage(initial_content=codec.encode(state))) as q:
        assert await q.read_state() == state  # and a queue reads what the codec wrote


def test_the_codec_refuses_what_is_not_a_state_and_reads_nothing_as_empty() -> None:
    from jqueue.core import codec

    assert codec.decode(b"") == QueueState()
    with pytest.raises(CorruptStateError) as raised:
        codec.decode(b'{"jobs": 3}', "s3://bucket/q.json")
    assert raised.value.location == "s3://bucket/q.json"
