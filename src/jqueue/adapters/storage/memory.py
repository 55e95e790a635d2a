"""``InMemoryStorage``: one object in process memory, for tests and examples."""

from __future__ import annotations

import threading

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
