"""The local queue's segment files: one data sync per create, torn tails, damage, reclaiming space."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jqueue import CASConflictError, CorruptStateError, DirectQueue, LocalFileSystemStorage
from jqueue.adapters.storage import segments
from jqueue.adapters.storage.segment_format import OBJECT, V2, encode_record
from jqueue.adapters.storage.segments import BUSY, SegmentLog

SMALL = 64 * 1024


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


def test_objects_survive_a_reopen_and_a_second_create_conflicts(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("log/1", b"one")
    log.create("checkpoint/1-5", b"c" * 10_000)
    with pytest.raises(CASConflictError):
        log.create("log/1", b"other")
    log.close()
    fresh = SegmentLog(tmp_path / "s")
    assert fresh.get("log/1") == b"one"
    assert fresh.get("checkpoint/1-5") == b"c" * 10_000
    assert fresh.list_names("log/", "") == ["log/1"]
    assert fresh.get("log/2") is None


def test_a_create_costs_one_data_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("genesis", b"first")  # creates the directory and the first segment
    syncs: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd: int) -> None:
        syncs.append("fdatasync")
        real_fdatasync(fd)

    def fsync(fd: int) -> None:
        syncs.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    for n in range(20):
        log.create(f"log/{n}", b"x" * 1000)
    assert syncs == ["fdatasync"] * 20


def test_another_instance_sees_creates_and_deletes(tmp_path: Path) -> None:
    writer, reader = SegmentLog(tmp_path / "s"), SegmentLog(tmp_path / "s")
    assert reader.get("a") is None
    writer.create("a", b"1")
    assert reader.get("a") == b"1"
    writer.delete("a")
    assert reader.get("a") is None
    assert reader.list_names("", "") == []
    reader.create("a", b"again")  # a deleted name can be created anew
    assert writer.get("a") == b"again"


def test_a_torn_tail_is_ignored_by_readers_and_zeroed_by_the_next_writer(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("a", b"whole")
    log.close()
    [segment] = segment_files(tmp_path / "s")
    data = segment.read_bytes()
    end = len(data.rstrip(b"\0"))
    assert end == V2.header.size + V2.record_size(len("a"), len("whole"))
    torn = bytearray(data)
    torn[end : end + 300] = encode_record(OBJECT, "lost", b"z" * 1000)[:300]  # its bytes never all arrived
    segment.write_bytes(bytes(torn))
    reader = SegmentLog(tmp_path / "s")
    assert reader.list_names("", "") == ["a"]
    writer = SegmentLog(tmp_path / "s")
    writer.create("b", b"after the tear")
    after_b = end + V2.record_size(len("b"), len("after the tear"))
    assert segment.read_bytes()[after_b : end + 400] == bytes(end + 400 - after_b)
    fresh = SegmentLog(tmp_path / "s")
    assert (fresh.get("a"), fresh.get("b")) == (b"whole", b"after the tear")
    assert reader.get("b") == b"after the tear"


def test_damage_before_whole_records_is_reported_and_left_alone(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    for name in ("a", "b", "c"):
        log.create(name, name.encode() * 100)
    log.close()
    [segment] = segment_files(tmp_path / "s")
    data = bytearray(segment.read_bytes())
    damaged_at = data.index(b"b" * 100) + 50
    data[damaged_at] ^= 0xFF
    segment.write_bytes(bytes(data))
    before = segment.read_bytes()
    log = SegmentLog(tmp_path / "s")
    with pytest.raises(CorruptStateError) as raised:
        log.create("d", b"must not land")
    assert raised.value.location.startswith(segment.as_uri())
    with pytest.raises(CorruptStateError):
        SegmentLog(tmp_path / "s").list_names("", "")
    assert segment.read_bytes() == before


def test_a_foreign_file_named_like_a_segment_is_reported(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("a", b"1")
    (tmp_path / "s" / "000000000007.seg").write_bytes(b"not a segment at all")
    with pytest.raises(CorruptStateError) as raised:
        SegmentLog(tmp_path / "s").get("a")
    assert raised.value.location.endswith("000000000007.seg")


def test_full_segments_roll_over_and_readers_follow(tmp_path: Path) -> None:
    writer = SegmentLog(tmp_path / "s", segment_bytes=SMALL)
    reader = SegmentLog(tmp_path / "s", segment_bytes=SMALL)
    reader.get("nothing yet")
    names = [f"log/{n:05d}" for n in range(300)]
    for name in names:
        writer.create(name, name.encode() * 50)
    big = os.urandom(3 * SMALL)
    writer.create("checkpoint/big", big)
    assert len(segment_files(tmp_path / "s")) > 3
    assert reader.list_names("log/", "") == names
    assert reader.get("checkpoint/big") == big
    assert SegmentLog(tmp_path / "s").get(names[-1]) == names[-1].encode() * 50


def test_deleted_space_is_reclaimed_and_moved_records_stay_readable(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    writer = SegmentLog(directory, segment_bytes=SMALL)
    stale_reader = SegmentLog(directory, segment_bytes=SMALL)
    names = [f"log/{n:05d}" for n in range(2000)]
    for name in names:
        writer.create(name, name.encode() * 20)
    assert stale_reader.get(names[0]) is not None  # indexes every record where it was first written
    total = sum(p.stat().st_size for p in segment_files(directory))
    keep = set(names[::97])
    for name in names:
        if name not in keep:
            writer.delete(name)
    assert total > 6 * SMALL
    assert len(segment_files(directory)) <= 2  # the newest, and the one its tombstones filled
    for reader in (writer, stale_reader, SegmentLog(directory, segment_bytes=SMALL)):
        assert reader.list_names("log/", "") == sorted(keep)
        assert all(reader.get(name) == name.encode() * 20 for name in keep)


def test_deletes_made_by_different_instances_still_free_a_segment(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    first, second = SegmentLog(directory, segment_bytes=SMALL), SegmentLog(directory, segment_bytes=SMALL)
    names = [f"n{n:04d}" for n in range(400)]
    for name in names:
        first.create(name, b"y" * 500)
    second.get(names[0])
    for position, name in enumerate(names[:-1]):
        (first if position % 2 else second).delete(name)
    assert len(segment_files(directory)) <= 2
    assert SegmentLog(directory).list_names("", "") == [names[-1]]


def test_a_replaced_directory_is_noticed(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("a", b"old")
    shutil.rmtree(tmp_path / "s")
    assert log.get("a") is None
    assert not (tmp_path / "s").exists()
    log.create("a", b"new")
    assert SegmentLog(tmp_path / "s").get("a") == b"new"


_CHILD = """
import sys
from jqueue.adapters.storage.segment_format import OBJECT, V2, encode_record
from jqueue.adapters.storage.segments import SegmentLog
log = SegmentLog(__import__("pathlib").Path(sys.argv[1]), segment_bytes=int(sys.argv[3]))
for n in range(10**9):
    name = f"{sys.argv[2]}/{n:07d}"
    content = name.encode() * (1 + n % 300)
    try:
        if n % 2 or log.try_create(name, content) is not None:  # the quick path, half the time
            log.create(name, content)
    except Exception as exc:
        if type(exc).__name__ != "CASConflictError":
            raise
        continue
    print(name, flush=True)
