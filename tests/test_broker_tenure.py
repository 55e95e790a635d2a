"""The broker record, stepped by hand on a real file: who serves, takeover, and foreign records."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from jqueue import CorruptStateError, LocalFileSystemStorage
from jqueue.adapters.service import finder as finder_module
from jqueue.adapters.service.tenure import BrokerRecord, BrokerTenure, Role
from jqueue.testing import instrumented

QUICK = {"renew_every": timedelta(milliseconds=10), "stale_after": timedelta(milliseconds=100)}


def tenure(path: Path, address: str) -> BrokerTenure:
    return BrokerTenure(LocalFileSystemStorage(path), address, **QUICK)


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
    for _ in range(5):  # the first renews: the record keeps changing, the second waits
        await asyncio.sleep(0.05)
        await first.step()
        await second.step()
    assert (first.serving(), second.serving()) == (True, False)
    await asyncio.sleep(0.15)  # the first stops renewing
    await second.step()
    assert (second.role, second.epoch) == (Role.ACTIVE, 2)
    await first.step()  # its renewal loses the race: deposed
    assert (first.role, first.serving()) == (Role.STANDBY, False)


async def test_a_foreign_record_is_never_overwritten_even_after_a_lost_race(tmp_path: Path) -> None:
    path = tmp_path / "_broker.json"
    broker = tenure(path, "http://a")
    await broker.step()
    path.write_text("somebody else's file")  # written while the broker held the record
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
