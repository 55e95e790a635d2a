"""``DirectQueue``: every call is its own compare-and-swap commit."""

from __future__ import annotations

import asyncio
from types import TracebackType

from jqueue.core.operations import DEFAULT_MAX_PAYLOAD_BYTES, Operation, QueueOperations, T
from jqueue.core.retry import RetryPolicy
from jqueue.core.store import StateStore, StorageUse
from jqueue.domain.models import QueueState
from jqueue.ports.storage import ObjectStoragePort


class DirectQueue(QueueOperations):
    """A queue that commits each call on its own; no background task.

    Calls from one ``DirectQueue`` take turns, so they never conflict with each
    other; conflicts with other processes are retried on fresh state.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the state lives.
    max_retries : int
        Conflicting commits retried before ``CASConflictError`` reaches the caller.
    max_payload_bytes : int or None
        Largest payload ``enqueue`` accepts; None for no limit.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        max_retries: int = 10,
        *,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.storage = storage
        self.max_retries = max_retries
        self.max_payload_bytes = max_payload_bytes
        self._store = StateStore(storage, RetryPolicy(max_retries=max_retries))
        self._turn = asyncio.Lock()
        self._storage_use = StorageUse(storage)

    async def _execute(self, operation: Operation[T]) -> T:
        answers: list[T] = []

        def transition(state: QueueState) -> QueueState:
            new_state, answer = operation(state)
            answers[:] = [answer]
            return new_state

        async with self._turn:
            await self._store.apply(transition)
        return answers[0]

    async def read_state(self) -> QueueState:
        """Return a fresh snapshot of the queue straight from storage."""
        return (await self._store.read()).state

    async def __aenter__(self) -> DirectQueue:
        await self._storage_use.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._storage_use.__aexit__(exc_type, exc, tb)
