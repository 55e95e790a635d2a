"""The keyed half of the storage port (named immutable objects), on every backend."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from conftest import Backend
from jqueue import CASConflictError
from jqueue.ports.storage import KeyedStoragePort


async def test_missing_named_object_is_none(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    assert await storage.get("log/00000000000000000001") is None


async def test_create_is_exclusive_and_keeps_the_first_content(backend: Backend) -> None:
    storage, name = backend.new_keyed()
    other = cast(KeyedStoragePort, backend.handle(name))
    await storage.create("log/1", b"first")
    with pytest.raises(CASConflictError):
        await other.create("log/1", b"second")
    assert await other.get("log/1") == b"first"


async def test_named_objects_do_not_touch_the_main_object(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    await storage.create("log/1", b"entry")
    assert await storage.read() == (b"", None)
    etag = await storage.write(b"main")
    assert await storage.read() == (b"main", etag)
    assert await storage.get("log/1") == b"entry"


async def test_list_is_sorted_filtered_by_prefix_and_start(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    for name in ["log/0003", "log/0001", "log/0002", "snap/0002", "logbook/0001"]:
        await storage.create(name, name.encode())
    assert await storage.list_names("log/") == ["log/0001", "log/0002", "log/0003"]
    assert await storage.list_names("log/", start_after="log/0001") == ["log/0002", "log/0003"]
    assert await storage.list_names("snap/") == ["snap/0002"]
    assert await storage.list_names("none/") == []


async def test_delete_removes_and_tolerates_missing(backend: Backend) -> None:
    storage, _ = backend.new_keyed()
    await storage.create("log/1", b"x")
    await storage.delete("log/1")
    await storage.delete("log/1")
    assert await storage.get("log/1") is None
    assert await storage.list_names("log/") == []
    await storage.create("log/1", b"again")
    assert await storage.get("log/1") == b"again"


async def test_ten_racing_creators_have_one_winner(backend: Backend) -> None:
    storage, name = backend.new_keyed()
    creators = [cast(KeyedStoragePort, backend.handle(name)) for _ in range(10)]
    results = await asyncio.gather(
        *(c.create("log/7", f"writer-{i}".encode()) for i, c in enumerate(creators)),
        return_exceptions=True,
    )
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, CASConflictError) for i, r in enumerate(results) if i != winners[0])
    assert await storage.get("log/7") == f"writer-{winners[0]}".encode()


@pytest.mark.parametrize("bad", ["", "../x", "log/../x", "/abs", "log//x", "a b", "log/."])
async def test_unsafe_names_are_refused(backend: Backend, bad: str) -> None:
    storage, _ = backend.new_keyed()
    with pytest.raises(ValueError, match="invalid object name"):
        await storage.get(bad)
