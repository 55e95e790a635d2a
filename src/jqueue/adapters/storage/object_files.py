"""``ObjectFiles``: named objects as one file each, the layout of queues made by earlier versions."""

from __future__ import annotations

import contextlib
import mmap
import os
import time
import uuid
from pathlib import Path
from typing import Protocol

from jqueue.domain.errors import CASConflictError, StorageError

_ORPHAN_AGE_SECONDS = 3600.0


class NamedObjects(Protocol):
    """The blocking named-object calls of a local queue (see ``KeyedStoragePort``)."""

    @property
    def directory(self) -> Path:
        """Where the objects live."""
        ...

    def get(self, name: str) -> bytes | None:
        """Return the object's content, or None."""
        ...

    def mapped(self, name: str) -> memoryview | None:
        """Return the object's content mapped read-only, or None."""
        ...

    def create(self, name: str, content: bytes) -> None:
        """Create the object, durably, only if it does not exist."""
        ...

    def list_names(self, prefix: str, start_after: str) -> list[str]:
        """Return the names that start with ``prefix`` and sort after ``start_after``, sorted."""
        ...

    def delete(self, name: str) -> None:
        """Remove the object if it exists."""
        ...


class ObjectFiles:
    """One file per named object under ``directory``.

    Parameters
    ----------
    directory : Path
        The queue's ``<file>.d`` directory.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._swept_dirs: set[Path] = set()

    def get(self, name: str) -> bytes | None:
        """Return the object's content, or None."""
        target = self.directory / name
        try:
            return target.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {target.as_uri()}", exc) from exc

    def mapped(self, name: str) -> memoryview | None:
        """Return the object's content mapped read-only, or None."""
        target = self.directory / name
        try:
            with target.open("rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    return memoryview(b"")
                return memoryview(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {target.as_uri()}", exc) from exc

    def create(self, name: str, content: bytes) -> None:
        """Create the object, whole and fsynced, with a hard link that fails if the name exists."""
        target = self.directory / name
        try:
            if not target.parent.is_dir():
                target.parent.mkdir(parents=True, exist_ok=True)
                fsync_dir(target.parent.parent)
            self._sweep_old_temps(target.parent)
            tmp = durable_temp(target, content)
            try:
                os.link(tmp, target)
            except FileExistsError as exc:
                raise CASConflictError(f"{target.as_uri()} exists") from exc
            finally:
                tmp.unlink()
            fsync_dir(target.parent)
        except OSError as exc:
            raise StorageError(f"cannot create {target.as_uri()}", exc) from exc

    def list_names(self, prefix: str, start_after: str) -> list[str]:
        """Return the names that start with ``prefix`` and sort after ``start_after``."""
        folder, _, stem = prefix.rpartition("/")
        directory = self.directory / folder if folder else self.directory
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

    def delete(self, name: str) -> None:
        """Remove the object if it exists."""
        target = self.directory / name
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


def durable_temp(target: Path, content: bytes) -> Path:
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


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
