"""A process's memory at depth: the C allocator's free pages in the middle of its heap go back
to the system (``give_back_memory``: what a merge of slabs frees would otherwise stay
resident), and the slabs of a storage that cannot map them are spilled to files (``spilled``)."""

from __future__ import annotations

import mmap
import platform
import subprocess
import sys

import pytest

from jqueue import DirectQueue, InMemoryStorage, LogSettings
from jqueue.core.log.slabs import SlabSet
from jqueue.core.log.store import LogStore
from jqueue.core.loop import memory
from jqueue.core.loop.memory import give_back_memory

FREED_HEAP = """
import sys
from pathlib import Path
from jqueue.core.loop import memory
from jqueue.core.loop.memory import give_back_memory

def anon_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) // 1024

blocks, pins = [], []
for n in range(2000):  # 200 MB of blocks, each followed by a small block that stays
    blocks.append(bytes(100_000) + bytes([n % 256]))
    pins.append(bytes(600) + bytes([n % 256]))
del blocks
before = anon_mib()
given = give_back_memory()
print(before, anon_mib(), given)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_free_middle_of_the_heap_goes_back_to_the_system() -> None:
    done = subprocess.run([sys.executable, "-c", FREED_HEAP], capture_output=True, text=True, check=True)
    before, after, given = done.stdout.split()
    assert given == "True"
    assert int(before) - int(after) > 100, done.stdout  # of the 200 MB freed, pinned in place


def test_it_says_whether_it_could() -> None:
    assert give_back_memory() is (platform.libc_ver()[0] == "glibc")


def test_trims_come_at_most_once_every_trim_every(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "_trim", lambda: trims.append)
    monkeypatch.setattr(memory, "_last_trim", -memory.TRIM_EVERY)
    assert give_back_memory()
    assert give_back_memory()  # asked again at once: the heaps were walked a moment ago
    assert trims == [0]


class KeyedOnly:
    """A keyed storage that cannot map its objects (as S3 and GCS cannot)."""

    def __init__(self, storage: InMemoryStorage) -> None:
        self._storage = storage

    async def read(self) -> tuple[bytes, str | None]:
        return await self._storage.read()

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        return await self._storage.write(content, if_match)

    async def get(self, name: str) -> bytes | None:
        return await self._storage.get(name)

    async def create(self, name: str, content: bytes) -> None:
        await self._storage.create(name, content)

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        return await self._storage.list_names(prefix, start_after)

    async def delete(self, name: str) -> None:
        await self._storage.delete(name)


def spilled_slabs(slabs: object) -> list[bool]:
    """Whether each slab of ``slabs`` is read from a mapping of a temporary file."""
    assert isinstance(slabs, SlabSet)
    return [
        isinstance(slab.opened.data, memoryview) and isinstance(slab.opened.data.obj, mmap.mmap)
        for slab in slabs.slabs
    ]


async def test_the_slabs_written_on_a_storage_that_cannot_map_them_are_spilled_to_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(memory, "SPILL_BYTES", 1)  # every slab
    storage = KeyedOnly(InMemoryStorage(name="spill"))
    async with DirectQueue(storage, log=LogSettings(checkpoint_every=10**9)) as queue:
        first = await queue.enqueue_many("work", [b"%d" % n for n in range(3000)])
        await queue.checkpoint()
        second = await queue.enqueue_many("work", [b"%d" % n for n in range(3000, 4000)], priority=1)
        await queue.checkpoint()
        store = await queue._opener.store()
        assert isinstance(store, LogStore)
        assert spilled_slabs(store._checkpoints.slabs) == [True, True]  # written, then spilled
    async with DirectQueue(storage) as fresh:  # a new process reads them (its first claim spills nothing)
        claimed = await fresh.dequeue(batch_size=4000)
        assert [job.id for job in claimed] == [job.id for job in first + second]  # lower priority first
        assert (claimed[2999].payload, claimed[-1].payload) == (b"2999", b"3999")
