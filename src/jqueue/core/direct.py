"""``DirectQueue``: every call is its own compare-and-swap commit."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import TracebackType

from jqueue.core.layout import Layout
from jqueue.core.management import ManagementOperations
from jqueue.core.operations import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_VISIBILITY_TIMEOUT,
    Operation,
    T,
)
from jqueue.core.retry import RetryPolicy
from jqueue.core.settings import LogSettings, QueuePolicy
from jqueue.core.timed import DEFAULT_STORAGE_TIMEOUT
from jqueue.domain.index import QueueIndex
from jqueue.ports.storage import ObjectStoragePort


class DirectQueue(ManagementOperations):
    """A queue that commits each call on its own; no background task.

    Calls from one ``DirectQueue`` take turns, so they never conflict with each
    other; conflicts with other processes are retried on fresh state.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the queue lives.
    max_retries : int
        Conflicting commits retried before ``CASConflictError`` reaches the caller.
    max_payload_bytes : int or None
        Largest payload ``enqueue`` accepts; None for no limit.
    layout : {"auto", "log", "single"}
        Storage layout: keep what exists and start new queues as a log (``"auto"``),
        migrate to or insist on the log (``"log"``), or the documented single object.
    log : LogSettings or None
        Checkpoint, retention and cache settings of the log layout.
    policy : QueuePolicy or None
        Defaults for retries, back-off, time to live and history.
    visibility_timeout : timedelta
        How long a claim holds a job without a heartbeat before the job returns to
        the queue (``dequeue`` can override it per call). Every commit returns the
        jobs whose lease ran out.
    storage_timeout : timedelta or None
        The longest a storage call may take before it fails with ``StorageError``; None
        waits forever.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        max_retries: int = 10,
        *,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
        layout: Layout = "auto",
        log: LogSettings | None = None,
        visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        policy: QueuePolicy | None = None,
        storage_timeout: timedelta | None = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        retry = RetryPolicy(max_retries=max_retries)
        options = (log, visibility_timeout, policy, storage_timeout)
        super().__init__(storage, retry, layout, max_payload_bytes, *options)
        self.max_retries = max_retries
        self._turn = asyncio.Lock()

    async def _execute(self, operation: Operation[T]) -> T:
        answers: list[T] = []

        def transition(index: QueueIndex) -> None:
            self._sweep(index)
            answers[:] = [operation(index)]
            self._trim(index)

        async with self._turn, self._storage_use:  # without 'async with', held for this call only
            store = await self._opened_store()
            await store.apply(transition)
        return answers[0]

    async def __aenter__(self) -> DirectQueue:
        await self._storage_use.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._opener.close()
        finally:
            await self._storage_use.__aexit__(exc_type, exc, tb)
