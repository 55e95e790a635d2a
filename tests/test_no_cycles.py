"""A closed queue frees its state at once: no reference cycle keeps a million-job index alive
until the cycle collector happens to run (a reopened queue would hold two indexes at its peak)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from conftest import LAYOUTS, QUEUE_KINDS
from jqueue import BrokerQueue, DirectQueue, InMemoryStorage, Layout
from jqueue.domain.index import QueueIndex


async def _used_index(kind: str, layout: Layout, storage: InMemoryStorage) -> weakref.ref[QueueIndex]:
    queue = DirectQueue(storage, layout=layout) if kind == "direct" else BrokerQueue(storage, layout=layout)
    async with queue:
        await queue.enqueue_many("work", [b"a", b"b"])
        [job] = await queue.dequeue("work")
        await queue.ack(job)
        await queue.checkpoint()
        index = (await queue._opener.store()).index
    return weakref.ref(index)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_a_closed_queue_frees_its_index_without_the_cycle_collector(kind: str, layout: Layout) -> None:
    storage = InMemoryStorage()
    gc.collect()
    gc.disable()
    try:
        index = asyncio.run(_used_index(kind, layout, storage))
        assert index() is None, gc.get_referrers(index())
    finally:
        gc.enable()
