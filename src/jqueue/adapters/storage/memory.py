"""``InMemoryStorage``: objects in process memory, for tests and examples."""

from __future__ import annotations

import threading

from jqueue.adapters.storage.names import checked_name, checked_prefix
from jqueue.domain.errors import CASConflictError


class InMemoryStorage:
    """An in-process object with compare-and-swap writes; etags are a counter.

    Safe across coroutines and threads of one process; nothing survives the process.

    Parameters
    ----------
    initial_content : bytes or None
        Content the object starts with; None starts with no object.
    name : str
        A label for messages and the ``memory://`` URL.
    """

    def __init__(self, initial_content: bytes | None = None, *, name: str = "") -> None:
        self.url = f"memory://{name}"
        self._lock = threading.Lock()
        self._content = initial_content
        self._generation = 0 if initial_content is None else 1
        self._named: dict[str, bytes] = {}

    async def read(self) -> tuple[bytes, str | None]:
        """Return the content and etag, or ``(b"", None)`` before the first write."""
        with self._lock:
            if self._content is None:
                return b"", None
            return self._content, str(self._generation)

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        """Replace the content if the etag still matches; None creates it only if absent."""
        with self._lock:
            current = None if self._content is None else str(self._generation)
            if current != if_match:
                raise CASConflictError(f"{self.url}: expected etag {if_match!r}, found {current!r}")
            self._content = bytes(content)
            self._generation += 1
            return str(self._generation)

    async def get(self, name: str) -> bytes | None:
        """Return the named object's content, or None."""
        with self._lock:
            return self._named.get(checked_name(name))

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
