"""Jobs and the queue state: frozen values and the pure transitions between them.

Nothing here does I/O. Every transition returns a new ``QueueState`` (or the same
object when nothing changed). The ``version`` counter is left alone by transitions;
it is bumped once per committed write. These transitions define what each queue
operation means; the queues run them on ``QueueIndex`` (``jqueue.domain.index``),
which does the same at a cost that does not grow with depth and is property-tested
against them.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer, field_validator

from jqueue.domain.errors import JobNotFoundError, LeaseLostError

UNLEASED_CLAIM_TIMEOUT = timedelta(minutes=5)
"""How long a claim without a lease expiry holds its job after its last heartbeat
(the documented jqueue's default stale timeout)."""

LEASE_EXPIRED = "lease expired"
"""The error recorded on a job whose lease ran out."""


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


class JobStatus(StrEnum):
    """Where a job is in its life: ``QUEUED``, ``IN_PROGRESS``, ``DEAD`` (a dead letter), ``ACKED``."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    DEAD = "dead"
    ACKED = "acked"
    STAGED = "staged"
    """Written by a bulk write that is not published yet: invisible to claims."""
    """Finished: seen in history records and in the job a deduplicated enqueue returns."""


class Job(BaseModel):
    """One unit of work.

    Attributes
    ----------
    id : str
        A UUID assigned at enqueue time.
    entrypoint : str
        The logical name that routes the job to its handler.
    payload : bytes
        Opaque bytes (base64 in JSON).
    status : JobStatus
        ``QUEUED``, ``IN_PROGRESS`` or ``DEAD``.
    priority : int
        Lower runs first.
    created_at : datetime
        UTC time of enqueue.
    heartbeat_at : datetime or None
        UTC time of the last claim or heartbeat; None while queued.
    attempts : int
        How many times the job has been claimed.
    lease : str or None
        The token of the current claim; it changes on every claim. Passing the
        claimed ``Job`` to ``ack``/``nack``/``heartbeat`` checks it (fencing).
    lease_expires_at : datetime or None
        When the current claim runs out and the job returns to the queue, unless a
        heartbeat extends it.
    max_attempts : int or None
        Claims allowed before a failure makes the job dead; None for the queue's default.
    not_before : datetime or None
        The job is not claimable before this time (a delay, or a retry's backoff); a
        claim keeps it, so a running job shows when it became due.
    deadline : datetime or None
        Past this time (its enqueue time plus its ``ttl``) the job dies instead of
        being claimed.
    dedup_key : str or None
        While a job with this key is in the queue (or was acked within the history's
        retention), enqueueing the key again returns that job.
    last_error : str or None
        The error of the last failed attempt.
    dead_reason : str or None
        Why a ``DEAD`` job died: ``max_attempts`` or ``ttl``.
    dead_at : datetime or None
        When a ``DEAD`` job died.
    claimed_at : tuple of datetime
        When the job was claimed, each time.
    batch : str or None
        The bulk write that added the job (see ``stage_many``), if one did.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    entrypoint: str
    payload: bytes
    status: JobStatus = JobStatus.QUEUED
    priority: int = 0
    created_at: AwareDatetime = Field(default_factory=utc_now)
    heartbeat_at: AwareDatetime | None = None
    attempts: int = 0
    lease: str | None = None
    lease_expires_at: AwareDatetime | None = None
    max_attempts: int | None = None
    not_before: AwareDatetime | None = None
    deadline: AwareDatetime | None = None
    dedup_key: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    dead_at: AwareDatetime | None = None
    claimed_at: tuple[AwareDatetime, ...] = ()
    batch: str | None = None

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_from_base64(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"payload is not valid base64: {exc}") from exc
        return value

    @field_serializer("payload", when_used="json")
    def _payload_to_base64(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    @classmethod
    def new(cls, entrypoint: str, payload: bytes, priority: int = 0) -> Job:
        """Create a queued job with a fresh id and the current time."""
        return cls(entrypoint=entrypoint, payload=payload, priority=priority)

    def with_status(self, status: JobStatus) -> Job:
        """Return a copy with another status."""
        return self.model_copy(update={"status": status})

    def with_heartbeat(self, ts: datetime | None) -> Job:
        """Return a copy with another heartbeat time."""
        return self.model_copy(update={"heartbeat_at": ts})

    def claimed(self, now: datetime, lease: str | None = None, expires_at: datetime | None = None) -> Job:
        """Return a copy claimed at ``now`` under ``lease`` until ``expires_at``; one more attempt."""
        return self.model_copy(
            update={
                "status": JobStatus.IN_PROGRESS,
                "heartbeat_at": now,
                "attempts": self.attempts + 1,
                "claimed_at": (*self.claimed_at, now),
                "lease": lease,
                "lease_expires_at": expires_at,
            }
        )

    def requeued(self, error: str | None = None) -> Job:
        """Return a copy back in the queued state, without a lease, with ``error`` as its last
        error if given."""
        update = {"status": JobStatus.QUEUED, "heartbeat_at": None, "lease": None, "lease_expires_at": None}
        return self.model_copy(update=update | ({} if error is None else {"last_error": error}))

    def beaten(self, now: datetime) -> Job:
        """Return a copy with its heartbeat at ``now`` and its lease as long again from ``now``."""
        expires = self.lease_expires_at
        if expires is not None and self.heartbeat_at is not None:
            expires = now + (expires - self.heartbeat_at)
        return self.model_copy(update={"heartbeat_at": now, "lease_expires_at": expires})

    def is_expired(self, now: datetime) -> bool:
        """Whether this job is in progress under a lease that ran out before ``now``.

        A job claimed without a lease expiry (by the original jqueue) counts as leased
        until ``UNLEASED_CLAIM_TIMEOUT`` after its last heartbeat.
        """
        if self.status is not JobStatus.IN_PROGRESS:
            return False
        expires = self.lease_expires_at
        if expires is None:
            if self.heartbeat_at is None:
                return True
            expires = self.heartbeat_at + UNLEASED_CLAIM_TIMEOUT
        return expires < now

    def is_stale(self, cutoff: datetime) -> bool:
        """Whether this job is in progress with no heartbeat since ``cutoff``."""
        return self.status is JobStatus.IN_PROGRESS and (
            self.heartbeat_at is None or self.heartbeat_at < cutoff
        )


def _priority_order(job: Job) -> tuple[int, datetime]:
    return (job.priority, job.created_at)


class QueueState(BaseModel):
    """The whole queue at one version.

    Attributes
    ----------
    jobs : tuple of Job
        Every job, in insertion order.
    version : int
        Incremented on every committed write.
    """

    model_config = ConfigDict(frozen=True)

    jobs: tuple[Job, ...] = ()
    version: int = 0

    def _queued(self, entrypoint: str | None) -> Iterator[Job]:
        return (
            j
            for j in self.jobs
            if j.status is JobStatus.QUEUED and (entrypoint is None or j.entrypoint == entrypoint)
        )

    def queued_jobs(self, entrypoint: str | None = None) -> tuple[Job, ...]:
        """Return the queued jobs (of one entrypoint, if given), lowest (priority, created_at) first."""
        return tuple(sorted(self._queued(entrypoint), key=_priority_order))

    def in_progress_jobs(self) -> tuple[Job, ...]:
        """Return the jobs that are claimed and not yet acked."""
        return tuple(j for j in self.jobs if j.status is JobStatus.IN_PROGRESS)

    def find(self, job_id: str) -> Job | None:
        """Return the job with this id, or None."""
        return next((j for j in self.jobs if j.id == job_id), None)

    def _require(self, job_id: str) -> Job:
        job = self.find(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job

    def _with_jobs(self, jobs: Iterable[Job]) -> QueueState:
        return self.model_copy(update={"jobs": tuple(jobs)})

    def with_version(self, version: int) -> QueueState:
        """Return a copy at another version."""
        return self.model_copy(update={"version": version})

    def with_job_added(self, job: Job) -> QueueState:
        """Return a state with ``job`` appended."""
        return self.model_copy(update={"jobs": (*self.jobs, job)})

    def with_jobs_added(self, jobs: Iterable[Job]) -> QueueState:
        """Return a state with ``jobs`` appended."""
        return self.model_copy(update={"jobs": (*self.jobs, *jobs)})

    def with_job_replaced(self, updated: Job) -> QueueState:
        """Return a state where the job with ``updated.id`` is ``updated``.

        Raises
        ------
        JobNotFoundError
            If no job has that id.
        """
        self._require(updated.id)
        return self._with_jobs(updated if j.id == updated.id else j for j in self.jobs)

    def with_job_removed(self, job_id: str, lease: str | None = None) -> QueueState:
        """Return a state without the job ``job_id`` (an ack), fenced by ``lease`` if given.

        Raises
        ------
        JobNotFoundError
            Unfenced, if no job has that id.
        LeaseLostError
            Fenced, if the lease no longer holds the job.
        """
        self._holding(job_id, lease)
        return self._with_jobs(j for j in self.jobs if j.id != job_id)

    def with_jobs_claimed(
        self,
        entrypoint: str | None,
        batch_size: int,
        now: datetime,
        expires_at: datetime | None = None,
        leases: Callable[[], str] | None = None,
    ) -> tuple[QueueState, list[Job]]:
        """Claim up to ``batch_size`` queued jobs in priority order, each under a new lease.

        Returns
        -------
        tuple of (QueueState, list of Job)
            The new state (``self`` when nothing was claimed) and the claimed jobs.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        best = heapq.nsmallest(batch_size, self._queued(entrypoint), key=_priority_order)
        claimed = [job.claimed(now, leases() if leases else None, expires_at) for job in best]
        if not claimed:
            return self, []
        by_id = {job.id: job for job in claimed}
        return self._with_jobs(by_id.get(j.id, j) for j in self.jobs), claimed

    def with_job_requeued(self, job_id: str, lease: str | None = None) -> QueueState:
        """Return a state with ``job_id`` back in the queue (a nack), fenced by ``lease`` if given."""
        return self.with_job_replaced(self._holding(job_id, lease).requeued())

    def with_heartbeat(self, job_id: str, now: datetime, lease: str | None = None) -> QueueState:
        """Return a state with the heartbeat of ``job_id`` at ``now`` and its lease extended.

        Unfenced, a job in another status than claimed (say, requeued after going
        stale) leaves the state unchanged; fenced by ``lease``, that is a lost lease.
        """
        job = self._holding(job_id, lease)
        if job.status is not JobStatus.IN_PROGRESS:
            return self
        return self.with_job_replaced(job.beaten(now))

    def requeue_expired(self, now: datetime) -> QueueState:
        """Requeue in-progress jobs whose lease ran out before ``now``; ``self`` if none did."""
        if not any(j.is_expired(now) for j in self.jobs):
            return self
        return self._with_jobs(j.requeued(LEASE_EXPIRED) if j.is_expired(now) else j for j in self.jobs)

    def _holding(self, job_id: str, lease: str | None) -> Job:
        """Return the job; with a ``lease``, only if that lease still holds it.

        Raises
        ------
        JobNotFoundError
            Unfenced, if no job has that id.
        LeaseLostError
            Fenced, if the job is gone, not claimed, or claimed under another lease.
        """
        if lease is None:
            return self._require(job_id)
        job = self.find(job_id)
        if job is None or job.status is not JobStatus.IN_PROGRESS or job.lease != lease:
            raise LeaseLostError(job_id)
        return job

    def requeue_stale(self, cutoff: datetime) -> QueueState:
        """Requeue in-progress jobs whose last heartbeat is before ``cutoff``; ``self`` if none are."""
        if not any(j.is_stale(cutoff) for j in self.jobs):
            return self
        return self._with_jobs(j.requeued() if j.is_stale(cutoff) else j for j in self.jobs)

    def stale_count(self, cutoff: datetime) -> int:
        """Count the in-progress jobs whose last heartbeat is before ``cutoff``."""
        return sum(1 for j in self.jobs if j.is_stale(cutoff))
