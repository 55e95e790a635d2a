"""``InMemoryStorage``: objects in process memory, for tests and examples."""

from __future__ import annotations

import threading

from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.domain.errors import CASConflictError


class InMemoryStorage:
    """An in-process object with compare-and-swap writes; the etag is a counter.

    Safe across coroutines and threads of one process; nothing survives the process.

    Parameters
    ----------
    initial_content : bytes
        Content the object starts with (etag ``"0"``); empty starts with no object.
        Each write's etag is the count of writes so far (``"1"``, ``"2"``...).
    name : str
        A label for messages and the ``memory://`` URL.
    """

    def __init__(self, initial_content: bytes = b"", *, name: str = "") -> None:
        self.initial_content = initial_content
        self.url = f"memory://{name}"
        self._lock = threading.Lock()
        self._content = bytes(initial_content)
        self._etag: str | None = "0" if initial_content else None
        self._writes = 0
        self._named: dict[str, bytes] = {}

    async def read(self) -> tuple[bytes, str | None]:
        """Return the content and etag, or ``(b"", None)`` while there is no object."""
        with self._lock:
            return self._content, self._etag

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the content if the etag still matches; None creates it only if absent."""
        with self._lock:
            if if_match != self._etag:
                raise CASConflictError(f"{self.url}: expected etag {if_match!r}, found {self._etag!r}")
            self._writes += 1
            self._content, self._etag = bytes(content), str(self._writes)
            return self._etag

    async def remove(self) -> None:
        """Remove the object: there is none until the next create."""
        with self._lock:
            self._content, self._etag = b"", None

    async def get(self, name: str) -> bytes | None:
        """Return the named object's content, or None."""
        with self._lock:
            return self._named.get(checked_name(name))

    async def mapped(self, name: str) -> memoryview | None:
        """Return a view of the named object's content (the bytes held, not a copy), or None."""
        with self._lock:
            content = self._named.get(checked_name(name))
        return None if content is None else memoryview(content)

    async def create(self, name: str, content: bytes) -> None:
        """Create the named object only if it does not exist."""
        with self._lock:
            if checked_name(name) in self._named:
                raise CASConflictError(f"{self.url}/{name} exists")
            self._named[name] = bytes(content)

    async def list_names(self, prefix: str, start_after: str = "") -> list[str]:
        """Return the names under ``prefix`` after ``start_after``, sorted."""
        checked_prefix(prefix)
        with self._lock:
            names = [n for n in self._named if n.startswith(prefix) and n > start_after]
        return sorted(names)

    async def delete(self, name: str) -> None:
        """Remove the named object if it exists."""
        with self._lock:
            self._named.pop(checked_name(name), None)
