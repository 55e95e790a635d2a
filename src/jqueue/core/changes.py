"""``ChangeFeed``: wakes a queue's idle callers when it may have changed.

A change is a commit made through the same queue object, or, on a backend with a change
signal (``ChangeSignalPort``: the local file), a commit by any process. Callers remember the
``generation`` they last acted on and wait for a newer one, so no change is missed between
two waits; a wake-up may be spurious.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from jqueue.ports.storage import ChangeSignalPort, ObjectStoragePort


class ChangeFeed:
    """The changes of one queue.

    Parameters
    ----------
    storage : ObjectStoragePort
        The queue's backend; its change signal is used if it has one.
    """

    def __init__(self, storage: ObjectStoragePort) -> None:
        self._storage = storage if isinstance(storage, ChangeSignalPort) else None
        self._stop: Callable[[], None] | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self.generation = 0

    @property
    def signalled(self) -> bool:
        """Whether commits of other processes are signalled too (else only this object's)."""
        return self._watching()

    def notify(self) -> None:
        """Record a change and wake every waiter."""
        self.generation += 1
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the generation once it is past ``seen``, or after ``seconds``."""
        self._watching()
        if self.generation == seen:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, seconds)
            finally:
                self._waiters.discard(waiter)
        return self.generation

    def _watching(self) -> bool:
        if self._stop is None and self._storage is not None:
            self._stop = self._storage.watch_changes(self.notify)
        return self._stop is not None

    def close(self) -> None:
        """Stop listening to the backend's signal."""
        if self._stop is not None:
            self._stop()
            self._stop = None