"""


def test_writers_killed_at_random_moments_lose_no_acknowledged_create(tmp_path: Path) -> None:
    writers = 3  # racing each other too
    directory = tmp_path / "s"
    acknowledged: set[str] = set()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    for round_number in range(6):
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(directory), f"w{w}", str(SMALL)],
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            )
            for w in range(writers)
        ]
        for child in children:  # each has started writing (a busy machine starts them slowly)
            assert child.stdout is not None
            acknowledged.add(child.stdout.readline().strip())
        time.sleep(0.4 + 0.13 * round_number)  # a different moment of the writing each round
        for child in children:
            child.send_signal(signal.SIGKILL)
        for child in children:
            assert child.stdout is not None
            acknowledged |= set(child.stdout.read().split())  # the rest, through the same buffer
            child.wait(timeout=30)
        log = SegmentLog(directory, segment_bytes=SMALL)
        listed = set(log.list_names("", ""))
        assert acknowledged <= listed
        for name in acknowledged:
            n = int(name.rsplit("/", 1)[1])
            assert log.get(name) == name.encode() * (1 + n % 300)
        log.create(f"check/{round_number}", b"the tail takes new records")
        log.close()
    assert len(acknowledged) > 100


async def test_the_file_adapter_keeps_a_queue_made_by_an_earlier_version_in_its_files(tmp_path: Path) -> None:
    legacy = tmp_path / "q.json.d" / "log"
    legacy.mkdir(parents=True)
    (legacy / "00000000000000000001").write_bytes(b"old entry")
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    assert storage.namespace == tmp_path / "q.json.d"
    assert await storage.get("log/00000000000000000001") == b"old entry"
    await storage.create("log/00000000000000000002", b"new entry")
    assert (legacy / "00000000000000000002").read_bytes() == b"new entry"
    assert not (tmp_path / "q.json.segments").exists()


def test_large_records_are_indexed_without_reading_them_and_checked_when_read(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    big = [os.urandom(3 << 20) for _ in range(3)]
    for n, content in enumerate(big):
        log.create(f"big/{n}", content)
    log.close()
    [segment] = [path for path in segment_files(tmp_path / "s") if big[1] in path.read_bytes()]
    data = bytearray(segment.read_bytes())
    data[data.index(big[1]) + 12345] ^= 0xFF  # damage inside the middle record's content
    segment.write_bytes(bytes(data))
    fresh = SegmentLog(tmp_path / "s")
    assert fresh.list_names("big/", "") == ["big/0", "big/1", "big/2"]
    assert (fresh.get("big/0"), fresh.get("big/2")) == (big[0], big[2])
    with pytest.raises(CorruptStateError) as raised:
        fresh.get("big/1")
    assert raised.value.location.startswith(segment.as_uri())


def test_a_torn_large_record_at_the_tail_is_not_taken_for_a_whole_one(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("small", b"x")
    log.close()
    [segment] = segment_files(tmp_path / "s")
    data = bytearray(segment.read_bytes())
    end = len(data.rstrip(b"\0"))
    record = encode_record(OBJECT, "big", os.urandom(3 << 20))
    data[end : end + len(record) // 2] = record[: len(record) // 2]  # the first half arrived
    segment.write_bytes(bytes(data))
    fresh = SegmentLog(tmp_path / "s")
    assert fresh.list_names("", "") == ["small"]
    fresh.create("after", b"y")
    assert SegmentLog(tmp_path / "s").list_names("", "") == ["after", "small"]


def test_a_quick_read_never_waits_for_a_writer(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("a", b"1")
    assert log.try_get("a") == b"1"
    [segment] = segment_files(tmp_path / "s")
    end = len(segment.read_bytes().rstrip(b"\0"))
    answers: list[object] = []

    def quick_reads() -> None:
        answers.extend([log.try_get("b"), log.try_get("a")])

    with open(tmp_path / "s" / "lock", "rb") as lock, open(segment, "r+b") as raw:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a writer in another process, mid-append
        try:
            raw.seek(end)
            raw.write(encode_record(OBJECT, "b", b"half")[:20])
            raw.flush()
            quick = threading.Thread(target=quick_reads)
            quick.start()
            quick.join(5)
            assert answers == [None, b"1"]  # "b" is not committed yet, and was not waited for
            full = threading.Thread(target=log.get, args=("b",))
            full.start()
            full.join(0.3)
            assert full.is_alive()  # a full read waits to tell a torn record from damage
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    full.join(10)
    quick.join(10)
    assert not full.is_alive()


def test_a_quick_create_writes_at_once_or_answers_busy_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # syncs slowed by a busy machine would answer BUSY too (a test of its own, below): here only
    # the size of the newest segment decides
    monkeypatch.setattr(segments, "_QUICK_SYNC_SECONDS", float("inf"))
    log = SegmentLog(tmp_path / "s", segment_bytes=SMALL)
    assert log.try_create("a", b"1") is BUSY  # the first write reads the whole store: not quick
    log.create("a", b"1")
    assert log.try_create("b", b"2") is None
    assert SegmentLog(tmp_path / "s").get("b") == b"2"
    with pytest.raises(CASConflictError):
        log.try_create("a", b"again")
    roomy = SegmentLog(tmp_path / "roomy")
    roomy.create("first", b"x")
    assert roomy.try_create("large", bytes(1 << 20)) is BUSY  # it fits, but is past the quick size
    assert roomy.get("large") is None
    answers: list[object] = []
    with open(tmp_path / "s" / "lock", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a writer in another process
        try:
            quick = threading.Thread(target=lambda: answers.append(log.try_create("c", b"3")))
            quick.start()
            quick.join(5)
            assert answers == [BUSY]  # answered without waiting for the lock
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    filled = [log.try_create(f"fill/{n}", bytes(1000)) for n in range(100)]
    n = filled.index(BUSY)
    assert set(filled[:n]) == {None}
    assert set(filled[n:]) == {BUSY}
    assert len(segment_files(tmp_path / "s")) == 1  # a full segment is left to the slow path
    log.create(f"fill/{n}", bytes(1000))
    assert len(segment_files(tmp_path / "s")) == 2
    written = sorted(["a", "b", *(f"fill/{i}" for i in range(n + 1))])
    assert SegmentLog(tmp_path / "s").list_names("", "") == written


def test_quick_creates_stop_while_syncs_are_slow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SegmentLog(tmp_path / "s")
    log.create("first", b"x")
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(0.01)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    answers = [log.try_create(f"slow/{n}", b"x") for n in range(20)]
    assert answers[0] is None
    assert answers[-1] is BUSY  # the event loop is not held for a slow disk's syncs
    # A fast disk, whatever this machine's disk does while CI shares it:
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    for n in range(40):
        log.create(f"fast/{n}", b"x")
    assert log.try_create("quick again", b"x") is None  # fast syncs bring the quick path back


async def test_a_caller_committing_in_a_loop_lets_other_tasks_run(tmp_path: Path) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as queue:
        await queue.enqueue("e", b"creates the queue")
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        for _ in range(50):
            await queue.enqueue("e", b"x")  # each create is written on the event loop
        task.cancel()
    assert ticks - before >= 50  # a heartbeat or a background checkpoint is not starved


def test_a_mapped_record_reads_as_its_content_and_outlives_its_delete_and_its_segment(tmp_path: Path) -> None:
    directory = tmp_path / "s"
    writer = SegmentLog(directory, segment_bytes=SMALL)
    names = [f"slab/{n:04d}" for n in range(300)]
    for name in names:
        writer.create(name, name.encode() * 30)
    reader = SegmentLog(directory, segment_bytes=SMALL)
    first, kept = reader.mapped(names[0]), names[-1]
    assert first is not None
    assert bytes(first) == names[0].encode() * 30
    assert reader.mapped("slab/none") is None
    for name in names[:-1]:
        writer.delete(name)
    assert reader.mapped(names[1]) is None  # deleted since this reader indexed it
    assert len(segment_files(directory)) <= 2  # the first segment was reclaimed and unlinked
    assert bytes(first) == names[0].encode() * 30
    moved = SegmentLog(directory, segment_bytes=SMALL).mapped(kept)
    assert moved is not None
    assert bytes(moved) == kept.encode() * 30


async def test_the_file_adapter_maps_named_objects_in_both_layouts(tmp_path: Path) -> None:
    legacy = tmp_path / "old.json.d" / "slab"
    legacy.mkdir(parents=True)
    (legacy / "1").write_bytes(b"old slab")
    (legacy / "2").write_bytes(b"")
    old, new = LocalFileSystemStorage(tmp_path / "old.json"), LocalFileSystemStorage(tmp_path / "new.json")
    await new.create("slab/1", b"new slab")
    for storage, content in ((old, b"old slab"), (new, b"new slab")):
        found = await storage.mapped("slab/1")
        assert found is not None
        assert bytes(found) == content
        assert await storage.mapped("slab/3") is None
    empty = await old.mapped("slab/2")
    assert empty is not None
    assert bytes(empty) == b""
