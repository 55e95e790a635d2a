"""Damage at the tail of a file queue is never taken for a torn append.

A torn append leaves a prefix of one record (or, when the machine stops before the sync,
pages of it unwritten); a record written whole that fails its checksum, or a segment cut
short of the size it was made with, is damage: ``CorruptStateError`` with its location, and
the queue's files are never written over. The cases are an adversary's: a bit flipped in the
newest record, the newest segment truncated inside the newest slab or checkpoint. Both file
layouts: segments (``<file>.segments/``) and an earlier version's files (``<file>.d/``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jqueue import CorruptStateError, DirectQueue, LocalFileSystemStorage, LogSettings
from jqueue.adapters.storage.segment_format import (
    OBJECT,
    PAGE,
    RECORD,
    RECORD_MAGIC,
    TRAILER,
    V1,
    V2,
    VERSIONS,
    encode_record,
)
from jqueue.adapters.storage.segments import SegmentLog

Record = tuple[str, int, int]
"""A record's name, offset and size in its segment."""


def records(segment: Path) -> list[Record]:
    """Every whole-looking record of a segment file, in order."""
    data = segment.read_bytes()
    version = VERSIONS[data[:8]]
    found, at = [], version.header.size
    while at + RECORD.size <= len(data):
        magic, _, length, name_length, _, _ = RECORD.unpack_from(data, at)
        if magic != RECORD_MAGIC:
            break
        size = version.record_size(name_length, length)
        found.append((data[at + RECORD.size : at + RECORD.size + name_length].decode(), at, size))
        at += size
    return found


def newest_segment(directory: Path) -> Path:
    return max(directory.glob("*.seg"))


async def _queue_with_history(path: Path) -> int:
    """Make a queue with checkpoints and slabs behind its newest entries; return its job count."""
    async with DirectQueue(LocalFileSystemStorage(path), log=LogSettings(checkpoint_every=40)) as q:
        ids = [job.id for job in await q.enqueue_many("work", [b"x" * 50] * 300)]
        for n in range(90):
            await q.enqueue("work", f"job {n}".encode())
        await q.ack(ids[0])
        await q.checkpoint()
        await q.enqueue("work", b"the newest commit")
        return len((await q.read_state()).jobs)


async def _refused(path: Path, where: Path) -> None:
    """A fresh process's read and write are both refused, naming ``where``; nothing changes."""
    before = {p: p.read_bytes() for p in where.parent.iterdir() if p.is_file()}
    async with DirectQueue(LocalFileSystemStorage(path)) as q:
        with pytest.raises(CorruptStateError) as read:
            await q.read_state()
        with pytest.raises(CorruptStateError):
            await q.enqueue("work", b"must not land over the damage")
    assert read.value.location.startswith(where.as_uri())
    after = {p: p.read_bytes() for p in where.parent.iterdir() if p.is_file()}
    assert after == before


REGIONS = {
    "record magic": lambda offset, size, name: offset,
    "checksum": lambda offset, size, name: offset + 4,
    "content length": lambda offset, size, name: offset + 8,
    "name": lambda offset, size, name: offset + RECORD.size,
    "content": lambda offset, size, name: offset + (size + RECORD.size + len(name) - TRAILER.size) // 2,
    "trailer size": lambda offset, size, name: offset + size - TRAILER.size,
    "trailer magic": lambda offset, size, name: offset + size - 1,
}


@pytest.mark.parametrize("region", sorted(REGIONS))
async def test_a_bit_flipped_in_the_newest_record_is_damage(tmp_path: Path, region: str) -> None:
    path = tmp_path / "q.json"
    await _queue_with_history(path)
    segment = newest_segment(tmp_path / "q.json.segments")
    name, offset, size = records(segment)[-1]
    data = bytearray(segment.read_bytes())
    data[REGIONS[region](offset, size, name.encode())] ^= 0x10
    segment.write_bytes(bytes(data))
    await _refused(path, segment)


