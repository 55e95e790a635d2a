"""``LocalFileSystemStorage``: the state in one local file, committed atomically and durably."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.domain.errors import CASConflictError, StorageError

_ORPHAN_AGE_SECONDS = 3600.0


def _etag(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


class LocalFileSystemStorage:
    """A file on a local POSIX filesystem with compare-and-swap writes.

    A write takes an exclusive ``flock`` on ``<file>.lock``, checks the etag, writes
    the new content to a temporary file in the same directory, fsyncs it, renames it
    over the old file and fsyncs the directory. The file is never truncated in place,
    so a process killed at any moment leaves the old or the new state, whole; readers
    need no lock. Not for network filesystems. The etag is the SHA-256 hex digest of
    the content.

    Named objects (the log-structured layout) live in the directory ``<file>.d``;
    each is created whole with a hard link from a fsynced temporary file, which
    fails if the name exists.

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
        self.namespace = self.path.with_name(self.path.name + ".d")
        self._swept_dirs: set[Path] = set()

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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _replace(self, content: bytes) -> None:
        tmp = _durable_temp(self.path, content)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)

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
        return await asyncio.to_thread(self._get, self.namespace / checked_name(name))

    async def create(self, name: str, content: bytes) -> None:
        """Create the named object, whole and fsynced, only if it does not exist."""
        await asyncio.to_thread(self._create, self.namespace / checked_name(name), bytes(content))

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names under ``prefix`` after ``start_after``, sorted."""
        return await asyncio.to_thread(self._list, checked_prefix(prefix), start_after)

    async def delete(self, name: str) -> None:
        """Remove the named object if it exists."""
        await asyncio.to_thread(self._delete, self.namespace / checked_name(name))

    def _get(self, target: Path) -> bytes | None:
        try:
            return target.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {target.as_uri()}", exc) from exc

    def _create(self, target: Path, content: bytes) -> None:
        try:
            if not target.parent.is_dir():
                target.parent.mkdir(parents=True, exist_ok=True)
                _fsync_dir(target.parent.parent)
            self._sweep_old_temps(target.parent)
            tmp = _durable_temp(target, content)
            try:
                os.link(tmp, target)
            except FileExistsError as exc:
                raise CASConflictError(f"{target.as_uri()} exists") from exc
            finally:
                tmp.unlink()
            _fsync_dir(target.parent)
        except OSError as exc:
            raise StorageError(f"cannot create {target.as_uri()}", exc) from exc

    def _list(self, prefix: str, start_after: str) -> list[str]:
        folder, _, stem = prefix.rpartition("/")
        directory = self.namespace / folder if folder else self.namespace
        lead = f"{folder}/" if folder else ""
        try:
            names = [
                lead + entry.name
                for entry in os.scandir(directory)
                if entry.name.startswith(stem) and not entry.name.startswith(".") and entry.is_file()
            ]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {directory.as_uri()}", exc) from exc
        return sorted(n for n in names if n > start_after)

    def _delete(self, target: Path) -> None:
        try:
            target.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {target.as_uri()}", exc) from exc

    def _sweep_old_temps(self, directory: Path) -> None:
        """Remove temporary files that creators which died long ago left behind."""
        if directory in self._swept_dirs:
            return
        cutoff = time.time() - _ORPHAN_AGE_SECONDS
        for entry in os.scandir(directory):
            if not (entry.name.startswith(".") and entry.name.endswith(".tmp")):
                continue
            with contextlib.suppress(FileNotFoundError):  # another creator just finished with it
                if entry.stat().st_mtime < cutoff:
                    Path(entry.path).unlink(missing_ok=True)
        self._swept_dirs.add(directory)


def _durable_temp(target: Path, content: bytes) -> Path:
    """Write ``content`` to a fsynced temporary file beside ``target`` and return its path."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
