"""The broker record, stepped by hand on a real file: who serves, takeover, and foreign records."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import BUCKET, s3_env
from jqueue import CorruptStateError, LocalFileSystemStorage, S3Storage
from jqueue.adapters.service.client import caller as finder_module
from jqueue.adapters.service.server.tenure import BrokerTenure, Role
from jqueue.adapters.service.wire.root import BrokerRecord, record_storage
from jqueue.testing import instrumented
from jqueue.testing.faults import InstrumentedStorage
from servers import S3Endpoint

RENEW_EVERY, STALE_AFTER = timedelta(milliseconds=10), timedelta(milliseconds=100)


def tenure(path: Path, address: str) -> BrokerTenure:
    return BrokerTenure(
        LocalFileSystemStorage(path), address, renew_every=RENEW_EVERY, stale_after=STALE_AFTER
    )


async def test_one_serves_the_other_takes_over_only_a_stale_record(tmp_path: Path) -> None:
    first, second = (
        tenure(tmp_path / "_broker.json", "http://a"),
        tenure(tmp_path / "_broker.json", "http://b"),
    )
    await first.step()
    await second.step()
    assert (first.role, second.role, second.record and second.record.address) == (
        Role.ACTIVE,
        Role.STANDBY,
        "http://a",
    )
    for _ in range(5):  # the second watches, the first renews from then on, the second waits
        await asyncio.sleep(0.05)
        await first.step()
        await second.step()
    assert (first.serving(), second.serving()) == (True, False)
    assert first.record is not None
    assert first.record.beat > 2
    await asyncio.sleep(0.15)  # the first stops renewing while it had to: stale at once
    await second.step()
    assert (second.role, second.epoch) == (Role.ACTIVE, 2)
    await first.step()  # its renewal loses the race: deposed
    assert (first.role, first.serving()) == (Role.STANDBY, False)


def watched_tenure(storage: InstrumentedStorage, address: str, lasts: float = 0.05) -> BrokerTenure:
    return BrokerTenure(
        storage,
        address,
        renew_every=RENEW_EVERY,
        stale_after=STALE_AFTER,
        watch_lasts=timedelta(seconds=lasts),
    )


async def test_a_broker_alone_on_its_root_writes_nothing_on_a_timer(tmp_path: Path) -> None:
    record = instrumented(LocalFileSystemStorage(tmp_path / "_broker.json"), keyed=False)
    broker = watched_tenure(record, "http://a")
    await broker.step()
    written = record.calls["write"]
    for _ in range(20):
        await asyncio.sleep(0.02)
        await broker.step()
        assert broker.serving()
    assert record.calls["write"] == written, "an unwatched broker rewrote its record on a timer"
    assert record.calls["read"] >= 20


async def test_a_standby_makes_a_quiet_broker_renew_and_never_takes_over_a_live_one(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    active = watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), "http://a", lasts=0.2)
    watching = instrumented(LocalFileSystemStorage(path), keyed=False)
    standby = watched_tenure(watching, "http://b")
    await active.step()
    await standby.step()
    await asyncio.sleep(0.21)  # quiet from now on; the standby did not look meanwhile
    await active.step()
    await standby.step()  # stale: it watches, and waits for the answer
    await standby.step()
    assert standby.role is Role.STANDBY, "taken over before the broker could answer the watch"
    beats, started = [], time.monotonic()
    for _ in range(40):  # 0.4 s or more: four times stale_after, twice watch_lasts
        await active.step()
        await asyncio.sleep(0.01)
        await standby.step()
        assert active.record is not None
        beats.append(active.record.beat)
    assert (active.role, active.serving(), standby.role) == (Role.ACTIVE, True, Role.STANDBY)
    assert active.epoch == 1
    assert beats[-1] > beats[0] + 10, "the watched broker did not renew"
    watches_due = (time.monotonic() - started) / 0.2  # one a watch_lasts; a busy machine takes longer
    renewed_for_watch_lasts = watching.calls["write"] <= 3 + watches_due
    assert renewed_for_watch_lasts, "the broker renewed only at each watch, not for watch_lasts"


async def test_a_dead_quiet_broker_is_taken_over_after_an_unanswered_watch(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    dead, standby = (
        watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), "http://a"),
        (watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), "http://b")),
    )
    await dead.step()
    started = time.monotonic()
    while standby.role is Role.STANDBY:
        assert time.monotonic() - started < 10
        await asyncio.sleep(0.01)
        await standby.step()
    assert standby.epoch == 2
    assert time.monotonic() - started >= 0.1  # stale_after: a record is trusted that long


async def test_a_foreign_record_is_never_overwritten_even_after_a_lost_race(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    broker = tenure(path, "http://a")
    await broker.step()
    path.write_text("somebody else's file")  # written while the broker held the record
    with pytest.raises(CorruptStateError, match="not a broker record"):
        await broker.step()
    assert broker.role is Role.STANDBY
    for _ in range(3):
        await asyncio.sleep(0.15)
        with pytest.raises(CorruptStateError, match="not a broker record"):
            await broker.step()
    assert path.read_text() == "somebody else's file"


async def test_concurrent_first_calls_of_a_client_read_the_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = instrumented(LocalFileSystemStorage(tmp_path / "_broker.json"))
    await record.write(msgspec.json.encode(BrokerRecord("http://127.0.0.1:1", 1, 1, "o", "t")))
    monkeypatch.setattr(finder_module, "record_storage", lambda root: record)
    finder = finder_module.BrokerFinder(str(tmp_path))
    found = await asyncio.gather(*(finder.find() for _ in range(50)))
    assert set(found) == {"http://127.0.0.1:1"}
    assert record.calls["read"] == 1, "fifty first calls made fifty storage clients before"


async def test_a_watch_of_one_broker_says_nothing_of_the_next(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    first, second, third = (
        watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), f"http://{n}", lasts=60)
        for n in "abc"
    )
    await first.step()
    await second.step()
    for _ in range(10):  # the second watches the first, which renews from then on
        await asyncio.sleep(0.02)
        await first.step()
        await second.step()
    assert first.record is not None
    assert first.record.beat > 2
    started = time.monotonic()
    while third.role is Role.STANDBY:  # the first dies; the third takes over (the second is frozen)
        assert time.monotonic() - started < 10
        await asyncio.sleep(0.01)
        await third.step()
    assert third.epoch == 2
    for _ in range(40):  # the second wakes up beside a live broker that nobody watched yet
        await third.step()
        await asyncio.sleep(0.01)
        await second.step()
    assert (second.role, third.role, third.epoch) == (Role.STANDBY, Role.ACTIVE, 2)


async def test_two_standbys_watching_a_dead_broker_do_not_hold_each_other_up(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    dead, *standbys = (
        watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), f"http://{n}", lasts=60)
        for n in "abc"
    )
    await dead.step()
    for _ in range(10):  # both watch it; it renews
        await asyncio.sleep(0.02)
        await dead.step()
        for standby in standbys:
            await standby.step()
    assert dead.record is not None
    assert dead.record.beat > 2
    started = time.monotonic()  # it dies: each watch of one standby must not look alive to the other
    while all(standby.role is Role.STANDBY for standby in standbys):
        assert time.monotonic() - started < 10, "the standbys' watches kept the dead broker's record fresh"
        await asyncio.sleep(0.005)
        for standby in standbys:
            await standby.step()
    assert sorted(standby.role for standby in standbys) == [Role.ACTIVE, Role.STANDBY]


async def test_a_standby_watches_a_broker_at_its_first_look(tmp_path: Path) -> None:
    """So that a broker killed just after a standby started is taken over in ``stale_after``, not
    in ``stale_after`` plus the time a quiet record takes to call for a watch."""
    path = tmp_path / "_broker.json"
    active, standby = (
        watched_tenure(instrumented(LocalFileSystemStorage(path), keyed=False), f"http://{n}", lasts=60)
        for n in "ab"
    )
    await active.step()
    await standby.step()
    assert standby.record is not None
    assert standby.record.beat == 2, "the standby did not watch at once"
    renewed_at = standby.record.renewed_at
    await active.step()
    assert active.record is not None
    assert (active.record.beat, active.record.renewed_at != renewed_at) == (3, True)


async def test_a_client_of_an_s3_root_reads_its_record_with_one_storage_client(
    moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_env(moto).items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    root = f"s3://{BUCKET}/finder-{uuid.uuid4().hex[:8]}?endpoint_url={moto.url}&region={moto.region}"
    await record_storage(root).write(msgspec.json.encode(BrokerRecord("http://127.0.0.1:1", 1, 1, "o", "t")))
    opened = 0
    new_client = S3Storage._new_client

    def counted(storage: S3Storage) -> Any:
        nonlocal opened
        opened += 1
        return new_client(storage)

    monkeypatch.setattr(S3Storage, "_new_client", counted)
    monkeypatch.setattr(finder_module, "RECHECK_EVERY", 0.0)  # every look reads the record
    finder = finder_module.BrokerFinder(root)
    await finder.open()
    try:
        assert await finder.find() == "http://127.0.0.1:1"
        for _ in range(5):
            assert await finder.moved_from("http://127.0.0.1:2") == "http://127.0.0.1:1"
    finally:
        await finder.close()
    assert opened == 1, "each read of the record opened a client (tens of ms of CPU on S3)"