@pytest.mark.parametrize("prefix", ["slab/", "checkpoint/"])
async def test_the_newest_segment_cut_inside_its_newest_slab_or_checkpoint_is_damage(
    tmp_path: Path, prefix: str
) -> None:
    path = tmp_path / "q.json"
    await _queue_with_history(path)
    segment = newest_segment(tmp_path / "q.json.segments")
    newest = [(offset, size) for name, offset, size in records(segment) if name.startswith(prefix)]
    assert newest, f"no {prefix} record in the newest segment"
    offset, size = newest[-1]
    os.truncate(segment, offset + size // 2)
    await _refused(path, segment)


def _torn_tail_is_taken_as_torn(directory: Path, tail: Callable[[int], bytes]) -> None:
    """After one acknowledged record, ``tail(offset)`` is written where the next would go (not
    synced, never acknowledged): readers see only the acknowledged one, a writer goes on."""
    SegmentLog(directory).create("kept", b"acknowledged")
    segment = newest_segment(directory)
    _, offset, size = records(segment)[-1]
    with open(segment, "r+b") as raw:
        raw.seek(offset + size)
        raw.write(tail(offset + size))
    log = SegmentLog(directory)
    assert log.list_names("", "") == ["kept"]
    log.create("next", b"after the tear")
    assert SegmentLog(directory).list_names("", "") == ["kept", "next"]


def _anywhere(tail: bytes) -> Callable[[int], bytes]:
    return lambda _: tail


def test_a_torn_append_of_any_length_is_zeroed_and_the_log_goes_on(tmp_path: Path) -> None:
    record = encode_record(OBJECT, "torn", os.urandom(3 * PAGE))
    size = len(record)
    for cut in (1, RECORD.size - 1, RECORD.size + 3, size // 2, size - TRAILER.size, size - 1):
        _torn_tail_is_taken_as_torn(tmp_path / f"cut{cut}", _anywhere(record[:cut]))  # killed mid-append


def test_a_record_with_a_page_never_written_is_a_torn_append(tmp_path: Path) -> None:
    def with_a_hole(offset: int) -> bytes:
        record = bytearray(encode_record(OBJECT, "unsynced", os.urandom(4 * PAGE)))
        hole = -offset % PAGE + PAGE  # the second whole page of the record, in the file's pages
        record[hole : hole + PAGE] = bytes(PAGE)  # the machine stopped before the sync wrote it
        return bytes(record)

    _torn_tail_is_taken_as_torn(tmp_path / "s", with_a_hole)


def test_a_segment_of_the_earlier_version_is_read_and_sealed_by_the_first_write(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    directory.mkdir()
    (directory / "lock").touch()
    body = b"".join(encode_record(OBJECT, f"old/{n}", f"old {n}".encode(), V1) for n in range(3))
    old = directory / f"{1:012d}.seg"
    old.write_bytes(V1.header.pack(V1.magic, 1) + body + bytes(1 << 16))
    log = SegmentLog(directory)
    assert log.list_names("", "") == ["old/0", "old/1", "old/2"]
    log.create("new", b"in a segment of the new version")
    assert newest_segment(directory).read_bytes()[:8] == V2.magic
    fresh = SegmentLog(directory)
    assert [fresh.get(f"old/{n}") for n in range(3)] == [b"old 0", b"old 1", b"old 2"]
    assert fresh.get("new") == b"in a segment of the new version"


@pytest.mark.parametrize("damage", ["flip", "cut"])
async def test_the_newest_objects_of_an_earlier_versions_files_are_checked_too(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "q.json"
    (tmp_path / "q.json.d").mkdir()
    await _queue_with_history(path)
    directory = tmp_path / "q.json.d"
    newest_entry = max((directory / "log").iterdir())
    newest_slab = max((directory / "slab").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    if damage == "flip":
        data = bytearray(newest_entry.read_bytes())
        data[data.index(b'"seq"')] ^= 0x10  # a structural byte of the entry
        newest_entry.write_bytes(bytes(data))
        await _refused(path, newest_entry)
    else:
        os.truncate(newest_slab, newest_slab.stat().st_size // 2)
        await _refused(path, newest_slab)


def test_the_helpers_read_what_the_queue_wrote(tmp_path: Path) -> None:
    count = asyncio.run(_queue_with_history(tmp_path / "q.json"))
    assert count == 390
    names = [name for name, _, _ in records(newest_segment(tmp_path / "q.json.segments"))]
    assert any(name.startswith("slab/") for name in names)
    assert any(name.startswith("checkpoint/") for name in names)
