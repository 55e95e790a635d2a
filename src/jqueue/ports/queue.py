"""``Queue``: what a worker needs of a queue, so that any implementation plugs in.

``DirectQueue``, ``BrokerQueue`` and ``GroupCommitLoop`` satisfy it, and so can a client of
a remote queue: ``Worker``, ``QueueSet`` and ``HeartbeatManager`` are typed against it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from jqueue.domain.errors import JQueueError
from jqueue.domain.models import Job
from jqueue.domain.policy import QueuePolicy


@runtime_checkable
class SupportsHeartbeat(Protocol):
    """Anything with ``async heartbeat(job_id)``: every jqueue queue, or a test double."""

    async def heartbeat(self, job_id: Any, /) -> None:
        """Record that the worker on a job is alive."""
        ...


@runtime_checkable
class SupportsProgress(Protocol):
    """A queue whose heartbeat also stores a job's progress (every jqueue queue)."""

    async def heartbeat(
        self, job_id: Any, /, *, progress: float | None = None, note: str | None = None
    ) -> None:
        """Record that the worker on a job is alive, and how far the job got."""
        ...


@runtime_checkable
class SupportsCancelCheck(Protocol):
    """A queue that tells whether a job's cancel was asked for without committing (every jqueue
    queue), so a worker learns of a cancel within seconds."""

    async def cancel_requested(self, job_id: Any, /) -> bool:
        """Whether the job's cancel was asked for (or it ended cancelled)."""
        ...


@dataclass(frozen=True)
class PeriodicReport:
    """A periodic job a worker enqueues: its ``schedule`` (as text), the tick that passed last
    and the job that tick made (``last_job``, its id), and the next tick."""

    entrypoint: str
    schedule: str
    last_tick: datetime
    next_tick: datetime
    last_job: str


@dataclass(frozen=True)
class WorkerReport:
    """What a worker says of itself to a broker, for the dashboard: the entrypoints it handles,
    how many jobs it runs at once and runs now, and its periodic jobs."""

    handlers: list[str]
    concurrency: int
    running: int
    periodic: list[PeriodicReport] = field(default_factory=list)
    stopped: bool = False
    """The worker's run ended: its last word."""


@runtime_checkable
class SupportsWorkerReport(Protocol):
    """A queue that passes on what its worker says of itself (a ``RemoteQueue``: to the broker,
    with its calls)."""

    def report_worker(self, report: Callable[[], WorkerReport], /) -> None:
        """Have ``report`` called for what the worker says, whenever it is to be said."""
        ...

    async def say_stopped(self) -> None:
        """Say, once, that the worker's run ended (its report with ``stopped``)."""
        ...


@runtime_checkable
class Queue(SupportsHeartbeat, Protocol):
    """Claim, settle and keep alive jobs of one queue (see ``JobQueue`` for each call)."""

    @property
    def visibility_timeout(self) -> timedelta:
        """How long a claim holds a job without a heartbeat."""
        ...

    @property
    def policy(self) -> QueuePolicy:
        """The queue's defaults for attempts and back-off."""
        ...

    async def dequeue(
        self,
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[Job]:
        """Claim up to ``batch_size`` jobs, best priority first."""
        ...

    async def peek(self, entrypoint: str | Collection[str] | None = None, limit: int = 1) -> list[Job]:
        """Return the jobs ``dequeue`` would claim now, claiming none."""
        ...

    async def ack(self, job_id: Job | str, *, result: bytes | None = None) -> None:
        """Remove a finished job (fenced when given the claimed ``Job``), keeping ``result``."""
        ...

    async def nack(
        self,
        job_id: Job | str,
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Return a claimed job to the queue after a wait, or to the dead letters (at once with
        ``dead``)."""
        ...

    async def release(self, job_id: Job | str) -> None:
        """Return a claimed job to the queue at once, not as a failure."""
        ...


@runtime_checkable
class SupportsAckAndDequeue(Protocol):
    """A queue that acks jobs and claims the next ones in one commit (every jqueue queue, and
    ``RemoteQueue``: in one request), which ``Worker`` uses to ack with its next claim."""

    async def ack_and_dequeue(
        self,
        acks: Sequence[tuple[Job | str, bytes | None]],
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> tuple[list[JQueueError | None], list[Job]]:
        """Ack each of ``acks`` (None or the error per ack), then claim up to ``batch_size`` jobs."""
        ...


@runtime_checkable
class ChangeSource(Protocol):
    """Tells idle callers that a queue may have changed (``JobQueue.changes``)."""

    @property
    def generation(self) -> int:
        """A number that grows at each change."""
        ...

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the generation once it is past ``seen``, or after ``seconds``."""
        ...
