"""The storage port: the only thing jqueue needs from a backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class ObjectStoragePort(Protocol):
    """One object that supports compare-and-swap writes.

    Any class with these two coroutines is a backend; no base class is needed.
    jqueue's own adapters also expose ``url`` (where the object lives), which
    error messages use when present.
    """

    async def read(self) -> tuple[bytes, str | None]:
        """Read the object.

        Returns
        -------
        tuple of (bytes, str or None)
            The content and its etag, or ``(b"", None)`` when the object does not exist.
        """
        ...

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the object if it is still at ``if_match``.

        Parameters
        ----------
        content : bytes
            The new object body.
        if_match : str or None
            The etag last read. ``None`` asks for the object to be created; jqueue's
            adapters then fail if it already exists, so two creators cannot both win.

        Returns
        -------
        str
            The etag of the new content.

        Raises
        ------
        CASConflictError
            If the object is no longer at ``if_match`` (or exists, for ``None``).
        StorageError
            For any other backend failure.
        """
        ...


@runtime_checkable
class KeyedStoragePort(ObjectStoragePort, Protocol):
    """A backend that can also keep named immutable objects beside its main object.

    Names are relative paths (``"log/00000000000000000042"``) inside a namespace
    the backend derives from its main object's location. The log-structured
    layout needs these four calls; a backend without them keeps the single-object
    layout.
    """

    async def get(self, name: str) -> bytes | None:
        """Return the object's content, or None if it does not exist."""
        ...

    async def create(self, name: str, content: bytes) -> None:
        """Create the object, whole and durable, only if it does not exist yet.

        Raises
        ------
        CASConflictError
            If an object with this name exists.
        StorageError
            For any other backend failure.
        """
        ...

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names that start with ``prefix`` and sort after ``start_after``, in order."""
        ...

    async def delete(self, name: str) -> None:
        """Remove the object; a missing object is not an error."""
        ...


@runtime_checkable
class RemovableStoragePort(Protocol):
    """A backend that can remove its main object: what a broker's beat is once its broker left
    (``ROOT/_member-ID.json``), so that brokers that come and go leave nothing behind.

    jqueue's own adapters are ones. A backend without it leaves such objects in place.
    """

    async def remove(self) -> None:
        """Remove the main object (on a file, its lock file too; not its named objects); a
        missing object is not an error.

        Raises
        ------
        StorageError
            For a backend failure.
        """
        ...


@runtime_checkable
class MappedStoragePort(Protocol):
    """A backend whose named objects a process can read in place, so that reading a large object
    (a checkpoint's slab) keeps resident only the pages it touches, or nothing more than the
    backend holds already.

    The local file adapter (a mapping of the file) and the memory adapter (a view of its bytes)
    are ones. Other keyed backends are read with ``get``, and the slabs a process writes on
    them are spilled to temporary files (``core/loop/memory.spilled``).
    """

    async def mapped(self, name: str) -> memoryview | None:
        """Return the named object's content mapped read-only, or None if it does not exist.

        The content is not checked against the backend's own checksum, so this is for objects
        whose format checks itself; the mapping stays valid when the object is deleted.

        Raises
        ------
        StorageError
            For a backend failure.
        """
        ...


@runtime_checkable
class ChangeSignalPort(Protocol):
    """A backend that can tell when its queue may have changed, so that idle workers need not poll.

    The local file adapter is one (Linux inotify on its segment directory).
    """

    def watch_changes(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` in the running event loop after each change (spurious calls are
        allowed, missed ones are not); return the call that stops it, or None if this backend
        cannot watch this queue now (the caller polls, and may ask again later)."""
        ...
