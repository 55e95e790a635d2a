"""The broker record, stepped by hand on a real file: who serves, takeover, and foreign records."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import CorruptStateError, LocalFileSystemStorage
from jqueue.adapters.service.lease import BrokerLease, Role

QUICK = {"renew_every": timedelta(milliseconds=10), "stale_after": timedelta(milliseconds=100)}


def lease(path: Path, address: str) -> BrokerLease:
    return BrokerLease(LocalFileSystemStorage(path), address, **QUICK)


async def test_one_serves_the_other_takes_over_only_a_stale_record(tmp_path: Path) -> None:
    first, second = lease(tmp_path / "_broker.json", "http://a"), lease(tmp_path / "_broker.json", "http://b")
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
    broker = lease(path, "http://a")
    await broker.step()
    path.write_text("somebody else's file")  # written while the broker held the record
    await broker.step()
    assert broker.role is Role.STANDBY
    for _ in range(3):
        await asyncio.sleep(0.15)
        with pytest.raises(CorruptStateError, match="not a broker record"):
            await broker.step()
    assert path.read_text() == "somebody else's file"
