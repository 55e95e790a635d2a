"""``LocalFileSystemStorage``: the state in one local file, committed atomically and durably."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from jqueue.adapters.storage.file_lock import hold_flock
from jqueue.adapters.storage.file_watch import DirectoryWatch
from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.adapters.storage.object_files import NamedObjects, ObjectFiles, durable_temp, fsync_dir
from jqueue.adapters.storage.segments import Busy, SegmentLog
from jqueue.domain.errors import CASConflictError, StorageError

T = TypeVar("T")


def _etag(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


class LocalFileSystemStorage:
    """A file on a local POSIX filesystem with compare-and-swap writes.

    A write takes an exclusive ``flock`` on ``<file>.lock``, checks the etag, writes
    the new content to a temporary file in the same directory, fsyncs it, renames it
    over the old file and fsyncs the directory. The file is never truncated in place,
    so a process killed at any moment leaves the old or the new state, whole; readers
    need no lock. Not for network filesystems. The etag is the SHA-256 hex digest of
    the content. A lock that another process holds for ``LOCK_WAIT_LIMIT`` fails the call
    with a ``StorageError`` naming the lock file; a holder stopped while holding it is
    killed (``hold_flock``).

    Named objects (the log-structured layout) are records in append-only segment
    files in the directory ``<file>.segments`` (see ``SegmentLog``): creating one
    costs one data sync. A queue made by an earlier version keeps its named objects
    as files in ``<file>.d``, each created whole with a hard link from a fsynced
    temporary file, which fails if the name exists.

    Parameters
    ----------
    path : str or Path
        The state file; parent directories are created on first write.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).absolute()
        self.url = self.path.as_uri()
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._orphans_swept = False
        self._files = ObjectFiles(self.path.with_name(self.path.name + ".d"))
        self._segments = SegmentLog(self.path.with_name(self.path.name + ".segments"))
        self._watch: DirectoryWatch | None = None
        self._chosen: NamedObjects | None = None

    @property
    def namespace(self) -> Path:
        """The directory of the named objects: ``<file>.segments``, or ``<file>.d`` for a queue
        an earlier version made."""
        return self._objects().directory

    def _objects(self) -> NamedObjects:
        """The named objects' layout: per-file where an earlier version made the queue, else
        segments (decided once either directory exists)."""
        if self._chosen is None:
            if self._files.directory.is_dir():
                self._chosen = self._files
            elif self._segments.directory.is_dir():
                self._chosen = self._segments
            else:
                return self._segments  # a new queue
        return self._chosen

    def named_url(self, name: str) -> str:
        """Where the named object ``name`` is kept (with "" the directory of them all), for
        messages: under ``<file>.segments/`` (``<file>.d/`` for a queue an earlier version made)."""
        return f"{self.namespace.as_uri()}/{name}"

    async def read(self) -> tuple[bytes, str | None]:
        """Return the content and etag, or ``(b"", None)`` if the file does not exist."""
        return await asyncio.to_thread(self._read)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the file if its etag still matches; None creates it only if absent."""
        return await asyncio.to_thread(self._write, bytes(content), if_match)

    def _read(self) -> tuple[bytes, str | None]:
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return b"", None
        except OSError as exc:
            raise StorageError(f"cannot read {self.url}", exc) from exc
        return content, _etag(content)

    def _write(self, content: bytes, if_match: str | None) -> str:
        try:
            with self._locked():
                current = self._read()[1]
                if current != if_match:
                    raise CASConflictError(f"{self.url}: expected etag {if_match!r}, found {current!r}")
                self._sweep_orphans()
                self._replace(content)
        except OSError as exc:
            raise StorageError(f"cannot write {self.url}", exc) from exc
        return _etag(content)

    async def remove(self) -> None:
        """Remove the file and its lock file if they exist (named objects stay)."""
        await asyncio.to_thread(self._remove)

    def _remove(self) -> None:
        try:
            with self._locked():
                self.path.unlink(missing_ok=True)
                self._lock_path.unlink(missing_ok=True)  # a later write makes it again
                fsync_dir(self.path.parent)
        except OSError as exc:
            raise StorageError(f"cannot remove {self.url}", exc) from exc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            hold_flock(fd, fcntl.LOCK_EX, self._lock_path.as_uri())
            yield
        finally:
            os.close(fd)

    def _replace(self, content: bytes) -> None:
        tmp = durable_temp(self.path, content)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def _sweep_orphans(self) -> None:
        """Remove temporary files left by writers that died mid-write (we hold the lock)."""
        if self._orphans_swept:
            return
        prefix = f".{self.path.name}."
        for entry in os.scandir(self.path.parent):
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                Path(entry.path).unlink(missing_ok=True)
        self._orphans_swept = True

    async def get(self, name: str) -> bytes | None:
        """Return the named object's content, or None."""
        checked_name(name)
        if self._objects() is self._segments:  # a small record in the page cache: no thread
            found = self._named("read", name, lambda _: self._segments.try_get(name))
            if not isinstance(found, Busy):
                return found
        return await asyncio.to_thread(self._named, "read", name, lambda objects: objects.get(name))

    async def mapped(self, name: str) -> memoryview | None:
        """Return the named object's content mapped read-only (``MappedStoragePort``), or None."""
        checked_name(name)
        return await asyncio.to_thread(self._named, "map", name, lambda objects: objects.mapped(name))

    async def create(self, name: str, content: bytes) -> None:
        """Create the named object, whole and durable, only if it does not exist."""
        content = bytes(content)
        checked_name(name)
        quick = self._objects() is self._segments  # uncontended, small, on a fast disk: no thread
        if quick and self._named("create", name, lambda _: self._segments.try_create(name, content)) is None:
            await asyncio.sleep(0)  # as a thread hop would: a caller in a loop must not starve other tasks
            return
        await asyncio.to_thread(self._named, "create", name, lambda objects: objects.create(name, content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names under ``prefix`` after ``start_after``, sorted."""
        checked_prefix(prefix)
        return await asyncio.to_thread(
            self._named, "list", prefix, lambda objects: objects.list_names(prefix, start_after)
        )

    async def delete(self, name: str) -> None:
        """Remove the named object if it exists."""
        checked_name(name)
        await asyncio.to_thread(self._named, "delete", name, lambda objects: objects.delete(name))

    def watch_changes(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` after another commit to this queue's segments (inotify, on Linux).
        Until the queue is created, the directory of its file is watched, and the watch moves
        to the segments when they appear. None for a queue made by an earlier version, or
        without inotify."""
        if self._objects() is self._files:
            return None
        segments = self._segment_watch()
        if segments is not None:
            return segments.subscribe(callback)
        parent = DirectoryWatch.start(self.path.parent)
        if parent is None:
            return None
        moved: list[Callable[[], None]] = []

        def created_maybe() -> None:
            if not moved and (watch := self._segment_watch()) is not None:
                moved.append(watch.subscribe(callback))
                parent.close()
            callback()

        stop_parent = parent.subscribe(created_maybe)
        if self._segments.directory.is_dir():  # created while the watch was being set up
            created_maybe()

        def stop() -> None:
            stop_parent()
            parent.close()
            for unsubscribe in moved:
                unsubscribe()

        return stop

    def _segment_watch(self) -> DirectoryWatch | None:
        if self._watch is None:
            self._watch = DirectoryWatch.start(self._segments.directory)
        return self._watch

    def _named(self, verb: str, name: str, call: Callable[[NamedObjects], T]) -> T:
        objects = self._objects()
        try:
            return call(objects)
        except OSError as exc:
            raise StorageError(f"cannot {verb} {objects.directory.as_uri()}/{name}", exc) from exc
