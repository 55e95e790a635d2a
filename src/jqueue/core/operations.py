"""The queue operations, written once for every commit strategy.

Each public call becomes an ``Operation``: a pure function from a state to the next
state and the caller's answer. A queue class decides only how operations reach
storage (``_execute``): one commit per call, or many folded into one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from jqueue.domain.errors import PayloadTooLargeError
from jqueue.domain.models import Job, QueueState, utc_now

T = TypeVar("T")
Operation = Callable[[QueueState], tuple[QueueState, T]]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


class QueueOperations(ABC):
    """The documented queue API on top of an abstract ``_execute``."""

    max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES

    @abstractmethod
    async def _execute(self, operation: Operation[T]) -> T:
        """Apply ``operation`` to the newest state, commit it, and return its answer."""

    @abstractmethod
    async def read_state(self) -> QueueState:
        """Return a fresh snapshot of the queue straight from storage."""

    async def enqueue(self, entrypoint: str, payload: bytes, priority: int = 0) -> Job:
        """Add a job; returns it once it is durably committed.

        Raises
        ------
        PayloadTooLargeError
            If ``payload`` is over ``max_payload_bytes``.
        """
        limit = self.max_payload_bytes
        if limit is not None and len(payload) > limit:
            raise PayloadTooLargeError(len(payload), limit)
        job = Job.new(entrypoint, payload, priority)
        return await self._execute(lambda state: (state.with_job_added(job), job))

    async def dequeue(self, entrypoint: str | None = None, *, batch_size: int = 1) -> list[Job]:
        """Claim up to ``batch_size`` queued jobs (of ``entrypoint``, if given), best priority first.

        Returns an empty list, without writing, when there is nothing to claim.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        return await self._execute(lambda state: state.with_jobs_claimed(entrypoint, batch_size, utc_now()))

    async def ack(self, job_id: str) -> None:
        """Remove a finished job.

        Raises
        ------
        JobNotFoundError
            If the job is not in the queue (for example, acked already).
        """
        await self._execute(lambda state: (state.with_job_removed(job_id), None))

    async def nack(self, job_id: str) -> None:
        """Put a claimed job back in the queue."""
        await self._execute(lambda state: (state.with_job_requeued(job_id), None))

    async def heartbeat(self, job_id: str) -> None:
        """Record that the worker on ``job_id`` is alive."""
        await self._execute(lambda state: (state.with_heartbeat(job_id, utc_now()), None))

    async def requeue_stale(self, timeout: timedelta) -> int:  # noqa: ASYNC109  (documented name)
        """Requeue in-progress jobs with no heartbeat for ``timeout``; returns how many."""

        def operation(state: QueueState) -> tuple[QueueState, int]:
            cutoff = utc_now() - timeout
            return state.requeue_stale(cutoff), state.stale_count(cutoff)

        return await self._execute(operation)
