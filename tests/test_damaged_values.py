"""Damaged values in a stored queue are ``CorruptStateError`` at the queue's location, and the
queue is left untouched: a marker naming a base outside the queue, and a lease whose heartbeat
would move it past the year 9999."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import (
    BrokerQueue,
    CorruptStateError,
    DirectQueue,
    InMemoryStorage,
    Layout,
    LocalFileSystemStorage,
)
from jqueue.core.formats.entry import ENTRY_PREFIX

BASES = ["../../etc/passwd", "/etc/passwd", "base/../../../x", "base/", "log/00000000000000000001", ""]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("layout", ["auto", "log"])
async def test_a_marker_naming_a_base_outside_the_queue_is_reported_and_kept(
    tmp_path: Path, base: str, layout: Layout
) -> None:
    path = tmp_path / "queue.json"
    async with DirectQueue(LocalFileSystemStorage(path)) as q:
        await q.enqueue("work", b"x")
    marker = json.dumps({"layout": "jqueue-log/1", "base": base}).encode()
    path.write_bytes(marker)
    storage = LocalFileSystemStorage(path)
    names = await storage.list_names(ENTRY_PREFIX)
    async with DirectQueue(storage, layout=layout) as q:
        for call in (q.read_state(), q.enqueue("work", b"y"), q.stats(), q.dequeue()):
            with pytest.raises(CorruptStateError) as raised:
                await call
            assert raised.value.location == storage.url
    assert path.read_bytes() == marker
    assert await storage.list_names(ENTRY_PREFIX) == names


async def damaged_single_object(field: str, value: str) -> tuple[InMemoryStorage, str, bytes]:
    """A single-object queue holding one claimed job whose ``field`` is ``value``."""
    storage = InMemoryStorage(name="damaged")
    async with DirectQueue(storage, layout="single") as q:
        await q.enqueue("work", b"x")
        await q.enqueue("other", b"y")
        [job] = await q.dequeue("work")
    content, etag = await storage.read()
    state = json.loads(content)
    for stored in state["jobs"]:
        if stored["id"] == job.id:
            stored[field] = value
    damaged = json.dumps(state).encode()
    await storage.write(damaged, if_match=etag)
    return storage, job.id, damaged


LATE = [("lease_expires_at", "9999-12-31T23:59:59.999999Z"), ("heartbeat_at", "9999-12-31T23:59:59Z")]


@pytest.mark.parametrize(("field", "value"), LATE)
@pytest.mark.parametrize("kind", [DirectQueue, BrokerQueue])
async def test_a_heartbeat_that_would_move_a_lease_past_the_year_9999_is_refused(
    field: str, value: str, kind: type[DirectQueue] | type[BrokerQueue]
) -> None:
    storage, job_id, damaged = await damaged_single_object(field, value)
    async with kind(storage) as q:
        with pytest.raises(CorruptStateError) as raised:
            await q.heartbeat(job_id)
        assert raised.value.location == storage.url
        assert "the lease of job" in raised.value.detail
        # The other calls on stored times answer as usual (and commit nothing bad).
        [other] = await q.dequeue("other")
        await q.nack(other, delay=timedelta(days=365 * 1000))
        await q.enqueue("work", b"z", ttl=timedelta(days=365 * 1000), delay=timedelta(days=365 * 1000))
        assert (await q.stats()).entrypoints["work"].in_progress == 1
    state = json.loads((await storage.read())[0])
    [kept] = [stored for stored in state["jobs"] if stored["id"] == job_id]
    assert kept == next(stored for stored in json.loads(damaged)["jobs"] if stored["id"] == job_id)


async def test_a_heartbeat_past_the_year_9999_on_the_log_layout_writes_nothing() -> None:
    storage, job_id, _ = await damaged_single_object(*LATE[0])
    async with DirectQueue(storage, layout="log") as q:  # migrates the job as it is
        names = await storage.list_names(ENTRY_PREFIX)
        with pytest.raises(CorruptStateError) as raised:
            await q.heartbeat(job_id)
        assert raised.value.location == storage.url
    assert await storage.list_names(ENTRY_PREFIX) == names
