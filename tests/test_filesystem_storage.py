"""The local-file adapter: atomic replacement, durable commits, typed errors."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jqueue import LocalFileSystemStorage, StorageError
from jqueue.adapters.storage import file_lock


async def test_a_write_replaces_the_file_instead_of_truncating_it(tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    etag = await storage.write(b"old state " * 1000)
    with open(tmp_path / "q.json", "rb") as old:
        await storage.write(b"new", if_match=etag)
        assert old.read() == b"old state " * 1000
    assert (tmp_path / "q.json").read_bytes() == b"new"


async def test_every_commit_fsyncs_the_file_and_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    storage = LocalFileSystemStorage(tmp_path / "nested" / "q.json")
    etag = await storage.write(b"one")
    await storage.write(b"two", if_match=etag)
    assert synced == ["file", "dir", "file", "dir"]


async def test_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    orphan = tmp_path / ".q.json.deadbeef.tmp"
    orphan.write_bytes(b"half a state")
    unrelated = tmp_path / ".other.json.deadbeef.tmp"
    unrelated.write_bytes(b"not ours")
    await LocalFileSystemStorage(tmp_path / "q.json").write(b"state")
    assert not orphan.exists()
    assert unrelated.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.deadbeef.tmp", "q.json", "q.json.lock"]


async def test_io_failures_are_storage_errors(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    storage = LocalFileSystemStorage(tmp_path / "a-file" / "q.json")
    with pytest.raises(StorageError) as raised:
        await storage.write(b"x")
    assert isinstance(raised.value.cause, OSError)
    directory = LocalFileSystemStorage(tmp_path)
    with pytest.raises(StorageError):
        await directory.read()


@contextlib.contextmanager
def locked_by_another_process(lock_file: Path, *, stopped: bool) -> Iterator[subprocess.Popen[bytes]]:
    """Another process takes ``lock_file``'s flock and keeps it: running (asleep), or stopped
    (SIGSTOP) while holding it."""
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(lock_file)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        if stopped:
            os.kill(holder.pid, signal.SIGSTOP)
        yield holder
    finally:
        holder.kill()
        with contextlib.suppress(ProcessLookupError):  # killed and reaped already
            os.kill(holder.pid, signal.SIGCONT)
        holder.wait(30)


async def test_a_lock_held_by_a_running_process_fails_a_write_in_time_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_lock, "LOCK_WAIT_LIMIT", 1.5)
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    etag = await storage.write(b"before")
    await storage.create("entry-1", b"one")
    held = "stayed locked by another process for 1.5 s (process"
    with locked_by_another_process(tmp_path / "q.json.lock", stopped=False) as holder:
        with pytest.raises(StorageError) as failed:
            await storage.write(b"after", if_match=etag)
        assert holder.poll() is None  # a holder that runs is waited for, never killed
    assert f"q.json.lock {held} {holder.pid}, running)" in str(failed.value)
    segment_lock = tmp_path / "q.json.segments" / "lock"
    with locked_by_another_process(segment_lock, stopped=False) as holder:
        with pytest.raises(StorageError) as failed:
            await storage.create("entry-2", b"two")
        assert holder.poll() is None
    assert f"segments/lock {held}" in str(failed.value)
    assert await storage.read() == (b"before", etag)
    assert await storage.get("entry-2") is None
    etag = await storage.write(b"after", if_match=etag)  # the holder is gone: the lock is free
    await storage.create("entry-2", b"two")
    assert await storage.get("entry-2") == b"two"


async def test_a_lock_holder_stopped_inside_a_commit_is_killed_and_the_write_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    etag = await storage.write(b"before")
    await storage.create("entry-1", b"one")
    for lock_file in (tmp_path / "q.json.lock", tmp_path / "q.json.segments" / "lock"):
        with locked_by_another_process(lock_file, stopped=True) as holder:
            started = time.monotonic()
            if lock_file.name == "lock":
                await storage.create("entry-2", b"two")
            else:
                etag = await storage.write(b"after", if_match=etag)
            waited = time.monotonic() - started
            assert holder.wait(10) == -signal.SIGKILL
        assert file_lock.STOPPED_HOLDER_LIMIT <= waited < file_lock.LOCK_WAIT_LIMIT
        assert f"killed process {holder.pid}: it held {lock_file.as_uri()} while stopped" in caplog.text
    assert await storage.read() == (b"after", etag)
    assert await storage.get("entry-2") == b"two"
