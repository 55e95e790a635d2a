"""``GroupCommitLoop``: one writer task folds every pending operation into one commit."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from jqueue.core.layout import Layout
from jqueue.core.management import ManagementOperations
from jqueue.core.operations import DEFAULT_MAX_PAYLOAD_BYTES, Operation, T
from jqueue.core.retry import RetryPolicy
from jqueue.core.settings import LogSettings, QueuePolicy
from jqueue.core.timed import DEFAULT_STORAGE_TIMEOUT
from jqueue.domain.errors import JQueueError, QueueClosedError
from jqueue.domain.index import QueueIndex
from jqueue.ports.storage import ObjectStoragePort

logger = logging.getLogger("jqueue")


@dataclass
class _Pending:
    operation: Operation[Any]
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupCommitLoop(ManagementOperations):
    """A queue whose calls are batched by a single writer task into one commit per round.

    While one commit is in flight, new calls collect; the next round applies them all
    to the newest state and commits once. An operation that fails (say, an ack of an
    unknown job) fails only its own caller. A lost race re-applies the whole batch to
    fresh state after an exponential, jittered back-off. Every round also returns to
    the queue the claimed jobs whose lease ran out.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the state lives.
    stale_timeout : timedelta
        The default visibility timeout: a claim holds its job this long past its last
        heartbeat, then the job returns to the queue.
    max_retries : int
        Conflicting commits retried before the batch fails with ``CASConflictError``.
    max_payload_bytes : int or None
        Largest payload ``enqueue`` accepts; None for no limit.
    layout : {"auto", "log", "single"}
        Storage layout: keep what exists and start new queues as a log (``"auto"``),
        migrate to or insist on the log (``"log"``), or the documented single object.
    log : LogSettings or None
        Checkpoint, retention and cache settings of the log layout.
    policy : QueuePolicy or None
        Defaults for retries, back-off, time to live and history.
    storage_timeout : timedelta or None
        The longest a storage call may take before it fails with ``StorageError``; None
        waits forever.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        stale_timeout: timedelta = timedelta(minutes=5),
        *,
        max_retries: int = 20,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
        layout: Layout = "auto",
        log: LogSettings | None = None,
        policy: QueuePolicy | None = None,
        storage_timeout: timedelta | None = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        retry = RetryPolicy(max_retries=max_retries)
        options = (log, stale_timeout, policy, storage_timeout)
        super().__init__(storage, retry, layout, max_payload_bytes, *options)
        self.stale_timeout = stale_timeout
        self._pending: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        """Start the writer task."""
        if self._task is not None:
            raise RuntimeError("the group-commit loop is already running")
        await self._storage_use.__aenter__()
        self._stopping = False
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._write_rounds(), name="jqueue-group-commit")

    async def stop(self) -> None:
        """Commit every operation submitted so far, then stop the writer task."""
        if self._task is None:
            return
        self._stopping = True
        self._wakeup.set()
        try:
            await self._task
            await self._opener.close()
        finally:
            self._task = None
            await self._storage_use.__aexit__(None, None, None)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _execute(self, operation: Operation[T]) -> T:
        if self._task is None or self._stopping or self._task.done():
            raise QueueClosedError("the queue is not running; use 'async with' or call start() first")
        pending = _Pending(operation)
        self._pending.append(pending)
        self._wakeup.set()
        result: T = await pending.future
        return result

    async def _write_rounds(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    batch, self._pending = self._pending, []
                    await self._commit_batch(batch)
                if self._stopping:
                    return
        finally:  # stopped, cancelled (a deadline on stop()) or broken: no caller waits forever
            self._stopping = True
            unsent, self._pending = self._pending, []
            _fail(unsent, QueueClosedError("the queue stopped before this call was committed"))

    async def _commit_batch(self, batch: list[_Pending]) -> None:
        outcomes: list[tuple[bool, Any]] = []

        def transition(index: QueueIndex) -> None:
            outcomes.clear()
            self._sweep(index)
            for pending in batch:
                savepoint = index.savepoint()
                try:
                    answer = pending.operation(index)
                except Exception as exc:
                    index.rollback_to(savepoint)  # a failed call leaves nothing behind
                    outcomes.append((False, exc))
                else:
                    outcomes.append((True, answer))
            self._trim(index)

        try:
            store = await self._opened_store()
            await store.apply(transition)
        except asyncio.CancelledError:
            closed = "the queue stopped while this call's commit was in flight; it may have landed"
            _fail(batch, QueueClosedError(closed))
            raise
        except JQueueError as exc:  # the storage's answer: every call of the round shares it
            logger.warning("group commit of %d operations failed: %r", len(batch), exc)
            outcomes[:] = [(False, exc)] * len(batch)
        except Exception as exc:
            if len(batch) > 1:  # one call's effects broke the commit (say, a value the encoder refuses)
                logger.warning("a group commit failed, committing its %d calls alone: %r", len(batch), exc)
                for pending in batch:
                    await self._commit_batch([pending])
                return
            outcomes[:] = [(False, exc)]
        for pending, (ok, value) in zip(batch, outcomes, strict=True):
            if pending.future.done():
                continue
            if ok:
                pending.future.set_result(value)
            else:
                pending.future.set_exception(value)


def _fail(calls: list[_Pending], error: Exception) -> None:
    for pending in calls:
        if not pending.future.done():
            pending.future.set_exception(error)
