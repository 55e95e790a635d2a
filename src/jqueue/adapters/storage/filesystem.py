"""``LocalFileSystemStorage``: the state in one local file, committed atomically and durably."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from jqueue.domain.errors import CASConflictError, StorageError


def _etag(content: bytes) -> str:
    return hashlib.blake2b(content, digest_size=16).hexdigest()


class LocalFileSystemStorage:
    """A file on a local POSIX filesystem with compare-and-swap writes.

    A write takes an exclusive ``flock`` on ``<file>.lock``, checks the etag (a
    BLAKE2 hash of the content), writes the new content to a temporary file in the
    same directory, fsyncs it, renames it over the old file and fsyncs the
    directory. The file is never truncated in place, so a process killed at any
    moment leaves the old or the new state, whole; readers need no lock. Not for
    network filesystems.

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
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
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
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _sweep_orphans(self) -> None:
        """Remove temporary files left by writers that died mid-write (we hold the lock)."""
        if self._orphans_swept:
            return
        prefix = f".{self.path.name}."
        for entry in os.scandir(self.path.parent):
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp"):
                Path(entry.path).unlink(missing_ok=True)
        self._orphans_swept = True
