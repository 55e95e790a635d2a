"""The commit seam: how a queue reads its state and commits a new one.

``StateStore`` is the only code that talks to an ``ObjectStoragePort`` on behalf of
the queues. It keeps the snapshot it last read or committed, applies a pure
transition to it and commits the result with compare-and-swap. It re-reads only
when a write conflicts, or when a transition changed nothing (an empty dequeue, an
unknown job) on a snapshot this call has not verified, since a stale snapshot could
make that answer wrong. A storage layout other than one whole-state object replaces
this class and nothing above it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType

from jqueue.core import codec
from jqueue.core.retry import RetryPolicy
from jqueue.domain.errors import CASConflictError
from jqueue.domain.models import QueueState
from jqueue.ports.storage import ObjectStoragePort

Transition = Callable[[QueueState], QueueState]


def describe(storage: ObjectStoragePort) -> str:
    """Return where ``storage`` keeps its object, for error messages."""
    url = getattr(storage, "url", None)
    return url if isinstance(url, str) else repr(storage)


class StorageUse:
    """Holds a storage open (its client, its connections) while a queue is open.

    A storage that is an async context manager is entered when the queue opens
    and exited when it closes; any other storage needs nothing.
    """

    def __init__(self, storage: ObjectStoragePort) -> None:
        self._storage = storage if isinstance(storage, AbstractAsyncContextManager) else None

    async def __aenter__(self) -> None:
        if self._storage is not None:
            await self._storage.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._storage is not None:
            await self._storage.__aexit__(exc_type, exc, tb)


@dataclass(frozen=True)
class Snapshot:
    """A decoded state and the etag it was read or written at (None: no object yet)."""

    state: QueueState
    etag: str | None


class StateStore:
    """Whole-state snapshots committed with compare-and-swap.

    Parameters
    ----------
    storage : ObjectStoragePort
        The backend holding the state object.
    retry : RetryPolicy
        How often and how patiently to retry a conflicting commit.
    """

    def __init__(self, storage: ObjectStoragePort, retry: RetryPolicy) -> None:
        self.storage = storage
        self.retry = retry
        self.location = describe(storage)
        self._cached: Snapshot | None = None

    async def read(self) -> Snapshot:
        """Read and decode the current state from storage, and remember it."""
        content, etag = await self.storage.read()
        self._cached = Snapshot(codec.decode(content, self.location), etag)
        return self._cached

    async def apply(self, transition: Transition) -> QueueState:
        """Commit ``transition`` applied to the newest state, retrying on conflict.

        ``transition`` may run several times and must be pure apart from recording
        its outcome. Returns the committed state, or the unchanged verified state
        when the transition changed nothing. Exceptions raised by the transition
        on a verified state propagate.

        Raises
        ------
        CASConflictError
            When every retry lost its race.
        """
        snapshot, verified = self._cached, False
        retries = 0
        while True:
            if snapshot is None:
                snapshot, verified = await self.read(), True
            try:
                new_state = transition(snapshot.state)
            except Exception:
                if verified:
                    raise
                snapshot = None
                continue
            if new_state is snapshot.state:
                if verified:
                    return new_state
                snapshot = None
                continue
            try:
                return await self._commit(snapshot, new_state)
            except CASConflictError:
                retries += 1
                if retries > self.retry.max_retries:
                    raise
                await self.retry.wait(retries)
                snapshot, verified = self._cached, True

    async def _commit(self, base: Snapshot, new_state: QueueState) -> QueueState:
        new_state = new_state.with_version(base.state.version + 1)
        content = codec.encode(new_state, commit_id=uuid.uuid4().hex)
        try:
            etag = await self.storage.write(content, if_match=base.etag)
        except CASConflictError:
            current, current_etag = await self.storage.read()
            if current != content or current_etag is None:
                self._cached = Snapshot(codec.decode(current, self.location), current_etag)
                raise
            # The object holds this very commit (its id is unique): a retried request
            # whose first attempt had landed. The write succeeded.
            etag = current_etag
        self._cached = Snapshot(new_state, etag)
        return new_state
