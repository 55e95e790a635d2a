"""The queue operations, written once for every commit strategy and layout.

Each public call becomes an ``Operation``: a function that decides the call's
effects on the queue index (applying them) and returns the caller's answer. A queue
class decides only how operations reach the store (``_execute``): one commit per
call, or many folded into one.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TypeVar

from jqueue.core.layout import Layout, StoreOpener
from jqueue.core.log_store import LogStore
from jqueue.core.retry import RetryPolicy
from jqueue.core.settings import LogSettings
from jqueue.core.store import CommitStore, StorageUse
from jqueue.domain.effects import Added, to_micros
from jqueue.domain.errors import PayloadTooLargeError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job, QueueState, utc_now
from jqueue.domain.records import added_from, job_from
from jqueue.ports.storage import ObjectStoragePort

T = TypeVar("T")
Operation = Callable[[QueueIndex], T]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_VISIBILITY_TIMEOUT = timedelta(minutes=5)


def new_lease() -> str:
    """Return a fresh lease token."""
    return uuid.uuid4().hex


def _fence(job: Job | str) -> tuple[str, str | None]:
    """Return the job id and, for a claimed ``Job``, the lease that fences the call."""
    return (job, None) if isinstance(job, str) else (job.id, job.lease)


class QueueOperations(ABC):
    """The documented queue API on top of an abstract ``_execute``."""

    def __init__(
        self,
        storage: ObjectStoragePort,
        retry: RetryPolicy,
        layout: Layout,
        max_payload_bytes: int | None,
        log: LogSettings | None,
        visibility_timeout: timedelta,
    ) -> None:
        if visibility_timeout <= timedelta(0):
            raise ValueError(f"visibility_timeout must be positive, got {visibility_timeout}")
        self.storage = storage
        self.max_payload_bytes = max_payload_bytes
        self.visibility_timeout = visibility_timeout
        self._opener = StoreOpener(storage, retry, layout, log or LogSettings())
        self._storage_use = StorageUse(storage)

    @abstractmethod
    async def _execute(self, operation: Operation[T]) -> T:
        """Apply ``operation`` to the newest state, commit it, and return its answer."""

    async def _opened_store(self) -> CommitStore:
        return await self._opener.store()

    async def checkpoint(self) -> bool:
        """Write a checkpoint of the queue now (log layout); False for the single object, which has none."""
        store = await self._opened_store()
        if not isinstance(store, LogStore):
            return False
        await store.checkpoint()
        return True

    def _checked(self, payload: bytes) -> bytes:
        limit = self.max_payload_bytes
        if limit is not None and len(payload) > limit:
            raise PayloadTooLargeError(len(payload), limit)
        return payload

    async def read_state(self) -> QueueState:
        """Return a fresh snapshot of the whole queue straight from storage."""
        return await (await self._opened_store()).read_state()

    async def enqueue(self, entrypoint: str, payload: bytes, priority: int = 0) -> Job:
        """Add a job; returns it once it is durably committed.

        Raises
        ------
        PayloadTooLargeError
            If ``payload`` is over ``max_payload_bytes``.
        """
        job = Job.new(entrypoint, self._checked(payload), priority)
        added = added_from(job)

        def operation(index: QueueIndex) -> Job:
            index.apply(added)
            return job

        return await self._execute(operation)

    async def enqueue_many(self, entrypoint: str, payloads: Iterable[bytes], priority: int = 0) -> list[Job]:
        """Add one job per payload, all in one commit; returns them in order.

        Raises
        ------
        PayloadTooLargeError
            If a payload is over ``max_payload_bytes``; then none is added.
        """
        jobs = [Job.new(entrypoint, self._checked(payload), priority) for payload in payloads]
        effects = [added_from(job) for job in jobs]

        def operation(index: QueueIndex) -> list[Job]:
            index.apply_all(effects)
            return jobs

        return await self._execute(operation) if jobs else []

    async def ack_many(self, jobs: Iterable[Job | str]) -> None:
        """Remove finished jobs, all in one commit, each fenced as in ``ack``.

        If one of them cannot be acked (``LeaseLostError``, ``JobNotFoundError``), the
        error is raised and none is removed.
        """
        fences = [_fence(job) for job in jobs]

        def operation(index: QueueIndex) -> None:
            for job_id, lease in fences:
                index.remove(job_id, lease)

        await self._execute(operation)

    async def nack_many(self, jobs: Iterable[Job | str]) -> None:
        """Put claimed jobs back in the queue, all in one commit, each fenced as in ``nack``.

        If one of them cannot be requeued, the error is raised and none is.
        """
        fences = [_fence(job) for job in jobs]

        def operation(index: QueueIndex) -> None:
            for job_id, lease in fences:
                index.requeue(job_id, lease)

        await self._execute(operation)

    async def dequeue(
        self,
        entrypoint: str | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[Job]:
        """Claim up to ``batch_size`` queued jobs (of ``entrypoint``, if given), best priority first.

        Each claimed job gets a new ``lease`` that expires after ``visibility_timeout``
        (the queue's ``visibility_timeout`` by default) unless heartbeats extend it; an
        expired lease returns the job to the queue. Returns an empty list, without
        writing, when there is nothing to claim.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        visibility = self.visibility_timeout if visibility_timeout is None else visibility_timeout

        def operation(index: QueueIndex) -> list[Added]:
            now = utc_now()
            expires = to_micros(now + visibility)
            claims = index.claim(entrypoint, batch_size, to_micros(now), expires, new_lease)
            return [index.records[claim.job_id].as_added() for claim in claims]

        claimed = await self._execute(operation)
        if not claimed:
            return []
        payloads = await (await self._opened_store()).payloads([snapshot.payload for snapshot in claimed])
        return [job_from(snapshot, payload) for snapshot, payload in zip(claimed, payloads, strict=True)]

    async def ack(self, job: Job | str) -> None:
        """Remove a finished job.

        Pass the claimed ``Job`` to fence the call with its lease, or a job id to
        remove the job whatever its state (as the documented jqueue does).

        Raises
        ------
        LeaseLostError
            Fenced, if the lease no longer holds the job (it expired and the job was
            claimed again, or someone else acked or requeued it); nothing changes.
        JobNotFoundError
            Unfenced, if the job is not in the queue (for example, acked already).
        """
        job_id, lease = _fence(job)

        def operation(index: QueueIndex) -> None:
            index.remove(job_id, lease)

        await self._execute(operation)

    async def nack(self, job: Job | str) -> None:
        """Put a claimed job back in the queue (fenced when given the claimed ``Job``)."""
        job_id, lease = _fence(job)

        def operation(index: QueueIndex) -> None:
            index.requeue(job_id, lease)

        await self._execute(operation)

    async def heartbeat(self, job: Job | str) -> None:
        """Record that the worker on a job is alive, extending its lease by its visibility timeout.

        Fenced when given the claimed ``Job``: a lost lease raises ``LeaseLostError``.
        """
        job_id, lease = _fence(job)

        def operation(index: QueueIndex) -> None:
            index.beat(job_id, to_micros(utc_now()), lease)

        await self._execute(operation)

    async def requeue_stale(self, timeout: timedelta) -> int:  # noqa: ASYNC109  (documented name)
        """Requeue in-progress jobs with no heartbeat for ``timeout``; returns how many."""
        return await self._execute(lambda index: len(index.requeue_stale(to_micros(utc_now() - timeout))))
